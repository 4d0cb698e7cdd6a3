"""Every view of a recorded trace at a playback cursor, built from one Readings value per frame (pure: no Gradio)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specviz.analysis.readings import Readings, readings_of_trace
from specviz.engine.events import Cycle
from specviz.engine.tally import Tally
from specviz.run.trace import Trace
from specviz.ui import charts, texts
from specviz.ui.deployment_view import deployment_figures, deployment_html, race_view, trace_report
from specviz.ui.render import Phase, narration, race_html, stream_html
from specviz.ui.tree_view import current_tree_html


@dataclass
class Recording:
    """A measured trace and what every frame of its playback reads: the running tallies (folded once) and the final Readings."""

    trace: Trace
    running: list[Tally]
    final: Readings

    @classmethod
    def of(cls, trace: Trace) -> Recording:
        running = Tally.running(trace.cycles)
        return cls(trace, running, readings_of_trace(trace, tally=running[-1] if running else Tally()))

    def readings_at(self, shown: int) -> Readings:
        if shown >= len(self.trace.cycles):
            return self.final
        return readings_of_trace(self.trace, upto=shown, tally=self.running[shown - 1] if shown else Tally())


@dataclass
class Frame:
    stream: str
    summary: str
    narration: str | None
    charts: dict[str, Any] | None  # {live chart key: figure} for every chart in charts.LIVE_CHARTS; None: leave them as they are
    tree: str = ""  # the current cycle's token tree, drawn ("" for a chain's cycle)
    race: str | None = None  # the race's text lanes, verdict and inspector choices come with the last frame
    verdict: str | None = None
    inspector: list[tuple[str, str]] | None = None
    race_chart: Any = None  # the arrival curves up to the playback's clock, with the charts (and at the end)
    race_numbers: str | None = None
    deployment: str | None = None  # the report's sections for this prompt, with the last frame
    deployment_charts: tuple[Any, Any] | None = None  # batch curve (None unless saved), memory bars


def frame(
    recording: Recording,
    shown: int,
    phase: Phase,
    slowdown: float,
    with_charts: bool,
    hardware_line: str | None = None,
    saved_batches: dict | None = None,
) -> Frame:
    """The views at `shown` cycles (the last one at `phase`); the end of the run adds the verdict and the deployment."""
    trace = recording.trace
    m = recording.readings_at(shown)
    figures = None
    if with_charts:
        so_far = charts.SoFar(trace.cycles[:shown], recording.running[:shown], m)
        figures = {chart.key: chart.draw(so_far) for chart in charts.LIVE_CHARTS}
    result = Frame(
        stream=stream_html(trace, shown, phase),
        summary=texts.summary_markdown(m, trace, shown),
        narration=narration(trace, shown - 1, phase) if shown else None,
        charts=figures,
        tree=current_tree_html(trace, shown, phase == "decide"),
    )
    finished = shown >= len(trace.cycles) and phase == "decide" and trace.summary is not None
    if (with_charts or finished) and trace.summary is not None and trace.baseline is not None:
        result.race_chart, result.race_numbers = race_view(trace, shown, finished)
    if finished:
        result.race = race_html(trace, m, slowdown)
        report = trace_report(trace, m, saved_batches)
        result.deployment = deployment_html(report)
        result.deployment_charts = deployment_figures(report)
        result.verdict = texts.verdict_html(
            m, trace.pair.name, hardware_line, trace.pair, trace.started.tree if trace.started else ""
        )
        result.inspector = inspector_choices(trace.cycles)
    return result


def inspector_choices(cycles: list[Cycle]) -> list[tuple[str, str]]:
    """(label, "cycle:position") for every drafted token and every target token of the trace."""
    choices = []
    for cycle in cycles:
        if cycle.is_tree:  # a tree's nodes show their p, q and u on hover; the target's distribution is here
            kind = "bonus" if cycle.bonus_token_id is not None else "resampled"
            label = f"cycle {cycle.index + 1} · target's {cycle.new_token_text!r} ({kind}, after the tree's path)"
            choices.append((label, f"{cycle.index}:{len(cycle.positions)}"))
            continue
        for i, position in enumerate(cycle.positions):
            choices.append(
                (f"cycle {cycle.index + 1} · draft {i + 1} {position.text!r} ({position.status})", f"{cycle.index}:{i}")
            )
        if cycle.bonus_token_id is not None:
            choices.append(
                (f"cycle {cycle.index + 1} · target's {cycle.new_token_text!r} (bonus)", f"{cycle.index}:{len(cycle.positions)}")
            )
        else:  # the residual it was drawn from is shown at the rejected position
            choices.append(
                (f"cycle {cycle.index + 1} · target's {cycle.new_token_text!r} (resampled)", f"{cycle.index}:{cycle.n_accepted}")
            )
    return choices
