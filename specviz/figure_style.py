"""The look every specviz figure shares, the app's charts and the deployment report's alike."""

from __future__ import annotations


def figure_layout(title: str, height: int, margin: dict[str, int], legend_y: float) -> dict[str, object]:
    """Plotly layout keywords: a 15 px title, the white template, 12 px text and a horizontal legend below."""
    return {
        "title": {"text": title, "font": {"size": 15}},
        "height": height,
        "margin": margin,
        "legend": {"orientation": "h", "y": legend_y, "x": 0},
        "template": "plotly_white",
        "font": {"size": 12},
    }
