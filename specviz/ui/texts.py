"""The app's longer words: the theory tab, the claims checked, the verdict, the run details."""

from __future__ import annotations

import html

from specviz.analysis import theory
from specviz.analysis.cache_fit import rate_range, two_levels
from specviz.analysis.kernels import multiplies_half_precision_row_by_row
from specviz.analysis.readings import Readings
from specviz.engine.events import NOT_ROW_EXACT
from specviz.engine.tree_shape import TreeShape
from specviz.kernels import forms
from specviz.numbers import number
from specviz.process.machine_load import OtherLoad
from specviz.run.chosen_setting import ChosenSetting, verify_cost_moved
from specviz.run.pair_info import PairInfo
from specviz.ui.as_text import markdown_text

FORMULAS = r"""
### The exact algorithm, one cycle
1. **Draft**: sample $x_1 \dots x_\gamma$ from the draft's $q$, one step at a time.
2. **Verify**: one target forward over the prefix and all drafts gives $p_1 \dots p_{\gamma+1}$.
3. **Accept** $x_i$ if $u_i \le \min\!\left(1, \frac{p_i(x_i)}{q_i(x_i)}\right)$, $u_i \sim U(0,1)$; at the first rejection sample from $\mathrm{norm}(\max(0, p_i - q_i))$ and stop.
4. **Bonus**: if all $\gamma$ pass, sample one more token from $p_{\gamma+1}$.
5. **Roll back** both KV caches to the accepted prefix.

Under greedy decoding the test is "accept while $x_i = \arg\max p_i$", and the output equals the target's own greedy output.

### What to expect (Leviathan et al. 2023)
- Tokens per target forward: $E = \frac{1 - \alpha^{\gamma+1}}{1 - \alpha}$
- Walltime speedup: $S = \frac{1 - \alpha^{\gamma+1}}{(1 - \alpha)(\gamma\tau + 1)}$ (Theorem 3.8)
- Arithmetic work: $\frac{(1 - \alpha)(\gamma\hat\tau + \gamma + 1)}{1 - \alpha^{\gamma+1}}$ times autoregressive (Theorem 3.11)
- Some $\gamma$ helps **iff** $\alpha > \tau$; then the best $\gamma$ gives at least $\frac{1+\alpha}{1+\tau}$. As $\tau \to 0$ the ceiling is $\frac{1}{1-\alpha}$.

α is the chance one draft is accepted; τ is a draft step's time over a target step's. We estimate α two ways:
accepted / (accepted + rejections), the maximum-likelihood estimate (drafts after a rejection were never tested, so
accepted / drafted is biased low), and the mean of Σₓ min(p(x), q(x)) over tested positions, which has far less variance.
"""

_CLAIM = theory.Prediction.of(0.8, 5, 0.01)  # the practitioner article's example, by Leviathan's formula
CLAIMS = f"""
### Common claims, checked
| claim (from practitioner articles) | check |
| --- | --- |
| "E[speedup] = (1 + τ)/(1 + τ/α): τ = 0.01, α = 0.8 gives 4.6×" | That formula is not in the literature and gives **{theory.practitioner_claim_speedup(0.8, 0.01):.4f}** (a slowdown). Leviathan's gives **{_CLAIM.speedup:.2f}×** at γ = 5 and **{_CLAIM.best_speedup:.2f}×** at the best γ = {_CLAIM.best_gamma}. |
| "accept if target_prob ≥ threshold · draft_prob; else resample from max(0, target_prob − draft_prob)" | Not exact. The exact test is a coin flip with probability min(1, p/q), and the residual is a whole distribution, norm(max(0, p − q)), renormalised. A threshold is our *lenient* mode: lossy, and flagged as such. |
| "Average acceptance rate: 3.7 tokens" | α is a probability, not a count. 3.7 is tokens per cycle, E = (1 − α^(γ+1))/(1 − α): at γ = 5 that means α ≈ {next(a / 1000 for a in range(1, 1000) if theory.expected_tokens_per_cycle(a / 1000, 5) >= 3.7):.2f}. |
| "Speculative decoding always helps" | Only if α > τ. A draft half the target's cost needs α > 0.5 before any γ pays off. |
"""


def verdict_html(
    m: Readings | None, pair_name: str = "", hardware_line: str | None = None, info: PairInfo | None = None, tree: str = ""
) -> str:
    """Is speculative decoding worth it for this pair and prompt? Measured speedup first, then why, from α, τ and ν;
    the chain's predictions only for a chain (a token tree's run names its shape, `tree`, instead)."""
    if m is None or m.alpha is None or m.tau is None:
        return '<div class="sv-verdict">Run a prompt to get a verdict for your pair from what it measures.</div>'
    why = f"α = {m.alpha:.2f} against τ = {m.tau:.3f}"
    if m.verify_cost is not None:
        why += f", and a verify pass costs ν = {m.verify_cost:.2f} target steps (the theory's ideal is 1){_row_by_row(m, info)}"
    advice = ""
    if m.best_gamma is not None and m.best_speedup is not None:
        if not m.prediction.speedup_possible:
            advice = " No γ can help while α ≤ τ: a cheaper or better-aligned draft would."
        elif m.best_gamma != m.gamma:
            advice = f" The theory, with this ν, suggests γ = <b>{m.best_gamma}</b> (predicted {m.best_speedup:.2f}×)."
    verdict = m.speed_verdict
    if verdict is None:
        head, css = "<b>Not measured yet</b>", ""
    elif verdict == "faster":
        head, css = f"<b>Worth it here</b>: measured <b>{m.measured_speedup:.2f}×</b> the target alone", ""
    elif verdict == "even":
        head, css = f"<b>Break-even here</b>: measured <b>{m.measured_speedup:.2f}×</b>", " sv-even"
    else:
        head, css = f"<b>Not worth it here</b>: measured <b>{m.measured_speedup:.2f}×</b>, a slowdown", " sv-no"
    predicted = ""
    if tree:
        predicted, advice = (
            f" Drafted as the token tree {html.escape(tree)}: Leviathan's formula is a chain's and predicts no tree.",
            "",
        )
    elif m.predicted_with_verify_cost is not None:
        predicted = f" Predicted at γ = {m.gamma}: {m.predicted_speedup:.2f}× (Leviathan), {m.predicted_with_verify_cost:.2f}× with the measured ν."
    hardware = f"<br><small>{html.escape(hardware_line)}</small>" if hardware_line else ""
    name = f" for {html.escape(pair_name)}" if pair_name else ""
    return f'<div class="sv-verdict{css}">{head}{name}: {why}.{predicted}{advice}{hardware}</div>'


def _row_by_row(m: Readings, info: PairInfo | None) -> str:
    """Why ν is high, where the reason is known: half precision on a CPU whose torch kernels multiply it row by row."""
    info = info or PairInfo()
    capability, dtype = info.cpu_capability, info.dtype
    if m.verify_cost is None or m.verify_cost < 1.3 or not multiplies_half_precision_row_by_row(capability, dtype):
        return ""
    return (
        f"; this CPU reports {html.escape(capability)}, with no {html.escape(dtype)} matrix kernel, so torch multiplies the γ + 1 rows of a verify "
        "pass one by one (benchmarks/verify_rows.py shows it)"
    )


def loading_html(message: str, fraction: float | None, run_id: int | None = None) -> str:
    """The numbers bar while a pair is fetched and loaded: what is happening, and a bar of the bytes fetched so far."""
    bar = (
        f'<progress id="fetch-progress" max="1" value="{fraction:.3f}"></progress> {fraction:.0%} '
        if fraction is not None
        else ""
    )
    return (
        f'<div id="run-numbers" class="sv-numbers" data-state="loading" data-run-id="{run_id}">{bar}{html.escape(message)}</div>'
    )


def run_numbers_html(m: Readings | None, state: str, run_id: int | None = None, trace=None) -> str:
    """The run's recorded numbers, for people (a compact bar) and for scripts (data-* attributes), like the CLI's JSON."""
    data = {"state": state, "run-id": run_id}
    if m is not None and m.measured_speedup is not None:
        data.update(
            {
                "speedup": f"{m.measured_speedup:.4f}",
                "speedup-spread": number(m.speedup_spread.spread, 4) if m.speedup_spread else None,
                "rounds": len(m.speedup_spread.values) if m.speedup_spread else None,
                "alpha": number(m.alpha, 4),
                "tau": number(m.tau, 4),
                "verify-cost": number(m.verify_cost, 4),
                "tokens-per-s": f"{m.tokens_per_s:.2f}",
                "baseline-tokens-per-s": f"{m.baseline_tokens_per_s:.2f}",
                "tokens-per-cycle": number(m.tokens_per_cycle, 4),
            }
        )
    started = getattr(trace, "started", None)
    engine = getattr(started, "engine", "")
    if engine and "speedup" in data:
        data["engine"] = engine
    if getattr(started, "threads", 0) and "speedup" in data:
        data["threads"] = started.threads
    if started is not None and "speedup" in data:
        data["rows-exact"] = "true" if started.rows_exact else "false"
    setting = getattr(trace, "setting", None)
    moved = _verify_cost_moved(m, started, setting) if "speedup" in data else None
    if setting is not None and setting.auto and "speedup" in data:
        data["auto"] = setting.label
    if moved is not None:
        data["nu-moved"] = f"{moved[0]:.4f}/{moved[1]:.4f}"
    others = getattr(trace, "other_load", None)
    if others is not None and others.other_cores is not None and "speedup" in data:
        data["other-load"] = f"{others.other_cores:.2f}"
    read_gb_s = tuple(getattr(trace, "memory_read_gb_s", ()) or ())
    if read_gb_s and "speedup" in data:
        data["read-gb-s"] = "/".join(f"{rate:.1f}" for rate in read_gb_s)
    attributes = "".join(f' data-{key}="{html.escape(str(value))}"' for key, value in data.items() if value is not None)
    if state == "measuring":
        body = "<b>Measuring</b> the speculative run, then the target alone… nothing is drawn until both are timed."
    elif state == "choosing":
        body = (
            "<b>γ auto</b>: measuring which chain or tree pays for this pair on this machine (once, then kept in "
            "specviz's cache)…"
        )
    elif state == "waiting":
        body = "Waiting for another session's measurement to finish (runs share the processor, so they are timed one at a time)…"
    elif m is None or m.measured_speedup is None:
        body = "Press <b>Run</b>: specviz times the speculative run and the target alone first, then plays the recording back."
    else:
        rounds = m.speedup_spread
        repeat = (
            f" · measured in {len(rounds.values)} alternating rounds ({', '.join(f'{r:.2f}' for r in sorted(rounds.values))}): "
            "the median, ± the farthest round from it"
            if rounds is not None and rounds.spread is not None
            else " · measured once"
        )
        shown = rounds.text() if rounds is not None and rounds.spread is not None else f"{m.measured_speedup:.2f}×"
        body = (
            f'<span class="sv-big">{shown}</span> speed of the target alone · '
            f"{m.tokens_per_s:.0f} vs {m.baseline_tokens_per_s:.0f} tokens/s · α = {number(m.alpha, 2)} · τ = {number(m.tau)} · "
            f"ν = {number(m.verify_cost, 2)} · {number(m.tokens_per_cycle, 2)} tokens per target forward{repeat}"
            f"{_engine_note(engine)}{_threads_note(started)}{_read_rate_note(read_gb_s, setting)}{_setting_note(setting)}"
            f"{_busy_warning(others)}{_moved_warning(moved, setting)}"
        )
    return f'<div id="run-numbers" class="sv-numbers"{attributes}>{body}</div>'


ENGINE_WORDS = {
    "compiled": "compiled step",
    "eager": "eager step (the compiled one is not loaded yet)",
    "transformers": "transformers' forward",
}


def _engine_note(engine: str) -> str:
    """Which forward ran both runs: a compiled step and an eager one differ several-fold in speed."""
    return f" · ran on the {ENGINE_WORDS[engine]}" if engine in ENGINE_WORDS else ""


def _threads_note(started) -> str:
    threads = getattr(started, "threads", 0)
    return f", {threads} thread{'s' if threads != 1 else ''}" if threads else ""


def _read_rate_note(rates: tuple[float, ...], setting: ChosenSetting | None) -> str:
    """The machine's memory read rate around the timed rounds, and where it lay at two levels (during the Run, or
    between γ auto's choice and the Run), what that means: some machines (VMs) move between two states, and a verify
    pass costs differently in each (docs/performance.md, "The machine's two states")."""
    if not rates:
        return ""
    said = rate_range(rates)
    note = f" · memory read {said} GB/s around it"
    chosen = setting.read_gb_s if setting is not None and setting.auto else None
    if two_levels(rates):
        note += (
            "<br>The machine changed speed during this Run (its memory reads moved between two levels): on such a machine "
            "a verify pass costs differently at each, so this Run mixes the two. Compare Runs timed at one rate."
        )
    elif chosen and two_levels([chosen, *rates]):
        note += (
            f"<br>γ auto chose this setting while memory read {chosen:.0f} GB/s and this Run was timed at {said} GB/s: "
            "this machine moves between two speeds, and a verify pass costs differently at each (docs/performance.md, "
            '"The machine\'s two states"). Compare Runs timed at like rates.'
        )
    return note


def _setting_note(setting: ChosenSetting | None) -> str:
    """γ auto's choice as the run drafted it ("on this machine: γ 2, predicted 1.40×"), or why nothing pays here."""
    if setting is None or not setting.auto:
        return ""
    said = setting.short() if setting.pays else setting.sentence
    return f"<br>γ auto, {html.escape(said)}"


def _verify_cost_moved(m: Readings | None, started, setting: ChosenSetting | None) -> tuple[float, float] | None:
    """(ν when the setting was chosen, ν in this run) at this run's rows, where the two are NU_MOVED apart; else None."""
    if m is None or setting is None or started is None or started.mode != "speculative":
        return None
    rows = (TreeShape.parse(started.tree).n_nodes if started.tree else started.gamma) + 1
    then = setting.verify_cost_at(rows)
    return (then, m.verify_cost) if verify_cost_moved(then, m.verify_cost) else None


def _moved_warning(moved: tuple[float, float] | None, setting: ChosenSetting | None) -> str:
    if moved is None or setting is None:
        return ""
    when = f" ({html.escape(setting.measured_at)})" if setting.measured_at else ""
    return (
        f'<br><span class="sv-busy">⚠ ν moved: a verify pass cost {moved[0]:.2f} target steps when γ auto measured this '
        f"machine{when} and {moved[1]:.2f} in this run, so the machine's speed changed between the two: this speedup "
        "is not to be trusted. Run it again when the machine is quiet.</span>"
    )


def _busy_warning(others: OtherLoad | None) -> str:
    if others is None or not others.busy:
        return ""
    if others.own_work:
        return (
            f'<br><span class="sv-busy">⚠ This server was {html.escape(others.own_work)} on the same cores while this '
            "was timed, so both speeds may be slowed and the ratios skewed: run it again when it has finished.</span>"
        )
    return (
        f'<br><span class="sv-busy">⚠ Other programs used {others.other_cores:.1f} cores of the machine while this was timed '
        f"(after {others.settle_s:.1f} s of waiting for quiet), so both speeds may be slowed and the ratios skewed: "
        "run it again when the machine is quiet.</span>"
    )


def details_markdown(info: PairInfo) -> str:
    """The pair's models, sizes and device (Markdown); every string of it is shown as text, as it may come from a shared trace."""
    if not info.known:
        return "No pair loaded yet."
    if not (info.target and info.draft and info.device and info.dtype):
        return f"Pair **{markdown_text(info.name)}**: this trace does not record its models' details."
    return (
        f"| | target | draft |\n| --- | --- | --- |\n"
        f"| model | {markdown_text(info.target)} | {markdown_text(info.draft)} |\n"
        f"| parameters | {info.target_parameters / 1e6:,.1f} M | {info.draft_parameters / 1e6:,.1f} M |\n"
        f"| weights in memory | {info.target_weight_mb:,.1f} MiB | {info.draft_weight_mb:,.1f} MiB |\n"
        f"{_deployment_rows(info)}\n"
        f"{_feature_head_row(info)}"
        f"Device **{markdown_text(info.device)}**{_capability(info)}, dtype **{markdown_text(info.dtype)}**{_form(info)}, "
        f"shared vocabulary {info.shared_vocab:,} tokens, cold load {info.load_s:.2f} s (tokenizers + both models)."
        + _peak_line(info.memory)
        + _compile_line(info.compile)
    )


def _feature_head_row(info: PairInfo) -> str:
    """The pair's feature head (EAGLE-style drafter), where it has one."""
    if not info.feature_head:
        return ""
    return (
        f"Feature head {markdown_text(info.feature_head)}: {(info.feature_head_parameters or 0) / 1e6:,.1f} M parameters of its own, "
        f"{info.feature_head_weight_mb or 0:,.1f} MiB{_head_form(info)} (it reads the target's embedding and copies its kept head rows).\n\n"
    )


def _head_form(info: PairInfo) -> str:
    form = info.feature_head_form
    return f" in **{form}** ({forms.FORMS[form].summary})" if form in forms.FORMS else ""


def _form(info: PairInfo) -> str:
    """The target's weight form on a CPU, where the pair chose one (kernels/forms.py), and which kernel computed it."""
    form = info.weight_form
    if not form:
        return ""
    summary = f" ({forms.FORMS[form].summary})" if form in forms.FORMS else ""
    kernel = f"; {markdown_text(info.weight_kernel)}" if info.weight_kernel else ""
    return f", target weights **{markdown_text(form)}**{summary}{kernel}"


def _capability(info: PairInfo) -> str:
    capability = info.cpu_capability
    return f" ({markdown_text(capability)})" if capability else ""


def _deployment_rows(info: PairInfo) -> str:
    """KV cache per token and each model's load times, when the run recorded them."""
    rows = ""
    memory, loads = info.memory, info.model_load_s
    if memory:
        kv = [memory[role]["kv_bytes_per_token"] / 1024 for role in ("target", "draft")]
        rows += f"| KV cache per token | {kv[0]:,.1f} KiB | {kv[1]:,.1f} KiB |\n"
    if loads:
        rows += f"| load: first in this process | {loads['target']['cold_s']:.2f} s | {loads['draft']['cold_s']:.2f} s |\n"
        if loads["target"].get("warm_s") is not None:  # a trace from before the app read each model once
            rows += f"| load: again (warm) | {loads['target']['warm_s']:.2f} s | {loads['draft']['warm_s']:.2f} s |\n"
    return rows


def _compile_line(compiled: dict | None) -> str:
    """What compiling the fast path's step graphs cost this process (engine/compiled.py), per model."""
    if not compiled:
        return ""
    parts = []
    for role, report in compiled.items():
        if report.get("compiled"):
            graphs = ", ".join(f"{graph} {seconds:.1f} s" for graph, seconds in (report.get("seconds") or {}).items())
            parts.append(f"{role} compiled ({graphs})")
        else:
            parts.append(f"{role} eager ({markdown_text(report.get('reason') or 'not compiled')})")
    return "\n\nFast path (static KV cache, compiled steps): " + "; ".join(parts) + "."


def _peak_line(memory: dict | None) -> str:
    if not memory:
        return ""
    mib = lambda b: f"{b / 2**20:,.1f} MiB"  # noqa: E731
    added = "" if memory["added_fraction"] is None else f" ({100 * memory['added_fraction']:.1f} %)"
    return (
        f"\n\nPeak memory of this run ({markdown_text(memory['peak_source'])}): target alone {mib(memory['autoregressive_peak_bytes'])}, "
        f"speculative {mib(memory['speculative_peak_bytes'])}: speculation adds {mib(memory['added_bytes'])}{added}."
    )


def summary_markdown(m: Readings, trace, shown: int | None = None) -> str:
    """The numbers under the token stream: so far during playback, the whole run at the end."""
    lossy = ""
    if trace.started is not None and trace.started.lossy:
        lossy = f' <span class="sv-lossy">LOSSY: lenient acceptance (l = {trace.started.lenience:g}), not the target\'s distribution</span>'
    elif trace.started is not None and not trace.started.rows_exact and trace.started.mode == "speculative":
        lossy = (
            f' · <span class="sv-rounding" data-rows-exact="false" title="{html.escape(NOT_ROW_EXACT)}">'
            "exact up to rounding (float kernels)</span>"
        )
    if trace.summary is None or (shown is not None and shown < len(trace.cycles)):
        total = f" of {len(trace.cycles)}" if trace.summary is not None else ""
        return (
            f"Cycle {m.n_cycles}{total} · α so far {number(m.alpha)} · {number(m.tokens_per_cycle, 2)} tokens per target forward"
            + lossy
        )
    s = trace.summary
    parts = [
        f"**{s.new_tokens} tokens** in {s.wall_s * 1000:.0f} ms ({number(m.tokens_per_s, 0)} tokens/s), {m.n_cycles} cycles, "
        f"**{number(m.tokens_per_cycle, 2)} tokens per target forward**",
        f"α = **{number(m.alpha)}** (analytic Σ min(p, q): {number(m.alpha_analytic)}; accepted/drafted, biased low: {number(m.alpha_naive)})",
        f"τ = **{number(m.tau)}** ({m.tau_source})",
    ]
    if m.measured_speedup is not None and trace.started is not None and trace.started.tree:
        parts.append(
            f"speedup measured **{m.measured_speedup:.2f}×**, a verify pass over the tree's rows taking ν = "
            f"{number(m.verify_cost, 2)} target steps (Leviathan's formula is a chain's: it predicts no tree)"
        )
    elif m.measured_speedup is not None:
        parts.append(
            f"speedup measured **{m.measured_speedup:.2f}×**; predicted from α, τ, γ: {number(m.predicted_speedup, 2)}× "
            f"(Leviathan), {number(m.predicted_with_verify_cost, 2)}× counting the verify pass as the ν = {number(m.verify_cost, 2)} "
            "target steps it really took"
        )
    if s.stop_reason == "stopped":
        parts.append("stopped by the user")
    return " · ".join(parts) + lossy
