"""Speculative decoding with token trees: greedy output equals transformers' generate(); sampling follows the target.

Drafts that agree with the target (the draft is the target), that rarely do (another random model), the feature
head built from the target, and prompt lookup's branches; chain, product, EAGLE-style (top nodes branch) and dynamic
(a node budget) shapes; on transformers' cache and on the static-cache fast path.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from specviz.drafting.drafters import FeatureDrafter, ModelDrafter, PromptLookupDrafter
from specviz.engine import CachedDecoder, DecodeSettings, SamplingSettings
from specviz.engine.compiled import FastDecoder, FastModel
from specviz.engine.events import Cycle, Summary
from specviz.engine.speculative import speculative_decode
from specviz.engine.tree_shape import TreeShape
from specviz.models.feature_head import head_from_target
from tests.test_greedy_exact import transformers_greedy
from tests.test_tree_acceptance import chi_square
from tests.tiny import fake_vocabulary, tiny_llama

VOCAB = 64
PROMPT = [3, 17, 5, 42, 8, 8, 9]
SHAPES = [
    TreeShape.chain(3),
    TreeShape((3, 2)),
    TreeShape((3, 2, 2, 1), expanded=2),
    TreeShape((4, 1, 1, 1), expanded=1),
    TreeShape.dynamic(nodes=6, depth=3, width=3),
]


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=0, sharpness=3.0)


def drafter_for(kind: str, target):
    if kind == "same model":  # always agrees: every cycle accepts a full path
        return ModelDrafter(CachedDecoder(target, VOCAB))
    if kind == "other model":  # a different random model: mostly rejected, side branches matter
        return ModelDrafter(CachedDecoder(tiny_llama(VOCAB, seed=1, layers=1, sharpness=3.0), VOCAB))
    return FeatureDrafter(head_from_target(target, list(range(VOCAB))), VOCAB, compiled=False)


def run(target, drafter, shape, settings, prompt=PROMPT, decoder=None) -> tuple[list[Cycle], Summary]:
    decoder = decoder or CachedDecoder(target, VOCAB)
    events = list(speculative_decode(decoder, drafter, prompt, replace(settings, tree=shape), fake_vocabulary()))
    assert events[0].tree == shape.text, "the run announces its tree's shape"
    return events[1:-1], events[-1]


@pytest.mark.parametrize("kind", ["same model", "other model", "feature head"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_greedy_tree_equals_transformers_generate(target, kind, shape):
    reference = transformers_greedy(target, PROMPT, 30)
    cycles, summary = run(target, drafter_for(kind, target), shape, DecodeSettings(max_new_tokens=30))
    assert list(summary.new_token_ids) == reference, (
        f"{kind}, tree {shape}: speculative greedy output parted from generate() at token "
        f"{next(i for i, (a, b) in enumerate(zip(summary.new_token_ids, reference)) if a != b)}"
    )
    assert all(len(cycle.emitted_token_ids) == len(cycle.accepted_nodes) + 1 for cycle in cycles[:-1])
    assert sum(len(cycle.emitted_token_ids) for cycle in cycles) == 30 and summary.tally.cycles == len(cycles)
    if kind == "same model":  # the draft is the target: a full-depth path is accepted
        assert len(cycles[0].accepted_nodes) == len(shape.branching)


FAST_SHAPES = [TreeShape((3, 2, 2, 1), expanded=2), TreeShape.dynamic(nodes=8, depth=4, width=3)]


@pytest.mark.parametrize("kind", ["same model", "other model", "feature head", "lookup"])
@pytest.mark.parametrize("shape", FAST_SHAPES, ids=str)
def test_greedy_tree_on_the_fast_path_equals_transformers_generate(target, kind, shape):
    """The target (and the draft model) on the static-cache fast path, run eager as it runs by default."""
    fast_target = FastModel(target, compile_step=False)
    if kind == "lookup":
        drafter = PromptLookupDrafter()
    elif kind == "feature head":
        drafter = drafter_for(kind, target)
    else:
        draft = target if kind == "same model" else tiny_llama(VOCAB, seed=1, layers=1, sharpness=3.0)
        drafter = ModelDrafter(FastDecoder(FastModel(draft, compile_step=False), VOCAB))
    prompt = PROMPT * 3  # repeats, so that prompt lookup finds matches
    reference = transformers_greedy(target, prompt, 30)
    cycles, summary = run(target, drafter, shape, DecodeSettings(max_new_tokens=30), prompt, FastDecoder(fast_target, VOCAB))
    assert list(summary.new_token_ids) == reference, f"{kind}, tree {shape}: the fast path parted from generate()"
    assert all(len(cycle.positions) <= shape.n_nodes for cycle in cycles), f"a tree grew past {shape.n_nodes} nodes"
    if kind == "same model":
        assert len(cycles[0].accepted_nodes) == len(shape.branching), "the draft is the target: a full path is accepted"


def test_side_branches_are_accepted(target):
    """With a poor draft, a tree must sometimes accept a node that is not its draft's first choice (else it is a chain)."""
    cycles, _ = run(target, drafter_for("other model", target), TreeShape((4, 2)), DecodeSettings(max_new_tokens=40))
    accepted_at_depth_1 = {cycle.accepted_nodes[0] for cycle in cycles if cycle.accepted_nodes}
    assert accepted_at_depth_1 - {0}, "only the draft's first choice (node 0) was ever accepted at depth 1"


def test_a_chain_shaped_tree_costs_the_chain_rows(target):
    cycles, summary = run(target, drafter_for("other model", target), TreeShape.chain(4), DecodeSettings(max_new_tokens=20))
    emitted_before = [sum(len(c.emitted_token_ids) for c in cycles[:i]) for i in range(len(cycles))]
    full = [cycle for cycle, before in zip(cycles, emitted_before) if 20 - before > 4]  # room for 4 drafts and the target's
    assert full and all(cycle.n_rows == 5 and cycle.n_draft_forwards == 4 for cycle in full), (
        "a chain of 4 drafts should verify 5 rows and cost the draft 4 forwards (the root's and 3 feeds: the last is not fed)"
    )
    assert summary.tally.drafted + summary.tally.cycles == sum(cycle.n_rows for cycle in cycles)


def test_max_new_tokens_is_never_exceeded(target):
    for limit in (1, 2, 5):
        _, summary = run(target, drafter_for("same model", target), TreeShape((3, 2, 2)), DecodeSettings(max_new_tokens=limit))
        assert len(summary.new_token_ids) == limit == len(transformers_greedy(target, PROMPT, limit))


def test_lenient_acceptance_is_refused_for_trees(target):
    with pytest.raises(ValueError, match="exactly"):
        run(target, drafter_for("same model", target), TreeShape((2,)), DecodeSettings(lenience=0.5))


SMALL_VOCAB, SMALL_PROMPT, N_SAMPLES = 6, [1, 2, 3, 1, 2], 2000


@pytest.mark.parametrize(
    "siblings,shape",
    [
        pytest.param("independent", TreeShape((3, 2)), marks=pytest.mark.slow),
        ("without_replacement", TreeShape((3, 2))),  # the drafters' default in the quick suite
        pytest.param("without_replacement", TreeShape.dynamic(nodes=4, depth=2, width=3), marks=pytest.mark.slow),  # q's top-k
    ],
    ids=["independent", "without replacement", "dynamic"],
)
def test_tree_sampling_through_the_models_follows_the_target(siblings, shape):
    """End to end on tiny models: the first two tokens of a sampled tree run against the target's exact joint."""
    small_target = tiny_llama(SMALL_VOCAB, seed=0, hidden=16, layers=1)
    draft = tiny_llama(SMALL_VOCAB, seed=1, hidden=16, layers=1)
    with torch.no_grad():
        first = torch.softmax(small_target(torch.tensor([SMALL_PROMPT])).logits[0, -1].double(), -1)
        joint = torch.stack(
            [
                first[a] * torch.softmax(small_target(torch.tensor([SMALL_PROMPT + [a]])).logits[0, -1].double(), -1)
                for a in range(SMALL_VOCAB)
            ]
        )
    counts = torch.zeros(SMALL_VOCAB, SMALL_VOCAB, dtype=torch.float64)
    target_decoder, drafter = CachedDecoder(small_target, SMALL_VOCAB), ModelDrafter(CachedDecoder(draft, SMALL_VOCAB))
    for seed in range(N_SAMPLES):
        settings = DecodeSettings(max_new_tokens=3, sampling=SamplingSettings(temperature=1.0), seed=seed, tree=shape)
        events = list(speculative_decode(target_decoder, drafter, SMALL_PROMPT, settings, fake_vocabulary(), siblings=siblings))
        a, b = events[-1].new_token_ids[:2]
        counts[a, b] += 1
    statistic, p_value = chi_square(counts, joint)
    print(f"{siblings}: χ² {statistic:.1f} on {SMALL_VOCAB**2 - 1} degrees, p = {p_value:.3g}")
    assert p_value > 1e-3, (
        f"{siblings} siblings: tree sampling does not follow the target (χ² {statistic:.1f}, p = {p_value:.2g})"
    )


def test_greedy_tree_equals_generate_on_the_bundled_pair(bundled_pair):
    from specviz.prompts.sets import PROMPTS
    from specviz.run.runner import encode_prompt

    vocab = bundled_pair.shared_vocab_size
    for prompt in PROMPTS["code"][:2]:
        ids = encode_prompt(bundled_pair, prompt, 40, 4)
        drafter = ModelDrafter(CachedDecoder(bundled_pair.draft.model, vocab))
        target_decoder = CachedDecoder(bundled_pair.target.model, vocab)
        shape = TreeShape((3, 2, 1), expanded=2)
        settings = DecodeSettings(max_new_tokens=40, tree=shape)
        events = list(speculative_decode(target_decoder, drafter, ids, settings, bundled_pair.vocabulary))
        reference = transformers_greedy(bundled_pair.target.model, ids, 40)
        ours = list(events[-1].new_token_ids)
        assert ours == reference[: len(ours)] and len(ours) > 0, f"the tree parted from generate() on {prompt!r}"


def test_the_drafters_keep_the_accepted_path(target):
    """Wrong draft state never breaks exactness (the target decides), only the draft's guesses: so check it directly.
    After every cycle, the draft model's cache must be a fresh cache of the committed tokens, and the feature head's
    known features the target's own hidden states over them, whichever branch was accepted."""
    draft = tiny_llama(VOCAB, seed=1, layers=1, sharpness=3.0)
    model_drafter = ModelDrafter(CachedDecoder(draft, VOCAB))
    feature_drafter = FeatureDrafter(head_from_target(target, list(range(VOCAB))), VOCAB, compiled=False)
    # the head built from a random target is a poor guesser: it needs a wide tree to have side branches accepted
    for drafter, shape in ((model_drafter, TreeShape((4, 2), expanded=2)), (feature_drafter, TreeShape((16, 2), expanded=2))):
        committed, side_branches = list(PROMPT), 0
        settings = DecodeSettings(max_new_tokens=40, tree=shape)
        events = speculative_decode(CachedDecoder(target, VOCAB), drafter, PROMPT, settings, fake_vocabulary())
        for cycle in events:
            if isinstance(cycle, Summary):
                break
            if not isinstance(cycle, Cycle):
                continue
            committed += cycle.emitted_token_ids
            side_branches += any(node != 0 for node in cycle.accepted_nodes[:1])
            with torch.no_grad():
                if drafter is model_drafter:
                    length = drafter.decoder.cached_length
                    fresh = draft(torch.tensor([committed[:length]]), use_cache=True).past_key_values
                    for kept, reference in zip(drafter.decoder.cache.layers, fresh.layers):
                        assert (kept.keys - reference.keys).abs().max() < 1e-4, (
                            f"cycle {cycle.index}: the draft's cache lost the path"
                        )
                else:
                    known = drafter.features
                    fresh = target(torch.tensor([committed[: len(known)]]), output_hidden_states=True).hidden_states[-1][0]
                    assert (known - fresh).abs().max() < 1e-4, f"cycle {cycle.index}: the head's features are not the path's"
        assert side_branches > 0, f"{drafter.name}: no side branch was accepted, so compaction was never put to the test"
