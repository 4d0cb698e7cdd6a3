"""Lesson 12, "Same drafts, three verifiers": token by token, block verification and sample-and-match, measured back to
back on one sampled prompt, then one cycle of the first run whose drafts the three verifiers judged differently,
walked through with its numbers (engine/verifiers.py has the rules; Cycle.verdicts the verdicts on the same drafts)."""

from __future__ import annotations

import html

from specviz.analysis.same_drafts import first_split, same_drafts_tallies
from specviz.engine.events import Cycle, SameDraftsVerdict
from specviz.numbers import number

VERIFIER_WORDS = {
    "exact": "token by token (Leviathan et al.)",
    "block": "block verification (Sun et al., ICLR 2025)",
    "match": "sample-and-match (llama.cpp)",
}


def measured_rows(runs) -> str:
    """One row per verifier's own run: α, tokens per target pass, the speedup over the target alone."""
    return "".join(
        f"<tr><td>{VERIFIER_WORDS[r.request.verification]}</td><td>{number(r.readings.alpha, 2)}</td>"
        f"<td><b>{number(r.readings.tokens_per_cycle, 2)}</b></td><td>{number(r.readings.measured_speedup, 2)}×</td></tr>"
        for r in runs
    )


def same_drafts_rows(cycles: list[Cycle]) -> str:
    """One row per verifier, judged on the very drafts of one run: α and tokens per pass (before any cut)."""
    tallies = same_drafts_tallies(cycles)
    return "".join(
        f"<tr><td>{VERIFIER_WORDS[name]}</td><td>{number(tally.alpha, 2)}</td><td><b>{number(tally.mean_acceptance_length, 2)}</b></td></tr>"
        for name, tally in tallies.items()
    )


def _numbers(values: tuple[float, ...]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _walk_exact(v: SameDraftsVerdict) -> str:
    tests = "; ".join(
        f"x{i + 1}: u = {u:.2f} {'≤' if u <= a else '>'} min(1, p/q) = {a:.2f}"
        for i, (u, a) in enumerate(zip(v.uniforms, v.accept_probability))
        if i <= v.n_accepted
    )
    return f"<li><b>token by token</b>: {tests}, so it keeps <b>{v.n_accepted}</b>.</li>"


def _walk_block(v: SameDraftsVerdict) -> str:
    tests = "; ".join(
        f"prefix {i + 1}: η = {eta:.2f} {'≤' if eta <= h else '>'} h = {h:.2f}"
        for i, (eta, h) in reversed(list(enumerate(zip(v.uniforms, v.accept_probability))))
    )
    return (
        f"<li><b>block</b>: the weights w_i = min(1, w_(i−1)·p_i/q_i) are {_numbers(v.block_weights)}; h_i, the chance "
        f"that prefix i is kept when no longer one was, comes from w_i and the residual mass at the next position "
        f"(h_γ = w_γ). From the longest prefix back: {tests}; it keeps the longest that passed, <b>{v.n_accepted}</b>, "
        "and draws its own token from max(0, w·p − q), the block's joint residual.</li>"
    )


def _walk_match(v: SameDraftsVerdict) -> str:
    chances = _numbers(v.accept_probability)
    return (
        f"<li><b>match</b>: the target draws its own token at every position and keeps a draft only if the draw equals "
        f"it, a chance of p_i(x_i) = {chances}; it keeps <b>{v.n_accepted}</b>.</li>"
    )


def walk_through(cycle: Cycle) -> str:
    """The cycle's drafts with p and q, then each verifier's test in its own numbers."""
    by_name = {v.verification: v for v in cycle.verdicts}
    first = cycle.verdicts[0]
    drafts = ", ".join(
        f"<code>{html.escape(_visible(position.text))}</code> (p = {p:.2f}, q = {q:.2f})"
        for position, p, q in zip(cycle.positions, first.p, first.q)
    )
    walks = [_walk_exact(by_name["exact"]), _walk_block(by_name["block"]), _walk_match(by_name["match"])]
    return (
        f"<p>Cycle {cycle.index + 1} drafted {drafts}. Each verifier's generator was seeded alike, so token by token's u "
        f"and block's η are the same draws: only the rule differs.</p><ul>{''.join(walks)}</ul>"
    )


def _visible(text: str) -> str:
    """A token's text with its whitespace shown: a newline as ⏎, a space as ·, nothing as ∅."""
    return text.replace("\n", "⏎").replace(" ", "·") or "∅"


def explain_verifiers(main, extra) -> str:
    runs = [main, *extra]
    cycles = main.trace.cycles
    split = first_split(cycles)
    walked = walk_through(split) if split else "<p>In this run every cycle got the same verdict from all three.</p>"
    return (
        f"<p>One prompt, seed {main.request.seed}, temperature {main.request.temperature:g}, γ = {main.request.gamma}: the three "
        "verifiers, each run measured back to back with the target alone.</p>"
        "<table><tr><th>verifier</th><th>α</th><th>tokens per target pass</th><th>measured speedup</th></tr>"
        f"{measured_rows(runs)}</table>"
        f"<p><b>Same drafts, three verdicts.</b> Every one of the first run's {len(cycles)} cycles was also judged by the other "
        "two verifiers on its very drafts (the run went on with its own verdict), a paired comparison without the noise of "
        "three different texts:</p>"
        f"<table><tr><th>verifier</th><th>α</th><th>tokens per target pass</th></tr>{same_drafts_rows(cycles)}</table>"
        f"{walked}"
        "<p><b>Question:</b> the three keep different numbers of drafts from the same block, and block verification keeps "
        "the most on average; yet all three give the same distribution of texts. Why? (Hint: what each one draws after "
        "the drafts it keeps.)</p>"
    )
