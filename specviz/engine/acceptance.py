"""The acceptance test of one cycle (step 3 of the algorithm): which drafted path the target keeps, and the token it adds.

A proposal is a token tree; a chain is the tree with one child per node. `judge` is the one entry point:
  - greedy: from the root, move to the child whose token is the target's argmax; stop where none is, and emit the
    argmax (lenience l < 1, offered for chains: move while p(x) ≥ l·max p, which is lossy);
  - sampling, at each node reached, test its children one after another (multi-draft speculative sampling): accept
    child x with probability min(1, p(x) / q(x)); after a rejection the target's distribution becomes the residual
    p ← norm(max(0, p − q)) and the next sibling is tested against it; if every child is rejected, the target's own
    token is drawn from the last residual (from p itself at a leaf: the bonus token). One uniform per node is drawn
    up front, so a node's test reads the same draw however the walk got there.
How q moves from one sibling to the next depends on how the siblings were drawn (`SIBLINGS`):
  - "independent": each drawn from q on its own (SpecInfer); q stays as it is;
  - "without_replacement": drawn from q one after another, each excluding those before it (`draw_children`;
    EAGLE-2's top-k under sampling); after x is rejected, q ← q without x, renormalised.
Both keep the target's distribution exactly (tests/test_tree_acceptance.py, χ² on a five-token vocabulary); judging
siblings drawn without replacement as if independent does not, and the same test catches it.
A node with no q (a deterministic drafter: greedy top-k, lookup) is a draft whose q is one-hot on it.

A chain under sampling takes a fast path: engine/verifiers.py's vectorised tests (token by token, block, or
sample-and-match, as `verification` says). Token by token is the walk above written for a chain, with the same uniforms
and the same draw after: tests/test_acceptance.py checks that both decide alike on random inputs (count, token, and
the generator's state after). A tree is judged token by token only.

Two parts, so that the timed section holds only what decoding needs: `judge` makes the decision; `explain` adds the
numbers the UI shows (p and q as shown, their top-n, the overlap), after the cycle's clock has stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from specviz.engine.events import SameDraftsVerdict
from specviz.engine.sampling import SamplingSettings, display_probs, residual, sample, warp
from specviz.engine.tree import ROOT, TokenTree
from specviz.engine.verifiers import VERIFIERS, Verdict, same_drafts_verdicts, verify_token_by_token

Siblings = Literal["independent", "without_replacement"]
SIBLINGS: tuple[Siblings, ...] = ("independent", "without_replacement")
Ranked = list[tuple[int, float]]


def draw_children(draft_probs: torch.Tensor, n_children: int, siblings: Siblings, generator: torch.Generator) -> torch.Tensor:
    """The tokens of `n_children` siblings drawn from q: independently, or one after another without replacement."""  # (vocab,) → (n_children,)
    check_siblings(siblings)
    replacement = siblings == "independent"
    n_children = n_children if replacement else min(n_children, int((draft_probs > 0).sum()))
    return torch.multinomial(draft_probs, n_children, replacement=replacement, generator=generator)


def check_siblings(siblings: str) -> None:
    if siblings not in SIBLINGS:
        raise ValueError(f"unknown sibling draw {siblings!r}: choose one of {', '.join(SIBLINGS)}")


def judge(
    target_logits: torch.Tensor,  # (nodes + 1, vocab): p at the root, then after each node
    tree: TokenTree,
    draft_probs: torch.Tensor | None,  # (rows, vocab): q each node's children were drawn from, per parent; None: one-hot
    settings: SamplingSettings,
    generator: torch.Generator,
    siblings: Siblings = "without_replacement",
    verification: str = "exact",
    lenience: float = 1.0,
) -> Verdict:
    """The one entry point of step 3 (module docstring)."""
    if settings.greedy:  # p and q one-hot: token by token, block and match all keep the same path
        return judge_greedy(target_logits, tree, settings, lenience, verification)
    p = warp(target_logits, settings)  # (nodes + 1, vocab)
    if tree.is_chain:  # the vectorised tests
        x = torch.tensor(tree.token_ids, dtype=torch.long, device=p.device)  # (k,)
        q = draft_probs[: len(x)] if draft_probs is not None else F.one_hot(x, p.shape[-1]).to(p)  # (k, vocab)
        if verification == "exact":
            return verify_token_by_token(p, q, x, generator, lenience)
        return VERIFIERS[verification](p, q, x, generator)
    if verification != "exact" or lenience != 1.0:
        raise ValueError("a token tree is judged token by token and exactly: block, match and lenience are for chains")
    return judge_sampled_tree(p, tree, draft_probs, siblings, generator)


def judge_sampled_tree(
    p: torch.Tensor, tree: TokenTree, draft_probs: torch.Tensor | None, siblings: Siblings, generator: torch.Generator
) -> Verdict:
    """Walk down the tree from the root, testing each reached node's children in order against p as warped."""
    check_siblings(siblings)
    uniforms = torch.rand(len(tree), generator=generator, device=p.device)  # (nodes,): one per node, up front
    accept_probability = torch.zeros(len(tree), dtype=p.dtype, device=p.device)  # (nodes,), filled where tested
    accepted, tested, node = [], [], ROOT
    while True:
        children = tree.children(node)
        p_now = p[node + 1]  # (vocab,), the residual after each rejected sibling
        q_now = draft_probs[node + 1] if draft_probs is not None and children else None  # (vocab,)
        for child in children:
            x = tree.token_ids[child]
            q_child = q_now if q_now is not None else F.one_hot(torch.tensor(x, device=p.device), p.shape[-1]).to(p)
            ratio = (p_now[x] / q_child[x]).clamp(max=1.0)
            tested.append(child)
            accept_probability[child] = ratio
            if uniforms[child] <= ratio:
                break
            p_now = residual(p_now, q_child)
            if q_now is not None and siblings == "without_replacement":
                q_now = without(q_now, x)
        else:  # every child rejected (or none: the bonus): the target's own token from what is left of p
            token = int(sample(p_now[None], generator).item())
            correction = p_now if children else None
            return Verdict(accepted, token, tested, not children, accept_probability, uniforms, correction, p)
        accepted.append(child)
        node = child


def without(probs: torch.Tensor, token: int) -> torch.Tensor:
    """q with one token removed and the rest renormalised: what the next sibling drawn without replacement came from."""
    removed = probs.clone()
    removed[token] = 0.0
    total = removed.sum()
    return removed / total if total > 0 else removed


def judge_greedy(
    target_logits: torch.Tensor, tree: TokenTree, settings: SamplingSettings, lenience: float, verification: str
) -> Verdict:
    """p is one-hot on the target's argmax: follow the child that drafted it, and emit the argmax where none did. After
    a rejection the residual norm(max(0, p − q)) is p itself, so the new token is the argmax there."""
    device = target_logits.device
    x = torch.tensor(tree.token_ids, dtype=torch.long, device=device)  # (nodes,)
    rows = tree.parent_rows.to(device)  # (nodes,)
    best = target_logits.argmax(-1)  # (nodes + 1,), the token warp's one-hot would pick
    if lenience == 1.0:
        hits = x == best[rows]  # (nodes,)
    else:  # lossy: accept while p(x) ≥ l · max p under the plain softmax, as the UI shows p
        shown = display_probs(target_logits[rows], settings)  # (nodes, vocab)
        hits = shown.gather(-1, x[:, None]).squeeze(-1) >= lenience * shown.max(-1).values
    both = torch.cat([best, hits.long()]).tolist()  # one sync for the whole tree
    best_ids, hit = both[: len(tree) + 1], both[len(tree) + 1 :]
    accepted, tested, node = [], [], ROOT
    while True:
        children = tree.children(node)
        match = None
        for child in children:
            tested.append(child)
            if hit[child]:
                match = child
                break
        if match is None:
            return Verdict(accepted, best_ids[node + 1], tested, not children, hits.float(), None, None, None, verification)
        accepted.append(match)
        node = match


@dataclass
class Shown:
    """A verdict's display numbers per node (on the CPU): what the stream, the inspector and a tree's drawing show."""

    status: list[str]  # "accepted", "rejected" or "unverified"
    p: list[float | None]  # p(x) at the node's parent, as tested before any residual; None if never tested
    q: list[float]  # q(x) at the node's parent, as shown
    accept_probability: list[float | None]
    uniforms: list[float | None]  # None under greedy, for match, and for untested nodes
    overlap: list[float | None]  # Σ_x min(p(x), q(x)) at the parent, where tested
    tops: tuple[list[Ranked], list[Ranked], list[Ranked]]  # per node: top of p and q at its parent, and on the last
    # rejected node the top of what the target's token was drawn from (the residual)
    bonus_top_p: Ranked  # p after the accepted path: where the target's own token came from


def explain(
    verdict: Verdict,
    target_logits: torch.Tensor,  # (nodes + 1, vocab)
    tree: TokenTree,
    draft_probs: torch.Tensor | None,
    draft_logits: torch.Tensor | None,  # (rows, vocab), for display
    settings: SamplingSettings,
    top_n: int = 5,
) -> Shown:
    """The numbers the UI shows for a verdict, moved to the CPU in a few transfers."""
    n = len(tree)
    device = target_logits.device
    x = torch.tensor(tree.token_ids, dtype=torch.long, device=device)  # (nodes,)
    rows = tree.parent_rows.to(device)  # (nodes,)
    p_view = verdict.target_probs if verdict.target_probs is not None else display_probs(target_logits, settings)
    q_sampled = draft_probs[rows] if draft_probs is not None else F.one_hot(x, p_view.shape[-1]).float()  # (nodes, vocab)
    q_view = display_probs(draft_logits[rows], settings) if draft_logits is not None else q_sampled  # (nodes, vocab)
    p_sampled = warp(target_logits[rows], settings) if settings.greedy else p_view[rows]  # (nodes, vocab), as tested
    n_top = min(top_n, p_view.shape[-1])
    top_p = ranked(torch.topk(p_view, n_top))  # per row of the verify pass
    top_q = ranked(torch.topk(q_view, n_top)) if n else []
    p_x = p_view[rows].gather(-1, x[:, None]).squeeze(-1).tolist()
    q_x = q_view.gather(-1, x[:, None]).squeeze(-1).tolist()
    overlap = torch.minimum(p_sampled, q_sampled).sum(-1).tolist()
    accept = verdict.accept_probability.tolist()
    uniforms = verdict.uniforms.tolist() if verdict.uniforms is not None else None
    if verdict.correction is not None:
        residual_top = torch.topk(verdict.correction, min(top_n, verdict.correction.shape[-1]))
        residual = list(zip(residual_top.indices.tolist(), residual_top.values.tolist()))
    else:  # greedy: the residual is one-hot on the new token
        residual = [(verdict.new_token_id, 1.0)]
    rejected = verdict.tested_nodes[-1] if verdict.tested_nodes and not verdict.is_bonus else None
    tested, accepted = set(verdict.tested_nodes), set(verdict.accepted_nodes)
    status = ["accepted" if i in accepted else ("rejected" if i in tested else "unverified") for i in range(n)]
    last = verdict.accepted_nodes[-1] if verdict.accepted_nodes else ROOT
    return Shown(
        status=status,
        p=[p_x[i] if i in tested else None for i in range(n)],
        q=q_x,
        accept_probability=[accept[i] if i in tested else None for i in range(n)],
        uniforms=[uniforms[i] if i in tested and uniforms is not None else None for i in range(n)],
        overlap=[overlap[i] if i in tested else None for i in range(n)],
        tops=([top_p[parent + 1] for parent in tree.parents], top_q, [residual if i == rejected else [] for i in range(n)]),
        bonus_top_p=top_p[last + 1],
    )


def ranked(top: torch.return_types.topk) -> list[Ranked]:
    return [list(zip(ids, values)) for ids, values in zip(top.indices.tolist(), top.values.tolist())]


def compare_verdicts(
    verdict: Verdict, draft_token_ids: list[int], draft_probs: torch.Tensor | None, seed: int
) -> tuple[SameDraftsVerdict, ...]:
    """Every verifier's verdict on the chain this verdict judged, as plain numbers (nothing under greedy, where all
    three keep the same prefix, nor for an empty window)."""
    if verdict.target_probs is None or not draft_token_ids:
        return ()
    p = verdict.target_probs  # (k+1, vocab)
    x = torch.tensor(draft_token_ids, dtype=torch.long, device=p.device)  # (k,)
    q = draft_probs[: len(x)] if draft_probs is not None else F.one_hot(x, p.shape[-1]).float()  # (k, vocab)
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
