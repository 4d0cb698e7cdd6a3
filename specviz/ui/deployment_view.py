"""The race on the main view and the deployment sections of "Theory & verdict": pure functions of a recorded trace.

The race plays the two runs' token arrivals (specviz.deployment.latency) up to the playback's clock; the
deployment sections are the report's (specviz.deployment.report) for the one prompt on screen, with the batch
curve read from a saved `hardware --batch --save` measurement, never timed inside a user's run.
"""

from __future__ import annotations

import html
from dataclasses import replace

import plotly.graph_objects as go

from specviz.analysis.readings import Readings
from specviz.deployment import figures
from specviz.deployment.batch import BatchRow
from specviz.deployment.latency import LatencyStats, arrival_times
from specviz.deployment.memory import MemoryReport, PairLoadTimes
from specviz.deployment.report import DeploymentReport, sections
from specviz.numbers import number
from specviz.run.trace import Trace


def speculative_arrivals(trace: Trace) -> list[float]:
    return arrival_times([trace.started, *trace.cycles]) if trace.started else []


def autoregressive_arrivals(trace: Trace) -> list[float]:
    """The baseline's arrivals on its own clock: its prefill, then one token per step."""
    if trace.started is None or trace.baseline is None:
        return []
    started = replace(trace.started, mode="autoregressive", prefill_s=trace.baseline.prefill_s)
    return arrival_times([started, *trace.baseline_steps])


def clock_at(trace: Trace, shown: int) -> float:
    """The speculative run's engine seconds when its first `shown` cycles had ended: the playback's clock."""
    prefill = trace.summary.prefill_s if trace.summary else (trace.started.prefill_s if trace.started else 0.0)
    return prefill + sum(c.draft_s + c.verify_s + c.overhead_s for c in trace.cycles[:shown])


def _so_far(arrivals: list[float], until_s: float | None, final_s: float | None) -> LatencyStats:
    """One method's numbers up to the playback's clock (the whole request once the race is over)."""
    if until_s is None:
        return LatencyStats.of(arrivals, final_s)
    arrived = [t for t in arrivals if t <= until_s]
    return LatencyStats.of(arrived, arrived[-1] if arrived else 0.0)


def race_numbers_html(speculative: LatencyStats, autoregressive: LatencyStats, until_s: float | None) -> str:
    """TTFT, TPOT and ITL P50/P99 of both runs, so far."""
    ms = lambda value: number(None if value is None else 1000 * value, 1)  # noqa: E731
    rows = "".join(
        f"<tr><td>{name}</td><td>{s.n_tokens}</td><td>{ms(s.ttft_s)}</td><td>{ms(s.tpot_s)}</td>"
        f"<td>{ms(s.itl_p50_s)}</td><td>{ms(s.itl_p99_s)}</td></tr>"
        for name, s in (("speculative", speculative), ("target alone", autoregressive))
    )
    when = "the whole run" if until_s is None else f"so far, at {1000 * until_s:.0f} ms"
    return (
        f'<div class="sv-race-numbers" data-until-ms="{"" if until_s is None else f"{1000 * until_s:.1f}"}">'
        f"<table><thead><tr><th>{html.escape(when)}</th><th>tokens</th><th>TTFT (ms)</th><th>TPOT (ms)</th>"
        f"<th>ITL P50 (ms)</th><th>ITL P99 (ms)</th></tr></thead><tbody>{rows}</tbody></table>"
        "<p>A speculative cycle releases its tokens together, so most gaps between tokens are zero (ITL P50 near 0) "
        "and a few are a whole cycle (ITL P99).</p></div>"
    )


def race_view(trace: Trace, shown: int, finished: bool) -> tuple[go.Figure, str]:
    """The race figure and its numbers at `shown` cycles; the whole race once `finished`."""
    spec, base = speculative_arrivals(trace), autoregressive_arrivals(trace)
    until_s = None if finished else clock_at(trace, shown)
    figure = figures.race_figure(spec, base, until_s)
    spec_stats = _so_far(spec, until_s, trace.summary.wall_s if trace.summary else None)
    base_stats = _so_far(base, until_s, trace.baseline.wall_s if trace.baseline else None)
    return figure, race_numbers_html(spec_stats, base_stats, until_s)


def saved_batch_rows(saved: dict | None) -> tuple[tuple[BatchRow, ...], float | None]:
    """A saved `hardware --batch` measurement's rows and the α they were predicted at; () when none was saved."""
    if not saved:
        return (), None
    try:
        rows = tuple(BatchRow(r["batch"], r["tau"], r["verify_cost"], r["predicted_speedup"]) for r in saved["batches"])
        return rows, saved.get("batch_alpha")
    except (KeyError, TypeError):
        return (), None


def trace_report(trace: Trace, m: Readings, saved_batches: dict | None = None) -> DeploymentReport | None:
    """The report's numbers for the one prompt on screen (one request each way); None before a complete run."""
    if trace.summary is None or trace.baseline is None or trace.started is None:
        return None
    info = trace.pair
    memory = MemoryReport.from_json(info.memory) if info.memory else None
    loads = info.model_load_s
    rows, batch_alpha = saved_batch_rows(saved_batches)
    report = DeploymentReport(
        pair=info.name,
        device=info.device,
        dtype=info.dtype,
        prompts=1,
        gamma=trace.started.gamma,
        speculative=(LatencyStats.of(speculative_arrivals(trace), trace.summary.wall_s),),
        autoregressive=(LatencyStats.of(autoregressive_arrivals(trace), trace.baseline.wall_s),),
        alpha_run=m.alpha,
        alpha_scored=None,
        tau=m.tau,
        verify_cost=m.verify_cost,
        speedup=m.measured_speedup,
        mean_acceptance_length=m.tally.mean_acceptance_length,
        target_parameters=info.target_parameters or None,
        draft_parameters=info.draft_parameters or None,
        memory=memory,
        load_times=PairLoadTimes.from_json(loads) if loads else None,
        batch_alpha=batch_alpha,
        batch_rows=rows,
        load_source=(loads or {}).get("cold_source", "the first load in the app's process"),
    )
    return report.with_verdict()


NO_BATCH = (
    "<p>No batch curve saved for this pair on this machine: <code>python -m specviz hardware --pair NAME --batch 1,4,16,64 "
    "--save</code> times one (the app never times batches inside a run).</p>"
)
ONE_PROMPT = (
    "<p class='sv-note'>For the one prompt on screen: one request each way, so the tail is this request's. "
    "<code>python -m specviz report --pair NAME --prompts FILE --out report.html</code> measures a prompt set.</p>"
)


def deployment_html(report: DeploymentReport | None) -> str:
    """The report's sections (verdict with its checked rules, latency, memory, cold start, batch) as HTML, figures apart."""
    if report is None:
        return "<p>Run a prompt: the verdict and the deployment numbers appear here once both runs are measured.</p>"
    parts = sections(report, with_figures=False)
    body = "".join(f"<h3>{html.escape(title)}</h3>{content}" for title, content in parts)
    if not report.batch_rows:
        body += NO_BATCH
    return f'<div class="sv-deployment">{ONE_PROMPT}{body}</div>'


def deployment_figures(report: DeploymentReport | None) -> tuple[go.Figure | None, go.Figure | None]:
    """The batch curve (when one was saved) and the memory bars."""
    if report is None:
        return None, None
    batch = figures.batch_figure(report.batch_rows) if report.batch_rows else None
    memory = figures.memory_figure(report.memory.peak_parts()) if report.memory else None
    return batch, memory
