"""Under sampling, speculative decoding must draw from the target's exact distribution (and lenient mode must not).

On a six-token vocabulary the target's exact joint distribution of the first two new tokens can be
computed from its logits; a chi-square test compares it with thousands of speculative samples.
"""

from dataclasses import replace

import pytest
import torch

from specviz.drafting.drafters import FeatureDrafter, ModelDrafter, PromptLookupDrafter
from specviz.engine import (
    CachedDecoder,
    DecodeSettings,
    SamplingSettings,
    speculative_decode,
)
from specviz.engine.compiled import FastDecoder, FastModel
from specviz.engine.tree_shape import TreeShape
from specviz.models.feature_head import head_from_target
from tests.tiny import fake_vocabulary, tiny_llama

VOCAB = 6
PROMPT = [1, 2, 3, 1, 2]
N_SAMPLES = 2000
SIGNIFICANCE = 1e-3


def reference_joint(target, top_k: int) -> torch.Tensor:
    """P(a, b) = p(a | prompt) · p(b | prompt, a), from full forwards (no cache), after an independent top-k cut."""

    def next_token_probs(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = target(torch.tensor([ids])).logits[0, -1].double()
        if top_k:
            cutoff = logits.sort(descending=True).values[top_k - 1]
            logits = torch.where(logits >= cutoff, logits, torch.tensor(float("-inf"), dtype=logits.dtype))
        return torch.softmax(logits, -1)

    first = next_token_probs(PROMPT)
    return torch.stack([first[a] * next_token_probs(PROMPT + [a]) for a in range(VOCAB)])  # (VOCAB, VOCAB)


def speculative_counts(target, drafter_factory, settings: DecodeSettings, target_decoder=None) -> torch.Tensor:
    counts = torch.zeros(VOCAB, VOCAB)
    target_decoder = target_decoder or CachedDecoder(target, VOCAB)
    drafter = drafter_factory()
    for seed in range(N_SAMPLES):
        seeded = DecodeSettings(**{**settings.__dict__, "seed": seed})
        summary = list(speculative_decode(target_decoder, drafter, PROMPT, seeded, fake_vocabulary()))[-1]
        a, b = summary.new_token_ids[:2]
        counts[a, b] += 1
    return counts


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's test; cells expected to hold fewer than 5 samples are pooled into one."""
    counts, expected = counts.flatten().double(), probs.flatten() * counts.sum()
    small = expected < 5
    observed_cells = torch.cat([counts[~small], counts[small].sum(0, keepdim=True)])
    expected_cells = torch.cat([expected[~small], expected[small].sum(0, keepdim=True)])
    keep = expected_cells > 0
    statistic = (((observed_cells - expected_cells) ** 2) / expected_cells)[keep].sum()
    degrees = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(degrees / 2, dtype=torch.float64), statistic / 2))


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=0, hidden=16, layers=1)


@pytest.fixture(scope="module")
def draft():
    return tiny_llama(VOCAB, seed=1, hidden=16, layers=1)


@pytest.mark.parametrize("drafter_kind,top_k", [("model", 0), ("model", 4), ("lookup", 0), ("feature", 0)])
def test_speculative_sampling_matches_the_target_distribution(target, draft, drafter_kind, top_k):
    settings = DecodeSettings(max_new_tokens=3, gamma=3, sampling=SamplingSettings(temperature=1.0, top_k=top_k))
    factories = {
        "model": lambda: ModelDrafter(CachedDecoder(draft, VOCAB)),
        "lookup": PromptLookupDrafter,
        "feature": lambda: FeatureDrafter(head_from_target(target, list(range(VOCAB))).eval(), VOCAB),  # reads p's features
    }
    factory = factories[drafter_kind]
    counts = speculative_counts(target, factory, settings)
    p_value = chi_square_p_value(counts, reference_joint(target, top_k))
    assert p_value > SIGNIFICANCE, f"samples do not follow the target's distribution (chi-square p = {p_value:.2e})"


@pytest.fixture(scope="module")
def compiled_pair(target, draft):
    """Both tiny models on one compiled package, compiled once (about 20 s on 2 cores; later sessions load it from
    Inductor's cache, as tests/test_compiled_exact.py's): the draft has the target's layout, so it loads the target's
    package and runs its own weights."""
    fast_target, fast_draft = FastModel(target, compile_step=True), FastModel(draft, compile_step=True)
    if fast_target.build() is None:
        pytest.skip(f"the step cannot compile here: {fast_target.report.reason}")
    assert set(fast_draft.warm_up().seconds) == {"load"}
    return fast_target, fast_draft


@pytest.mark.parametrize("engine,method", [("eager", "chain"), ("compiled", "chain"), ("compiled", "tree")])
def test_speculative_sampling_on_the_fast_path_matches_the_target_distribution(target, draft, engine, method, request):
    """The same test with both models on the fast path (engine/compiled.py), the shipped path: the static cache run
    eager, and the compiled package, with a chain and with a token tree; the reference is transformers' own forward."""
    if engine == "compiled":
        fast_target, fast_draft = request.getfixturevalue("compiled_pair")
    else:
        fast_target, fast_draft = FastModel(target, compile_step=False), FastModel(draft, compile_step=False)
    settings = DecodeSettings(max_new_tokens=3, gamma=3, sampling=SamplingSettings(temperature=1.0))
    target_decoder = FastDecoder(fast_target, VOCAB)
    assert target_decoder.engine == engine
    if method == "chain":
        drafter = lambda: ModelDrafter(FastDecoder(fast_draft, VOCAB))  # noqa: E731
        counts = speculative_counts(target, drafter, settings, target_decoder=target_decoder)
    else:
        settings = replace(settings, tree=TreeShape((3, 2)))
        counts = tree_counts(target_decoder, ModelDrafter(FastDecoder(fast_draft, VOCAB)), settings)
    p_value = chi_square_p_value(counts, reference_joint(target, 0))
    assert p_value > SIGNIFICANCE, f"samples do not follow the target's distribution (chi-square p = {p_value:.2e})"


def tree_counts(target_decoder, drafter, settings: DecodeSettings) -> torch.Tensor:
    counts = torch.zeros(VOCAB, VOCAB)
    for seed in range(N_SAMPLES):
        events = list(speculative_decode(target_decoder, drafter, PROMPT, replace(settings, seed=seed), fake_vocabulary()))
        a, b = events[-1].new_token_ids[:2]
        counts[a, b] += 1
    return counts


def test_lenient_mode_is_detectably_lossy(target, draft):
    """The same test must reject lenient acceptance: it has the power to catch a lossy algorithm."""
    settings = DecodeSettings(max_new_tokens=3, gamma=3, sampling=SamplingSettings(temperature=1.0), lenience=0.2)
    counts = speculative_counts(target, lambda: ModelDrafter(CachedDecoder(draft, VOCAB)), settings)
    p_value = chi_square_p_value(counts, reference_joint(target, 0))
    assert p_value < SIGNIFICANCE, f"lenience 0.2 should distort the output distribution, yet chi-square p = {p_value:.2e}"


def test_draft_and_target_really_disagree(target, draft):
    """Guard: if q ≈ p every draft is accepted and the tests above would prove nothing about rejection."""
    with torch.no_grad():
        p = torch.softmax(target(torch.tensor([PROMPT])).logits[0, -1], -1)
        q = torch.softmax(draft(torch.tensor([PROMPT])).logits[0, -1], -1)
    overlap = torch.minimum(p, q).sum().item()
    assert overlap < 0.8, f"Σ min(p, q) = {overlap:.2f}: the draft agrees too well for a meaningful test"


@pytest.mark.parametrize("drafter_kind", ["model", "feature"])
def test_the_numbers_shown_are_the_ones_the_test_judged(target, draft, drafter_kind):
    """Every tested draft's shown accept probability is min(1, p/q) of its shown p and q: the inspector's q is the q the
    token was drawn from and judged by, cycle after cycle (with temperature and top-k, where a display built from other
    logits than the judged ones would show another q)."""
    factories = {
        "model": lambda: ModelDrafter(CachedDecoder(draft, VOCAB)),
        "feature": lambda: FeatureDrafter(head_from_target(target, list(range(VOCAB))).eval(), VOCAB),
    }
    tested = 0
    for seed in range(20):
        settings = DecodeSettings(max_new_tokens=12, gamma=3, seed=seed, sampling=SamplingSettings(temperature=0.7, top_k=4))
        events = speculative_decode(CachedDecoder(target, VOCAB), factories[drafter_kind](), PROMPT, settings, fake_vocabulary())
        for cycle in (event for event in events if hasattr(event, "positions")):
            for position in (position for position in cycle.positions if position.p is not None):
                assert position.accept_probability == pytest.approx(min(1.0, position.p / position.q), abs=1e-5)
                tested += 1
    assert tested > 50
