"""Token trees on the command line: `run --tree`, `bench --tree` and `--tree default` (models.yaml), in fresh processes
on the bundled pair as tests/test_cli.py runs them; refusals in this process (nothing loads). `report --tree`:
tests/test_deployment_cli.py."""

import pytest

from specviz.cli import main
from specviz.models.catalogue import load_catalogue
from tests.test_cli import specviz_json

PROMPTS = "def main():\n    return\n---\nimport os\nimport sys\n\n\ndef run("


def test_run_json_carries_each_cycles_tree_and_writes_what_the_target_alone_writes():
    args = ("run", "--prompt", "import os\n", "--max-new-tokens", "20", "--json")
    tree = specviz_json(*args, "--tree", "2x2x1:1")
    plain = specviz_json(*args, "--mode", "autoregressive")
    assert tree["tree"] == "2x2x1:1" and plain["tree"] is None
    assert tree["new_token_ids"] == plain["new_token_ids"], "greedy: a tree writes exactly what the target alone writes"
    for cycle in tree["cycles"]:
        parents, path = cycle["parents"], cycle["accepted_nodes"]
        assert len(parents) == len(cycle["draft_token_ids"]) <= 5, "2x2x1:1 holds at most 2 + 2 + 1 nodes"
        assert all(-1 <= parent < node for node, parent in enumerate(parents)), "a node comes after its parent"
        assert len(path) == cycle["n_accepted"]
        assert [parents[node] for node in path] == [-1, *path[:-1]], "the accepted path runs from the root down"
    assert sum(c["n_accepted"] + 1 for c in tree["cycles"]) == 20, "each pass emits its path and the target's own token"
    summary = tree["summary"]
    assert summary["tokens_per_cycle"] == pytest.approx(20 / len(tree["cycles"]))
    rows = [len(c["parents"]) + 1 for c in tree["cycles"]]
    assert summary["rows_per_pass"] == pytest.approx(sum(rows) / len(rows)), "the pending token and every node"


def test_bench_json_puts_tree_rows_beside_the_chain(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPTS)
    args = ("bench", "--prompts", str(prompts), "--repeats", "1", "--max-new-tokens", "16", "--gamma", "2", "--no-hf")
    output = specviz_json(*args, "--no-dynamic", "--tree", "default", "3", "--threads", "1", "--json", timeout=600)
    rows = output["rows"]
    own = load_catalogue().get("pycode-distilled").tree_shape
    assert own is not None and own.n_nodes <= 5, "the bundled pair names a tree of at most 5 nodes (models.yaml)"
    assert [(row["method"], row["gamma"], row["tree"]) for row in rows[1:]] == [
        ("speculative", 2, None),
        ("speculative-tree", None, own.text),
        ("speculative-tree", None, "3"),
    ], "the chain's row, then one row per tree in the order asked, 'default' being the pair's own"
    chain, tree, wide = rows[1:]
    assert output["greedy_identical"] is True
    assert chain["rows_per_pass"] <= 3 and 1 < tree["rows_per_pass"] <= 6 and 1 < wide["rows_per_pass"] <= 4
    for row in (chain, tree, wide):
        assert row["same_as_target"] is True, f"{row['tree'] or 'the chain'}: greedy must equal the target alone"
        assert row["tokens_per_s"] > 0 and row["speedup"] > 0 and row["verify_cost"] > 0
        assert row["rows_per_pass"] == pytest.approx(row["drafts_per_cycle"] + 1)
        histogram = row["acceptance_histogram"]
        accepted = sum(k * n for k, n in enumerate(histogram))
        assert row["mean_acceptance_length"] == pytest.approx(1 + accepted / sum(histogram))
    assert max(k for k, n in enumerate(wide["acceptance_histogram"]) if n) <= 1, "a tree one deep accepts one token at most"
    assert tree["predicted_speedup"] is None and tree["alpha"] is not None, "Leviathan's prediction is a chain's"
    assert chain["predicted_tokens_per_cycle"] is None
    # the theory's E from the run's own acceptance by depth and rank, beside the measured E (which the 16-token limit
    # cuts short on the last cycle: the deep tree's measured value sits below its prediction)
    assert 1 < tree["predicted_tokens_per_cycle"] <= own.depth + 1
    assert wide["predicted_tokens_per_cycle"] == pytest.approx(wide["tokens_per_cycle"], abs=0.3)


@pytest.mark.parametrize(
    "args,complaint",
    [
        (["run", "--prompt", "x", "--tree", "2x0"], "--tree: the tree shape '2x0' has a depth with no children"),
        (["run", "--prompt", "x", "--tree", "two"], "widths per depth"),
        (["run", "--prompt", "x", "--tree", "8x8"], "at most 64 nodes"),
        (["run", "--prompt", "x", "--tree", "2x1", "--drafter", "adaptive"], "drafts chains only"),
        (["run", "--prompt", "x", "--tree", "2x1", "--lenience", "0.5"], "lenient"),
        (["run", "--prompt", "x", "--tree", "default", "--target", "a/b", "--draft", "a/c"], "names no tree"),
        (["bench", "--tree", "2x1", "x"], "--tree"),
        (["bench", "--tree", "2x1", "--adaptive-gamma"], "adaptive"),
        (["report", "--out", "r.html", "--tree", "1x2x"], "--tree"),
    ],
)
def test_bad_trees_are_one_line_before_anything_loads(args, complaint, capsys):
    assert main(args) == 2
    said = capsys.readouterr()
    lines = [line for line in said.err.splitlines() if line.strip()]
    assert len(lines) == 1 and complaint in lines[0], f"one line, before any model loads ('Loading …'): {said.err}"
    assert said.out == ""
