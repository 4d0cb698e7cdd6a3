"""models.yaml loads into validated dataclasses and rejects anything malformed, loudly."""

import pytest

from specviz.engine.tree_shape import TreeShape
from specviz.models.catalogue import CatalogueError, load_catalogue


def write(tmp_path, text: str):
    path = tmp_path / "models.yaml"
    path.write_text(text)
    return path


GOOD_PAIR = "    target: a/b\n    draft: a/c\n    description: d\n"


def test_the_shipped_catalogue_loads_with_the_bundled_default():
    catalogue = load_catalogue()
    assert catalogue.default == "pycode-distilled"
    assert "pycode-distilled" in catalogue.offline_pairs() and "pycode-plain" in catalogue.offline_pairs()
    assert catalogue.get("qwen2.5-0.5b-7b").target == "Qwen/Qwen2.5-7B-Instruct"
    assert not catalogue.get("qwen2.5-0.5b-7b").bundled


@pytest.mark.parametrize(
    "text,complaint",
    [
        ("default: x\npairs:\n  x:\n" + GOOD_PAIR + "    colour: red\n", "colour"),
        ("default: x\npairs:\n  x:\n" + GOOD_PAIR + "    gamma: four\n", "gamma"),
        ("default: x\npairs:\n  x:\n" + GOOD_PAIR + "    gamma: 99\n", "gamma"),
        ("default: x\npairs:\n  x:\n    target: a/b\n    description: d\n", "draft"),
        ("default: y\npairs:\n  x:\n" + GOOD_PAIR, "default"),
        ("default: x\nextra: 1\npairs:\n  x:\n" + GOOD_PAIR, "extra"),
        ("- just\n- a list\n", "mapping"),
        ("default: x\npairs:\n  x: [1, 2]\n", "mapping"),
    ],
)
def test_malformed_catalogues_are_rejected_with_the_key_named(tmp_path, text, complaint):
    with pytest.raises(CatalogueError, match=complaint):
        load_catalogue(write(tmp_path, text))


def test_unknown_pair_lists_the_choices():
    with pytest.raises(CatalogueError, match="pycode-distilled"):
        load_catalogue().get("no-such-pair")


@pytest.mark.parametrize(
    "line,shape",
    [("    tree: 4x2x1:2\n", TreeShape((4, 2, 1), 2)), ("    tree: 3\n", TreeShape((3,))), ("", None)],
)
def test_a_pair_may_name_its_token_tree(tmp_path, line, shape):
    pair = load_catalogue(write(tmp_path, "default: x\npairs:\n  x:\n" + GOOD_PAIR + line)).get("x")
    assert pair.tree_shape == shape


@pytest.mark.parametrize(
    "tree,complaint",
    [
        ("4x0", "has a depth with no children"),
        ("wide", "widths per depth"),
        ("8x8x8", "at most 64 nodes"),
        ("[2, 1]", "valid string"),
    ],
)
def test_a_bad_tree_is_one_sentence_naming_the_pair(tmp_path, tree, complaint):
    text = "default: x\npairs:\n  x:\n" + GOOD_PAIR + "  y:\n" + GOOD_PAIR + f"    tree: {tree}\n"
    with pytest.raises(CatalogueError, match=complaint) as raised:
        load_catalogue(write(tmp_path, text))
    assert "pairs.y.tree: " in str(raised.value) and "\n" not in str(raised.value)


def test_the_shipped_trees_parse_and_their_drafters_grow_trees():
    from specviz.drafting.registry import tree_drafter_keys

    named = {name: pair for name, pair in load_catalogue().pairs.items() if pair.tree}
    assert named, "at least one shipped pair names a tree for `--tree default`"
    for name, pair in named.items():
        assert pair.drafter in tree_drafter_keys(), f"{name}: its {pair.drafter} drafter cannot grow its tree"
        assert not pair.tree_shape.is_chain, f"{name}: a tree of one child per node is a chain"
