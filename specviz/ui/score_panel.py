"""The "Score my draft" panel: paste text (or pick a prompt set) and see, without generating, how often the
draft would be accepted along it, where it struggles, and what speedup that predicts over γ.

specviz/ui/parts/score_tab.py lays the panel out and wires its button to `score_views`; everything it shows comes from the pure
renderers below (tested without a browser). Scoring needs torch: it is imported on the first score, so the
app's first page does not wait for transformers.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from specviz.checked import choice, flag, whole
from specviz.checked import text as text_within
from specviz.engine.settings import MAX_GAMMA, SamplingSettings
from specviz.models.catalogue import PairError
from specviz.prompts.sets import load_prompt_set
from specviz.run.runner import MAX_PROMPT_CHARS
from specviz.serving import recorder
from specviz.serving.pair_cache import get_pair
from specviz.ui.palette import COLOURS
from specviz.ui.request import RUN_FIELDS, Field, checked

if TYPE_CHECKING:
    from specviz.analysis.score import Scorecard

MY_TEXT = "my text (below)"
PROMPT_SETS = [MY_TEXT, "code", "heldout", "prose", "repetitive", "arithmetic"]
MAX_STRIP_TOKENS = 1500
CONTINUATION_TOKENS = 48
HARDEST_HEADERS = ["Σ min(p, q)", "before it", "the text's token", "target's top", "draft's top"]
MAX_SCORE_CHARS = MAX_PROMPT_CHARS  # scoring runs both models over the whole text: the same budget as a run's prompt
SCORE_FIELDS = {  # what "Score my draft" may be sent, by the page or a script (request.py's Field and checked)
    "pair_name": RUN_FIELDS["pair"],
    "text": Field("Text to score", text_within(MAX_SCORE_CHARS), when_empty=""),
    "prompt_set": Field("Prompt set", choice(PROMPT_SETS)),
    "temperature": RUN_FIELDS["temperature"],
    "gamma": Field("γ for the prediction", whole(1, MAX_GAMMA)),
    "own": Field("Score what the target writes after it", flag),
}

SCORE_CSS = """
.sv-score { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .95rem; line-height: 1.9; white-space: pre-wrap;
            word-break: break-word; padding: 10px 12px; border-radius: 10px; border: 1px solid var(--border-color-primary); }
.sv-score .sv-s { border-radius: 3px; padding: 1px 0; cursor: help; }
.sv-score .sv-s.sv-low { text-decoration: underline dotted 2px; text-underline-offset: 3px; }
.sv-score-scale { display: flex; align-items: center; gap: 8px; font-size: .85rem; margin: 4px 0; }
.sv-score-scale .sv-grad { width: 160px; height: 10px; border-radius: 5px; }
"""


def _hex(colour: str) -> tuple[int, int, int]:
    colour = colour.lstrip("#")
    return int(colour[0:2], 16), int(colour[2:4], 16), int(colour[4:6], 16)


def overlap_colour(overlap: float) -> str:
    """Rejected's orange at 0 to accepted's green at 1, translucent so the text stays readable."""
    low, high = _hex(COLOURS["rejected"]), _hex(COLOURS["accepted"])
    share = min(1.0, max(0.0, overlap))
    r, g, b = (round(a + (c - a) * share) for a, c in zip(low, high))
    return f"rgba({r}, {g}, {b}, 0.38)"


def _visible(text: str) -> str:
    return html.escape(text).replace("\n", "↵\n")


def score_strip_html(card: Scorecard, max_tokens: int = MAX_STRIP_TOKENS) -> str:
    """Every scored text as a strip of tokens, each coloured by Σ min(p, q) at its position (hover: the numbers).

    The first token of a text has nothing before it and is left plain. Positions below 0.5 are also
    underlined with dots, a second cue besides colour.
    """
    scale = (
        '<div class="sv-score-scale"><span>draft rarely accepted</span>'
        f'<span class="sv-grad" style="background: linear-gradient(90deg, {overlap_colour(0)}, {overlap_colour(1)})"></span>'
        "<span>almost always accepted</span><span>· dotted underline: below 0.5</span></div>"
    )
    blocks, shown = [], 0
    for index, text in enumerate(card.texts):
        spans = []
        for position, token in enumerate(text.token_texts):
            if shown >= max_tokens:
                spans.append(" …")
                break
            shown += 1
            if position == 0:
                spans.append(f'<span class="sv-s">{_visible(token)}</span>')
                continue
            overlap = text.overlaps[position - 1]
            tip = (
                f"Σ min(p, q) = {overlap:.2f}\ntarget's top: {text.target_top[position - 1]!r}\n"
                f"draft's top: {text.draft_top[position - 1]!r}"
            )
            low = " sv-low" if overlap < 0.5 else ""
            spans.append(
                f'<span class="sv-s{low}" style="background: {overlap_colour(overlap)}" title="{html.escape(tip)}">{_visible(token)}</span>'
            )
        alpha = "—" if text.alpha is None else f"{text.alpha:.2f}"
        blocks.append(f'<div class="sv-score" data-text="{index}"><b>text {index + 1}: α = {alpha}</b>\n{"".join(spans)}</div>')
        if shown >= max_tokens:
            break
    return f"<style>{SCORE_CSS}</style>{scale}{''.join(blocks)}"


def hardest_rows(card: Scorecard, n: int = 10) -> list[list]:
    """The positions where a draft is least likely to be accepted, as rows for a table (HARDEST_HEADERS)."""
    return [[round(h.overlap, 3), h.context, h.token, h.target_top, h.draft_top] for h in card.hardest(n)]


def summary_markdown(card: Scorecard) -> str:
    d = card.to_dict()
    meaning = "the share of positions where both models' top token agree" if card.sampling.greedy else "the mean of Σ min(p, q)"
    lines = [
        f"**α ≈ {d['alpha']:.3f}** over {d['tokens_scored']:,} positions ({meaning}, teacher-forced: nothing was generated).",
        f"On this device τ = {d['tau']:.3f} (draft step / target step) and ν = {d['verify_cost']:.2f} "
        f"(a verify pass over γ + 1 = {card.gamma + 1} tokens, in target steps).",
        f"At γ = {card.gamma} that predicts **{d['predicted_speedup']:.2f}×** "
        f"({d['predicted_tokens_per_cycle']:.2f} tokens per cycle); the best γ is {d['best_gamma']} "
        f"(**{d['best_speedup']:.2f}×**).",
    ]
    if len(card.texts) > 1:
        lines.append("α by text: " + ", ".join("—" if a is None else f"{a:.2f}" for a in d["alpha_by_text"]) + ".")
    return "\n\n".join(lines)


def speedup_curve_figure(card: Scorecard, max_gamma: int = MAX_GAMMA) -> go.Figure:
    """The predicted speedup over γ from the scored α and the measured τ (with ν = 1, and with the measured ν)."""
    curve = card.speedup_curve(max_gamma)
    figure = go.Figure()
    if curve:
        gammas = [g for g, _, _ in curve]
        figure.add_trace(
            go.Scatter(x=gammas, y=[s for _, s, _ in curve], name="Leviathan (ν = 1)", line={"color": COLOURS["predicted"]})
        )
        figure.add_trace(
            go.Scatter(
                x=gammas, y=[s for _, _, s in curve], name="with measured ν", line={"color": COLOURS["baseline"], "width": 3}
            )
        )
        best = card.readings
        if best.best_gamma is not None and best.best_gamma <= max_gamma:
            figure.add_trace(
                go.Scatter(
                    x=[best.best_gamma],
                    y=[best.best_speedup],
                    mode="markers",
                    marker={"symbol": "star", "size": 14, "color": COLOURS["accepted"]},
                    name=f"best γ = {best.best_gamma}",
                )
            )
        figure.add_hline(y=1.0, line_dash="dot", line_color=COLOURS["drafted"])
    figure.update_layout(
        title={"text": f"predicted speedup over γ at α = {card.alpha:.2f}" if card.alpha is not None else "predicted speedup"},
        height=300,
        margin={"l": 48, "r": 16, "t": 48, "b": 40},
        template="plotly_white",
        legend={"orientation": "h", "y": -0.25, "x": 0},
        xaxis_title="γ",
        yaxis_title="speedup",
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
    )
    return figure


def texts_to_score(text: str, prompt_set: str) -> list[str]:
    """The pasted text, or a built-in prompt set (ValueError with one sentence when there is nothing to score)."""
    if prompt_set and prompt_set != MY_TEXT:
        return load_prompt_set(prompt_set)
    if not text or not text.strip():
        raise ValueError("Paste some text to score, or pick a prompt set.")
    return [text]


def score_for_panel(
    pair_name: str, text: str, prompt_set: str, temperature: float, gamma: int, own_continuation: bool = False
) -> Scorecard:
    """Check every value (SCORE_FIELDS), load the pair (cached), time its steps once per γ, and score the texts (or
    the target's continuations of them)."""
    values = dict(pair_name=pair_name, text=text, prompt_set=prompt_set, temperature=temperature, gamma=gamma)
    request = checked(values | {"own": own_continuation}, SCORE_FIELDS)
    pair_name, text, prompt_set, gamma = (request[name] for name in ("pair_name", "text", "prompt_set", "gamma"))
    sampling = SamplingSettings(temperature=request["temperature"])
    texts = texts_to_score(text, prompt_set)
    from specviz.analysis.score import scorecard  # scoring runs both models: torch loads here, on the first score
    from specviz.analysis.timing import pair_step_times

    pair = get_pair(pair_name)
    continue_tokens = CONTINUATION_TOKENS if request["own"] else 0
    return recorder.timed_quietly(  # steps timed as a Run's are, never beside one
        lambda: scorecard(pair, texts, sampling, gamma, pair_step_times(pair, gamma), continue_tokens=continue_tokens)
    )


def score_views(
    pair_name: str, text: str, prompt_set: str, temperature: float, gamma: int, own_continuation: bool = False
) -> dict[str, object]:
    """Everything the panel shows after "Score my draft", by name: summary, strip, hardest, curve.

    A bad input (settings, prompt set, catalogue, pair) is one sentence in the summary, and the rest is emptied.
    """
    try:
        card = score_for_panel(pair_name, text, prompt_set, temperature, gamma, own_continuation)
    except (ValueError, PairError) as error:
        return {"summary": f"⚠ {error}", "strip": "", "hardest": [], "curve": None}
    return {
        "summary": summary_markdown(card),
        "strip": score_strip_html(card),
        "hardest": hardest_rows(card),
        "curve": speedup_curve_figure(card),
    }
