"""The deployment numbers on the command line: run --json's memory and load_s, hardware --batch, the report command."""

import math

import pytest

from specviz.analysis.readings import speed_verdict
from specviz.analysis.theory import expected_speedup_with_verify_cost
from specviz.deployment.verdict import judge
from tests.test_cli import specviz, specviz_json

PROMPTS = "def main():\n    return\n---\nimport os\nimport sys\n\n\ndef run("


def test_run_json_carries_memory_and_load_times():
    output = specviz_json("run", "--prompt", "def main():\n", "--max-new-tokens", "12", "--json")
    memory, load = output["memory"], output["load_s"]
    for role in ("target", "draft"):
        model = memory[role]
        assert model["weight_bytes"] == 4 * model["parameters"], "float32 on a CPU: 4 bytes per parameter"
        assert model["kv_bytes_per_token"] > 0
        assert load[role]["cold_s"] > 0 and load[role]["warm_s"] > 0, f"{role}: cold and warm load, separately"
    assert memory["target"]["parameters"] > memory["draft"]["parameters"]
    assert memory["peak_source"] == "estimated from tensors", "a CPU has no allocator peak: the tensors' estimate"
    assert memory["speculative_peak_bytes"] - memory["autoregressive_peak_bytes"] == memory["added_bytes"]
    assert memory["added_bytes"] >= memory["draft"]["weight_bytes"], "speculation adds at least the draft's weights"
    assert memory["added_fraction"] == pytest.approx(memory["added_bytes"] / memory["autoregressive_peak_bytes"])
    assert load["speculative_cold_s"] == pytest.approx(load["target"]["cold_s"] + load["draft"]["cold_s"])
    assert "first load" in load["cold_source"], "without --cold-start, cold is this process's first load, and says so"


def test_hardware_batch_json_on_the_bundled_pair():
    output = specviz_json(
        "hardware", "--pair", "pycode-distilled", "--alpha", "0.8", "--batch", "4,1", "--repeats", "1", "--json"
    )
    assert output["weights"] == "real (local folders)", "a bundled pair is timed on its own weights"
    assert output["batch_alpha"] == 0.8 and output["batch_alpha_source"] == "given"
    assert output["batch_prediction"] == "predicted from measured step costs"
    batches = output["batches"]
    assert [row["batch"] for row in batches] == [1, 4], "one row per batch size, smallest first"
    for row in batches:
        assert {"batch", "tau", "verify_cost", "predicted_speedup"} <= row.keys()
        assert row["tau"] == pytest.approx(row["draft_step_ms"] / row["target_step_ms"])
        assert row["verify_cost"] == pytest.approx(row["verify_ms"] / row["target_step_ms"])
        expected = expected_speedup_with_verify_cost(0.8, output["gamma"], row["tau"], row["verify_cost"])
        assert row["predicted_speedup"] == pytest.approx(expected), "the prediction is the theory's, from these costs"
    paying = [row["batch"] for row in batches if speed_verdict(row["predicted_speedup"]) == "faster"]
    past = [row["batch"] for row in batches if not paying or row["batch"] > paying[-1]]
    assert output["stops_paying_at"] == (past[0] if past else None), "the first batch past the largest that pays"
    assert output["batch_sentence"].startswith("Predicted from measured step costs")


def test_report_writes_one_offline_html_file_with_a_tree_beside_the_chain(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPTS)
    out = tmp_path / "report.html"
    args = ("--prompts", str(prompts), "--out", str(out), "--repeats", "1", "--max-new-tokens", "8", "--batch", "1,2")
    output = specviz_json("report", *args, "--no-cold-start", "--threads", "1", "--tree", "2x1:1", "--json", timeout=600)
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "Verdict" in html and "Batch size" in html
    assert "<h2>Chain or tree" in html, "--tree adds the drafting comparison"
    chain, tree = output["drafting"]
    assert chain["setup"] == f"chain, γ = {output['gamma']}" and tree["setup"] == "tree 2x1:1"
    assert chain["speedup"] == pytest.approx(output["speedup"]), "the chain's row is the report's own run"
    assert chain["verify_cost"] == pytest.approx(output["verify_cost"])
    for row in (chain, tree):
        assert row["same_as_target"] is True and row["tokens_per_pass"] >= 1 and row["verify_cost"] > 0
    assert 1 < tree["rows_per_pass"] <= 4, "2x1:1: the pending token and at most 3 nodes"
    assert "<script src=" not in html and "<link" not in html, "plotly.js is inline, nothing is fetched: the file works offline"
    assert len(output["speculative"]) == len(output["autoregressive"]) == 2, "one request per prompt × repeat"
    assert all(len(r["arrivals_s"]) == 8 for r in output["speculative"] + output["autoregressive"])
    assert output["alpha_run"] is not None and output["alpha_scored"] is not None
    assert output["speedup"] > 0 and output["tau"] > 0 and output["verify_cost"] > 0
    assert [row["batch"] for row in output["batch_rows"]] == [1, 2] and output["batch_alpha"] == output["alpha_run"]
    assert output["memory"]["added_bytes"] > 0 and output["load_times"]["target"]["warm_s"] > 0
    checks = output["verdict"]["checks"]
    assert [c["rule"] for c in checks] == [c.rule for c in judge(None).checks], "every rule of thumb, in the library's order"
    assert checks[1]["holds"] is None, "no batch above 8 was timed: not measured, not guessed"
    tail = output["speculative_tail"]
    assert not math.isnan(tail["latency_p99_s"]) and tail["latency_p99_s"] >= tail["latency_p50_s"]
    acceptance = output["acceptance"]  # as engines count it, with the histogram beside its law
    assert output["verification"] == "exact" and len(acceptance["acceptance_length_law"]) == output["gamma"] + 1
    assert "<h2>Acceptance as serving engines count it" in html


@pytest.mark.parametrize(
    "args,complaint",
    [
        (["report", "--out", "/no/such/folder/report.html"], "--out"),
        (["report", "--out", "r.html", "--batch", "1,x"], "--batch"),
        (["report", "--out", "r.html", "--repeats", "0"], "--repeats"),
        (["report", "--out", "r.html", "--gamma", "0"], "γ"),
        (["report", "--out", "r.html", "--prompts", "/no/such/prompts.txt"], "prompts"),
        (["hardware", "--batch", "0,4"], "--batch"),
        (["report"], "--out"),
    ],
)
def test_bad_report_and_batch_arguments_are_one_line(args, complaint):
    result = specviz(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and complaint in lines[0], result.stderr
