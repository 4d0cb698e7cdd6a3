"""The "Score my draft" panel: its renderers are pure functions of a Scorecard; its views come back by name."""

import re

import pytest

from specviz.analysis.score import scorecard
from specviz.engine import SamplingSettings
from specviz.prompts.sets import PROMPTS
from specviz.ui.score_panel import (
    HARDEST_HEADERS,
    MY_TEXT,
    hardest_rows,
    overlap_colour,
    score_for_panel,
    score_strip_html,
    score_views,
    speedup_curve_figure,
    summary_markdown,
    texts_to_score,
)
from tests.test_score import TIMES

TEXT = "def add(a, b):\n    return a + b\n\n\ndef main():\n    print(add(1, 2))\n"


@pytest.fixture(scope="module")
def card(bundled_pair):
    return scorecard(bundled_pair, [TEXT, "import os\nimport sys\n"], SamplingSettings(), 4, TIMES)


def test_the_strip_colours_every_scored_token(card):
    page = score_strip_html(card)
    scored = sum(len(text.overlaps) for text in card.texts)
    assert page.count('title="Σ min(p, q) = ') == scored, "one hover tip per scored position"
    assert page.count('<div class="sv-score"') == 2
    low = sum(o < 0.5 for text in card.texts for o in text.overlaps)
    assert page.count("sv-s sv-low") == low, "positions below 0.5 carry the dotted underline too"
    assert overlap_colour(0.0) != overlap_colour(1.0) and overlap_colour(2.0) == overlap_colour(1.0)
    assert len(re.findall(r'class="sv-s( sv-low)?"', score_strip_html(card, max_tokens=5))) == 5, "the strip stops at max_tokens"


def test_hardest_rows_summary_and_curve(card):
    rows = hardest_rows(card, 4)
    assert len(rows) == 4 and all(len(row) == len(HARDEST_HEADERS) for row in rows)
    assert [row[0] for row in rows] == sorted(row[0] for row in rows)
    text = summary_markdown(card)
    assert f"{card.alpha:.3f}" in text and "τ = 0.100" in text and "ν = 1.20" in text
    figure = speedup_curve_figure(card)
    assert len(figure.data) == 3 and list(figure.data[0].x) == list(range(1, 17))


def test_nothing_to_score_is_one_sentence():
    with pytest.raises(ValueError, match="Paste some text"):
        texts_to_score("  ", MY_TEXT)
    assert texts_to_score("", "code")[0] == PROMPTS["code"][0]


def test_the_panel_scores_through_its_views(bundled_pair):
    views = score_views("pycode-distilled", TEXT, MY_TEXT, 0.0, 3)
    assert set(views) == {"summary", "strip", "hardest", "curve"}, "app.py maps these names onto its components"
    assert views["summary"].startswith("**α ≈") and views["curve"] is not None
    bad = score_views("pycode-distilled", "  ", MY_TEXT, 0.0, 3)
    assert bad["summary"].startswith("⚠ Paste some text") and bad["strip"] == "", "bad input is one sentence, the rest emptied"
    card = score_for_panel("pycode-distilled", TEXT, MY_TEXT, 0.0, 3)
    assert card.gamma == 3 and card.tokens_scored > 10 and card.readings.tau is not None
