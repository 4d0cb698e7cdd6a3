"""HTML views of a trace: the colour-coded token stream, the race, the narration. Pure functions."""

from __future__ import annotations

import html
from typing import Literal

from specviz.analysis.readings import Readings
from specviz.engine.events import NOT_ROW_EXACT, Cycle, DraftPosition
from specviz.numbers import number
from specviz.run.trace import Trace
from specviz.ui import tree_view
from specviz.ui.as_text import markdown_repr, markdown_text
from specviz.ui.palette import LEGEND
from specviz.ui.tokens import token_span

Phase = Literal["draft", "verify", "decide"]
PHASES: tuple[Phase, ...] = ("draft", "verify", "decide")


def position_tip(cycle: Cycle, index: int, position: DraftPosition, greedy: bool) -> str:
    """What a hover shows: the numbers of the test, in the paper's letters."""
    lines = [f"draft token {index + 1} of cycle {cycle.index + 1}: {position.text!r}", f"q(x) = {number(position.q)}   (draft)"]
    if position.status == "unverified":
        lines.append("never tested: an earlier draft in this cycle was rejected")
        return "\n".join(lines)
    lines.append(f"p(x) = {number(position.p)}   (target)")
    if greedy:
        verdict = (
            "accepted: the target's top choice" if position.status == "accepted" else "rejected: not the target's top choice"
        )
        lines.append(f"greedy test → {verdict}")
    else:
        lines.append(f"min(1, p/q) = {number(position.accept_probability)}")
        comparison = "≤" if position.status == "accepted" else ">"
        lines.append(f"u = {number(position.u)} {comparison} {number(position.accept_probability)} → {position.status}")
    lines.append(f"Σ min(p, q) here = {number(position.overlap)}")
    return "\n".join(lines)


def new_token_tip(cycle: Cycle, greedy: bool) -> str:
    if not cycle.positions:
        return f"target's own token {cycle.new_token_text!r}\nno drafts this cycle: a plain target step"
    if cycle.bonus_token_id is not None:
        p = next((prob for token, _, prob in cycle.bonus_top_p if token == cycle.bonus_token_id), None)
        return f"bonus token {cycle.new_token_text!r}\nall {len(cycle.positions)} drafts accepted, so the target adds\none more from p_{len(cycle.positions) + 1}: p(x) = {number(p)}"
    rejected = cycle.positions[cycle.n_accepted]
    if greedy:
        return f"resampled {cycle.new_token_text!r}: the target's top choice\nin place of the rejected {rejected.text!r}"
    r = next((prob for token, _, prob in rejected.top_residual if token == cycle.resampled_token_id), None)
    return f"resampled {cycle.new_token_text!r} from norm(max(0, p − q))\nat the rejected position: residual(x) = {number(r)}"


def stream_html(trace: Trace, shown_cycles: int | None = None, phase: Phase = "decide") -> str:
    """The prompt, then each cycle's tokens in their states, up to `shown_cycles` (the last one at `phase`)."""
    if trace.started is None:
        return '<div class="sv-stream" data-empty="1">Press Run to watch the draft propose and the target verify.</div>'
    greedy = trace.started.temperature == 0
    if trace.pair.chat_template and trace.prompt:  # the user's message, not the template's markup
        parts = [f'<div class="sv-user" title="wrapped in the target\'s chat template">{html.escape(trace.prompt)}</div>']
    else:
        parts = [token_span(text, "prompt") for text in trace.started.prompt_texts]
    cycles = trace.cycles if shown_cycles is None else trace.cycles[:shown_cycles]
    for n, cycle in enumerate(cycles):
        last = n == len(cycles) - 1
        current_phase = phase if last else "decide"
        parts.append(f'<span class="sv-sep" data-label="{cycle.index + 1}"></span>')
        if cycle.is_tree:  # only its emitted text: the tree itself is drawn under the stream (tree_view.tree_html)
            parts += tree_view.stream_tokens(cycle, greedy, current_phase == "decide", "sv-current" if last else "")
            continue
        for i, position in enumerate(cycle.positions):
            if current_phase == "decide":
                status, tip = position.status, position_tip(cycle, i, position, greedy)
            else:
                status, tip = "drafted", f"drafted {position.text!r}: q(x) = {number(position.q)}\nwaiting for the target"
            parts.append(token_span(position.text, status, tip, cycle.index, "sv-current" if last else ""))
        if cycle.draft_stop and cycle.draft_stop != "window full":  # a dynamic or lookup drafter stopped early: say why
            reason = html.escape(f"the draft stopped here: {cycle.draft_stop}", quote=True)
            parts.append(f'<span class="sv-stop" data-tip="{reason}" aria-label="{reason}">⏸</span>')
        if current_phase == "decide":
            kind = "bonus" if cycle.bonus_token_id is not None else "resampled"
            parts.append(
                token_span(cycle.new_token_text, kind, new_token_tip(cycle, greedy), cycle.index, "sv-current" if last else "")
            )
    return f'<div class="sv-stream">{"".join(parts)}</div>'


def legend_html() -> str:
    items = "".join(
        f"<span>{token_span(label.split(' ')[0], status)} {html.escape(label)} <small>({cue})</small></span>"
        for status, label, cue in LEGEND
    )
    return f'<div class="sv-legend">{items}</div>'


def narration(trace: Trace, cycle_index: int, phase: Phase) -> str:
    """One or two sentences (Markdown) on what just happened in this phase of this cycle, and why; tokens as text."""
    cycle = trace.cycles[cycle_index]
    greedy = trace.started.temperature == 0
    k = len(cycle.positions)
    head = f"**Cycle {cycle.index + 1}** · "
    stop = cycle.draft_stop
    why_stopped = f" The draft stopped there: {markdown_text(stop)}." if stop and stop != "window full" else ""
    if cycle.is_tree and k:
        if phase == "draft":
            return head + tree_view.drafted_sentence(cycle, trace.started)
        return head + (tree_view.verified_sentence(cycle) if phase == "verify" else tree_view.decided_sentence(cycle, greedy))
    if phase == "draft":
        if k == 0:
            return (
                head
                + "the drafter had nothing to propose (no earlier match for prompt lookup, or the token limit is one away): this cycle is a plain target step."
            )
        drafted = ", ".join(markdown_repr(p.text) for p in cycle.positions)
        per_step = cycle.draft_s / k * 1000
        return (
            head
            + f"the draft proposed {k} token{'s' if k > 1 else ''} ({drafted}), one small forward each ({per_step:.2f} ms per token)."
            + why_stopped
        )
    if phase == "verify":
        return (
            head
            + f"the target scored all {k} drafts and the position after them in **one** forward pass ({cycle.verify_s * 1000:.2f} ms): p₁…p{_sub(k + 1)}."
        )
    if k == 0:
        return (
            head
            + f"no drafts to test, so this cycle is a plain target step: the target adds {markdown_repr(cycle.new_token_text)} itself. "
            "**1 token for one target forward.**"
        )
    sentences = []
    if cycle.n_accepted:
        sentences.append(
            f"token{'s' if cycle.n_accepted > 1 else ''} 1{'–' + str(cycle.n_accepted) if cycle.n_accepted > 1 else ''} accepted"
        )
    if cycle.resampled_token_id is not None:
        i = cycle.n_accepted
        rejected = cycle.positions[i]
        if greedy:
            why = f"token {i + 1} {markdown_repr(rejected.text)} rejected: the target's top choice is {markdown_repr(cycle.new_token_text)}, which replaces it"
        else:
            why = (
                f"token {i + 1} rejected: u = {rejected.u:.2f} > p/q = {rejected.accept_probability:.2f}; "
                f"resampled {markdown_repr(cycle.new_token_text)} from the residual norm(max(0, p − q))"
            )
        sentences.append(why)
        if k - i - 1 > 0:
            sentences.append(f"{k - i - 1} later draft{'s were' if k - i - 1 > 1 else ' was'} never tested")
    else:
        sentences.append(
            f"all {k} accepted, so the target adds a bonus token {markdown_repr(cycle.new_token_text)} from p{_sub(k + 1)}"
        )
    emitted = len(cycle.emitted_token_ids)
    return head + "; ".join(sentences) + f". **{emitted} token{'s' if emitted > 1 else ''} for one target forward.**"


def _sub(n: int) -> str:
    return str(n).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


def race_html(trace: Trace, m: Readings | None, slowdown: float) -> str:
    """Both runs replayed side by side at their measured pace (times `slowdown`), drawn by the browser."""
    if trace.summary is None or trace.baseline is None or m is None or m.measured_speedup is None:
        return '<div class="sv-race"><div class="sv-lane"><h4>Speculative</h4></div><div class="sv-lane"><h4>Target alone</h4></div></div>'
    spec_times, spec_texts, t = [], [], trace.summary.prefill_s
    for cycle in trace.cycles:
        t += cycle.draft_s + cycle.verify_s + cycle.overhead_s
        texts = [cycle.positions[node].text for node in cycle.path] + [cycle.new_token_text]
        spec_times += [t] * len(cycle.emitted_token_ids)
        spec_texts += texts[: len(cycle.emitted_token_ids)]
    base_times, t = [], trace.baseline.prefill_s
    for step in trace.baseline_steps:
        t += step.step_s
        base_times.append(t)
    identical = ""
    if trace.started and trace.started.temperature == 0 and not trace.summary.lossy:
        same = trace.summary.new_token_ids == trace.baseline.new_token_ids
        if not trace.started.rows_exact:  # float kernels: exact up to rounding (events.NOT_ROW_EXACT)
            identical = (
                (
                    "<p><b>Greedy: the two texts are identical</b>, token for token. This target's float kernels make it "
                    "exact only up to rounding: "
                    if same
                    else "<p class='sv-rounding'><b>The texts differ under greedy decoding</b>: "
                )
                + html.escape(NOT_ROW_EXACT)
                + ".</p>"
            )
        else:
            identical = (
                "<p><b>Greedy: the two texts are identical</b>, token for token, as exact speculative decoding guarantees.</p>"
                if same
                else "<p class='sv-lossy'>The texts differ under greedy decoding: this is a bug, please report it.</p>"
            )
    elif trace.summary.lossy:
        identical = "<p class='sv-lossy'>LOSSY lenient mode: the speculative text need not follow the target's distribution.</p>"

    def lane(title: str, times: list[float], texts: list[str], summary, tokens_per_s: float, note: str, colour: str) -> str:
        spans = "".join(
            f'<span style="animation-delay:{time * slowdown:.4f}s">{html.escape(text)}</span>' for time, text in zip(times, texts)
        )
        total = summary.wall_s * slowdown
        return (
            f'<div class="sv-lane"><h4>{title}</h4><div class="sv-stats">{summary.new_tokens} tokens in {summary.wall_s * 1000:.0f} ms'
            f" · {tokens_per_s:.0f} tokens/s{note}</div>"
            f'<div class="sv-bar"><div style="animation-duration:{total:.3f}s;background:{colour}"></div></div>'
            f'<div class="sv-text">{spans}</div></div>'
        )

    pace = "real pace" if slowdown == 1 else f"{slowdown:g}× slower than real"
    spec_lane = lane(
        f"Speculative: draft + target, {html.escape(tree_view.shape_words(trace.started))}",
        spec_times,
        spec_texts,
        trace.summary,
        m.tokens_per_s,
        f" · {number(m.tokens_per_cycle, 2)} tokens per target pass · ν = {number(m.verify_cost, 2)}"
        f" · <b>{m.measured_speedup:.2f}× the speed</b>",
        "var(--sv-accepted)",
    )
    base_texts = [s.text for s in trace.baseline_steps]
    base_lane = lane(
        "Target alone (autoregressive)",
        base_times,
        base_texts,
        trace.baseline,
        m.baseline_tokens_per_s,
        "",
        "var(--sv-resampled)",
    )
    return (
        f'<div class="sv-race-wrap"><div class="sv-stats">Replayed at {pace}; times are the ones measured before playback.</div>'
        f'<div class="sv-race">{spec_lane}{base_lane}</div>{identical}</div>'
    )
