"""The figures and the offline report, built from constructed numbers; and the light modules import without torch."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specviz.analysis.readings import readings_of
from specviz.deployment import figures
from specviz.deployment.batch import BatchRow
from specviz.deployment.latency import LatencyStats
from specviz.deployment.memory import LoadTimes, MemoryReport, ModelMemory, PairLoadTimes
from specviz.deployment.report import DeploymentReport, DraftingRow, render_html, write_report
from tests.test_acceptance_law import simulated_tally

ROOT = Path(__file__).resolve().parent.parent
SPECULATIVE_ARRIVALS = [[0.2, 0.2, 0.2, 0.3, 0.4, 0.4], [0.15, 0.25, 0.25, 0.25, 0.35, 0.45]]
AUTOREGRESSIVE_ARRIVALS = [[0.12, 0.17, 0.22, 0.27, 0.32, 0.37], [0.11, 0.16, 0.21, 0.26, 0.31, 0.36]]

FIGURES = ("race", "itl", "request-latency", "memory", "batch")


def sample_report() -> DeploymentReport:
    """A report with every section filled, from numbers chosen by hand."""
    memory = MemoryReport(
        ModelMemory("assets/pycode-target", 20_000_000, 80_000_000, 61_440),
        ModelMemory("assets/pycode-draft", 3_000_000, 12_000_000, 2_048),
        autoregressive_peak_bytes=100_000_000,
        speculative_peak_bytes=118_000_000,
        peak_source="estimated from tensors",
    )
    return DeploymentReport(
        pair="pycode-distilled",
        device="cpu",
        dtype="float32",
        prompts=2,
        gamma=4,
        speculative=tuple(LatencyStats.of(a) for a in SPECULATIVE_ARRIVALS),
        autoregressive=tuple(LatencyStats.of(a) for a in AUTOREGRESSIVE_ARRIVALS),
        alpha_run=0.72,
        alpha_scored=0.70,
        tau=0.08,
        verify_cost=1.3,
        speedup=0.93,
        mean_acceptance_length=2.9,
        target_parameters=20_000_000,
        draft_parameters=3_000_000,
        memory=memory,
        load_times=PairLoadTimes(LoadTimes(0.8, 0.2), LoadTimes(0.3, 0.05)),
        batch_alpha=0.72,
        batch_rows=(
            BatchRow(1, 0.08, 1.3, 1.8),
            BatchRow(4, 0.1, 2.0, 1.2),
            BatchRow(16, 0.15, 4.0, 0.6),
            BatchRow(64, 0.2, 5.0, 0.5),
        ),
        prompt_labels=("def add", "class Stack"),
        acceptance=readings_of(simulated_tally(0.7, 4, 200), gamma=4).acceptance_metrics(),
        verification="block",
    ).with_verdict()


def test_race_is_two_staircases_and_cuts_at_the_playback_time():
    figure = figures.race_figure([0.2, 0.2, 0.4], [0.1, 0.2, 0.3])
    autoregressive, speculative = figure.data
    assert speculative.line.shape == "hv" and autoregressive.line.shape == "hv"
    assert list(speculative.x) == [0, 0.2, 0.2, 0.4] and list(speculative.y) == [0, 1, 2, 3]
    cut = figures.race_figure([0.2, 0.2, 0.4], [0.1, 0.2, 0.3], until_s=0.25)
    assert list(cut.data[1].x) == [0, 0.2, 0.2, 0.25] and list(cut.data[1].y) == [0, 1, 2, 2], "held flat up to the playback time"
    assert list(cut.data[0].y) == [0, 1, 2, 2]
    assert cut.layout.xaxis.range == figure.layout.xaxis.range, "axes stay fixed while the race plays"


def test_itl_figure_marks_p50_and_p99_of_each_method():
    figure = figures.itl_figure([0, 0, 0.1, 0.1, 0], [0.05, 0.05, 0.05])
    marks = [trace for trace in figure.data if trace.mode == "markers+text"]
    assert len(marks) == 2
    assert list(marks[1].y) == [0.5, 0.99] and marks[1].x[0] == pytest.approx(0.0), "the speculative P50 gap is inside a burst"
    assert marks[0].x[1] == pytest.approx(50.0)


def test_batch_figure_is_labelled_as_a_prediction_with_the_break_even_band():
    figure = figures.batch_figure([BatchRow(16, 0.1, 3.0, 0.7), BatchRow(1, 0.1, 1.0, 1.5)])
    assert list(figure.data[0].x) == [1, 16]
    assert "predicted from measured step costs" in figure.layout.title.text
    band, line = figure.layout.shapes
    assert (band.y0, band.y1, line.y0) == (0.95, 1.05, 1.0), "the band speed_verdict calls break-even, around 1×"


def test_report_round_trips_through_json():
    report = sample_report()
    assert DeploymentReport.from_json(report.to_json()) == report
    assert report.to_json()["speculative_tail"]["latency_p99_s"] == pytest.approx(report.speculative_tail.latency_p99_s)


def test_report_is_one_offline_file_with_every_section(tmp_path):
    report = sample_report()
    path = write_report(report.to_json(), tmp_path / "report.html")
    page = path.read_text(encoding="utf-8")
    assert not re.search(r"<(script|link|img)[^>]+(src|href)\s*=\s*[\"']?(https?:)?//", page), "nothing may be fetched"
    assert "@import" not in page and "fonts.googleapis" not in page
    assert page.count("<script") >= 1 + len(FIGURES)
    for div_id in FIGURES:
        assert f'id="{div_id}"' in page, f"the {div_id} figure must be in the report"
    for heading in ("Verdict", "α, τ, ν and the speedup", "Latency", "Memory", "Cold start", "Batch size"):
        assert f"<h2>{heading}" in page
    assert "<h2>Acceptance as serving engines count it" in page and "<b>block</b> verification" in page
    law = report.acceptance["acceptance_length_law"]
    assert f"{law[0]:.3f}" in page and f"{report.acceptance['acceptance_histogram_distance']:.3f}" in page, "law and distance"
    assert "Not worth it" in page, "0.93× measured is a slowdown by the app's thresholds"
    assert "stops paying at batch 16" in page
    assert page == render_html(report)


def test_tree_rows_sit_beside_the_chain_and_round_trip():
    plain = sample_report()
    assert "Chain or tree" not in render_html(plain), "no tree asked for: no drafting section"
    rows = (
        DraftingRow("chain, γ = 4", 2.9, 5.0, 1.3, 0.93, True),
        DraftingRow("tree 2x2x1:1", 3.2, 5.8, 1.6, None, False),
    )
    report = replace(plain, drafting=rows)
    assert DeploymentReport.from_json(report.to_json()) == report
    page = render_html(report)
    section = page[page.index("<h2>Chain or tree") :]
    assert "tree 2x2x1:1" in section and "5.80" in section and "0.93×" in section and "<td>no</td>" in section
    assert page.index("<h2>α, τ, ν and the speedup") < page.index("<h2>Chain or tree") < page.index("<h2>Latency")


def test_light_modules_import_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "import specviz.deployment.latency, specviz.deployment.memory, specviz.deployment.batch\n"
        "import specviz.deployment.verdict, specviz.deployment.figures, specviz.deployment.report\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"the report and figure modules must not need torch:\n{result.stderr}"
