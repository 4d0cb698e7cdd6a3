"""The acceptance test of one cycle (step 3 of the algorithm): which drafts the target keeps, and the token it adds itself.

The verifiers themselves (token by token, block, sample-and-match) are in engine/verifiers.py; `judge_drafts` is the
one entry point that picks one.

Two parts, so that the timed section holds only what decoding needs:
  - `judge_drafts` makes the decision (the work plain decoding's own step also does: warp and draw);
  - `explain_verdict` adds the numbers the UI shows (p and q as shown, their top-5, the overlap); the engine
    runs it after the cycle's clock has stopped, as the baseline builds its token text after its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specviz.engine.events import SameDraftsVerdict
from specviz.engine.sampling import SamplingSettings, display_probs, warp
from specviz.engine.verifiers import VERIFIERS, Verdict, accepted_prefix, same_drafts_verdicts, verify_token_by_token


@dataclass
class Acceptance:
    """The outcome of testing k drafts against the target's k + 1 distributions, with its display numbers (on the CPU)."""

    n_accepted: int
    new_token_id: int  # resampled after a rejection, or the bonus token
    is_bonus: bool
    p_shown: list[float]  # p_i(x_i) per draft
    q_shown: list[float]  # q_i(x_i) per draft
    accept_probability: list[float]
    uniforms: list[float] | None  # None under greedy
    overlap: list[float]  # Σ_x min(p_i(x), q_i(x)) per draft
    top_p: list[list[tuple[int, float]]]  # per position 1..k+1
    top_q: list[list[tuple[int, float]]]  # per position 1..k
    top_residual: list[tuple[int, float]]  # at the rejected position (one-hot under greedy: one entry), else empty


def judge_drafts(
    target_logits: torch.Tensor,  # (k + 1, vocab): p_1 .. p_{k+1}
    draft_token_ids: list[int],
    draft_probs: torch.Tensor | None,  # (k, vocab); None: q is one-hot on each draft (greedy, or a deterministic drafter)
    settings: SamplingSettings,
    lenience: float,
    generator: torch.Generator,
    verification: str = "exact",
) -> Verdict:
    """The one entry point of step 3: greedy once for every verifier, else the verifier `verification` names
    (engine/verifiers.py) on p and q as sampled.

    lenience l < 1 (token by token only) accepts with min(1, p / (l·q)) instead (under greedy: while p(x) ≥ l·max p),
    which is lossy: the output no longer follows p.
    """
    x = torch.tensor(draft_token_ids, dtype=torch.long, device=target_logits.device)  # (k,)
    if settings.greedy:  # p and q one-hot: token by token, block and match all keep the same prefix
        return _judge_greedy(target_logits, x, lenience, settings, verification)
    p = warp(target_logits, settings)  # (k+1, vocab)
    q = draft_probs if draft_probs is not None else F.one_hot(x, p.shape[-1]).float()  # (k, vocab)
    if verification == "exact":
        return verify_token_by_token(p, q, x, generator, lenience)
    return VERIFIERS[verification](p, q, x, generator)


def _judge_greedy(
    target_logits: torch.Tensor, x: torch.Tensor, lenience: float, settings: SamplingSettings, verification: str
) -> Verdict:
    """Greedy: p_i is one-hot on the target's argmax, and so is q_i on x_i. Accept while x_i is the argmax; after
    a rejection the residual norm(max(0, p − q)) is p itself, so the new token is the argmax at that position."""
    best = target_logits.argmax(-1)  # (k+1,), the token warp's one-hot would pick
    if lenience == 1.0:
        accept_probability = (x == best[: len(x)]).float()
    else:  # lossy: accept while p(x) ≥ l · max p under the plain softmax, as the UI shows p
        shown = display_probs(target_logits[: len(x)], settings)  # (k, vocab)
        accept_probability = (shown.gather(-1, x[:, None]).squeeze(-1) >= lenience * shown.max(-1).values).float()
    n_accepted = accepted_prefix(accept_probability > 0)
    return Verdict(n_accepted, int(best[n_accepted].item()), accept_probability, None, None, None, verification)


def explain_verdict(
    verdict: Verdict,
    target_logits: torch.Tensor,
    draft_token_ids: list[int],
    draft_probs: torch.Tensor | None,
    draft_logits: torch.Tensor | None,  # (k, vocab), for display
    settings: SamplingSettings,
    top_n: int = 5,
) -> Acceptance:
    """The numbers the UI shows for a verdict, moved to the CPU in a few transfers."""
    k = len(draft_token_ids)
    x = torch.tensor(draft_token_ids, dtype=torch.long, device=target_logits.device)  # (k,)
    p_view = verdict.target_probs if verdict.target_probs is not None else display_probs(target_logits, settings)  # (k+1, vocab)
    q_sampled = draft_probs if draft_probs is not None else F.one_hot(x, p_view.shape[-1]).float()  # (k, vocab)
    q_view = display_probs(draft_logits, settings) if draft_logits is not None else q_sampled  # (k, vocab)
    p_sampled = warp(target_logits[:k], settings) if settings.greedy else p_view[:k]  # (k, vocab), as the test used
    n_top = min(top_n, p_view.shape[-1])
    top_p = torch.topk(p_view, n_top)
    top_q = torch.topk(q_view, n_top) if k else None
    if verdict.correction is not None:
        residual_top = torch.topk(verdict.correction, min(top_n, verdict.correction.shape[-1]))
        top_residual = list(zip(residual_top.indices.tolist(), residual_top.values.tolist()))
    elif verdict.n_accepted < k:  # greedy: the residual is one-hot on the new token
        top_residual = [(verdict.new_token_id, 1.0)]
    else:
        top_residual = []
    return Acceptance(
        n_accepted=verdict.n_accepted,
        new_token_id=verdict.new_token_id,
        is_bonus=verdict.is_bonus,
        p_shown=p_view[:k].gather(-1, x[:, None]).squeeze(-1).tolist() if k else [],
        q_shown=q_view.gather(-1, x[:, None]).squeeze(-1).tolist() if k else [],
        accept_probability=verdict.accept_probability.tolist(),
        uniforms=verdict.uniforms.tolist() if verdict.uniforms is not None else None,
        overlap=torch.minimum(p_sampled, q_sampled).sum(-1).tolist() if k else [],
        top_p=_ranked(top_p),
        top_q=_ranked(top_q) if top_q is not None else [],
        top_residual=top_residual,
    )


def _ranked(top: torch.return_types.topk) -> list[list[tuple[int, float]]]:
    return [list(zip(ids, values)) for ids, values in zip(top.indices.tolist(), top.values.tolist())]


def compare_verdicts(
    verdict: Verdict, draft_token_ids: list[int], draft_probs: torch.Tensor | None, seed: int
) -> tuple[SameDraftsVerdict, ...]:
    """Every verifier's verdict on the drafts this verdict judged, as plain numbers (nothing under greedy, where all
    three keep the same prefix, nor for an empty window)."""
    if verdict.target_probs is None or not draft_token_ids:
        return ()
    p = verdict.target_probs  # (k+1, vocab)
    x = torch.tensor(draft_token_ids, dtype=torch.long, device=p.device)  # (k,)
    q = draft_probs if draft_probs is not None else F.one_hot(x, p.shape[-1]).float()  # (k, vocab)
    p_x, q_x = (probs[: len(x)].gather(-1, x[:, None]).squeeze(-1).tolist() for probs in (p, q))
    return tuple(
        SameDraftsVerdict(
            verification=name,
            n_accepted=other.n_accepted,
            new_token_id=other.new_token_id,
            accept_probability=tuple(other.accept_probability.tolist()),
            uniforms=tuple(other.uniforms.tolist()) if other.uniforms is not None else (),
            block_weights=tuple(other.block_weights.tolist()) if other.block_weights is not None else (),
            p=tuple(p_x),
            q=tuple(q_x),
        )
        for name, other in same_drafts_verdicts(p, q, x, seed).items()
    )
