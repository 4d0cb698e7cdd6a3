"""Plotly figures of a trace: α, τ, speedup (measured vs theory), the token inspector, the theory explorer.

A chart decorated with @live_chart is on the "Live charts" tab and redrawn during playback: the page lays
it out and every frame draws it from the registry, so adding one is this one function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.analysis.readings import Readings
from specviz.analysis.theory import Prediction
from specviz.engine.events import Cycle
from specviz.engine.settings import MAX_GAMMA
from specviz.engine.tally import Tally
from specviz.figure_style import figure_layout
from specviz.run.trace import Trace
from specviz.ui.palette import COLOURS

HEIGHT = 300
MAX_GAMMA_PLOTTED = MAX_GAMMA  # the curve over γ spans every γ the page offers
THEORY_GAMMAS = 32  # the theory explorer's curve runs over γ = 1..32


@dataclass(frozen=True)
class SoFar:
    """What a live chart reads at a playback cursor: the cycles shown, the tally after each of them, and their Readings."""

    cycles: list[Cycle]
    running: list[Tally]
    readings: Readings


@dataclass(frozen=True)
class LiveChart:
    key: str  # the chart's elem_id on the page
    label: str
    draw: Callable[[SoFar], go.Figure]


LIVE_CHARTS: list[LiveChart] = []  # in the order the tab shows them


def live_chart(key: str, label: str) -> Callable[[Callable[[SoFar], go.Figure]], Callable[[SoFar], go.Figure]]:
    """Put a chart on the Live charts tab: the page lays it out under `label` and playback redraws it."""

    def register(draw: Callable[[SoFar], go.Figure]) -> Callable[[SoFar], go.Figure]:
        LIVE_CHARTS.append(LiveChart(key, label, draw))
        return draw

    return register


def _layout(figure: go.Figure, title: str) -> go.Figure:
    margin = {"l": 48, "r": 16, "t": 48, "b": 40}
    transparent = "rgba(0,0,0,0)"  # the page's background shows through
    figure.update_layout(**figure_layout(title, HEIGHT, margin, -0.22), paper_bgcolor=transparent, plot_bgcolor=transparent)
    return figure


@live_chart("alpha-chart", "α")
def alpha_figure(so_far: SoFar) -> go.Figure:
    """Running α (two estimators) by cycle, and acceptance by position in the window, from the tallies after each cycle."""
    running = so_far.running
    figure = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], subplot_titles=("running α", "acceptance by position"))
    xs = list(range(1, len(running) + 1))
    for name, values, line in (
        ("α = accepted / (accepted + rejections)", [t.alpha for t in running], {"color": COLOURS["accepted"], "width": 3}),
        (
            "α analytic: mean Σ min(p, q)",
            [t.alpha_analytic for t in running],
            {"color": COLOURS["resampled"], "dash": "dash", "width": 2},
        ),
    ):
        figure.add_trace(
            go.Scatter(x=xs, y=values, name=name, mode="lines+markers" if "analytic" not in name else "lines", line=line), 1, 1
        )
    final = running[-1] if running else Tally()
    positions = list(range(1, len(final.tested_by_position) + 1))
    figure.add_trace(
        go.Bar(
            x=positions,
            y=final.acceptance_by_position,
            name="conditional: accepted / tested",
            marker_color=COLOURS["accepted"],
            text=[str(n) for n in final.tested_by_position],
            hovertemplate="position %{x}: %{y:.2f} of %{text} tested (given the earlier drafts accepted)<extra></extra>",
        ),
        1,
        2,
    )
    figure.add_trace(
        go.Bar(
            x=positions,
            y=final.acceptance_rate_per_pos,
            name="unconditional (vLLM): accepted / all cycles",
            marker_color=COLOURS["resampled"],
            hovertemplate="position %{x}: %{y:.2f} of every cycle<extra></extra>",
        ),
        1,
        2,
    )
    figure.update_yaxes(range=[0, 1.05])
    figure.update_xaxes(title_text="cycle", row=1, col=1)
    figure.update_xaxes(title_text="position in window", dtick=1, row=1, col=2)
    return _layout(figure, "α: how often the target accepts a draft")


@live_chart("histogram-chart", "acceptance histogram")
def acceptance_histogram_figure(so_far: SoFar) -> go.Figure:
    """Cycles by drafts accepted, as shares, beside Leviathan's truncated geometric law for the α measured so far."""
    readings = so_far.readings
    counts = readings.acceptance_histogram
    total = sum(counts) or 1
    ks = list(range(len(counts)))
    figure = go.Figure(
        go.Bar(
            x=ks, y=[c / total for c in counts], name="measured", marker_color=COLOURS["accepted"], text=[str(c) for c in counts]
        )
    )
    law = readings.acceptance_length_law
    title = "cycles by drafts accepted"
    if law is not None:
        figure.add_trace(
            go.Scatter(
                x=list(range(len(law))),
                y=law,
                name=f"law for α = {readings.alpha:.2f}",
                mode="lines+markers",
                line={"color": COLOURS["bonus"], "dash": "dash"},
            )
        )
        title += f" · distance to the law {readings.histogram_distance:.3f}"
    figure.update_xaxes(title_text="drafts accepted in a cycle", dtick=1)
    figure.update_yaxes(title_text="share of cycles", range=[0, 1.05])
    return _layout(figure, title)


@live_chart("tau-chart", "τ")
def tau_figure(so_far: SoFar) -> go.Figure:
    """τ per cycle and over the run: one draft step over the same target step the summary uses."""
    m = so_far.readings
    figure = go.Figure()
    xs, per_cycle = [], []
    for cycle in so_far.cycles:
        tau = m.cycle_tau(cycle)
        if tau is not None:
            xs.append(cycle.index + 1)
            per_cycle.append(tau)
    figure.add_trace(
        go.Scatter(x=xs, y=per_cycle, mode="markers", name="per cycle", marker={"color": COLOURS["drafted"], "size": 6})
    )
    if m.tau is not None:
        figure.add_hline(
            y=m.tau,
            line={"color": COLOURS["predicted"], "width": 3},
            annotation_text=f"τ = {m.tau:.3f}",
            annotation_position="top left",
        )
    figure.update_yaxes(rangemode="tozero", title_text="τ")
    figure.update_xaxes(title_text="cycle")
    return _layout(figure, f"τ = {m.tau_source}")


@live_chart("speedup-chart", "speedup")
def speedup_figure(so_far: SoFar) -> go.Figure:
    """Measured speedup next to the predictions from the measured α, τ (and ν), and the predicted curve over γ."""
    m = so_far.readings
    figure = make_subplots(rows=1, cols=2, column_widths=[0.38, 0.62], subplot_titles=("measured vs theory", "theory over γ"))
    bars = [
        ("measured", m.measured_speedup, COLOURS["accepted"]),
        ("Leviathan (ν = 1)", m.predicted_speedup, COLOURS["predicted"]),
        ("with measured ν", m.predicted_with_verify_cost, COLOURS["baseline"]),
    ]
    figure.add_trace(
        go.Bar(
            x=[b[0] for b in bars],
            y=[b[1] or 0 for b in bars],
            marker_color=[b[2] for b in bars],
            text=[("—" if b[1] is None else f"{b[1]:.2f}×") for b in bars],
            textposition="outside",
            showlegend=False,
        ),
        1,
        1,
    )
    if m.prediction is not None:
        curve = m.prediction.curve(MAX_GAMMA_PLOTTED)
        gammas = [g for g, _, _ in curve]
        curves = [("Leviathan (ν = 1)", [s for _, s, _ in curve], {"color": COLOURS["predicted"], "width": 3})]
        if m.verify_cost is not None:
            line = {"color": COLOURS["baseline"], "width": 2, "dash": "dash"}
            curves.append((f"with ν = {m.verify_cost:.2f}", [s for _, _, s in curve], line))
        for name, speedups, line in curves:
            figure.add_trace(go.Scatter(x=gammas, y=speedups, mode="lines", name=name, line=line), 1, 2)
        if m.best_gamma is not None and m.best_gamma <= MAX_GAMMA_PLOTTED:
            figure.add_trace(
                go.Scatter(
                    x=[m.best_gamma],
                    y=[m.best_speedup],
                    mode="markers+text",
                    text=[f"best γ = {m.best_gamma}"],
                    textposition="top center",
                    marker={"symbol": "star", "size": 14, "color": COLOURS["predicted"]},
                    showlegend=False,
                ),
                1,
                2,
            )
        if m.measured_speedup is not None:
            figure.add_trace(
                go.Scatter(
                    x=[m.gamma],
                    y=[m.measured_speedup],
                    mode="markers",
                    name=f"measured at γ = {m.gamma}",
                    marker={"size": 13, "color": COLOURS["accepted"], "line": {"width": 2, "color": "white"}},
                ),
                1,
                2,
            )
    figure.add_hline(y=1.0, line={"dash": "dot", "color": "#888"})
    figure.update_yaxes(rangemode="tozero", title_text="× autoregressive", row=1, col=1)
    figure.update_xaxes(title_text="γ", row=1, col=2)
    return _layout(figure, "Speedup over the target alone")


def inspector_figure(trace: Trace, cycle_index: int, position_index: int) -> go.Figure:
    """Top entries of p and q at one drafted position, and the residual the target resampled from."""
    figure = go.Figure()
    if not trace.cycles or cycle_index >= len(trace.cycles):
        return _layout(figure, "Token inspector: run something first")
    cycle = trace.cycles[cycle_index]
    if position_index >= len(cycle.positions):
        entries = {"p (target)": cycle.bonus_top_p}
        title = f"cycle {cycle.index + 1}: the target's own distribution for its extra token"
    else:
        position = cycle.positions[position_index]
        entries = {"p (target)": position.top_p, "q (draft)": position.top_q}
        if position.top_residual:
            entries["residual norm(max(0, p − q))"] = position.top_residual
        title = f"cycle {cycle.index + 1}, draft {position_index + 1} {position.text!r}: {position.status}"
    labels: list[str] = []
    for ranked in entries.values():
        for _, text, _ in ranked:
            if repr(text) not in labels:
                labels.append(repr(text))
    colours = {
        "p (target)": COLOURS["predicted"],
        "q (draft)": COLOURS["drafted"],
        "residual norm(max(0, p − q))": COLOURS["resampled"],
    }
    for name, ranked in entries.items():
        probs = {repr(text): prob for _, text, prob in ranked}
        figure.add_trace(go.Bar(x=labels, y=[probs.get(label, 0.0) for label in labels], name=name, marker_color=colours[name]))
    figure.update_layout(barmode="group")
    figure.update_yaxes(title_text="probability", rangemode="tozero")
    return _layout(figure, title)


def theory_figure(alpha: float, tau: float, gamma: int) -> go.Figure:
    """Expected speedup over γ for chosen α and τ, with the best γ and the chosen γ marked."""
    prediction = Prediction.of(alpha, gamma, tau)
    curve = prediction.curve(THEORY_GAMMAS)
    gammas, speedups = [g for g, _, _ in curve], [s for _, s, _ in curve]
    best, best_speedup = prediction.best_gamma, prediction.best_speedup
    figure = go.Figure(
        go.Scatter(x=gammas, y=speedups, mode="lines", name="expected speedup", line={"color": COLOURS["predicted"], "width": 3})
    )
    figure.add_trace(
        go.Scatter(
            x=[gamma],
            y=[prediction.speedup],
            mode="markers",
            name=f"γ = {gamma}",
            marker={"size": 12, "color": COLOURS["resampled"]},
        )
    )
    if best <= gammas[-1]:
        figure.add_trace(
            go.Scatter(
                x=[best],
                y=[best_speedup],
                mode="markers+text",
                text=[f"best γ = {best}: {best_speedup:.2f}×"],
                textposition="top center",
                name="best γ",
                marker={"symbol": "star", "size": 15, "color": COLOURS["accepted"]},
            )
        )
    figure.add_hline(y=1.0, line={"dash": "dot", "color": "#888"}, annotation_text="no speedup")
    figure.update_xaxes(title_text="γ (drafts per cycle)")
    figure.update_yaxes(title_text="× autoregressive", rangemode="tozero")
    return _layout(figure, f"Leviathan et al.: speedup for α = {alpha:.2f}, τ = {tau:.3f}")


def gamma_sweep_figure(points: list[tuple[int, float | None, float | None, float | None]]) -> go.Figure:
    """Measured speedup over γ next to the predictions (with the measured ν, and Leviathan's ν = 1): (γ, measured, with ν, ν = 1)."""
    points = sorted(points)
    gammas = [p[0] for p in points]
    figure = go.Figure()
    for index, name, style in (
        (1, "measured", {"mode": "lines+markers", "line": {"color": COLOURS["accepted"], "width": 3}, "marker": {"size": 10}}),
        (2, "predicted with measured ν", {"mode": "lines", "line": {"color": COLOURS["baseline"], "width": 2, "dash": "dash"}}),
        (3, "Leviathan (ν = 1)", {"mode": "lines", "line": {"color": COLOURS["predicted"], "width": 2}}),
    ):
        figure.add_trace(go.Scatter(x=gammas, y=[p[index] for p in points], name=name, **style))
    figure.add_hline(y=1.0, line={"dash": "dot", "color": "#888"})
    figure.update_xaxes(title_text="γ (drafts per cycle)", dtick=1)
    figure.update_yaxes(title_text="× autoregressive", rangemode="tozero")
    return _layout(figure, "Speedup over γ: measured in this lesson vs predicted")
