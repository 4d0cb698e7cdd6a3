"""A token tree's acceptance test must emit tokens from the target's exact distribution, whatever the tree drafted.

On a five-token vocabulary the target's exact joint distribution of the first two emitted tokens is a table: p at the
root, then p given the first token. Each sample drafts a two-level tree (three children of the root, two under each),
judges it, and records the first two tokens it emits; where it emits only one, the second is drawn from p given the
first, as the next cycle would. A χ² test compares the counts with the table. Siblings drawn without replacement but
judged as if independent (q not renormalised after a rejection) must fail the same test, so the test can fail.
"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from specviz.engine.acceptance import draw_children, explain, judge
from specviz.engine.sampling import warp
from specviz.engine.settings import SamplingSettings
from specviz.engine.tree import ROOT, TokenTree

VOCAB = 5
ROOT_CHILDREN, GRANDCHILDREN = 3, 2
N_SAMPLES = 6000
SIGNIFICANCE = 1e-3
SAMPLING = SamplingSettings(temperature=1.0)


def distributions(seed: int, sharpness: float) -> torch.Tensor:
    """(VOCAB + 1, VOCAB): row 0 the distribution at the root, row 1 + a the one after token a."""
    generator = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(VOCAB + 1, VOCAB, generator=generator, dtype=torch.float64) * sharpness, -1).float()


P = distributions(seed=0, sharpness=1.0)  # the target: spread out
Q = distributions(seed=1, sharpness=2.5)  # the draft: sharper, and peaked elsewhere (a bad draft shows biases best)


def expected_joint() -> torch.Tensor:
    """P(a, b) = p(a) · p(b | a), with p as the acceptance test warps it."""
    p = warp(P.log(), SAMPLING).double()
    return p[0, :, None] * p[1:]  # (VOCAB, VOCAB)


def drafted_tree(draw: str, generator: torch.Generator) -> tuple[TokenTree, torch.Tensor | None]:
    """Three children of the root, two under each; with q per parent row, or None for a deterministic top-k."""

    def children(q_row: torch.Tensor, n: int) -> list[int]:
        if draw == "top_k":
            return q_row.topk(n).indices.tolist()
        return draw_children(q_row, n, draw, generator).tolist()

    tokens, parents = children(Q[0], ROOT_CHILDREN), [ROOT] * ROOT_CHILDREN
    for child in range(ROOT_CHILDREN):
        grandchildren = children(Q[1 + tokens[child]], GRANDCHILDREN)
        tokens += grandchildren
        parents += [child] * len(grandchildren)
    tree = TokenTree(tuple(tokens), tuple(parents))
    rows = [0] + [1 + token for token in tokens]  # each node's row: the distributions after its token
    return tree, (None if draw == "top_k" else Q[rows])


def emitted_pairs(draw: str, judged_as: str, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    counts = torch.zeros(VOCAB, VOCAB, dtype=torch.float64)
    for _ in range(N_SAMPLES):
        tree, draft_probs = drafted_tree(draw, generator)
        target_logits = P[[0] + [1 + token for token in tree.token_ids]].log()  # (nodes + 1, VOCAB)
        verdict = judge(target_logits, tree, draft_probs, SAMPLING, generator, judged_as)
        emitted = [tree.token_ids[node] for node in verdict.accepted_nodes] + [verdict.new_token_id]
        if len(emitted) == 1:  # the next cycle draws the second token from p given the first
            emitted.append(int(torch.multinomial(P[1 + emitted[0]], 1, generator=generator)))
        counts[emitted[0], emitted[1]] += 1
    return counts


def expected_counts(probs: torch.Tensor, total: float) -> torch.Tensor:
    """The counts probs predict in float64, scaled to sum to total (scipy refuses sums that differ by 1.5e-8)."""
    probs = probs.double()
    return probs / probs.sum() * total


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, float]:
    """Pearson's statistic and p-value over the cells the target can emit."""
    possible = probs.flatten() > 0
    observed = counts.flatten()[possible].double()
    expected = expected_counts(probs.flatten()[possible], float(observed.sum()))
    result = chisquare(observed.numpy(), expected.numpy())
    return float(result.statistic), float(result.pvalue)


@pytest.mark.parametrize(
    "draw,judged_as",
    [("independent", "independent"), ("without_replacement", "without_replacement"), ("top_k", "without_replacement")],
)
def test_tree_sampling_keeps_the_target_distribution(draw, judged_as):
    statistic, p_value = chi_square(emitted_pairs(draw, judged_as), expected_joint())
    print(f"siblings drawn {draw}, judged {judged_as}: χ² {statistic:.1f} on {VOCAB * VOCAB - 1} degrees, p = {p_value:.3g}")
    assert p_value > SIGNIFICANCE, (
        f"siblings drawn {draw} and judged {judged_as}: the first two emitted tokens do not follow the target's "
        f"distribution (χ² {statistic:.1f}, p = {p_value:.2g} over {N_SAMPLES} samples); the tree's acceptance is not exact"
    )


def test_siblings_drawn_without_replacement_but_judged_as_independent_fail():
    """The naive variant: q is not renormalised after a rejected sibling, so later siblings are accepted too often."""
    statistic, p_value = chi_square(emitted_pairs("without_replacement", "independent"), expected_joint())
    print(f"naive (no renormalisation): χ² {statistic:.1f} on {VOCAB * VOCAB - 1} degrees, p = {p_value:.3g}")
    assert p_value < SIGNIFICANCE, (
        f"judging siblings drawn without replacement as if independent should bias the output, yet χ² {statistic:.1f} "
        f"(p = {p_value:.2g}) could not tell: this test would not catch a missing renormalisation"
    )


def test_greedy_follows_the_target_argmax_down_the_tree():
    # root → {7, 3}; 3 → {5, 1}; 7 → {2}. The target's argmax: 3 at the root, 1 after 3, 4 after 1.
    tree = TokenTree((7, 3, 5, 1, 2), (ROOT, ROOT, 1, 1, 0))
    argmax_per_row = [3, 9, 1, 9, 4, 9]  # row 0 the root, row i + 1 after node i
    target_logits = torch.nn.functional.one_hot(torch.tensor(argmax_per_row), 10).float()
    verdict = judge(target_logits, tree, None, SamplingSettings(), torch.Generator())
    assert verdict.accepted_nodes == [1, 3] and verdict.new_token_id == 4, (
        f"expected the path 3 → 1 (nodes 1, 3) then the target's 4, got nodes {verdict.accepted_nodes} then "
        f"{verdict.new_token_id}"
    )
    shown = explain(verdict, target_logits, tree, None, None, SamplingSettings())
    assert shown.status == ["rejected", "accepted", "rejected", "accepted", "unverified"], shown.status
    assert shown.accept_probability[4] is None and shown.accept_probability[1] == 1.0


def test_an_unknown_sibling_draw_is_refused():
    with pytest.raises(ValueError, match="unknown sibling draw"):
        draw_children(Q[0], 2, "with_luck", torch.Generator())


def test_chi_square_takes_float32_probabilities_that_do_not_sum_to_one():
    """Probabilities from a float32 softmax sum to 1 only within 1e-7; the test must not refuse them."""
    probs = torch.softmax(torch.randn(25, generator=torch.Generator().manual_seed(0)), -1)  # float32
    assert abs(float(probs.double().sum()) - 1) > 1.5e-8, (
        "the guard needs probabilities whose sum is off by more than scipy's tolerance"
    )
    counts = (probs.double() * N_SAMPLES).round()
    statistic, p_value = chi_square(counts, probs)
    assert p_value > 0.99, f"counts rounded from the expected ones should fit them (χ² {statistic:.3g}, p = {p_value:.3g})"
