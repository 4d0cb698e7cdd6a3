"""Guided lessons: each sets a scenario, runs it, then says what to look at in numbers measured by *this* run.

A lesson is data (the request of its main run, the extra runs it compares with) plus one function
that writes its explanation from the measured results, and optionally one that draws a chart from them;
nothing in the sentences is canned.
"""

from __future__ import annotations

import difflib
import html
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from specviz.analysis.cache_fit import cause_sentence, fit_sentence, last_level_cache_bytes, read_bandwidth_gb_s
from specviz.analysis.readings import Readings
from specviz.engine.tree_shape import TreeShape
from specviz.kernels import forms
from specviz.numbers import number
from specviz.prompts.sets import CHAT_HELDOUT, CHAT_REWRITE, CODE_QUESTIONS, PROMPTS
from specviz.run.trace import Trace
from specviz.serving import torch_threads
from specviz.ui import charts
from specviz.ui.lesson_verifiers import explain_verifiers
from specviz.ui.request import CHAIN, RunRequest
from specviz.ui.tree_view import shape_words

CODE_PROMPT = PROMPTS["code"][0]
PROSE_PROMPT = PROMPTS["prose"][0]
REPETITIVE_PROMPT = PROMPTS["repetitive"][3]
# "Why do cats purr?": a typical held-out question for the real pair's head, α 0.48 at γ 1 where the 24 held-out
# questions ranged 0.26–0.73 and the first 16 averaged 0.47 (the sky-is-blue question, used before, is among the hardest)
QUESTION_PROMPT = CHAT_HELDOUT[14]
REWRITE_PROMPT = CHAT_REWRITE[0]  # a paragraph to copy with its spelling fixed: the answer repeats the prompt
DRAFTER_NAMES = {"feature": "feature head", "model": "independent draft", "lookup": "prompt lookup"}
SWEEP_GAMMAS = (1, 2, 3, 4, 6, 8, 12)
LESSON_TREE = "4x2x1x1:1"  # 8 nodes: four guesses at depth 1, two under the likeliest, then a chain; docs/trees.md measured
# it the best of the shapes at 9 rows on the real pair (2.03 tokens per pass against the chain's 1.76)


@dataclass(frozen=True)
class Measured:
    """One measured run of a lesson: what was asked, what was recorded, and its Readings."""

    label: str
    request: RunRequest
    trace: Trace
    readings: Readings
    advice: str | None = None  # which chain or tree pays here, measured (serving/recorder.setting_advice), where asked
    verify_curve: dict[int, float] | None = None  # ν(k) that measurement found, k = 1 … 8


@dataclass(frozen=True)
class Lesson:
    key: str  # the button's elem_id
    title: str
    request: RunRequest  # the run shown in the stream
    extra: tuple[tuple[str, RunRequest], ...] = ()  # (label, request) measured after it, for comparison
    explain: Callable[[Measured, list[Measured]], str] = field(default=lambda main, extra: "")
    chart: Callable[[Measured, list[Measured]], object] | None = None  # a figure drawn from the measured runs
    advises: bool = False  # also measure which chain or tree pays for the pair here (`--gamma auto`'s choice)


SPEED_WORDS = {"faster": "faster than", "even": "about as fast as", "slower": "slower than"}


def _speed(m: Readings) -> str:
    if m.measured_speedup is None:
        return "not measured"
    return f"{m.measured_speedup:.2f}× ({SPEED_WORDS[m.speed_verdict]} the target alone)"


def _explain_distilled(main: Measured, extra: list[Measured]) -> str:
    m = main.readings
    return (
        f"<p>The distilled draft was accepted <b>α = {number(m.alpha, 2)}</b> of the time on this code, so each target forward "
        f"produced <b>{number(m.tokens_per_cycle, 2)}</b> tokens instead of 1. A draft step cost τ = {number(m.tau, 3)} target steps and "
        f"the verify pass ν = {number(m.verify_cost, 2)} steps. Measured: <b>{_speed(m)}</b>; the theory predicts "
        f"{number(m.predicted_with_verify_cost, 2)}× from these α, τ and ν ({number(m.predicted_speedup, 2)}× if ν were 1).</p>"
        f"<p><b>Look at</b> the green runs in the stream: whole phrases the target only had to check. "
        f"<b>Question:</b> {number(m.tokens_per_cycle, 2)} tokens per forward, yet only {number(m.measured_speedup, 2)}× faster: where did the rest go?</p>"
    )


def _explain_plain(main: Measured, extra: list[Measured]) -> str:
    m, d = main.readings, extra[0].readings
    return (
        f"<p>Same sizes, same tokenizer, same prompt — but this draft was trained on text alone, not on the target's "
        f"predictions. α fell from <b>{number(d.alpha, 2)}</b> (distilled) to <b>{number(m.alpha, 2)}</b>, tokens per forward from "
        f"{number(d.tokens_per_cycle, 2)} to {number(m.tokens_per_cycle, 2)}, and the speed from {_speed(d)} to <b>{_speed(m)}</b>.</p>"
        f"<p><b>Look at</b> the red tokens: every rejection throws away the drafts after it. "
        f"<b>Question:</b> the draft costs the same τ ≈ {number(m.tau, 3)} in both runs — so what decides whether speculation pays?</p>"
    )


def _explain_gamma(main: Measured, extra: list[Measured]) -> str:
    runs = sorted([main, *extra], key=lambda r: r.request.gamma)
    best = max(runs, key=lambda r: r.readings.measured_speedup or 0)
    rows = "".join(
        f"<tr><td>{r.request.gamma}</td><td>{number(r.readings.alpha, 2)}</td><td>{number(r.readings.tokens_per_cycle, 2)}</td>"
        f"<td><b>{number(r.readings.measured_speedup, 2)}×</b></td><td>{number(r.readings.predicted_with_verify_cost, 2)}×</td></tr>"
        for r in runs
    )
    last = runs[-1]
    return (
        f"<p>The same prompt at γ = {', '.join(str(r.request.gamma) for r in runs)}. The fastest was <b>γ = {best.request.gamma}</b> "
        f"({number(best.readings.measured_speedup, 2)}×); at γ = {last.request.gamma} it was {number(last.readings.measured_speedup, 2)}×: "
        f"past the best γ each cycle drafts tokens that are mostly thrown away (α = {number(last.readings.alpha, 2)} means the chance "
        f"that all {last.request.gamma} survive is {number((last.readings.alpha or 0) ** last.request.gamma, 3)}), while every draft still costs τ.</p>"
        f"<table><tr><th>γ</th><th>α</th><th>tokens / forward</th><th>measured</th><th>predicted (with ν)</th></tr>{rows}</table>"
        f"<p><b>Question:</b> the predicted best γ uses α and τ only. Why might the measured best γ be smaller on this CPU?</p>"
    )


def _gamma_chart(main: Measured, extra: list[Measured]):
    """Measured speedup over γ next to both predictions."""
    points = [
        (r.request.gamma, r.readings.measured_speedup, r.readings.predicted_with_verify_cost, r.readings.predicted_speedup)
        for r in [main, *extra]
    ]
    return charts.gamma_sweep_figure(points)


def _explain_domain(main: Measured, extra: list[Measured]) -> str:
    prose, code = main.readings, extra[0].readings
    return (
        f"<p>The bundled pair learned Python only. On prose the draft and target are both guessing, and they guess differently: "
        f"α on prose = <b>{number(prose.alpha, 2)}</b> against <b>{number(code.alpha, 2)}</b> on code; speed {_speed(prose)} on prose, "
        f"{_speed(code)} on code.</p>"
        f"<p><b>Question:</b> would a draft distilled on chat data help a code assistant? What does α depend on besides the models?</p>"
    )


def _first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _explain_lenient(main: Measured, extra: list[Measured]) -> str:
    m, exact = main.readings, extra[0].readings
    lenient_text, target_text = main.trace.summary.text, main.trace.baseline.text
    where = _first_difference(main.trace.summary.new_token_ids, main.trace.baseline.new_token_ids)
    diff = _diff_html(target_text, lenient_text)
    verdict = (
        f"The texts part at token {where + 1}: from there on this is <b>not</b> the target's text."
        if where is not None
        else "This time the two texts happen to agree; a lower lenience or another prompt will make them part."
    )
    return (
        f'<p><span class="sv-lossy">LOSSY</span> Lenient verification accepts a draft when p(x) ≥ l · max p '
        f"(l = {main.request.lenience:g}) instead of only the target's top choice. α rose to <b>{number(m.alpha, 2)}</b> "
        f"(exact: {number(exact.alpha, 2)}) and the speed to {_speed(m)} (exact: {_speed(exact)}). {verdict}</p>"
        f"<p class='sv-diff'>{diff}</p>"
        f"<p><b>Question:</b> an exact method can never change the output. What would you have to check before shipping lenient mode?</p>"
    )


def _diff_html(target: str, lenient: str) -> str:
    """The target's own greedy text with what lenient mode changed: removed struck through, added underlined."""
    parts = []
    matcher = difflib.SequenceMatcher(a=target, b=lenient, autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            parts.append(html.escape(target[a0:a1]))
        if op in ("delete", "replace"):
            parts.append(f'<del title="the target wrote this">{html.escape(target[a0:a1])}</del>')
        if op in ("insert", "replace"):
            parts.append(f'<ins title="lenient mode wrote this">{html.escape(lenient[b0:b1])}</ins>')
    return "".join(parts)


def _explain_lookup(main: Measured, extra: list[Measured]) -> str:
    m, other = main.readings, extra[0].readings
    return (
        f"<p>No draft model at all: prompt lookup proposes whatever followed the last matching n-gram earlier in the text. "
        f"On this repetitive prompt α = <b>{number(m.alpha, 2)}</b>, {number(m.tokens_per_cycle, 2)} tokens per forward, {_speed(m)}; "
        f"drafting costs almost nothing (τ = {number(m.tau, 4)}). On ordinary code it finds less to copy: α = {number(other.alpha, 2)}, "
        f"{_speed(other)}.</p>"
        f"<p><b>Question:</b> which real tasks repeat their input (think editing, summarising, extraction)?</p>"
    )


def _explain_sampling(main: Measured, extra: list[Measured]) -> str:
    other_seed, greedy = extra[0], extra[1]
    where = _first_difference(main.trace.summary.new_token_ids, other_seed.trace.summary.new_token_ids)
    parted = f"they part at token {where + 1}" if where is not None else "they happen to agree"
    m = main.readings
    return (
        f"<p>At temperature {main.request.temperature:g}, seed {main.request.seed} and seed {other_seed.request.seed} wrote "
        f"different continuations ({parted}). Exact speculative sampling does not promise the target's <i>text</i>, it "
        f"promises the target's <i>distribution</i>: each draft is accepted with probability min(1, p/q) and a rejection is "
        f"redrawn from norm(max(0, p − q)).</p>"
        f"<p>α here: <b>{number(m.alpha, 2)}</b> (seed {main.request.seed}; from Σ min(p, q): {number(m.alpha_analytic, 2)}) and "
        f"{number(other_seed.readings.alpha, 2)} (seed {other_seed.request.seed}), against {number(greedy.readings.alpha, 2)} under greedy "
        f"decoding of the same prompt; speed {_speed(m)} (greedy: {_speed(greedy.readings)}). specviz's tests check the "
        f"distribution with a χ² test against the exact probabilities on a small vocabulary.</p>"
        f"<p><b>Question:</b> under greedy a draft must match the target's top token; under sampling it needs p and q to overlap. "
        f"Which is easier for this pair, judging by these α?</p>"
    )


def _explain_real_model(main: Measured, extra: list[Measured]) -> str:
    m = main.readings
    info = main.trace.pair
    same = main.trace.summary.new_token_ids == main.trace.baseline.new_token_ids
    params = info.target_parameters or 0
    form = f", weights in {info.weight_form}" if info.weight_form else ""
    head_form = f", drafting in {info.feature_head_form}" if info.feature_head_form in forms.packed_names() else ""
    return (
        f"<p>A real pretrained chat model: <b>SmolLM2-135M-Instruct</b> ({params / 1e6:.0f}M parameters, {info.dtype}{form}) "
        f"answers the question above, wrapped in its own chat template (the grey bubble is the user's message). Its drafts come "
        f"from a <b>feature head</b> (EAGLE-style): one layer, {(info.feature_head_parameters or 0) / 1e6:.1f}M parameters of "
        f"its own{head_form}, that reads the target's own last hidden state and the next token, predicts the target's next hidden state, and "
        "reads a token out of it through the target's own head. It sees what the target saw, at a fraction of a layer's cost.</p>"
        f"<p>α = <b>{number(m.alpha, 2)}</b> drafting {html.escape(shape_words(main.trace.started))} "
        f"(by position in the window: {_by_position(m)}), {number(m.tokens_per_cycle, 2)} tokens per target forward, "
        f"τ = {number(m.tau, 3)}, ν = {number(m.verify_cost, 2)}: <b>{_speed(m)}</b>. "
        + ("The answer is identical, token for token, to the target decoding alone." if same else _parting(main))
        + (
            f"</p><p>Which setting pays here, measured (ν over 1–8 rows and a short calibration run): {html.escape(main.advice)}."
            if main.advice
            else ""
        )
        + f"</p><p><b>Question:</b> this head {_distillation(info.name, 'feature_head_ref')}. An independent 2-layer draft "
        "of the same size, trained on the same answers, is accepted far less often (lesson 10): what does the head know that "
        "the draft has to guess?</p>"
    )


def _by_position(m: Readings) -> str:
    rates = [number(rate, 2) for rate in m.tally.acceptance_by_position if rate is not None]
    return ", ".join(rates) if rates else "—"


def _explain_drafters(main: Measured, extra: list[Measured]) -> str:
    runs = [replace(main, label=extra[0].label), *extra]  # the main run is the first drafter on the first prompt
    rows = "".join(
        f"<tr><td>{html.escape(r.label)}</td><td>{DRAFTER_NAMES.get(r.request.drafter, r.request.drafter)}</td>"
        f"<td>{number(r.readings.alpha, 2)}</td><td>{number(r.readings.tokens_per_cycle, 2)}</td><td>{number(r.readings.tau, 3)}</td>"
        f"<td>{number(r.readings.verify_cost, 2)}</td><td><b>{number(r.readings.measured_speedup, 2)}×</b></td></tr>"
        for r in runs
    )
    best = {
        label: max((r for r in runs if r.label == label), key=lambda r: r.readings.measured_speedup or 0)
        for label in _labels(runs)
    }
    winners = "; ".join(
        f"on the {label}, <b>{DRAFTER_NAMES.get(r.request.drafter, r.request.drafter)}</b>" for label, r in best.items()
    )
    return (
        "<p>Three ways to draft for the same real target, each measured against the target alone in this same session: an "
        "<b>independent draft</b> (a 2-layer model distilled on the target's answers: it has to guess from the text alone), the "
        "<b>feature head</b> (one layer reading the target's own hidden state), and <b>prompt lookup</b> (no model: it copies what "
        "followed the last matching words earlier in the text, so τ ≈ 0).</p>"
        f"<table><tr><th>prompt</th><th>drafter</th><th>α</th><th>tokens / forward</th><th>τ</th><th>ν</th><th>measured</th></tr>{rows}</table>"
        f"<p>Fastest {winners}. A question's answer is new text: only a drafter that knows the target does well. A rewrite "
        "repeats its input: lookup finds whole phrases to copy for free.</p>"
        "<p><b>Question:</b> transformers' <code>prompt_lookup_num_tokens</code> and vLLM's n-gram speculator exist for a reason: "
        "which of your own workloads repeat their input?</p>"
    )


def _labels(runs: list[Measured]) -> list[str]:
    return list(dict.fromkeys(r.label for r in runs))


def _distillation(pair_name: str | None, folder: str = "draft_ref") -> str:
    """How the pair's draft (or feature head) was distilled, from its own distill_report.json (the one home of those numbers)."""
    from specviz.models.catalogue import CatalogueError, load_catalogue

    try:
        report = json.loads((Path(getattr(load_catalogue().get(pair_name or ""), folder)) / "distill_report.json").read_text())
        minutes, tokens = report["fit"]["seconds"] / 60, report["data"]["answer_tokens"]
    except (CatalogueError, OSError, KeyError, ValueError, TypeError):
        return "was distilled by specviz"
    amount = f"{tokens / 1e6:.2f} million" if tokens >= 1e6 else f"{tokens / 1000:.0f} thousand"
    last_run = ", its last run continuing an earlier one" if "continued_from" in report else ""
    return f"was distilled on {amount} of the target's answer tokens, in {minutes:.0f} minutes of training{last_run}"


def near_tie_at(trace: Trace, index: int) -> tuple[str, str, float] | None:
    """Where speculative and plain greedy decoding part at new token `index`: the target's top two there, and their logit gap."""
    emitted = 0
    for cycle in trace.cycles:
        n = len(cycle.emitted_token_ids)
        if index < emitted + n:
            j = index - emitted
            ranked = cycle.positions[j].top_p if j < len(cycle.positions) else cycle.bonus_top_p
            if len(ranked) < 2 or ranked[1][2] <= 0:
                return None
            return ranked[0][1], ranked[1][1], math.log(ranked[0][2] / ranked[1][2])
        emitted += n
    return None


def _parting(main: Measured) -> str:
    """The sentence for a run whose speculative and plain texts part (bf16 rounding at a near-tie)."""
    where = _first_difference(main.trace.summary.new_token_ids, main.trace.baseline.new_token_ids)
    if where is None:
        return "The answer is identical, token for token, to the target decoding alone."
    tie = near_tie_at(main.trace, where)
    gap = f": the target's top two there, {tie[0]!r} and {tie[1]!r}, are {tie[2]:.3f} logits apart, a near-tie" if tie else ""
    return (
        f"The two decodings part at token {where + 1}{gap}. In {main.trace.pair.dtype or 'bf16'} a verify pass over γ + 1 "
        "positions rounds differently from a single step, so at a near-tie the argmax can flip; neither text is wrong, and in "
        "float32 the outputs are identical (tests/test_real_model.py)."
    )


def _explain_bf16(main: Measured, extra: list[Measured]) -> str:
    results = [main, *extra]
    parted = [r for r in results if _first_difference(r.trace.summary.new_token_ids, r.trace.baseline.new_token_ids) is not None]
    rows = "".join(
        f"<li>{html.escape(r.request.prompt)}: {'identical' if r not in parted else _parting(r)}</li>" for r in results
    )
    form = main.trace.pair.weight_form
    why = (
        f"Here the target's weights are in <b>{form}</b> ({forms.FORMS[form].summary}) with a row-exact attention: every row of a verify pass is "
        "computed exactly as a single step would compute it (tests/test_real_feature_head.py checks it bit for bit), so the "
        "two decodings cannot part, even at a near-tie."
        if forms.rows_independent(form)
        else f"In <b>{main.trace.pair.dtype}</b>, whose 8-bit mantissa rounds a logit to about 1 part in 256, a "
        "verify pass over γ + 1 positions rounds differently from single steps, so at a near-tie the argmax can flip."
    )
    return (
        f"<p>Exact speculative decoding is lossless in exact arithmetic; on hardware it is exact only if a token's logits do "
        f"not depend on the other tokens sharing the verify pass. {why} Greedy speculative and plain decoding of {len(results)} "
        f"questions: <b>{len(results) - len(parted)} identical</b>, {len(parted)} parted.</p><ul>{rows}</ul>"
        "<p><b>Question:</b> torch's fused CPU attention and oneDNN's bf16 products split their work by the number of rows. "
        "Why does that make a token's result depend on its neighbours, and what does it cost to avoid?</p>"
    )


def where_weights_live(run: Measured) -> str:
    """One sentence from this run's numbers: the target's weights against this CPU's cache, and what ν came to."""
    weight_bytes = int((run.trace.pair.target_weight_mb or 0) * 2**20)
    cache = last_level_cache_bytes() if weight_bytes else None  # sizes unknown (an old trace): no claim about the cache
    return fit_sentence(weight_bytes, cache, _ran_rows(run), run.readings.verify_cost)


def _ran_rows(run: Measured) -> int:
    """Rows of one verify pass as the run drafted (γ auto drafts the measured choice, not the request's γ)."""
    started = run.trace.started
    if started is None:
        return _rows(run.request)
    return (TreeShape.parse(started.tree).n_nodes if started.tree else started.gamma) + 1


FIXES = {  # why a lesson drafts a setting of its own instead of γ auto's: it says so (setting_note)
    "lesson-2": "so that both drafts are compared at the same γ",
    "lesson-3": "to sweep γ",
    "lesson-4": "so that code and prose are compared at the same γ",
    "lesson-5": "so that lenient and exact verification draft alike",
    "lesson-6": "so that lookup drafts alike on both texts",
    "lesson-7": "so that both seeds and greedy decoding draft alike",
    "lesson-9": "so that the four questions draft alike",
    "lesson-10": "so that the three drafters are compared at the same γ",
    "lesson-11": "so that the chain and the tree verify the same rows a pass",
    "lesson-12": "so that the three verifiers judge the same chains",
    "lesson-13": "so that both pairs verify the same rows a pass",
    "lesson-14": "so that the three drafters are compared at the same γ",
}


def setting_note(lesson: Lesson, run: Measured) -> str:
    """What the lesson drafted and why: γ auto's measured choice (or why nothing pays here), or the setting the lesson
    fixes to teach its point, beside what γ auto measured for the pair on this machine where that is known."""
    chosen = run.trace.setting
    if lesson.request.auto:
        if chosen is None or not chosen.auto:
            return f"<p class='sv-setting'>γ auto could not be measured here, so this run drafted γ = {run.request.gamma}.</p>"
        return f"<p class='sv-setting'>γ auto, {html.escape(chosen.sentence)}.</p>"
    started = run.trace.started
    what = f"the tree {started.tree}" if started is not None and started.tree else f"γ = {run.request.gamma}"
    why = FIXES.get(lesson.key, "to teach its point")
    known = (
        f"γ auto, measured on this machine, drafts {chosen.label} for this pair"
        + (f" (predicted {chosen.predicted_speedup:.2f}×)" if chosen.predicted_speedup is not None else "")
        if chosen is not None
        else "a Run with γ auto drafts what this machine measures to pay"
    )
    return f"<p class='sv-setting'>This lesson fixes {html.escape(what)} {why}; {html.escape(known)}.</p>"


def slower_reason(run: Measured) -> str | None:
    """Why a run read slower than the target alone, in measured terms; None where it did not read slower."""
    m = run.readings
    if m.measured_speedup is None or m.speed_verdict != "slower":
        return None
    return (
        f"<p class='sv-slower'><b>Slower than the target alone here ({number(m.measured_speedup, 2)}×).</b> "
        f"{html.escape(where_weights_live(run))} With α = {number(m.alpha, 2)} and τ = {number(m.tau, 3)}, the theory "
        f"predicts {number(m.predicted_with_verify_cost, 2)}× from these numbers.</p>"
    )


def _explain_coder(main: Measured, extra: list[Measured]) -> str:
    """The 1.5B coder pair beside the bundled 16M pair, on this machine: the cache decides."""
    tiny = extra[0] if extra else None
    m = main.readings
    rows = "".join(
        f"<tr><td>{html.escape(label)}</td><td>{number((r.trace.pair.target_weight_mb or 0), 0)} MiB</td>"
        f"<td>{_rows(r.request)}</td><td>{number(r.readings.verify_cost, 2)}</td><td>{number(r.readings.alpha, 2)}</td>"
        f"<td>{number(r.readings.tau, 3)}</td><td><b>{number(r.readings.measured_speedup, 2)}×</b></td></tr>"
        for label, r in [("Qwen2.5-Coder 0.5B → 1.5B", main), *([("bundled 2M → 16M", tiny)] if tiny else [])]
    )
    cache = last_level_cache_bytes()
    tiny_fits = tiny is not None and cache is not None and (tiny.trace.pair.target_weight_mb or 0) * 2**20 <= cache
    cause = cause_sentence(m.verify_cost, tiny.readings.verify_cost, tiny_fits) if tiny is not None else None
    contrast = (
        f"<p>The bundled pair, on the same machine: {html.escape(where_weights_live(tiny))}"
        f"{' <b>' + html.escape(cause) + '</b>' if cause else ''}</p>"
        if tiny is not None
        else ""
    )
    advice = f"<p>{html.escape(main.advice)}</p>" if main.advice else ""
    if main.verify_curve:
        curve = ", ".join(f"ν({rows}) {nu:.2f}" for rows, nu in sorted(main.verify_curve.items()) if rows > 1)
        advice += (
            f"<p>The coder target's verify pass here, in target steps by rows: {curve}. This machine reads memory at "
            f"{torch_threads.timed(read_bandwidth_gb_s):.1f} GB/s (measured just now).</p>"
        )
    return (
        f"<p>A real coder model, in {html.escape(main.trace.pair.weight_form or 'its own dtype')} on this CPU: the 0.5B sibling drafted γ = {main.request.gamma} tokens a cycle and "
        f"was accepted <b>α = {number(m.alpha, 2)}</b> of the time; a draft step cost τ = {number(m.tau, 3)} target steps. "
        f"Measured: <b>{_speed(m)}</b>; the theory predicts {number(m.predicted_with_verify_cost, 2)}× from these α, τ and ν.</p>"
        f"<p><b>Where its weights live:</b> {html.escape(where_weights_live(main))}</p>{contrast}"
        f"<table><tr><th>pair</th><th>target weights</th><th>rows a pass</th><th>ν</th><th>α</th><th>τ</th><th>measured</th></tr>{rows}</table>"
        f"{advice}<p><b>Question:</b> ν is what a verify pass costs in target steps. Which of the two targets could this "
        f"CPU keep in its cache, and what would a bigger cache do to the coder pair's speedup?</p>"
    )


def _explain_coder_drafters(main: Measured, extra: list[Measured]) -> str:
    """The coder target drafted three ways on one question: its 0.5B sibling, specviz's feature head, prompt lookup."""
    runs = [main, *extra]
    form = main.trace.pair.feature_head_form
    drafting_in = f", drafting in {form}" if form in forms.packed_names() else ""
    what = {
        "model": "Qwen2.5-Coder-0.5B: a whole model, a third of the target's layers' weight",
        "feature": f"one layer reading the target's own last hidden state (specviz's head for this target{drafting_in})",
        "lookup": "no model: copies what followed the last matching words in the text",
    }
    rows = "".join(
        f"<tr><td>{DRAFTER_NAMES.get(r.request.drafter, r.request.drafter)}</td><td>{html.escape(what.get(r.request.drafter, ''))}</td>"
        f"<td>{number(r.readings.alpha, 2)}</td><td>{number(r.readings.tau, 3)}</td><td>{number(r.readings.verify_cost, 2)}</td>"
        f"<td>{number(r.readings.tokens_per_cycle, 2)}</td><td><b>{number(r.readings.measured_speedup, 2)}×</b></td></tr>"
        for r in runs
    )
    best = max(runs, key=lambda r: r.readings.measured_speedup or 0)
    sibling = next((r for r in runs if r.request.drafter == "model"), None)
    head = next((r for r in runs if r.request.drafter == "feature"), None)
    trade = ""
    if sibling is not None and head is not None and None not in (sibling.readings.tau, head.readings.tau):
        trade = (
            f" The head costs τ = {number(head.readings.tau, 3)} of a target step against the sibling's "
            f"{number(sibling.readings.tau, 3)}, and is accepted α = {number(head.readings.alpha, 2)} of the time against "
            f"{number(sibling.readings.alpha, 2)}: speculation pays for what a drafter knows and charges for what it costs."
        )
    return (
        f"<p>The same coding question, the same target (Qwen2.5-Coder-1.5B), drafted three ways at the same γ = "
        f"{main.request.gamma} (fixed here, so the drafters compare on equal terms), each measured against the target alone in "
        "this session. Every answer is the target's own, token for token: only the speed differs.</p>"
        f"<table><tr><th>drafter</th><th>what it is</th><th>α</th><th>τ</th><th>ν</th><th>tokens / pass</th><th>measured</th></tr>"
        f"{rows}</table><p>Fastest here: <b>{DRAFTER_NAMES.get(best.request.drafter, best.request.drafter)}</b>.{trade}</p>"
        f"<p><b>Question:</b> the head {_distillation(main.request.pair, 'feature_head_ref')}; the sibling is a whole "
        "pretrained model. What would more training data buy the head, and what does each cost to serve?</p>"
    )


CODER_GAMMA = 3  # the lesson's fixed draft length (it says so); `gamma: auto` measures the best one and the lesson shows it


def _rows(request: RunRequest) -> int:
    """Rows of one verify pass: the pending token and every drafted token (a chain's γ, a tree's nodes)."""
    return (request.gamma if request.tree == CHAIN else TreeShape.parse(request.tree).n_nodes) + 1


def _explain_tree(main: Measured, extra: list[Measured]) -> str:
    tree, chain = main, extra[0]
    rows = _rows(tree.request)

    def row(r: Measured) -> str:
        m = r.readings
        return (
            f"<tr><td>{html.escape(shape_words(r.trace.started))}</td><td>{_rows(r.request)}</td><td><b>{number(m.tokens_per_cycle, 2)}</b></td>"
            f"<td>{number(m.verify_cost, 2)}</td><td><b>{number(m.measured_speedup, 2)}×</b></td>"
            f"<td>{number(m.speedup_if_verify_costs_one_step, 2)}×</td></tr>"
        )

    t, c = tree.readings, chain.readings
    more = (t.tokens_per_cycle or 0) - (c.tokens_per_cycle or 0)
    gain = f"{abs(more):.2f} {'more' if more >= 0 else 'fewer'}"
    return (
        f"<p>The same pair and prompt, drafted two ways with the same {rows} rows in each verify pass, measured back to back. "
        "The chain spends its rows going deep on the draft's first guess; the tree spends them on second and third guesses "
        "near the root, where most misses are, and the target tests each depth's branches one after another.</p>"
        "<table><tr><th>drafting</th><th>rows per pass</th><th>tokens per pass</th><th>ν</th><th>measured</th>"
        f"<th>if ν were 1</th></tr>{row(chain)}{row(tree)}</table>"
        f"<p>The tree kept <b>{gain}</b> tokens per target pass than the chain. Its pass over {rows} rows cost "
        f"ν = {number(t.verify_cost, 2)} target steps (the chain's: {number(c.verify_cost, 2)}); both run over the "
        "pair's static cache where it has one, on the same compiled step where compiling is on (a tree's rows only name "
        "other keys), so the gap is the tree's, not the engine's. Measured: the tree {_speed(t)}, the chain "
        f"{_speed(c)}. The last column divides the same tokens per pass by the same cycles' cost with the verify pass counted "
        "as one target step, as a GPU pays up to large k: there a pass is bound by reading the weights once, and its spare "
        "arithmetic does the extra rows almost for free.</p>"
        f"<p><b>Question:</b> on this machine a pass over {rows} rows cost ν = {number(t.verify_cost, 2)} single steps; on a GPU "
        "it costs about one. Why does a CPU with two cores pay for every extra row, and which of the two would you ship on each?</p>"
    )


def lessons(
    default_pair: str,
    plain_pair: str,
    real_pair: str | None = None,
    real_gamma: int = 3,
    coder_pair: str | None = None,
    coder_head: bool = False,
) -> list[Lesson]:
    base = RunRequest(pair=default_pair, prompt=CODE_PROMPT)
    coder_question = RunRequest(pair=coder_pair or default_pair, prompt=CODE_QUESTIONS[1], max_new_tokens=96, gamma=CODER_GAMMA)
    coder_drafters = (
        [
            Lesson(
                "lesson-14",
                "Three drafters for a real coder model",
                replace(coder_question, drafter="feature"),
                extra=(
                    ("0.5B sibling", replace(coder_question, drafter="model")),
                    ("prompt lookup", replace(coder_question, drafter="lookup")),
                ),
                explain=_explain_coder_drafters,
            )
        ]
        if coder_pair and coder_head
        else []
    )
    coder = (
        [
            Lesson(
                "lesson-13",
                "A real coder model on your CPU",
                RunRequest(pair=coder_pair, prompt=CODE_QUESTIONS[0], max_new_tokens=96, gamma=CODER_GAMMA),
                extra=(("bundled pair", replace(base, gamma=CODER_GAMMA)),),  # the same 4 rows a pass
                explain=_explain_coder,
                advises=True,
            )
        ]
        if coder_pair
        else []
    )
    chat = RunRequest(
        pair=real_pair or default_pair, prompt=QUESTION_PROMPT, max_new_tokens=96, gamma=real_gamma, drafter="feature"
    )
    rewrite = replace(chat, prompt=REWRITE_PROMPT, max_new_tokens=64)
    question = replace(chat, max_new_tokens=64)
    real = (
        [
            Lesson(
                "lesson-8", "A real model answers a question", replace(chat, auto=True), explain=_explain_real_model, advises=True
            ),
            Lesson(
                "lesson-9",
                "Exact on hardware: when rows depend on their neighbours",
                replace(chat, prompt=CHAT_HELDOUT[1]),
                extra=tuple(
                    (f"question {n}", replace(chat, prompt=question)) for n, question in enumerate(CHAT_HELDOUT[2:5], start=3)
                ),
                explain=_explain_bf16,
            ),
            Lesson(
                "lesson-10",
                "Three drafters, one real model",
                question,
                extra=(
                    ("question", replace(question, drafter="model")),
                    ("question", replace(question, drafter="lookup")),
                    ("rewrite", rewrite),
                    ("rewrite", replace(rewrite, drafter="model")),
                    ("rewrite", replace(rewrite, drafter="lookup")),
                ),
                explain=_explain_drafters,
            ),
        ]
        if real_pair
        else []
    )

    tree_pair = (
        dict(pair=real_pair, prompt=QUESTION_PROMPT, drafter="feature") if real_pair else {}
    )  # else: the bundled code pair
    tree = replace(base, **tree_pair, tree=LESSON_TREE, gamma=TreeShape.parse(LESSON_TREE).depth)  # γ: the depth it reaches
    chain_or_tree = Lesson(
        "lesson-11",
        "Chain or tree?",
        tree,
        extra=(("chain", replace(tree, tree=CHAIN, gamma=_rows(tree) - 1)),),
        explain=_explain_tree,
    )

    def against_base(key: str, title: str, request: RunRequest, base_label: str, explain) -> Lesson:
        """A lesson that changes one thing of the first lesson's run and measures that run beside it."""
        return Lesson(key, title, request, extra=((base_label, base),), explain=explain)

    return [
        Lesson("lesson-1", "A distilled draft on code", replace(base, auto=True), explain=_explain_distilled),
        against_base(
            "lesson-2", "An undistilled draft: α falls", replace(base, pair=plain_pair), "distilled draft", _explain_plain
        ),
        Lesson(
            "lesson-3",
            "γ too large",
            replace(base, gamma=SWEEP_GAMMAS[-2]),
            extra=tuple((f"γ = {g}", replace(base, gamma=g)) for g in SWEEP_GAMMAS if g != SWEEP_GAMMAS[-2]),
            explain=_explain_gamma,
            chart=_gamma_chart,
        ),
        against_base("lesson-4", "Domain: code vs prose", replace(base, prompt=PROSE_PROMPT), "code", _explain_domain),
        against_base(
            "lesson-5",
            "Lenient verification (lossy)",
            replace(base, verification="lenient", lenience=0.3),
            "exact",
            _explain_lenient,
        ),
        Lesson(
            "lesson-6",
            "Prompt lookup on repetitive text",
            replace(base, prompt=REPETITIVE_PROMPT, drafter="lookup"),
            extra=(("lookup on code", replace(base, drafter="lookup")),),
            explain=_explain_lookup,
        ),
        Lesson(
            "lesson-7",
            "Sampling: a new seed, a new text",
            replace(base, temperature=0.8, seed=0),
            extra=(("seed 1", replace(base, temperature=0.8, seed=1)), ("greedy", base)),
            explain=_explain_sampling,
        ),
        *real,
        chain_or_tree,
        Lesson(
            "lesson-12",
            "Same drafts, three verifiers",
            replace(base, temperature=0.8, seed=12),
            extra=tuple((name, replace(base, temperature=0.8, seed=12, verification=name)) for name in ("block", "match")),
            explain=explain_verifiers,
        ),
        *coder,
        *coder_drafters,
    ]
