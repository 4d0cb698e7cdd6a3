"""Tree shapes as users type them, the dynamic (EAGLE-2) budget, and prompt lookup's branches."""

from __future__ import annotations

import pytest
import torch

from specviz.drafting.drafters import PromptLookupDrafter, lookup_continuations, merged_tree
from specviz.drafting.growth import grow_tree, keep_most_probable
from specviz.engine import SamplingSettings
from specviz.engine.tree import ROOT, TokenTree
from specviz.engine.tree_shape import TreeShape

GREEDY = SamplingSettings()


@pytest.mark.parametrize(
    "text,shape",
    [
        ("4x2x1", TreeShape((4, 2, 1))),
        ("4 × 2 × 1", TreeShape((4, 2, 1))),
        ("3", TreeShape((3,))),
        ("4x2x1:2", TreeShape((4, 2, 1), expanded=2)),
        ("nodes=16,depth=5", TreeShape((4,) * 5, expanded=4, budget=16)),
        ("depth=3, nodes=10, width=2", TreeShape((2, 2, 2), expanded=2, budget=10)),
    ],
)
def test_shapes_parse_from_what_users_type_and_back(text, shape):
    assert TreeShape.parse(text) == shape
    assert TreeShape.parse(shape.text) == shape, f"{shape.text!r} does not read back as the same shape"


def test_shapes_say_what_they_are():
    assert str(TreeShape.parse("4x2x1")) == "4×2×1"
    assert str(TreeShape.parse("4x2x1:2")) == "4×2×1, top 2 branch"
    assert str(TreeShape.parse("nodes=16,depth=5")) == "16 nodes, depth 5 (per depth the 4 best branch 4 ways)"
    assert TreeShape.parse("nodes=16,depth=5").n_nodes == 16 and TreeShape.parse("nodes=99,depth=2").n_nodes == 4 + 16
    assert TreeShape.parse("4x2x1:1").n_nodes == 4 + 2 + 1


@pytest.mark.parametrize(
    "text,message",
    [
        ("4x0x1", "a depth with no children"),
        ("4,2", "cannot read the tree shape"),
        ("", "cannot read the tree shape"),
        ("4x2:0", "lets no node branch"),
        ("nodes=16", "needs both nodes= and depth="),
        ("nodes=16,depth=5,top=3", "unknown key 'top'"),
        ("nodes=0,depth=5", "at least 1"),
        ("nodes=x,depth=5", "whole number"),
    ],
)
def test_a_wrong_shape_gets_one_sentence(text, message):
    with pytest.raises(ValueError, match=message) as caught:
        TreeShape.parse(text)
    assert str(caught.value).count(". ") == 0 and "\n" not in str(caught.value)


def test_a_budget_keeps_the_most_probable_nodes_with_their_ancestors():
    tree = TokenTree((10, 11, 12, 13, 14, 15), (ROOT, ROOT, 0, 0, 1, 2))
    log_q = torch.tensor([-0.1, -1.0, -0.5, -3.0, -1.2, -0.5])  # node 5 ties its parent 2: the parent must come first
    kept_tree, kept = keep_most_probable(tree, log_q, 4)
    assert kept == (0, 1, 2, 5), "the four most probable: 0 (−0.1), 2 and 5 (−0.5), 1 (−1.0)"
    assert kept_tree == TokenTree((10, 11, 12, 15), (ROOT, ROOT, 0, 2))


def test_a_dynamic_shape_grows_eagle_2s_way():
    """Per depth the most probable nodes branch into their top-k; then the budget's most probable stay."""
    vocab = 8
    root = torch.tensor([[4.0, 3.0, 0.0, -9, -9, -9, -9, -9]])
    fed: list[list[int]] = []

    def feed(tree: TokenTree, nodes: list[int]) -> torch.Tensor:
        fed.append(nodes)
        logits = torch.full((len(nodes), vocab), -9.0)
        logits[:, 5], logits[:, 6] = 5.0, 1.0  # every fed node is sure of token 5
        return logits

    shape = TreeShape.dynamic(nodes=5, depth=3, width=2)
    proposal, grown_ids = grow_tree(root, shape, feed, GREEDY, "without_replacement", torch.Generator())
    assert fed == [[0, 1], [2, 4]], "depth 2 expands the two depth-1 nodes, depth 3 the two best depth-2 nodes"
    tree = proposal.tree
    assert len(tree) == 5 and tree.token_ids[:2] == (0, 1)
    assert grown_ids == (0, 1, 2, 4, 6), "kept: both depth-1 nodes, their sure children, and 0 → 5 → 5"
    assert all(parent < node for node, parent in enumerate(tree.parents))


def test_lookup_offers_several_earlier_matches_as_branches():
    tokens = [7, 1, 2, 3, 9, 1, 2, 4, 5, 8, 1, 2]  # "1 2" was followed by 3, then by 4 5, then by … (the end)
    assert lookup_continuations(tokens, 3, 3, max_ngram=3, min_ngram=1) == [[4, 5, 8], [3, 9, 1]]
    tree = merged_tree([[4, 5, 8], [3, 9, 1], [4, 6]], max_nodes=10)
    assert tree == TokenTree((4, 3, 5, 6, 9, 8, 1), (ROOT, ROOT, 0, 0, 1, 2, 4)), "shared beginnings share a node"
    assert len(merged_tree([[4, 5, 8], [3, 9, 1]], max_nodes=3)) == 3
    proposal = PromptLookupDrafter().propose(tokens, TreeShape.parse("2x1x1"), GREEDY, None)
    assert proposal.tree.children(ROOT) == (0, 1) and proposal.draft_probs is None and proposal.draft_logits is None
