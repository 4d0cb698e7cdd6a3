"""One drafting step (models/head_step.py) behind every path that drafts with a head: the chain's `step`, a tree's
nodes (FeatureDrafter), the fast path's DraftStep, for the feature head and the EAGLE-3 head alike. They agree on a
step, and each runs the one `layer_step`: a fifth copy of the arithmetic would fail here."""

import pytest
import torch

from specviz.drafting.drafters import FeatureDrafter
from specviz.engine.sampling import SamplingSettings
from specviz.engine.tree_shape import TreeShape
from specviz.models import head_step
from specviz.models.feature_head import FeatureCache
from specviz.models.head_fast_path import FastHead
from tests import test_eagle3_head, test_feature_head
from tests.tiny import tiny_llama

VOCAB = 64


@pytest.fixture(scope="module", params=["feature", "eagle3"])
def head_and_width(request):
    """A random head of each kind over a tiny target, and the width of the features it reads."""
    torch.manual_seed(0)  # head_from_target draws the feature head's fuse weights from the global generator
    if request.param == "feature":
        return test_feature_head.random_head(tiny_llama(VOCAB, seed=0)), 32
    return test_eagle3_head.random_head(tiny_llama(VOCAB, seed=0, layers=3), kept=list(range(0, VOCAB, 2))), 96


def inputs(width: int, rows: int = 6):
    generator = torch.Generator().manual_seed(3)
    return torch.randint(0, VOCAB, (rows,), generator=generator), torch.randn(rows, width, generator=generator)


@torch.inference_mode()
def test_the_chain_the_tree_and_the_fast_path_agree_on_a_step(head_and_width):
    head, width = head_and_width
    token_ids, features = inputs(width)
    chain = head.step(token_ids, features, FeatureCache())  # (6, hidden)
    # a tree's nodes are fed at the positions and with the mask their rows give; here, a path of six
    positions, mask = torch.arange(6), torch.ones(6, 6, dtype=torch.bool).tril()
    tree = head_step.cached_step(head, token_ids, features, FeatureCache(), positions, mask)
    assert torch.equal(tree, chain), "a tree's nodes along one path are the chain's step, bit for bit"
    fast = FastHead(head, compile_step=False)
    predicted, logits = fast.draft_step(token_ids, features, fast.new_cache())
    # the fast path sums its attention in float32 in another order (engine/static_cache.reduced_attention)
    torch.testing.assert_close(predicted, chain[-1:], atol=2e-4, rtol=2e-4)
    torch.testing.assert_close(logits, head.logits(chain[-1:]), atol=2e-4, rtol=2e-4)


@torch.inference_mode()
def test_every_drafting_path_runs_the_one_layer_step(head_and_width, monkeypatch):
    head, width = head_and_width
    token_ids, features = inputs(width)
    calls = []
    real = head_step.layer_step

    def counted(*args, **kwargs):
        calls.append(args[1].shape[:-1])  # the rows of x it stepped
        return real(*args, **kwargs)

    monkeypatch.setattr(head_step, "layer_step", counted)

    head.step(token_ids, features, FeatureCache())
    assert calls == [(1, 6)], "FeatureHead.step (and the EAGLE-3 head's) runs layer_step"

    calls.clear()
    fast = FastHead(head, compile_step=False)
    fast.draft_step(token_ids, features, fast.new_cache())
    assert calls == [(1, 6)], "the fast path's DraftStep runs layer_step"

    calls.clear()
    drafter = FeatureDrafter(head, VOCAB, compiled=False)
    drafter.start(token_ids.tolist(), features)  # features[i]: the target's after token i
    proposal = drafter.propose(token_ids.tolist(), TreeShape((2, 1)), SamplingSettings(), torch.Generator().manual_seed(0))
    assert len(proposal.tree) == 4
    assert calls == [(1, 5), (1, 2)], "a tree: the catch-up over positions 1…5, then depth 1's two nodes in one step"
