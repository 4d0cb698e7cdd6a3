"""A deployment report: the numbers an engineer needs to decide (`DeploymentReport`), and one offline HTML file of them.

`DeploymentReport.to_json()` is what the CLI writes and the app reads; `write_report` renders it as a single
self-contained HTML file: plotly.js inline, no stylesheet, font or script fetched from anywhere.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.offline

from specviz.deployment import figures
from specviz.deployment.batch import BatchRow, stops_paying_sentence
from specviz.deployment.latency import PERCENTILE_METHOD, LatencyStats, LatencyTail, latency_tail
from specviz.deployment.memory import MemoryReport, PairLoadTimes
from specviz.deployment.verdict import DeploymentVerdict, judge
from specviz.numbers import number


@dataclass(frozen=True)
class DraftingRow:
    """One drafting setup over the report's prompts, beside the others: the chain of γ, or a token tree."""

    setup: str  # "chain, γ = 4" or "tree 2x2x1:1"
    tokens_per_pass: float | None  # tokens emitted per target forward
    rows_per_pass: float | None  # rows of a mean verify pass: the pending token and every drafted node
    verify_cost: float | None  # ν(rows): a verify pass over an autoregressive target step
    speedup: float | None  # measured, end to end, over the target alone
    same_as_target: bool | None  # greedy: the same output as the target alone on every prompt (None under sampling)


@dataclass(frozen=True)
class DeploymentReport:
    """Everything the report shows for one pair on one machine over one prompt set."""

    pair: str
    device: str
    dtype: str
    prompts: int
    gamma: int
    speculative: tuple[LatencyStats, ...]  # one per request, repeat-major: request k ran prompt k % prompts
    autoregressive: tuple[LatencyStats, ...]
    alpha_run: float | None  # α measured by the speculative runs (accepted / tested)
    alpha_scored: float | None  # α scored teacher-forced on the same prompts
    tau: float | None
    verify_cost: float | None  # ν
    speedup: float | None  # measured, end to end, speculative over autoregressive
    mean_acceptance_length: float | None  # tokens per target forward before any cut
    target_parameters: int | None = None
    draft_parameters: int | None = None
    memory: MemoryReport | None = None
    load_times: PairLoadTimes | None = None
    batch_alpha: float | None = None  # the α the batch curve predicts at
    batch_rows: tuple[BatchRow, ...] = ()
    verdict: DeploymentVerdict | None = None
    prompt_labels: tuple[str, ...] = field(default=())
    load_source: str = "a fresh process, from disk"  # how the cold loads were timed
    compile_note: str | None = None  # what compiling the fast path's step cost (engine/compiled.py), part of a cold start
    drafting: tuple[DraftingRow, ...] = ()  # the chain beside the token trees `report --tree` asked for; () when none
    acceptance: dict | None = None  # Readings.acceptance_metrics() of the speculative runs (docs/numbers.md)
    verification: str = "exact"  # how the drafts were judged (engine/verifiers.py)
    engine_commands: dict | None = None  # EngineCommands.to_json(): the pair's EAGLE-3 head in llama.cpp, vLLM, SGLang

    @property
    def speculative_tail(self) -> LatencyTail:
        return latency_tail(self.speculative)

    @property
    def autoregressive_tail(self) -> LatencyTail:
        return latency_tail(self.autoregressive)

    def with_verdict(self) -> DeploymentReport:
        """This report with its verdict judged from its own numbers."""
        verdict = judge(
            self.speedup,
            target_parameters=self.target_parameters,
            mean_acceptance_length=self.mean_acceptance_length,
            batch_rows=self.batch_rows,
            speculative_p99_s=self.speculative_tail.latency_p99_s,
            autoregressive_p99_s=self.autoregressive_tail.latency_p99_s,
            memory_added_fraction=self.memory.added_fraction if self.memory else None,
            memory_added_bytes=self.memory.added_bytes if self.memory else None,
            load_times=self.load_times,
        )
        return replace(self, verdict=verdict)

    def to_json(self) -> dict:
        """A JSON-ready dict (the CLI's `report --json`, the app's state), tails included for readers of the file."""
        data = asdict(self)
        data["memory"] = self.memory.to_json() if self.memory else None
        data["load_times"] = self.load_times.to_json() if self.load_times else None
        data["speculative_tail"] = self.speculative_tail.to_json()
        data["autoregressive_tail"] = self.autoregressive_tail.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeploymentReport:
        """The report `to_json` wrote (derived keys ignored)."""
        stats = lambda rows: tuple(LatencyStats(**{**r, "arrivals_s": tuple(r["arrivals_s"])}) for r in rows)
        return cls(
            **{k: data[k] for k in ("pair", "device", "dtype", "prompts", "gamma", "alpha_run", "alpha_scored", "tau")},
            speculative=stats(data["speculative"]),
            autoregressive=stats(data["autoregressive"]),
            verify_cost=data["verify_cost"],
            speedup=data["speedup"],
            mean_acceptance_length=data["mean_acceptance_length"],
            target_parameters=data.get("target_parameters"),
            draft_parameters=data.get("draft_parameters"),
            memory=MemoryReport.from_json(data["memory"]) if data.get("memory") else None,
            load_times=PairLoadTimes.from_json(data["load_times"]) if data.get("load_times") else None,
            batch_alpha=data.get("batch_alpha"),
            batch_rows=tuple(BatchRow(**row) for row in data.get("batch_rows", ())),
            verdict=DeploymentVerdict.from_json(data["verdict"]) if data.get("verdict") else None,
            prompt_labels=tuple(data.get("prompt_labels", ())),
            load_source=data.get("load_source", cls.load_source),
            compile_note=data.get("compile_note"),
            drafting=tuple(DraftingRow(**row) for row in data.get("drafting", ())),
            acceptance=data.get("acceptance"),
            verification=data.get("verification", "exact"),
            engine_commands=data.get("engine_commands"),
        )


def _number(value: float | None, fmt: str, scale: float = 1.0) -> str:
    return "–" if value is None else fmt.format(value * scale)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(figure: go.Figure, div_id: str) -> str:
    return figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False})


def _per_prompt_median(requests: Sequence[LatencyStats], prompts: int) -> list[float]:
    """Each prompt's median request latency over its repeats (requests are repeat-major)."""
    prompts = max(1, min(prompts, len(requests)))
    return [statistics.median(r.latency_s for r in requests[i::prompts]) for i in range(prompts)] if requests else []


def _verdict_section(verdict: DeploymentVerdict) -> str:
    marks = {True: "✔ holds", False: "✘ does not hold", None: "– not measured"}
    rows = [[html.escape(c.rule), html.escape(c.claim), marks[c.holds], html.escape(c.reason)] for c in verdict.checks]
    return (
        f'<p class="verdict {verdict.answer.replace(" ", "-")}"><b>{html.escape(verdict.answer.capitalize())}</b>: '
        f"{html.escape(verdict.reason)}</p>"
        "<h3>The article's rules of thumb, checked against what was measured</h3>"
        + _table(["rule", "the article's claim", "here", "because"], rows)
    )


def _latency_section(report: DeploymentReport, with_figures: bool = True) -> str:
    rows = []
    for name, requests in (("autoregressive", report.autoregressive), ("speculative", report.speculative)):
        tail = latency_tail(requests)
        tpots = [r.tpot_s for r in requests if r.tpot_s is not None]
        itl_max = max((r.itl_max_s for r in requests if r.itl_max_s is not None), default=None)
        rows.append(
            [
                name,
                str(tail.requests),
                _number(tail.ttft_ms, "{:.1f}"),
                _number(tail.latency_p50_s, "{:.3f}"),
                _number(tail.latency_p90_s, "{:.3f}"),
                _number(tail.latency_p99_s, "{:.3f}"),
                _number(tail.itl_p50_ms, "{:.2f}"),
                _number(tail.itl_p99_ms, "{:.2f}"),
                _number(itl_max, "{:.2f}", 1000),
                _number(statistics.mean(tpots) if tpots else None, "{:.2f}", 1000),
            ]
        )
    header = ["method", "requests", "TTFT P50 (ms)", "latency P50 (s)", "P90 (s)", "P99 (s)", "ITL P50 (ms)", "ITL P99 (ms)"]
    table = _table([*header, "ITL max (ms)", "TPOT mean (ms)"], rows)
    spec_first = report.speculative[0].arrivals_s if report.speculative else ()
    ar_first = report.autoregressive[0].arrivals_s if report.autoregressive else ()
    spec_itls = [gap for r in report.speculative for gap in r.itls_s]
    ar_itls = [gap for r in report.autoregressive for gap in r.itls_s]
    labels = list(report.prompt_labels) or None
    if not with_figures:
        return table
    return (
        table
        + _figure(figures.race_figure(spec_first, ar_first), "race")
        + _figure(figures.itl_figure(spec_itls, ar_itls), "itl")
        + _figure(
            figures.request_latency_figure(
                _per_prompt_median(report.speculative, report.prompts),
                _per_prompt_median(report.autoregressive, report.prompts),
                labels,
            ),
            "request-latency",
        )
    )


def _memory_section(memory: MemoryReport | None, with_figures: bool = True) -> str:
    if memory is None:
        return "<p>Memory was not measured.</p>"
    mib = lambda b: f"{b / 2**20:,.1f}"
    models = [
        [
            role,
            html.escape(m.reference),
            f"{m.parameters / 1e6:,.1f} M",
            mib(m.weight_bytes),
            f"{m.kv_bytes_per_token / 1024:,.1f}",
        ]
        for role, m in (("target", memory.target), ("draft", memory.draft))
    ]
    peaks = [
        ["autoregressive (target alone)", mib(memory.autoregressive_peak_bytes)],
        ["speculative (target + draft)", mib(memory.speculative_peak_bytes)],
        ["speculation adds", f"{mib(memory.added_bytes)} ({_number(memory.added_fraction, '{:.1f}', 100)} %)"],
    ]
    return (
        _table(["model", "reference", "parameters", "weights (MiB)", "KV cache per token (KiB)"], models)
        + f"<p>Peak memory of a run, {html.escape(memory.peak_source)}:</p>"
        + _table(["run", "peak (MiB)"], peaks)
        + (_figure(figures.memory_figure(memory.peak_parts()), "memory") if with_figures else "")
    )


def _cold_start_section(load_times: PairLoadTimes | None, source: str, compile_note: str | None = None) -> str:
    compiled = f"<p>Then, before the first request: {html.escape(compile_note)}.</p>" if compile_note else ""
    if load_times is None:
        return "<p>Load times were not measured.</p>" + compiled
    rows = [
        [role, f"{t.cold_s:.2f}", number(t.warm_s, 2, "not timed")]  # the app reads each model once: no warm load
        for role, t in (("target", load_times.target), ("draft", load_times.draft))
    ]
    rows.append(["both (speculative deployment)", f"{load_times.speculative_cold_s:.2f}", "–"])
    return _table(["model", f"cold: {html.escape(source)} (s)", "warm: loaded again (s)"], rows) + compiled


def _batch_section(report: DeploymentReport, with_figures: bool = True) -> str:
    if not report.batch_rows:
        return "<p>No batch sizes were measured.</p>"
    rows = [[str(r.batch), f"{r.tau:.3f}", f"{r.verify_cost:.2f}", f"{r.predicted_speedup:.2f}×"] for r in report.batch_rows]
    alpha = f" at α = {report.batch_alpha:.2f}, γ = {report.gamma}" if report.batch_alpha is not None else ""
    return (
        f"<p>{html.escape(stops_paying_sentence(report.batch_rows))} Predicted{alpha}.</p>"
        + _table(["batch", "τ", "ν (verify cost)", "predicted speedup"], rows)
        + (_figure(figures.batch_figure(report.batch_rows), "batch") if with_figures else "")
    )


def _drafting_section(rows: Sequence[DraftingRow]) -> str:
    same = {True: "yes", False: "no", None: "–"}
    cells = [
        [
            html.escape(row.setup),
            _number(row.rows_per_pass, "{:.2f}"),
            _number(row.tokens_per_pass, "{:.2f}"),
            _number(row.verify_cost, "{:.2f}"),
            _number(row.speedup, "{:.2f}×"),
            same[row.same_as_target],
        ]
        for row in rows
    ]
    return (
        "<p>The same prompts drafted as a chain and as token trees, run back to back. A tree verifies more rows per "
        "target pass to emit more tokens per pass; it pays where ν, the cost of those rows, stays near 1. The verdict "
        "above is the chain's.</p>"
        + _table(
            [
                "drafting",
                "rows per verify pass",
                "tokens per target pass",
                "ν (verify pass / target step)",
                "speedup",
                "same output as the target",
            ],
            cells,
        )
    )


def _engines_section(commands: Mapping[str, Any]) -> str:
    """The commands that run the pair's head elsewhere (deployment/engine_commands.py, as `export` prints them)."""
    from specviz.deployment.engine_commands import EngineCommands

    lines = EngineCommands(**{**commands, **{k: tuple(commands[k]) for k in ("llama_cpp", "vllm", "sglang")}}).lines()
    tree = f", SGLang the tree {html.escape(commands['tree'])}" if commands.get("tree") else ""
    return (
        f"<p>This pair's head is in EAGLE-3's standard form: export it, then serve it in another engine, drafting "
        f"K = {commands['gamma']} per verify pass as measured here{tree}.</p><pre>" + html.escape("\n".join(lines)) + "</pre>"
    )


def acceptance_lines(metrics: dict) -> list[str]:
    """The acceptance numbers as lines of text (bench, report): per position both ways, and the histogram of drafts
    accepted per cycle beside the truncated geometric law for the measured α, with their distance."""

    def listed(values, fmt: str) -> str:
        return " ".join("–" if v is None else fmt.format(v) for v in values or [])

    total = sum(metrics["acceptance_histogram"]) or 1
    lines = [
        f"mean acceptance length {_number(metrics['mean_acceptance_length'], '{:.2f}')} "
        f"({metrics['num_accepted_tokens']} drafts accepted over {metrics['num_drafts']} cycles)",
        "acceptance by position, unconditional (vLLM: accepted at i / all cycles): "
        + listed(metrics["acceptance_rate_per_pos"], "{:.2f}"),
        "acceptance by position, conditional (given drafts 1..i−1 accepted): "
        + listed(metrics["conditional_acceptance_rate_per_pos"], "{:.2f}"),
        "cycles by drafts accepted, k = 0..γ, measured: "
        + listed([c / total for c in metrics["acceptance_histogram"]], "{:.3f}"),
    ]
    if metrics["acceptance_length_law"] is not None:
        lines.append(
            "  law α^k (1 − α), α^γ at k = γ, for the measured α: "
            + listed(metrics["acceptance_length_law"], "{:.3f}")
            + f" · distance (total variation) {_number(metrics['acceptance_histogram_distance'], '{:.3f}')}"
        )
    return lines


def _acceptance_section(report: DeploymentReport) -> str:
    if not report.acceptance:
        return "<p>No speculative cycles were measured.</p>"
    items = "".join(f"<li>{html.escape(line)}</li>" for line in acceptance_lines(report.acceptance))
    return (
        f"<p>Drafts judged by <b>{html.escape(report.verification)}</b> verification. The definitions are in "
        f"docs/numbers.md; the field names are vLLM's where the quantity is the same.</p><ul>{items}</ul>"
    )


def _summary_section(report: DeploymentReport) -> str:
    rows = [
        ["α, measured by the runs", _number(report.alpha_run, "{:.3f}")],
        ["α, scored teacher-forced", _number(report.alpha_scored, "{:.3f}")],
        ["mean acceptance length (tokens per cycle)", _number(report.mean_acceptance_length, "{:.2f}")],
        ["τ (draft step / target step)", _number(report.tau, "{:.3f}")],
        ["ν (verify pass / target step)", _number(report.verify_cost, "{:.2f}")],
        ["measured speedup (end to end)", _number(report.speedup, "{:.2f}×")],
    ]
    return _table(["number", "value"], rows)


STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; max-width: 1000px; margin: 24px auto; padding: 0 16px; color: #1f2937; }
h1 { font-size: 1.5rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #e5e7eb; padding-bottom: 4px; }
table { border-collapse: collapse; margin: 8px 0 12px; font-size: .9rem; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e5e7eb; text-align: left; vertical-align: top; }
.verdict { font-size: 1.1rem; padding: 8px 12px; border-left: 6px solid #009E73; background: #f9fafb; }
.verdict.not-worth-it { border-left-color: #D55E00; } .verdict.break-even, .verdict.not-measured { border-left-color: #8c8c8c; }
.notes { font-size: .85rem; color: #4b5563; }
"""

NOTES = f"""<ul class="notes">
<li>Each token's arrival is timed on the engine's clock from the start of the request (prefill included); a speculative
cycle releases its 1 … γ + 1 tokens at once. ITL is the gap between consecutive tokens (zero inside a burst).</li>
<li>TTFT: start to the first token. TPOT = (request latency − TTFT) / (tokens − 1).</li>
<li>Percentiles: numpy, method="{PERCENTILE_METHOD}". Request percentiles are over requests (prompts × repeats); ITL
percentiles pool every gap of every request; TTFT is the median request's.</li>
<li>The batch curve is predicted from step costs measured at each batch size, at one α: (1 − α^(γ+1)) / ((1 − α)(γτ_B + ν_B)).</li>
<li>Memory on a CPU is estimated from the tensors (weights, KV cache at the longest length, the largest forward's
activations); on a GPU it is CUDA's allocator peak.</li>
</ul>"""


def sections(report: DeploymentReport, with_figures: bool = True) -> list[tuple[str, str]]:
    """(title, HTML) of every section; without figures for a page that draws them itself (the app)."""
    verdict = report.verdict or report.with_verdict().verdict
    return [
        ("Verdict", _verdict_section(verdict)),
        ("α, τ, ν and the speedup", _summary_section(report)),
        ("Acceptance as serving engines count it", _acceptance_section(report)),
        *([("Chain or tree", _drafting_section(report.drafting))] if report.drafting else []),
        ("Latency: distribution and tail, both methods", _latency_section(report, with_figures)),
        ("Memory", _memory_section(report.memory, with_figures)),
        ("Cold start", _cold_start_section(report.load_times, report.load_source, report.compile_note)),
        ("Batch size", _batch_section(report, with_figures)),
        *([("Run it in llama.cpp, vLLM or SGLang", _engines_section(report.engine_commands))] if report.engine_commands else []),
    ]


def render_html(report: DeploymentReport) -> str:
    """The report as one self-contained HTML page."""
    title = f"Is speculative decoding worth it? {report.pair} on {report.device}"
    body = "".join(
        f"<h2>{html.escape(name)}</h2>{content}"
        for name, content in [*sections(report), ("How these numbers are measured", NOTES)]
    )
    setup = f"{report.prompts} prompts, γ = {report.gamma}, {html.escape(report.dtype)}"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style>"
        f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script></head>'
        f"<body><h1>{html.escape(title)}</h1><p>{setup}.</p>{body}</body></html>"
    )


def write_report(report: DeploymentReport | Mapping[str, Any], path: str | Path) -> Path:
    """Write the report (a DeploymentReport or its to_json dict) as one offline HTML file; return its path."""
    if not isinstance(report, DeploymentReport):
        report = DeploymentReport.from_json(report)
    path = Path(path)
    path.write_text(render_html(report), encoding="utf-8")
    return path
