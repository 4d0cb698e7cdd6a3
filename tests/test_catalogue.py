"""models.yaml loads into validated dataclasses and rejects anything malformed, loudly."""

import pytest

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
