"""Plotly figures of a trace: α, τ, speedup (measured vs theory), the token inspector, the theory explorer."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz import theory
from specviz.measures import measure, running_alphas, tested_positions
from specviz.trace import Trace
from specviz.ui.palette import COLOURS

HEIGHT = 300
MAX_GAMMA_PLOTTED = 16


def _layout(figure: go.Figure, title: str) -> go.Figure:
    figure.update_layout(
        title={"text": title, "font": {"size": 15}},
        height=HEIGHT,
        margin={"l": 48, "r": 16, "t": 48, "b": 40},
        legend={"orientation": "h", "y": -0.22, "x": 0},
        template="plotly_white",
        font={"size": 12},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
    )
    return figure


def alpha_figure(trace: Trace) -> go.Figure:
    """Running α (two estimators) by cycle, and acceptance by position in the window."""
    figure = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], subplot_titles=("running α", "acceptance by position"))
    xs = list(range(1, len(trace.cycles) + 1))
    alpha_ml, alpha_analytic = running_alphas(trace.cycles)
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=alpha_ml,
            name="α = accepted / (accepted + rejections)",
            mode="lines+markers",
            line={"color": COLOURS["accepted"], "width": 3},
        ),
        1,
        1,
    )
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=alpha_analytic,
            name="α analytic: mean Σ min(p, q)",
            mode="lines",
            line={"color": COLOURS["resampled"], "dash": "dash", "width": 2},
        ),
        1,
        1,
    )
    tested, accepted = {}, {}
    for cycle in trace.cycles:
        for i in range(tested_positions(cycle)):
            tested[i + 1] = tested.get(i + 1, 0) + 1
            accepted[i + 1] = accepted.get(i + 1, 0) + (i < cycle.n_accepted)
    positions = sorted(tested)
    figure.add_trace(
        go.Bar(
            x=positions,
            y=[accepted[i] / tested[i] for i in positions],
            name="accepted / tested",
            marker_color=COLOURS["accepted"],
            text=[f"{tested[i]}" for i in positions],
            hovertemplate="position %{x}: %{y:.2f} of %{text} tested<extra></extra>",
            showlegend=False,
        ),
        1,
        2,
    )
    figure.update_yaxes(range=[0, 1.05])
    figure.update_xaxes(title_text="cycle", row=1, col=1)
    figure.update_xaxes(title_text="position in window", dtick=1, row=1, col=2)
    return _layout(figure, "α: how often the target accepts a draft")


def tau_figure(trace: Trace) -> go.Figure:
    """Measured cost ratio per cycle: one draft step over one target forward."""
    figure = go.Figure()
    xs, per_cycle = [], []
    for cycle in trace.cycles:
        if cycle.positions and cycle.verify_s:
            xs.append(cycle.index + 1)
            per_cycle.append(cycle.draft_s / len(cycle.positions) / cycle.verify_s)
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=per_cycle,
            mode="markers",
            name="per cycle: draft step / verify pass",
            marker={"color": COLOURS["drafted"], "size": 6},
        )
    )
    m = measure(trace)
    if m.tau is not None:
        figure.add_hline(
            y=m.tau,
            line={"color": COLOURS["predicted"], "width": 3},
            annotation_text=f"τ = {m.tau:.3f} ({m.tau_source})",
            annotation_position="top left",
        )
    figure.update_yaxes(rangemode="tozero", title_text="τ")
    figure.update_xaxes(title_text="cycle")
    return _layout(figure, "τ: what a draft step costs, in target steps")


def speedup_figure(trace: Trace) -> go.Figure:
    """Measured speedup next to Leviathan's prediction from the measured α and τ, and the predicted curve over γ."""
    m = measure(trace)
    figure = make_subplots(rows=1, cols=2, column_widths=[0.38, 0.62], subplot_titles=("measured vs theory", "theory over γ"))
    bars = [
        ("measured", m.measured_speedup, COLOURS["accepted"]),
        ("Leviathan", m.predicted_speedup, COLOURS["predicted"]),
        ("with verify cost ν", m.predicted_with_verify_cost, COLOURS["baseline"]),
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
    if m.alpha is not None and m.tau is not None:
        gammas = list(range(1, MAX_GAMMA_PLOTTED + 1))
        figure.add_trace(
            go.Scatter(
                x=gammas,
                y=[theory.expected_speedup(m.alpha, g, m.tau) for g in gammas],
                mode="lines",
                name=f"predicted (α = {m.alpha:.2f}, τ = {m.tau:.3f})",
                line={"color": COLOURS["predicted"], "width": 3},
            ),
            1,
            2,
        )
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
    gammas = list(range(1, 33))
    speedups = [theory.expected_speedup(alpha, g, tau) for g in gammas]
    best, best_speedup = theory.best_gamma(alpha, tau)
    figure = go.Figure(
        go.Scatter(x=gammas, y=speedups, mode="lines", name="expected speedup", line={"color": COLOURS["predicted"], "width": 3})
    )
    figure.add_trace(
        go.Scatter(
            x=[gamma],
            y=[theory.expected_speedup(alpha, gamma, tau)],
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
