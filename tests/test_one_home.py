""" "Every number is derived in one place" (docs/numbers.md), held against the source: a second copy of a rule fails here.

Rules that have caught copies before: whether a speedup is one at all (±5 % of 1× is break-even), whose home is
analysis/readings.py:speed_verdict; α pooled over scored texts, whose home is analysis/score.py:pooled_alpha; a prompt
set's rates and the target's mean step (`bench` took medians over repeats and a plain mean, `report` pooled every
request), whose home is analysis/prompt_set.py; the step timer (min of repeats in one place, the median in another),
whose home is analysis/timing.py:fastest_seconds; and waiting for the device, whose home is engine/kv_cache.py:synchronize.
The checks read every module of specviz/ with ast, so a copy is found however it is spaced or wrapped; each is
also shown a planted copy, so none of them can pass by finding nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from specviz.analysis.readings import readings_of, readings_of_steps, speed_verdict
from specviz.deployment.batch import BatchRow, BatchStepCosts, batch_row
from specviz.deployment.verdict import overall
from specviz.engine.tally import Tally

PACKAGE = Path(__file__).resolve().parent.parent / "specviz"
VERDICT_HOME = ("analysis/readings.py", "speed_verdict")
POOLED_ALPHA_HOMES = {("analysis/score.py", "pooled_alpha"), ("engine/tally.py", "alpha_analytic")}
RATIO_HOME = "analysis/readings.py"
PROMPT_SET_HOME = "analysis/prompt_set.py"
RATE_HOMES = {PROMPT_SET_HOME, "engine/events.py"}  # a prompt set's pooled rate; one request's own (its Summary)
TIMER_HOME = ("analysis/timing.py", "fastest_seconds")
SYNCHRONIZE_HOME = ("engine/kv_cache.py", "synchronize")
ACCEPTANCE_HOMES = {"engine/tally.py", "analysis/tree_theory.py"}  # a chain's counts; a tree's acceptance by rank
AVERAGES = {"sum", "mean", "median", "fmean", "min", "max"}
THRESHOLDS = {"FASTER_FROM", "SLOWER_FROM", "BREAK_EVEN_BAND"}
ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)

Place = tuple[str, str | None, int]  # module (relative to specviz/), enclosing function, line


def walk(tree: ast.AST) -> Iterator[tuple[ast.AST, str | None]]:
    """Every node with the name of the innermost function it sits in (None at module level)."""

    def visit(node: ast.AST, function: str | None) -> Iterator[tuple[ast.AST, str | None]]:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            yield child, inner
            yield from visit(child, inner)

    yield from visit(tree, None)


def names(node: ast.AST) -> set[str]:
    """The identifiers an expression reads: variables and attributes."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def is_speedup(node: ast.AST) -> bool:
    return any("speedup" in name and not name.endswith("possible") for name in names(node))


def is_threshold(node: ast.AST) -> bool:
    """A literal of the band (1.05, 0.95) or one of its named constants."""
    literal = isinstance(node, ast.Constant) and node.value in (1.05, 0.95)
    return literal or bool(names(node) & THRESHOLDS)


def speedup_judgements(module: str, tree: ast.AST) -> list[Place]:
    """Where a speedup is held against a number, or anything against the break-even band."""
    found = []
    for node, function in walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, ORDER) for op in node.ops):
            operands = [node.left, *node.comparators]
            if any(is_speedup(o) for o in operands) or any(is_threshold(o) for o in operands):
                found.append((module, function, node.lineno))
    return found


def alpha_poolings(module: str, tree: ast.AST) -> list[Place]:
    """Where α is computed from overlaps: a call of alpha_analytic, or a division that reads overlaps."""
    found = []
    for node, function in walk(tree):
        calls = isinstance(node, ast.Call) and "alpha_analytic" in names(node.func)
        divides = isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
        if calls or (divides and any(name.startswith("overlap") for name in names(node))):
            found.append((module, function, node.lineno))
    return found


def step_ratios(module: str, tree: ast.AST) -> list[Place]:
    """Where something is divided by a step time: τ and ν read from timed steps."""
    found = []
    for node, function in walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if any(name.endswith("step_s") for name in names(node.right)):
                found.append((module, function, node.lineno))
    return found


def is_seconds(name: str) -> bool:
    return name.endswith("_s") or "wall" in name or "second" in name


def rates(module: str, tree: ast.AST) -> list[Place]:
    """Where tokens are divided by seconds: a rate."""
    found = []
    for node, function in walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if any("token" in name for name in names(node.left)) and any(is_seconds(name) for name in names(node.right)):
                found.append((module, function, node.lineno))
    return found


def called(node: ast.AST) -> str:
    """The last name of what a call calls: "median" for statistics.median(...)."""
    return ast.unparse(node.func).rsplit(".", 1)[-1] if isinstance(node, ast.Call) else ""


def step_averages(module: str, tree: ast.AST) -> list[Place]:
    """Where step times are summed or averaged over requests."""
    found = []
    for node, function in walk(tree):
        if called(node) in AVERAGES and any(name.endswith("step_s") for arg in node.args for name in names(arg)):
            found.append((module, function, node.lineno))
    return found


def repeat_reductions(module: str, tree: ast.AST) -> list[Place]:
    """Where repeated timings are reduced to one after dropping a warm-up round: `min(timings[1:])` and its kind."""
    found = []
    for node, function in walk(tree):
        if called(node) in AVERAGES:
            slices = [n.slice for arg in node.args for n in ast.walk(arg) if isinstance(n, ast.Subscript)]
            if any(isinstance(s, ast.Slice) and isinstance(s.lower, ast.Constant) and s.lower.value == 1 for s in slices):
                found.append((module, function, node.lineno))
    return found


def synchronizations(module: str, tree: ast.AST) -> list[Place]:
    """Where a device is waited for: torch.cuda.synchronize and its kind."""
    found = []
    for node, function in walk(tree):
        if called(node) == "synchronize" and isinstance(node.func, ast.Attribute):
            found.append((module, function, node.lineno))
    return found


def acceptance_rates(module: str, tree: ast.AST) -> list[Place]:
    """Where accepted drafts are divided by something: an acceptance rate, α or a mean acceptance length."""
    found = []
    for node, function in walk(tree):
        divides = (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)) or called(node) == "ratio"
        if divides and any("accepted" in name for name in names(node)):
            found.append((module, function, node.lineno))
    return found


def sources() -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), filename=str(path))


def test_a_speedup_is_judged_in_one_function():
    places = [place for module, tree in sources() for place in speedup_judgements(module, tree)]
    strays = [place for place in places if place[:2] != VERDICT_HOME]
    assert places and not strays, (
        f"a speedup is held against a threshold outside {VERDICT_HOME[0]}:{VERDICT_HOME[1]} at {strays}: "
        "call speed_verdict, so the app, the deployment verdict and the batch curve keep one rule"
    )


def test_alpha_is_pooled_in_one_function():
    places = [place for module, tree in sources() for place in alpha_poolings(module, tree)]
    strays = [place for place in places if place[:2] not in POOLED_ALPHA_HOMES]
    assert places and not strays, f"α is pooled from overlaps outside analysis/score.py:pooled_alpha at {strays}"


def test_tau_and_nu_are_read_from_step_times_in_one_module():
    places = [place for module, tree in sources() for place in step_ratios(module, tree)]
    strays = [place for place in places if place[0] != RATIO_HOME]
    assert places and not strays, f"τ or ν is derived outside {RATIO_HOME} at {strays}: use readings_of_steps"


def test_a_prompt_sets_rates_are_pooled_in_one_module():
    places = [place for module, tree in sources() for place in rates(module, tree) + step_averages(module, tree)]
    strays = [place for place in places if place[0] not in RATE_HOMES]
    assert places and not strays, (
        f"tokens per second or a mean step is computed outside {PROMPT_SET_HOME} at {strays}: "
        "use PromptSetSummary, so `bench` and `report` summarise a prompt set alike"
    )


def test_acceptance_is_counted_in_one_module():
    """α, the mean acceptance length and the per-position rates come from the Tally (a tree's acceptance by rank from
    tree_theory); run, bench, report, the charts and lesson 12 read them (Readings.acceptance_metrics for JSON)."""
    places = [place for module, tree in sources() for place in acceptance_rates(module, tree)]
    strays = [place for place in places if place[0] not in ACCEPTANCE_HOMES]
    assert places and not strays, f"acceptance is divided out outside {sorted(ACCEPTANCE_HOMES)} at {strays}: read the Tally"


def test_steps_are_timed_by_one_timer_and_devices_waited_for_by_one_function():
    timers = [place for module, tree in sources() for place in repeat_reductions(module, tree)]
    assert timers and all(place[:2] == TIMER_HOME for place in timers), f"a second step timer at {timers}"
    waits = [place for module, tree in sources() for place in synchronizations(module, tree)]
    assert waits and all(place[:2] == SYNCHRONIZE_HOME for place in waits), f"a copy of synchronize at {waits}"


@pytest.mark.parametrize(
    "finder,copy",
    [
        (speedup_judgements, "def pays(row):\n    return row.predicted_speedup >= 1.0\n"),
        (speedup_judgements, "def good(ratio):\n    return ratio > 1.05\n"),
        (
            alpha_poolings,
            "def alpha(texts):\n    return sum(sum(t.overlaps) for t in texts) / sum(len(t.overlaps) for t in texts)\n",
        ),
        (alpha_poolings, "def alpha(s):\n    return alpha_analytic(sum(s.overlaps), len(s.overlaps))\n"),
        (step_ratios, "def tau(costs):\n    return costs.draft_step_s / costs.target_step_s\n"),
        (rates, "def rate(summaries):\n    return sum(s.new_tokens for s in summaries) / sum(s.wall_s for s in summaries)\n"),
        (step_averages, "def step(base):\n    return statistics.mean(s.step_s for s in base)\n"),
        (repeat_reductions, "def timer(seconds):\n    return [statistics.median(t[1:]) for t in seconds]\n"),
        (synchronizations, "def wait(device):\n    return torch.cuda.synchronize(device)\n"),
        (acceptance_rates, "def rate(stats):\n    return stats.num_accepted_tokens / stats.num_drafts\n"),
    ],
)
def test_each_check_finds_a_planted_copy(finder, copy):
    assert finder("planted.py", ast.parse(copy)) == [("planted.py", copy.split("(")[0].removeprefix("def "), 2)]


@pytest.mark.parametrize(
    "speedup,verdict,answer",
    [
        (1.30, "faster", "worth it"),
        (1.05, "faster", "worth it"),
        (1.0499, "even", "break-even"),
        (1.00, "even", "break-even"),
        (0.9501, "even", "break-even"),
        (0.95, "slower", "not worth it"),
        (0.50, "slower", "not worth it"),
        (None, None, "not measured"),
    ],
)
def test_one_rule_at_its_boundaries_in_every_view(speedup, verdict, answer):
    assert speed_verdict(speedup) == verdict
    measured = readings_of(Tally(), gamma=0, tokens_per_s=speedup, baseline_tokens_per_s=1.0) if speedup else None
    assert (measured.speed_verdict if measured else None) == verdict, "the app's verdict on a measured speedup"
    assert overall(speedup)[0] == answer, "the deployment verdict says the same in its words"
    if speedup is not None:
        assert BatchRow(16, 0.1, 1.0, speedup).pays == (verdict == "faster"), "a batch size pays only where it is faster"


def test_a_batch_row_is_read_like_any_timed_steps():
    costs = BatchStepCosts(batch=4, draft_step_s=0.002, target_step_s=0.012, verify_s=0.018)
    row, readings = batch_row(costs, 0.8, 4), readings_of_steps(0.002, 0.012, 0.018, 4, 0.8)
    assert (row.tau, row.verify_cost, row.predicted_speedup) == (
        readings.tau,
        readings.verify_cost,
        readings.prediction.speedup_with_verify_cost,
    )


def test_bench_and_report_read_one_summary_of_the_same_requests():
    """Two repeats at different speeds: the pooled rate is all tokens over all seconds, not a median of repeats."""
    from specviz.analysis.prompt_set import PromptSetSummary, TimedRequest
    from specviz.deployment.benchmark import MethodResult
    from specviz.engine.events import Summary

    def request(tokens: int, wall_s: float, step_s: float) -> list[Summary]:
        return [Summary("autoregressive", tuple(range(tokens)), "", wall_s, 0.1 * wall_s, "max_new_tokens", step_s=step_s)]

    result = MethodResult("autoregressive", None)
    for tokens, wall_s, step_s in ((10, 1.0, 0.09), (30, 1.0, 0.03), (20, 4.0, 0.18)):
        result.add(request(tokens, wall_s, step_s))
    pooled = result.pooled
    assert pooled == PromptSetSummary.of([TimedRequest.of(s) for s in result.summaries])
    assert pooled.tokens_per_s == pytest.approx(60 / 6.0)
    assert pooled.decode_tokens_per_s == pytest.approx(60 / 5.4)
    assert pooled.target_step_s == pytest.approx((10 * 0.09 + 30 * 0.03 + 20 * 0.18) / 60)
