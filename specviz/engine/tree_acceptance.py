"""The acceptance test of a token tree: which path the target keeps, and the token it adds itself.

Greedy: from the root, move to the child whose token is the target's argmax; stop where none is, and emit the argmax.

Sampling, at each node reached, test its children one after another (multi-draft speculative sampling):
  accept child x with probability min(1, p(x) / q(x)); after a rejection the target's distribution becomes the
  residual p ← norm(max(0, p − q)) and the next sibling is tested against it; if every child is rejected, the
  target's own token is drawn from the last residual (from p itself at a leaf: the bonus token).
How q moves from one sibling to the next depends on how the siblings were drawn (`SIBLINGS`):
  - "independent": each drawn from q on its own (SpecInfer); q stays as it is;
  - "without_replacement": drawn from q one after another, each excluding those before it (`draw_children`;
    EAGLE-2's top-k under sampling); after x is rejected, q ← q without x, renormalised.
Both keep the target's distribution exactly (tests/test_tree_acceptance.py, χ² on a five-token vocabulary); judging
siblings drawn without replacement as if independent does not, and the same test catches it.
A child with no q (a deterministic drafter: greedy top-k, lookup branches) is a draft whose q is one-hot on it.

As in engine/acceptance.py, `judge_tree` makes the decision (timed) and `explain_tree_verdict` builds the display
numbers afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from specviz.engine.sampling import SamplingSettings, display_probs, residual, sample, warp
from specviz.engine.tree import ROOT, TokenTree

Siblings = Literal["independent", "without_replacement"]
SIBLINGS: tuple[Siblings, ...] = ("independent", "without_replacement")


@dataclass
class TreeVerdict:
    """The decision: the accepted path and the target's own token, with what each tested node was judged on."""

    accepted_nodes: list[int]  # from depth 1 down
    new_token_id: int  # drawn after the last rejection at the path's end, or the bonus at a leaf
    tested_nodes: list[int]  # in the order tested: siblings one after another, depth by depth
    accept_probability: list[torch.Tensor]  # per tested node, a 0-d tensor (no sync while judging)
    uniforms: list[torch.Tensor] | None  # per tested node; None under greedy
    target_probs: torch.Tensor | None  # (nodes + 1, vocab) p as warped (under sampling)

    @property
    def n_accepted(self) -> int:
        return len(self.accepted_nodes)


def draw_children(draft_probs: torch.Tensor, n_children: int, siblings: Siblings, generator: torch.Generator) -> torch.Tensor:
    """The tokens of `n_children` siblings drawn from q: independently, or one after another without replacement."""  # (vocab,) → (n_children,)
    if siblings not in SIBLINGS:
        raise ValueError(f"unknown sibling draw {siblings!r}: choose one of {', '.join(SIBLINGS)}")
    replacement = siblings == "independent"
    n_children = n_children if replacement else min(n_children, int((draft_probs > 0).sum()))
    return torch.multinomial(draft_probs, n_children, replacement=replacement, generator=generator)


def judge_tree(
    target_logits: torch.Tensor,  # (nodes + 1, vocab): p at the root, then after each node
    tree: TokenTree,
    draft_probs: torch.Tensor | None,  # (nodes + 1, vocab): q its children were drawn from, per parent; None: deterministic
    settings: SamplingSettings,
    siblings: Siblings,
    generator: torch.Generator,
) -> TreeVerdict:
    """Walk down the tree, testing each reached node's children in order (module docstring)."""
    if settings.greedy:
        return _judge_greedy(target_logits, tree)
    if siblings not in SIBLINGS:
        raise ValueError(f"unknown sibling draw {siblings!r}: choose one of {', '.join(SIBLINGS)}")
    p = warp(target_logits, settings)  # (nodes + 1, vocab)
    accepted, tested, accept_probability, uniforms = [], [], [], []
    node = ROOT
    while True:
        p_now = p[node + 1]  # (vocab,), the residual after each rejected sibling
        q_now = draft_probs[node + 1] if draft_probs is not None else None  # (vocab,)
        for child in tree.children(node):
            x = tree.token_ids[child]
            q_child = q_now if q_now is not None else F.one_hot(torch.tensor(x, device=p.device), p.shape[-1]).to(p)  # (vocab,)
            ratio = (p_now[x] / q_child[x]).clamp(max=1.0)
            u = torch.rand((), generator=generator, device=p.device)
            tested.append(child)
            accept_probability.append(ratio)
            uniforms.append(u)
            if u <= ratio:
                break
            p_now = residual(p_now, q_child)
            if q_now is not None and siblings == "without_replacement":
                q_now = _without(q_now, x)
        else:  # every child rejected (or none): the target's own token from what is left of p
            token = sample(p_now[None], generator)
            return TreeVerdict(accepted, int(token.item()), tested, accept_probability, uniforms, p)
        accepted.append(child)
        node = child


def _without(probs: torch.Tensor, token: int) -> torch.Tensor:
    """q with one token removed and the rest renormalised: what the next sibling drawn without replacement came from."""
    removed = probs.clone()
    removed[token] = 0.0
    total = removed.sum()
    return removed / total if total > 0 else removed


def _judge_greedy(target_logits: torch.Tensor, tree: TokenTree) -> TreeVerdict:
    """p is one-hot on the target's argmax: follow the child that drafted it, and emit the argmax where none did."""
    best = target_logits.argmax(-1).tolist()  # (nodes + 1,): one sync for the whole tree
    accepted, tested, accept_probability = [], [], []
    node = ROOT
    while True:
        match = None
        for child in tree.children(node):
            hit = tree.token_ids[child] == best[node + 1]
            tested.append(child)
            accept_probability.append(torch.tensor(float(hit)))
            if hit:
                match = child
                break
        if match is None:
            return TreeVerdict(accepted, best[node + 1], tested, accept_probability, None, None)
        accepted.append(match)
        node = match


@dataclass
class TreeAcceptance:
    """A verdict's display numbers, per node (on the CPU): what a drawing of the tree shows on hover."""

    accepted_nodes: list[int]
    new_token_id: int
    status: list[str]  # per node: "accepted", "rejected" or "untested"
    p_shown: list[float | None]  # p(x) at the node's parent, as tested (the residual after rejected elder siblings)
    q_shown: list[float]  # q(x) at the node's parent as shown
    accept_probability: list[float | None]
    uniforms: list[float | None]


def explain_tree_verdict(
    verdict: TreeVerdict,
    target_logits: torch.Tensor,
    tree: TokenTree,
    draft_logits: torch.Tensor | None,
    settings: SamplingSettings,
) -> TreeAcceptance:
    """Per node: its status, p and q of its token at its parent, and the test's numbers (untested nodes have none).

    p shown is the plain p at the parent (before any residual), as the stream shows it for a chain."""
    n = len(tree)
    tested = dict(zip(verdict.tested_nodes, range(len(verdict.tested_nodes))))
    accepted = set(verdict.accepted_nodes)
    p_view = verdict.target_probs if verdict.target_probs is not None else display_probs(target_logits, settings)
    parent_rows = torch.tensor([parent + 1 for parent in tree.parents], dtype=torch.long)
    tokens = torch.tensor(tree.token_ids, dtype=torch.long)
    p_nodes = p_view[parent_rows, tokens].tolist() if n else []
    if draft_logits is not None:
        q_nodes = display_probs(draft_logits, settings)[parent_rows, tokens].tolist() if n else []
    else:
        q_nodes = [1.0] * n  # a deterministic draft: q is one-hot on it
    status, p_shown, accept_probability, uniforms = [], [], [], []
    for node in range(n):
        index = tested.get(node)
        status.append("accepted" if node in accepted else ("rejected" if index is not None else "untested"))
        p_shown.append(p_nodes[node] if index is not None else None)
        accept_probability.append(float(verdict.accept_probability[index]) if index is not None else None)
        uniforms.append(float(verdict.uniforms[index]) if index is not None and verdict.uniforms is not None else None)
    return TreeAcceptance(verdict.accepted_nodes, verdict.new_token_id, status, p_shown, q_nodes, accept_probability, uniforms)
