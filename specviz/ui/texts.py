"""The app's longer words: the theory tab, the claims checked, the verdict, the run details."""

from __future__ import annotations

from specviz import theory
from specviz.measures import Measures

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

CLAIMS = f"""
### Common claims, checked
| claim (from practitioner articles) | check |
| --- | --- |
| "E[speedup] = (1 + τ)/(1 + τ/α): τ = 0.01, α = 0.8 gives 4.6×" | That formula is not in the literature and gives **{theory.practitioner_claim_speedup(0.8, 0.01):.4f}** (a slowdown). Leviathan's gives **{theory.expected_speedup(0.8, 5, 0.01):.2f}×** at γ = 5 and **{theory.best_gamma(0.8, 0.01)[1]:.2f}×** at the best γ = {theory.best_gamma(0.8, 0.01)[0]}. |
| "accept if target_prob ≥ threshold · draft_prob; else resample from max(0, target_prob − draft_prob)" | Not exact. The exact test is a coin flip with probability min(1, p/q), and the residual is a whole distribution, norm(max(0, p − q)), renormalised. A threshold is our *lenient* mode: lossy, and flagged as such. |
| "Average acceptance rate: 3.7 tokens" | α is a probability, not a count. 3.7 is tokens per cycle, E = (1 − α^(γ+1))/(1 − α): at γ = 5 that means α ≈ {next(a / 1000 for a in range(1, 1000) if theory.expected_tokens_per_cycle(a / 1000, 5) >= 3.7):.2f}. |
| "Speculative decoding always helps" | Only if α > τ. A draft half the target's cost needs α > 0.5 before any γ pays off. |
"""


def verdict_markdown(m: Measures | None, pair_name: str = "") -> str:
    """Is speculative decoding worth it for this pair and prompt? From the measured α and τ."""
    if m is None or m.alpha is None or m.tau is None:
        return "Run a prompt to get a verdict for your pair from its measured α and τ."
    worth = theory.speedup_possible(m.alpha, m.tau)
    measured = f" Measured here: **{m.measured_speedup:.2f}×**." if m.measured_speedup else ""
    if worth:
        body = (
            f"**Worth it** for {pair_name}: α = {m.alpha:.2f} > τ = {m.tau:.3f}. The best γ is **{m.best_gamma}**, "
            f"predicted **{m.best_speedup:.2f}×**; at your γ = {m.gamma} the prediction is {m.predicted_speedup:.2f}×.{measured}"
        )
        return f'<div class="sv-verdict">{body}</div>'
    body = (
        f"**Not worth it** for {pair_name} on this prompt: α = {m.alpha:.2f} ≤ τ = {m.tau:.3f}, so no γ gives a speedup "
        f"(prediction at γ = {m.gamma}: {m.predicted_speedup:.2f}×).{measured} A cheaper or better-aligned draft would change that."
    )
    return f'<div class="sv-verdict sv-no">{body}</div>'


def details_markdown(info: dict) -> str:
    if not info:
        return "No pair loaded yet."
    return (
        f"| | target | draft |\n| --- | --- | --- |\n"
        f"| model | `{info['target']}` | `{info['draft']}` |\n"
        f"| parameters | {info['target_parameters'] / 1e6:,.1f} M | {info['draft_parameters'] / 1e6:,.1f} M |\n"
        f"| weights in memory | {info['target_weight_mb']:,.1f} MiB | {info['draft_weight_mb']:,.1f} MiB |\n\n"
        f"Device **{info['device']}**, dtype **{info['dtype']}**, shared vocabulary {info['shared_vocab']:,} tokens, "
        f"cold load {info['load_s']:.2f} s (tokenizers + both models)."
    )


def summary_markdown(m: Measures, trace) -> str:
    """The numbers under the token stream."""
    lossy = ""
    if trace.started is not None and trace.started.lossy:
        lossy = f' <span class="sv-lossy">LOSSY: lenient acceptance (l = {trace.started.lenience:g}), not the target\'s distribution</span>'
    if trace.summary is None:
        return f"Cycle {m.n_cycles} · α so far {_f(m.alpha)} · {_f(m.tokens_per_cycle, 2)} tokens per target forward" + lossy
    s = trace.summary
    parts = [
        f"**{s.new_tokens} tokens** in {s.wall_s * 1000:.0f} ms ({s.tokens_per_s:.0f} tokens/s), {m.n_cycles} cycles, "
        f"**{_f(m.tokens_per_cycle, 2)} tokens per target forward**",
        f"α = **{_f(m.alpha)}** (analytic Σ min(p, q): {_f(m.alpha_analytic)}; accepted/drafted, biased low: {_f(m.alpha_naive)})",
        f"τ = **{_f(m.tau)}** ({m.tau_source})",
    ]
    if m.measured_speedup is not None:
        parts.append(
            f"speedup measured **{m.measured_speedup:.2f}×**; predicted from α, τ, γ: {_f(m.predicted_speedup, 2)}× "
            f"(Leviathan), {_f(m.predicted_with_verify_cost, 2)}× counting the verify pass as the ν = {_f(m.verify_cost, 2)} "
            "target steps it really took"
        )
    if s.stop_reason == "stopped":
        parts.append("stopped by the user")
    return " · ".join(parts) + lossy


def _f(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"
