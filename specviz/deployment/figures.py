"""Plotly figures of a deployment's numbers: the race, ITL distributions, request latencies, the batch curve, memory.

Pure functions of plain numbers (seconds, bytes, rows). Colours are the project's Okabe–Ito palette (specviz.colours,
the page's too): the autoregressive baseline in its blue, speculation in the accepted green, predictions in orange.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from specviz.analysis.readings import BREAK_EVEN_BAND, FASTER_FROM, SLOWER_FROM
from specviz.colours import COLOURS
from specviz.deployment.batch import PREDICTED_LABEL, BatchRow
from specviz.deployment.latency import percentile
from specviz.figure_style import figure_layout

HEIGHT = 320
SPECULATIVE = ("speculative", COLOURS["accepted"])
AUTOREGRESSIVE = ("autoregressive", COLOURS["baseline"])


def _layout(figure: go.Figure, title: str, x_title: str, y_title: str) -> go.Figure:
    margin = {"l": 56, "r": 16, "t": 48, "b": 44}
    figure.update_layout(**figure_layout(title, HEIGHT, margin, -0.25), xaxis_title=x_title, yaxis_title=y_title)
    return figure


def _arrival_curve(arrivals_s: Sequence[float], until_s: float | None) -> tuple[list[float], list[int]]:
    """Points (time, tokens so far) from the request's start, cut at `until_s` and held flat up to it."""
    times, counts = [0.0], [0]
    for count, t in enumerate(arrivals_s, start=1):
        if until_s is not None and t > until_s:
            break
        times.append(t)
        counts.append(count)
    if until_s is not None and until_s > times[-1]:
        times.append(until_s)
        counts.append(counts[-1])
    return times, counts


def race_figure(speculative_s: Sequence[float], autoregressive_s: Sequence[float], until_s: float | None = None) -> go.Figure:
    """Tokens against time for both methods, each token at its arrival; cut at `until_s` to play the race back."""
    figure = go.Figure()
    for (name, colour), arrivals, width in ((AUTOREGRESSIVE, autoregressive_s, 2), (SPECULATIVE, speculative_s, 3)):
        times, counts = _arrival_curve(arrivals, until_s)
        figure.add_trace(
            go.Scatter(
                x=times,
                y=counts,
                name=f"{name} ({len(arrivals)} tokens)",
                mode="lines",
                line={"color": colour, "width": width, "shape": "hv"},
                hovertemplate="%{y} tokens at %{x:.3f} s<extra>" + name + "</extra>",
            )
        )
    end = max([*speculative_s[-1:], *autoregressive_s[-1:], 1e-3])
    longest = max(len(speculative_s), len(autoregressive_s), 1)
    figure.update_xaxes(range=[0, 1.02 * end])  # fixed axes, so a played-back race does not rescale
    figure.update_yaxes(range=[0, 1.05 * longest])
    return _layout(figure, "The race: tokens as they arrive", "seconds since the request started", "tokens")


def _ecdf(values_ms: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    values = np.sort(np.asarray(values_ms, dtype=float))
    return values, np.arange(1, len(values) + 1) / max(len(values), 1)


def itl_figure(speculative_itls_s: Sequence[float], autoregressive_itls_s: Sequence[float]) -> go.Figure:
    """The inter-token latency distribution of both methods as ECDFs, with each one's P50 and P99 marked."""
    figure = go.Figure()
    for (name, colour), itls, p50_side in (
        (AUTOREGRESSIVE, autoregressive_itls_s, "bottom right"),
        (SPECULATIVE, speculative_itls_s, "top right"),  # the other side, so close P50s stay readable
    ):
        values_ms = [1000 * v for v in itls]
        xs, ys = _ecdf(values_ms)
        figure.add_trace(go.Scatter(x=xs, y=ys, name=name, mode="lines", line={"color": colour, "width": 3, "shape": "hv"}))
        if not values_ms:
            continue
        p50, p99 = percentile(values_ms, 50), percentile(values_ms, 99)
        figure.add_trace(
            go.Scatter(
                x=[p50, p99],
                y=[0.5, 0.99],
                text=[f"P50 {p50:.1f} ms", f"P99 {p99:.1f} ms"],
                mode="markers+text",
                textposition=[p50_side, "middle left"],
                cliponaxis=False,
                marker={"color": colour, "size": 10, "symbol": "diamond"},
                name=f"{name} P50, P99",
                showlegend=False,
            )
        )
    figure.update_yaxes(range=[0, 1.02])
    return _layout(figure, "Inter-token latency: share of gaps at most x", "gap between tokens (ms)", "share of gaps")


def request_latency_figure(
    speculative_s: Sequence[float], autoregressive_s: Sequence[float], labels: Sequence[str] | None = None
) -> go.Figure:
    """Each request's latency, both methods side by side."""
    labels = list(labels) if labels is not None else [f"#{i + 1}" for i in range(max(len(speculative_s), len(autoregressive_s)))]
    figure = go.Figure()
    for (name, colour), latencies in ((AUTOREGRESSIVE, autoregressive_s), (SPECULATIVE, speculative_s)):
        figure.add_trace(go.Bar(x=labels[: len(latencies)], y=list(latencies), name=name, marker_color=colour))
    figure.update_layout(barmode="group")
    return _layout(figure, "Request latency per prompt", "prompt", "seconds")


def batch_figure(rows: Sequence[BatchRow]) -> go.Figure:
    """Predicted speedup against batch size, with the break-even band: above it speculation pays (speed_verdict)."""
    rows = sorted(rows, key=lambda r: r.batch)
    figure = go.Figure(
        go.Scatter(
            x=[r.batch for r in rows],
            y=[r.predicted_speedup for r in rows],
            customdata=[[r.tau, r.verify_cost] for r in rows],
            mode="lines+markers",
            name=PREDICTED_LABEL,
            line={"color": COLOURS["predicted"], "width": 3},
            marker={"size": 10},
            hovertemplate="batch %{x}: %{y:.2f}× (τ = %{customdata[0]:.3f}, ν = %{customdata[1]:.2f})<extra></extra>",
        )
    )
    figure.add_hrect(y0=SLOWER_FROM, y1=FASTER_FROM, fillcolor=COLOURS["rejected"], opacity=0.12, line_width=0)
    figure.add_hline(
        y=1.0, line_dash="dot", line_color=COLOURS["rejected"], annotation_text=f"break-even (±{100 * BREAK_EVEN_BAND:.0f} %)"
    )
    figure.update_xaxes(type="log", tickvals=[r.batch for r in rows])
    figure.update_layout(showlegend=True)
    return _layout(figure, f"Speedup by batch size, {PREDICTED_LABEL}", "batch size", "predicted speedup (×)")


def memory_figure(parts: Mapping[str, Mapping[str, int]]) -> go.Figure:
    """Stacked bars in MiB, one per configuration, e.g. {"autoregressive": {"target weights": b, ...}, "speculative": {...}}."""
    names = list(parts)
    fullest = max(parts.values(), key=len, default={})
    components = list(dict.fromkeys([*fullest, *(part for bars in parts.values() for part in bars)]))
    shades = [
        COLOURS["baseline"],
        COLOURS["resampled"],
        COLOURS["accepted"],
        COLOURS["bonus"],
        COLOURS["predicted"],
        COLOURS["drafted"],
    ]
    figure = go.Figure()
    for i, component in enumerate(components):
        figure.add_trace(
            go.Bar(
                y=names,
                x=[parts[name].get(component, 0) / 2**20 for name in names],
                name=component,
                orientation="h",
                marker_color=shades[i % len(shades)],
            )
        )
    figure.update_layout(barmode="stack", legend_traceorder="normal")
    return _layout(figure, "Memory at the peak", "MiB", "")
