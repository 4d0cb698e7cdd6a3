"""Every verifier keeps the target's distribution: χ² on the first three tokens of a toy pair given by its tables.

The toy pair has a four-token vocabulary and distributions that depend on the whole prefix, so the joint law of three
tokens is exact: p(a) p(b | a) p(c | a, b). With γ = 2 the first cycle ends after 0, 1 or 2 drafts, so a resample after
one accepted draft and a bonus token after two are among the counted outcomes. A deliberately wrong block verifier
(the product of ratios tested, then the token-level residual) must fail the same test.
"""

import itertools

import pytest
import torch

from specviz.engine.verifiers import (
    VERIFIERS,
    Verdict,
    accepted_prefix,
    block_stop_probabilities,
    block_weights,
    same_drafts_verdicts,
    verify_block,
    verify_match,
)
from tests.test_sampling_lossless import chi_square_p_value

VOCAB = 4
GAMMA = 2
N_SAMPLES = 4000
SIGNIFICANCE = 1e-3


def _table(prefix: tuple[int, ...], model: int) -> torch.Tensor:
    """A distribution that depends on the whole prefix, the same every time it is asked for."""
    seed = hash((model, prefix)) % (2**31)
    logits = torch.randn(VOCAB, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 1.5
    return torch.softmax(logits, -1)


class ToyPair:
    """p and q as tables over prefixes (cached): the target is model 0, the draft model 1."""

    def __init__(self):
        self.cache: dict[tuple, torch.Tensor] = {}

    def p(self, prefix: tuple[int, ...]) -> torch.Tensor:
        return self.cache.setdefault((0, prefix), _table(prefix, 0))

    def q(self, prefix: tuple[int, ...]) -> torch.Tensor:
        return self.cache.setdefault((1, prefix), _table(prefix, 1))

    def exact_joint(self) -> torch.Tensor:
        joint = torch.zeros(VOCAB, VOCAB, VOCAB, dtype=torch.float64)
        for a, b, c in itertools.product(range(VOCAB), repeat=3):
            joint[a, b, c] = self.p(())[a] * self.p((a,))[b] * self.p((a, b))[c]
        return joint


def first_three(pair: ToyPair, verifier, generator: torch.Generator) -> tuple[int, ...]:
    """Decode with `verifier` until three tokens are out: draft γ from q, judge, append."""
    out: tuple[int, ...] = ()
    while len(out) < 3:
        drafts: tuple[int, ...] = ()
        for _ in range(GAMMA):
            drafts += (int(torch.multinomial(pair.q(out + drafts), 1, generator=generator)),)
        p = torch.stack([pair.p(out + drafts[:i]) for i in range(GAMMA + 1)])  # (γ+1, vocab)
        q = torch.stack([pair.q(out + drafts[:i]) for i in range(GAMMA)])  # (γ, vocab)
        verdict = verifier(p, q, torch.tensor(drafts), generator)
        out += drafts[: verdict.n_accepted] + (verdict.new_token_id,)
    return out[:3]


def counts_of(verifier, pair: ToyPair) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(VOCAB, VOCAB, VOCAB)
    for _ in range(N_SAMPLES):
        counts[first_three(pair, verifier, generator)] += 1
    return counts


def wrong_block(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, generator: torch.Generator) -> Verdict:
    """Block verification without the paper's residual: keep the longest prefix whose capped product of ratios
    passes a uniform, then draw from the token-level residual norm(max(0, p − q)). Not exact."""
    k = len(x)
    weights = block_weights(p, q, x)[1:]  # (k,)
    etas = torch.rand(k, generator=generator, dtype=p.dtype)
    kept = (etas <= weights).nonzero()
    n = int(kept[-1]) + 1 if len(kept) else 0
    target = p[n] if n == k else (p[n] - q[n]).clamp_min(0)
    token = int(torch.multinomial(target / target.sum(), 1, generator=generator))
    return Verdict.of_chain(n, token, weights, etas, None, p, "block")


@pytest.fixture(scope="module")
def pair() -> ToyPair:
    return ToyPair()


def test_the_toy_pair_disagrees_enough_to_reject(pair):
    """Guard: with q ≈ p every verifier keeps everything and the χ² tests would prove nothing."""
    overlap = torch.minimum(pair.p(()), pair.q(())).sum().item()
    assert overlap < 0.85, f"Σ min(p, q) = {overlap:.2f} at the root: the draft agrees too well for a meaningful test"


@pytest.mark.parametrize("verification", list(VERIFIERS))
def test_each_verifier_keeps_the_targets_distribution_of_three_tokens(pair, verification):
    counts = counts_of(VERIFIERS[verification], pair)
    p_value = chi_square_p_value(counts, pair.exact_joint())
    assert p_value > SIGNIFICANCE, f"{verification}: three tokens do not follow the target (χ² p = {p_value:.2e})"


def test_block_without_the_joint_residual_is_caught(pair):
    p_value = chi_square_p_value(counts_of(wrong_block, pair), pair.exact_joint())
    assert p_value < 1e-6, f"the wrong block verifier should be rejected, yet χ² p = {p_value:.2e}"


def test_block_matches_the_papers_worked_example():
    """Sun et al.'s two-token example: M_b = (1/3, 2/3), M_s = (2/3, 1/3), γ = 2: token by token keeps 10/9 drafts
    on average, block verification 11/9 (exact expectations, summed over every draft block and uniform)."""
    p_row, q_row = torch.tensor([1 / 3, 2 / 3], dtype=torch.float64), torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)
    p, q = p_row.expand(3, 2), q_row.expand(2, 2)
    expected = {"exact": 0.0, "block": 0.0}
    for drafts in itertools.product(range(2), repeat=2):
        chance = float(q_row[drafts[0]] * q_row[drafts[1]])
        x = torch.tensor(drafts)
        ratios = (p_row[x] / q_row[x]).clamp(max=1)
        expected["exact"] += chance * float(ratios[0] + ratios[0] * ratios[1])  # P(≥1 kept) + P(2 kept)
        h = block_stop_probabilities(p, q, block_weights(p, q, x))
        kept_two, kept_one = float(h[1]), float(h[0] * (1 - h[1]))
        expected["block"] += chance * (2 * kept_two + kept_one)
    assert expected["exact"] == pytest.approx(10 / 9) and expected["block"] == pytest.approx(11 / 9)


def test_match_keeps_a_draft_exactly_when_the_targets_own_draw_equals_it():
    p = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # the target surely draws 1, then 0, then 2
    q = torch.full((2, 3), 1 / 3)
    verdict = verify_match(p, q, torch.tensor([1, 2]), torch.Generator().manual_seed(0))
    assert (verdict.n_accepted, verdict.new_token_id) == (1, 0), "x_1 = y_1 kept; x_2 ≠ y_2, so y_2 is the target's token"


def test_the_same_drafts_get_three_verdicts_from_one_call(pair):
    p = torch.stack([pair.p(()), pair.p((0,)), pair.p((0, 1))])
    q = torch.stack([pair.q(()), pair.q((0,))])
    verdicts = same_drafts_verdicts(p, q, torch.tensor([0, 1]), seed=3)
    assert set(verdicts) == {"exact", "block", "match"}
    again = same_drafts_verdicts(p, q, torch.tensor([0, 1]), seed=3)
    assert all((v.n_accepted, v.new_token_id) == (again[k].n_accepted, again[k].new_token_id) for k, v in verdicts.items())
    assert verdicts["block"].block_weights is not None and len(verdicts["block"].block_weights) == 2


@pytest.mark.parametrize("verification", list(VERIFIERS))
def test_a_draft_equal_to_the_target(verification):
    """p = q: token by token and block keep every draft; match keeps x_1 only when the target's own draw equals it,
    with chance p(x_1) (Σ p² averaged over drafts drawn from q = p): it draws its own token."""
    p_row = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    p, q = p_row.expand(GAMMA + 1, 3), p_row.expand(GAMMA, 3)
    generator = torch.Generator().manual_seed(1)
    kept = [VERIFIERS[verification](p, q, torch.tensor([0, 1]), generator).n_accepted for _ in range(2000)]
    if verification == "match":
        first = sum(n >= 1 for n in kept) / len(kept)
        assert abs(first - float(p_row[0])) < 0.04, f"match kept x_1 {first:.3f} of the time, p(x_1) = 0.5"
    else:
        assert all(n == GAMMA for n in kept), f"{verification} rejected a draft equal to the target's distribution"


def test_accepted_prefix_stops_at_the_first_failure():
    assert accepted_prefix(torch.tensor([True, False, True])) == 1
    assert accepted_prefix(torch.tensor([], dtype=torch.bool)) == 0


def test_block_keeps_at_least_what_token_by_token_keeps_on_average(pair):
    """Their Theorem 2, measured on the toy pair with the same drafts: block's mean kept ≥ token by token's."""
    generator = torch.Generator().manual_seed(5)
    totals = {"exact": 0, "block": 0}
    for _ in range(3000):
        drafts: tuple[int, ...] = ()
        for _ in range(GAMMA):
            drafts += (int(torch.multinomial(pair.q(drafts), 1, generator=generator)),)
        p = torch.stack([pair.p(drafts[:i]) for i in range(GAMMA + 1)])
        q = torch.stack([pair.q(drafts[:i]) for i in range(GAMMA)])
        totals["exact"] += VERIFIERS["exact"](p, q, torch.tensor(drafts), generator).n_accepted
        totals["block"] += verify_block(p, q, torch.tensor(drafts), generator).n_accepted
    assert totals["block"] >= totals["exact"] * 0.98, totals


@pytest.mark.parametrize("verification", list(VERIFIERS))
def test_an_empty_window_gets_the_bonus_token(verification):
    """At the token limit a cycle may draft nothing: every verifier then draws the bonus from p_1."""
    p = torch.tensor([[0.0, 1.0, 0.0]])
    verdict = VERIFIERS[verification](p, torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), torch.Generator())
    assert (verdict.n_accepted, verdict.new_token_id, verdict.is_bonus) == (0, 1, True)
