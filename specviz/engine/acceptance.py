"""The acceptance test of one cycle (step 3 of the algorithm): which drafts the target keeps, and the token it adds itself."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specviz.engine.sampling import SamplingSettings, display_probs, residual, sample, warp


@dataclass
class Acceptance:
    """The outcome of testing k drafts against the target's k + 1 distributions (all on the CPU)."""

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
    top_residual: list[tuple[int, float]]  # at the rejected position, else empty


def accept_drafts(
    target_logits: torch.Tensor,  # (k + 1, vocab): p_1 .. p_{k+1}
    draft_token_ids: list[int],
    draft_probs: torch.Tensor | None,  # (k, vocab), None for a deterministic drafter
    draft_logits: torch.Tensor | None,  # (k, vocab), for display
    settings: SamplingSettings,
    lenience: float,
    generator: torch.Generator,
    top_n: int = 5,
) -> Acceptance:
    """Leviathan et al.'s test: accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), left to right.

    lenience l < 1 accepts with min(1, p / (l·q)) instead (under greedy: while p(x) ≥ l·max p),
    which is lossy: the output no longer follows p.
    """
    k = len(draft_token_ids)
    device = target_logits.device
    p = warp(target_logits, settings)  # (k+1, vocab)
    x = torch.tensor(draft_token_ids, dtype=torch.long, device=device)  # (k,)
    q = draft_probs if draft_probs is not None else F.one_hot(x, p.shape[-1]).float()  # (k, vocab)
    p_view = display_probs(target_logits, settings)  # (k+1, vocab)
    q_view = display_probs(draft_logits, settings) if draft_logits is not None else q  # (k, vocab)

    # 1. the test, for all k drafts at once; only the prefix up to the first failure counts
    p_x = p[:k].gather(-1, x[:, None]).squeeze(-1)  # (k,)
    q_x = q.gather(-1, x[:, None]).squeeze(-1)  # (k,)
    shown_p_x = p_view[:k].gather(-1, x[:, None]).squeeze(-1)  # (k,)
    if settings.greedy:
        if lenience == 1.0:
            accept_probability = (x == p[:k].argmax(-1)).float()
        else:
            accept_probability = (shown_p_x >= lenience * p_view[:k].max(-1).values).float()
        uniforms = None
        accepted = accept_probability > 0
    else:
        accept_probability = (p_x / (lenience * q_x)).clamp(max=1.0)
        uniforms = torch.rand(k, generator=generator, device=device)
        accepted = uniforms <= accept_probability
    n_accepted = int(accepted.long().cumprod(0).sum().item()) if k else 0

    # 2. the target's own token: from the residual after a rejection, else the bonus from p_{k+1}
    if n_accepted < k:
        correction = residual(p[n_accepted], q[n_accepted])
        new_token = sample(correction[None], settings, generator)
        residual_top = torch.topk(correction, min(top_n, correction.shape[-1]))
        top_residual = list(zip(residual_top.indices.tolist(), residual_top.values.tolist()))
    else:
        new_token = sample(p[k : k + 1], settings, generator)
        top_residual = []

    # 3. numbers for display, moved to the CPU in a few transfers
    n_top = min(top_n, p.shape[-1])
    top_p = torch.topk(p_view, n_top)
    top_q = torch.topk(q_view, n_top) if k else None
    return Acceptance(
        n_accepted=n_accepted,
        new_token_id=int(new_token.item()),
        is_bonus=n_accepted == k,
        p_shown=shown_p_x.tolist(),
        q_shown=q_view.gather(-1, x[:, None]).squeeze(-1).tolist() if k else [],
        accept_probability=accept_probability.tolist(),
        uniforms=uniforms.tolist() if uniforms is not None else None,
        overlap=torch.minimum(p[:k], q).sum(-1).tolist(),
        top_p=_ranked(top_p),
        top_q=_ranked(top_q) if top_q is not None else [],
        top_residual=top_residual,
    )


def _ranked(top: torch.return_types.topk) -> list[list[tuple[int, float]]]:
    return [list(zip(ids, values)) for ids, values in zip(top.indices.tolist(), top.values.tolist())]
