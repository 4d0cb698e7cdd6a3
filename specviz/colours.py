"""The Okabe–Ito colours of the token states (docs/algorithm.md, "Colour legend"): the page, its charts and the report's figures."""

COLOURS = {
    "prompt": "#4b5563",
    "drafted": "#8c8c8c",
    "accepted": "#009E73",
    "rejected": "#D55E00",
    "unverified": "#b5b5b5",
    "resampled": "#0072B2",
    "bonus": "#9B4F96",
    "predicted": "#E69F00",
    "baseline": "#56B4E9",
}
