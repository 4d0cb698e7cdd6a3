"""`python -m specviz`: the JSON contract our own checks rely on, and one clear line for bad input."""

import json
import os
import subprocess
import sys

import pytest

from tests.local_models import save_model_folder


def specviz(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m specviz ARGS` in a fresh process, with `env` added to this one's environment."""
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "specviz", *args], capture_output=True, text=True, timeout=timeout, env=environment
    )


def specviz_json(*args: str, timeout: float = 300, env: dict | None = None) -> dict:
    """The JSON a command printed; a failed command fails the test with its stderr."""
    result = specviz(*args, timeout=timeout, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_run_json_on_the_bundled_pair():
    output = specviz_json("run", "--prompt", "def main():\n", "--max-new-tokens", "24", "--json")
    assert {"mode", "text", "new_token_ids", "cycles", "summary"} <= output.keys()
    assert output["mode"] == "speculative" and len(output["new_token_ids"]) == 24
    assert set(output["cycles"][0]) >= {
        "draft_token_ids",
        "n_accepted",
        "resampled_token_id",
        "bonus_token_id",
        "draft_s",
        "verify_s",
    }
    assert set(output["summary"]) >= {"new_tokens", "wall_s", "tokens_per_s", "alpha", "tau", "tokens_per_cycle"}
    assert sum(c["n_accepted"] + 1 for c in output["cycles"]) == 24
    assert output["rows_exact"] is False, "the bundled target's fp32 GEMMs see the rows: its runs say so"
    said = specviz("run", "--prompt", "def main():\n", "--max-new-tokens", "8").stdout
    assert "exact up to rounding" in said

    baseline = json.loads(
        specviz("run", "--prompt", "def main():\n", "--max-new-tokens", "24", "--mode", "autoregressive", "--json").stdout
    )
    assert baseline["new_token_ids"] == output["new_token_ids"], "greedy speculative must equal greedy autoregressive"


@pytest.mark.parametrize("pair", ["pycode-distilled", "pycode-plain"])
def test_fetch_accepts_a_draft_that_reads_with_its_targets_tokenizer(pair):
    """The bundled drafts ship no tokenizer files (they read with the target's): fetch must not demand one.
    CI runs `fetch` on a clean machine before any test, so this failing there fails everything."""
    output = specviz_json("fetch", "--pair", pair, "--json")
    assert output["pair"] == pair and output["draft"].endswith(("pycode-draft", "pycode-draft-plain"))


def test_samples_use_consecutive_seeds():
    result = specviz(
        "run", "--prompt", "import ", "--max-new-tokens", "12", "--temperature", "1", "--samples", "3", "--seed", "5", "--json"
    )
    samples = json.loads(result.stdout)["samples"]
    assert len(samples) == 3
    single = json.loads(
        specviz("run", "--prompt", "import ", "--max-new-tokens", "12", "--temperature", "1", "--seed", "6", "--json").stdout
    )
    assert samples[1]["new_token_ids"] == single["new_token_ids"], "sample i uses seed S + i"


def test_custom_pair_from_folders(tmp_path):
    folder = save_model_folder(tmp_path / "m")
    output = specviz_json(
        "run", "--target", str(folder), "--draft", str(folder), "--prompt", "def", "--max-new-tokens", "8", "--json"
    )
    assert output["summary"]["alpha"] == 1.0, "a draft identical to its target is always accepted"


def test_theory_json():
    result = json.loads(specviz("theory", "--alpha", "0.8", "--gamma", "5", "--tau", "0.01", "--json").stdout)
    assert result["speedup"] == pytest.approx(3.51, abs=0.005)
    assert result["best_gamma"] == 14 and result["best_speedup"] == pytest.approx(4.23, abs=0.005)
    assert result["tokens_per_cycle"] == pytest.approx(3.69, abs=0.005)


def heavy_modules_imported_by(*args: str) -> list[str]:
    """Which of torch and transformers `python -m specviz ARGS` imports, run in a fresh interpreter."""
    code = (
        "import json, runpy, sys\n"
        f"sys.argv = ['specviz', *{list(args)!r}]\n"
        "try:\n"
        "    runpy.run_module('specviz', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, f'exited with {exit.code}'\n"
        "print(json.dumps(sorted(name for name in ('torch', 'transformers') if name in sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-300:] + result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_theory_loads_no_torch():
    """Only the command being run is imported, so `python -m specviz theory` never pays for torch or transformers."""
    imported = heavy_modules_imported_by("theory", "--alpha", "0.8", "--gamma", "5", "--tau", "0.01", "--json")
    assert imported == [], f"python -m specviz theory imported {imported}"


@pytest.mark.parametrize(
    "args,complaint",
    [
        (["run", "--prompt", "x", "--gamma", "0"], "γ"),
        (["run", "--prompt", "x", "--temperature", "-1"], "temperature"),
        (["run", "--prompt", "x", "--temperature", "nan"], "temperature"),
        (["run", "--prompt", "x", "--top-p", "1.5"], "top-p"),
        (["run", "--prompt", "x", "--top-p", "0"], "top-p"),
        (["run", "--prompt", "x", "--max-new-tokens", "0"], "max_new_tokens"),
        (["run", "--prompt", ""], "empty"),
        (["run", "--prompt", "x", "--pair", "no-such-pair"], "unknown pair"),
        (["run", "--prompt", "x", "--lenience", "0"], "lenience"),
        (["run", "--prompt", "x", "--target", "only-a-target"], "--draft"),
        (["theory", "--alpha", "1.5", "--gamma", "3", "--tau", "0.1"], "alpha"),
        (["bench", "--gamma", "2,x"], "gamma"),
        (["run", "--prompt", "x", "--drafter", "nope"], "--drafter"),
        (["bench", "--repeats", "0"], "repeats"),
        (["run", "--prompt", "x", "--verification", "blocky"], "--verification"),
        (["bench", "--verification", "exact,block", "--lenience", "0.5"], "lenient acceptance"),
        (["run", "--prompt", "x", "--verification", "match", "--tree", "2x1", "--drafter", "model"], "token trees"),
    ],
)
def test_bad_arguments_exit_nonzero_with_one_line(args, complaint):
    result = specviz(*args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and complaint in lines[0], result.stderr


def test_bench_judges_the_same_prompts_and_seeds_three_ways(tmp_path):
    """One row per verification; greedy: all identical to the target alone, and nothing to compare on the same drafts
    (greedy judges once for every verifier: the same-drafts comparison is for sampling)."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def main():\n    return\n---\nimport os\nimport sys\n\n\ndef run(")
    common = ("bench", "--prompts", str(prompts), "--repeats", "1", "--max-new-tokens", "12", "--gamma", "3", "--no-hf")
    output = specviz_json(*common, "--no-dynamic", "--verification", "exact,block,match", "--json", timeout=600)
    rows = output["rows"]
    assert [row["method"] for row in rows] == ["autoregressive", "speculative", "speculative-block", "speculative-match"]
    assert [row["verification"] for row in rows[1:]] == ["exact", "block", "match"]
    assert output["greedy_identical"] is True, "under greedy every verifier writes what the target alone writes"
    for row in rows[1:]:
        assert row["same_drafts"] == {}
        assert len(row["acceptance_length_law"]) == 4 and row["acceptance_histogram_distance"] is not None


def test_bench_json_compares_every_method(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def main():\n    return\n---\nimport os\nimport sys\n\n\ndef run(")
    output = specviz_json(
        "bench", "--prompts", str(prompts), "--repeats", "1", "--max-new-tokens", "16", "--gamma", "2,4", "--json", timeout=600
    )
    methods = [row["method"] for row in output["rows"]]
    assert methods == [
        "autoregressive",
        "speculative",
        "transformers-assisted",
        "speculative",
        "transformers-assisted",
        "speculative-dynamic",
        "transformers-assisted-default",
    ]
    assert output["greedy_identical"] is True, "every method, dynamic ones included, must reproduce greedy decoding"
    assert "other_load_cores" in output, "bench reports other programs' load (null where /proc is missing)"
    assert output["engine"] in ("compiled", "eager") and output["threads"] >= 1, "bench says what it timed, as the page's trace"
    assert output["settings"]["max_new_tokens"] == 16 and output["settings"]["temperature"] == 0
    assert output["other_load_cores"] is None or output["other_load_cores"] >= 0
    for row in output["rows"]:
        assert {"method", "tokens_per_s", "speedup", "alpha", "tau", "predicted_speedup"} <= row.keys()
        assert row["tokens_per_s"] > 0
        if not row["method"].startswith("transformers"):
            assert (row["engine"], row["threads"]) == (output["engine"], output["threads"]), "every row of ours on one engine"
    for row in output["rows"]:
        if row["method"].startswith("speculative"):
            histogram = row["acceptance_histogram"]
            cycles = sum(histogram)
            accepted = sum(k * n for k, n in enumerate(histogram))
            assert row["mean_acceptance_length"] == pytest.approx(1 + accepted / cycles), "vLLM: 1 + accepted / cycles"
            assert row["conditional_acceptance_rate_per_pos"][0] is not None
    dynamic = output["rows"][5]
    assert dynamic["gamma"] is None and dynamic["drafts_per_cycle"] > 0 and dynamic["alpha"] is not None
    latency = ("latency_p50_s", "latency_p90_s", "latency_p99_s", "itl_p50_ms", "itl_p99_ms", "ttft_ms")
    for row in output["rows"]:
        if row["method"].startswith("transformers"):
            assert all(row[key] is None for key in latency), "generate() gives no token arrival times: null, not made up"
            continue
        assert all(row[key] is not None for key in latency), f"{row['method']} must carry every latency key"
        assert 0 < row["latency_p50_s"] <= row["latency_p90_s"] <= row["latency_p99_s"], "percentiles are ordered"
        assert 0 <= row["itl_p50_ms"] <= row["itl_p99_ms"] and row["ttft_ms"] > 0
        assert row["ttft_ms"] / 1000 <= row["latency_p99_s"], "the first token comes before the request ends"


def test_run_json_carries_vllm_metrics_and_draft_stops():
    """Mean acceptance length, the acceptance histogram and per-position acceptance, checked against the cycles."""
    result = specviz("run", "--prompt", "import os\n", "--max-new-tokens", "40", "--gamma", "3", "--json")
    output = json.loads(result.stdout)
    cycles, summary = output["cycles"], output["summary"]
    n_accepted = [c["n_accepted"] for c in cycles]
    assert summary["mean_acceptance_length"] == pytest.approx(1 + sum(n_accepted) / len(cycles))
    assert summary["acceptance_histogram"] == [n_accepted.count(k) for k in range(4)], "cycles by number accepted, length γ + 1"
    for i, rate in enumerate(summary["conditional_acceptance_rate_per_pos"]):
        tested = [c for c in cycles if len(c["draft_token_ids"]) > i and c["n_accepted"] >= i]
        assert rate == pytest.approx(sum(c["n_accepted"] > i for c in tested) / len(tested)), f"position {i + 1}"
    for i, rate in enumerate(summary["acceptance_rate_per_pos"]):  # vLLM's: over every cycle, not only the tested
        assert rate == pytest.approx(sum(c["n_accepted"] > i for c in cycles) / len(cycles)), f"position {i + 1}"
        assert summary["num_accepted_tokens_per_pos"][i] == sum(c["n_accepted"] > i for c in cycles)
    law = summary["acceptance_length_law"]
    assert len(law) == 4 and sum(law) == pytest.approx(1.0) and 0 <= summary["acceptance_histogram_distance"] <= 1
    assert output["verification"] == "exact"
    assert {c["draft_stop"] for c in cycles} <= {"window full", "token limit"}
    assert output["tree"] is None and summary["rows_per_pass"] == pytest.approx(
        1 + sum(len(c["draft_token_ids"]) for c in cycles) / len(cycles)
    )
    for cycle in cycles:  # a chain: no parents (position i's parent is i − 1), its accepted prefix as the path
        assert cycle["parents"] == [] and cycle["accepted_nodes"] == list(range(cycle["n_accepted"]))

    dynamic = json.loads(
        specviz("run", "--prompt", "import os\n", "--max-new-tokens", "40", "--drafter", "dynamic", "--json").stdout
    )
    assert dynamic["drafter"] == "dynamic" and dynamic["new_token_ids"] == output["new_token_ids"], "dynamic drafting is exact"
    assert any(c["draft_stop"].startswith("confidence") for c in dynamic["cycles"])
