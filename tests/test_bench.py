"""bench's transformers rows run what they say: transformers reads the assisted-generation settings from the
*draft's* generation_config, so bench sets them there for each call and restores them after."""

import torch

from specviz.deployment.benchmark import TRANSFORMERS_DEFAULT, assistant_settings
from specviz.drafting.registry import strategy
from tests.tiny import tiny_llama

PROMPT = [3, 17, 5, 42, 8, 8, 9]


def forwards_per_cycle(target, draft, assistant_config: dict) -> float:
    """Draft forwards per target forward in one assisted generate() of 30 tokens."""
    calls = {"target": 0, "draft": 0}
    hooks = [
        target.register_forward_hook(lambda *_: calls.__setitem__("target", calls["target"] + 1)),
        draft.register_forward_hook(lambda *_: calls.__setitem__("draft", calls["draft"] + 1)),
    ]
    ids = torch.tensor([PROMPT])
    try:
        with assistant_settings(draft, assistant_config):
            target.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=30,
                do_sample=False,
                pad_token_id=0,
                assistant_model=draft,
            )
    finally:
        for hook in hooks:
            hook.remove()
    return calls["draft"] / calls["target"]


def test_the_gamma_bench_asks_for_is_the_gamma_transformers_uses():
    target, draft = tiny_llama(64, seed=0), tiny_llama(64, seed=0)  # the same model: every draft is accepted
    twin = strategy("model").transformers_twin
    one, five = (
        forwards_per_cycle(target, draft, twin(1).assistant_config),
        forwards_per_cycle(target, draft, twin(5).assistant_config),
    )
    assert one < 1.5 and five > 3, f"draft forwards per cycle: {one:.2f} at γ = 1, {five:.2f} at γ = 5"


def test_assistant_settings_are_restored_after_the_call():
    draft = tiny_llama(64, seed=1)
    before = {key: getattr(draft.generation_config, key, None) for key in TRANSFORMERS_DEFAULT.assistant_config}
    with assistant_settings(draft, {"num_assistant_tokens": 7, "num_assistant_tokens_schedule": "heuristic"}):
        assert draft.generation_config.num_assistant_tokens == 7
    assert {key: getattr(draft.generation_config, key, None) for key in before} == before


def test_the_page_and_bench_time_one_path(bundled_pair):
    """The page's measured Run (serving/recorder.py) and `bench` (deployment/benchmark.py) on the same prompt, in one
    process: the same engine, threads and settings, and speedups within a band (wide: CI machines are noisy; the
    point is that both take one path, run/timing_conditions.py)."""
    from specviz.analysis.readings import readings_of_trace
    from specviz.deployment.benchmark import bench
    from specviz.engine import DecodeSettings
    from specviz.prompts.sets import PROMPTS
    from specviz.serving import recorder

    prompt, settings = PROMPTS["code"][0], DecodeSettings(max_new_tokens=48, gamma=3)
    page = recorder.measure_run(bundled_pair, prompt, settings, "model")
    benched = bench(bundled_pair, [prompt], settings, [3], "model", repeats=3, with_transformers=False, with_dynamic=False)
    row = next(row for row in benched["rows"] if row["method"] == "speculative")
    started = page.started
    assert (started.engine, started.threads) == (row["engine"], row["threads"]) == (benched["engine"], benched["threads"])
    assert started.threads >= 1 and started.engine in ("compiled", "eager")
    asked = benched["settings"]
    assert (started.gamma, started.tree, started.max_new_tokens, started.temperature, started.seed, started.verification) == (
        row["gamma"],
        "",
        asked["max_new_tokens"],
        asked["temperature"],
        asked["seed"],
        asked["verification"],
    )
    assert page.summary.new_token_ids == page.baseline.new_token_ids and benched["greedy_identical"]
    ratio = readings_of_trace(page).measured_speedup / row["speedup"]
    assert 0.6 <= ratio <= 1.6, f"page {readings_of_trace(page).measured_speedup:.2f}× against bench {row['speedup']:.2f}×"


def test_bench_takes_the_memory_read_rate_between_repeats_never_inside_a_request(bundled_pair, monkeypatch):
    """The read rate is taken before each repeat and after the last, and never while a request is timed: a request
    that is running when the probe is called fails the test."""
    from specviz.deployment import benchmark
    from specviz.engine import DecodeSettings
    from specviz.prompts.sets import PROMPTS

    running = []
    real_run_ours = benchmark.run_ours

    def run_ours(*args, **kwargs):
        running.append(True)
        try:
            return real_run_ours(*args, **kwargs)
        finally:
            running.pop()

    monkeypatch.setattr(benchmark, "run_ours", run_ours)
    taken = []

    def read_rate() -> float:
        assert not running, "the read rate was taken inside a timed request"
        taken.append(30.0 + 10 * len(taken))
        return taken[-1]

    settings = DecodeSettings(max_new_tokens=8, gamma=2)
    result = benchmark.bench(
        bundled_pair,
        [PROMPTS["code"][0]],
        settings,
        [2],
        "model",
        repeats=3,
        with_transformers=False,
        with_dynamic=False,
        read_rate=read_rate,
    )
    assert result["memory_read_gb_s"] == taken == [30.0, 40.0, 50.0, 60.0]
    merged = benchmark.merge_processes([result, {**result, "memory_read_gb_s": [35.0] * 4}])
    assert merged["memory_read_gb_s_by_process"] == [taken, [35.0] * 4]


def test_the_read_rate_line_warns_only_where_the_rates_lie_at_two_levels():
    from specviz.cli.bench import read_rate_line

    steady = read_rate_line([35.2, 36.0, 34.8])
    assert steady == "memory read rate around the repeats: 35, 36, 35 GB/s"
    moved = read_rate_line([35.0, 64.0, 63.0], "the processes")
    assert moved.startswith("memory read rate around the processes: 35, 64, 63 GB/s (⚠ it moved between levels")
    assert read_rate_line([]) == "memory read rate: not measured"


def test_the_auto_line_names_the_state_the_choice_was_made_in_beside_the_runs():
    from specviz.cli.bench import auto_line

    measured = {"measured_decode_speedup": 1.54, "measured_speedup": 1.48}
    line = auto_line("γ 7", 1.88, measured, 64.2, [36.3, 35.6, 37.9])
    assert line == (
        "--gamma auto chose γ 7: predicted 1.88× while decoding, measured 1.54× (0.82 of it); 1.48× with the prompt's "
        "prefill; chosen while memory read 64 GB/s, measured at 36–38 GB/s"
    )
    assert auto_line("γ 7", 1.88, measured).endswith("1.48× with the prompt's prefill"), "no rates, no clause"
    assert auto_line("γ 7", 1.88, measured, 36.0, [36.2, 35.9]).endswith("chosen while memory read 36 GB/s, measured at 36 GB/s")
