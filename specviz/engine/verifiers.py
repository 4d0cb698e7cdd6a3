"""Three exact ways to judge the same drafts (step 3 of the algorithm): each is a function of (p, q, x, generator).

p is (k + 1, vocab), the target's p_1 .. p_{k+1} as sampled from; q is (k, vocab), the draft's q_1 .. q_k; x holds the
k drafts. Each returns a Verdict: how many drafts it keeps, and the target's own token after them.

- "exact", token by token (Leviathan et al. 2023): accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), left to
  right; at the first rejection draw from norm(max(0, p_i − q_i)); all kept: a bonus token from p_{k+1}.
- "block" (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh, "Block Verification Accelerates Speculative
  Decoding", ICLR 2025, Algorithm 2): the block is judged jointly. With w_0 = 1 and w_i = min(1, w_{i−1} p_i(x_i) /
  q_i(x_i)) (the ratio taken over the whole prefix, capped at 1), prefix i survives with probability
      h_i = Σ_y max(0, w_i p_{i+1}(y) − q_{i+1}(y)) / (Σ_y max(0, w_i p_{i+1}(y) − q_{i+1}(y)) + 1 − w_i)   (i < k),
      h_k = w_k;
  one uniform η_i per prefix, and the longest prefix with η_i ≤ h_i is kept (walking back from the longest). After
  keeping τ < k drafts the target's token comes from p_res ∝ max(0, w_τ p_{τ+1} − q_{τ+1}), the block's joint residual;
  after τ = k, the bonus from p_{k+1}. It keeps at least as many drafts as token by token on average (their Theorem 2).
- "match", llama.cpp's sample-and-match (`common_sampler_sample_and_accept_n`): the target draws its own token y_i
  from p_i at every position; keep x_i while x_i = y_i; the first y_i that differs, or y_{k+1}, is the target's token.
  Exact because every emitted token is a draw from p given the tokens before it; it keeps x_i with probability
  p_i(x_i) instead of min(1, p_i(x_i) / q_i(x_i)), so fewer at temperature > 0.

Under greedy decoding all three keep the same prefix (p and q are one-hot), so engine/acceptance.py judges greedy once
for all of them. They judge chains: a token tree is judged token by token (engine/acceptance.py), and the settings refuse
block and match for trees. tests/test_verifiers.py checks each against the target's exact distribution of three tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specviz.engine.sampling import residual, sample
from specviz.engine.settings import VERIFICATIONS


@dataclass
class Verdict:
    """The decision of one acceptance test: the accepted path and the target's own token, with each node's numbers."""

    accepted_nodes: list[int]  # from depth 1 down (a chain's: 0 … n_accepted − 1)
    new_token_id: int  # resampled after a rejection, or the bonus token
    tested_nodes: list[int]  # in the order tested (a chain's: up to the first rejection)
    is_bonus: bool  # every child of the path's end was accepted (a chain: every draft), none left to test
    accept_probability: torch.Tensor  # (nodes,) exact: min(1, p/q); block: h_i; match: p_i(x_i), the chance y_i = x_i
    uniforms: torch.Tensor | None  # (nodes,) exact: u_i; block: η_i; None under greedy and for match
    correction: torch.Tensor | None  # (vocab,) what the target's token was drawn from after a rejection (under sampling)
    target_probs: torch.Tensor | None  # (nodes + 1, vocab) p as tested (under sampling; greedy never builds it)
    verification: str = "exact"
    block_weights: torch.Tensor | None = None  # (k,) block's w_1 .. w_k

    @classmethod
    def of_chain(cls, n_accepted: int, new_token_id: int, accept_probability: torch.Tensor, *rest) -> Verdict:
        """A chain's verdict: the first n_accepted of k drafts kept, the next one (if any) the one rejected."""
        k = len(accept_probability)
        accepted, tested = list(range(n_accepted)), list(range(min(n_accepted + 1, k)))
        return cls(accepted, new_token_id, tested, n_accepted == k, accept_probability, *rest)

    @property
    def n_accepted(self) -> int:
        return len(self.accepted_nodes)


def accepted_prefix(accepted: torch.Tensor) -> int:
    """How many drafts pass before the first failure."""
    return int(accepted.long().cumprod(0).sum().item()) if len(accepted) else 0


def _at_drafts(probs: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """probs_i(x_i) for each draft."""  # (k, vocab), (k,) → (k,)
    return probs[: len(x)].gather(-1, x[:, None]).squeeze(-1)


def verify_token_by_token(
    p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, generator: torch.Generator, lenience: float = 1.0
) -> Verdict:
    """Leviathan et al.: accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), left to right.

    lenience l < 1 accepts with min(1, p / (l·q)) instead, which is lossy: the output no longer follows p.
    """
    k = len(x)
    accept_probability = (_at_drafts(p, x) / (lenience * _at_drafts(q, x))).clamp(max=1.0)  # (k,)
    uniforms = torch.rand(k, generator=generator, device=x.device)
    n_accepted = accepted_prefix(uniforms <= accept_probability)
    correction = residual(p[n_accepted], q[n_accepted]) if n_accepted < k else None
    new_token = sample((correction if correction is not None else p[k])[None], generator)
    return Verdict.of_chain(n_accepted, int(new_token.item()), accept_probability, uniforms, correction, p, "exact")


def block_weights(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """w_0 .. w_k: w_0 = 1, w_i = min(1, w_{i−1} · p_i(x_i) / q_i(x_i)) (Sun et al., Algorithm 2)."""  # → (k+1,)
    ratios = _at_drafts(p, x) / _at_drafts(q, x)  # (k,)
    weights = [torch.ones((), dtype=p.dtype, device=p.device)]
    for ratio in ratios:
        weights.append(torch.clamp(weights[-1] * ratio, max=1.0))
    return torch.stack(weights)


def block_stop_probabilities(p: torch.Tensor, q: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """h_1 .. h_k: the chance that prefix i is kept, given no longer prefix was (Sun et al., equation 5)."""  # → (k,)
    k = len(q)
    if k == 0:  # no drafts: nothing to keep
        return weights[:0]
    excess = (weights[:k, None] * p[:k] - q).clamp_min(0.0).sum(-1)  # (k,) Σ_y max(0, w_i p_{i+1}(y) − q_{i+1}(y)), i = 0..k−1
    denominator = excess + 1.0 - weights[:k]
    inner = torch.where(denominator > 0, excess / denominator.clamp_min(1e-30), torch.zeros_like(excess))
    return torch.cat([inner[1:], weights[k:]])  # h_1 .. h_{k−1} from the residual mass, h_k = w_k


def block_residual(p: torch.Tensor, q: torch.Tensor, weights: torch.Tensor, n_accepted: int) -> torch.Tensor:
    """p_res ∝ max(0, w_τ p_{τ+1} − q_{τ+1}): the block's joint residual after keeping τ drafts."""  # → (vocab,)
    correction = residual(weights[n_accepted] * p[n_accepted], q[n_accepted])
    return correction / correction.sum()  # (residual falls back to w·p where nothing exceeds q: renormalised here)


def verify_block(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, generator: torch.Generator) -> Verdict:
    """Sun et al. (ICLR 2025), Algorithm 2: keep the longest prefix i with η_i ≤ h_i, then draw from the joint residual."""
    k = len(x)
    weights = block_weights(p, q, x)  # (k+1,)
    stop = block_stop_probabilities(p, q, weights)  # (k,)
    etas = torch.rand(k, generator=generator, device=x.device)
    kept = (etas <= stop).nonzero()
    n_accepted = int(kept[-1].item()) + 1 if len(kept) else 0  # walking back from the longest prefix: the first kept
    correction = block_residual(p, q, weights, n_accepted) if n_accepted < k else None
    new_token = sample((correction if correction is not None else p[k])[None], generator)
    return Verdict.of_chain(n_accepted, int(new_token.item()), stop, etas, correction, p, "block", weights[1:])


def verify_match(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, generator: torch.Generator) -> Verdict:
    """llama.cpp's sample-and-match: the target draws y_i from p_i at every position; keep x_i while x_i = y_i."""
    k = len(x)
    own = sample(p, generator)  # (k+1,) the target's own draw at every position
    n_accepted = accepted_prefix(own[:k] == x)
    correction = None
    if n_accepted < k:  # the law of the target's draw given that it missed the draft: p without x_i, renormalised
        correction = p[n_accepted].scatter(-1, x[n_accepted : n_accepted + 1], 0.0)
        correction = correction / correction.sum().clamp_min(1e-30)
    return Verdict.of_chain(n_accepted, int(own[n_accepted].item()), _at_drafts(p, x), None, correction, p, "match")


Verifier = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator], Verdict]
VERIFIERS: dict[str, Verifier] = {"exact": verify_token_by_token, "block": verify_block, "match": verify_match}
assert tuple(VERIFIERS) == VERIFICATIONS, "every verification the settings offer has a verifier"


def same_drafts_verdicts(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, seed: int) -> dict[str, Verdict]:
    """Every verifier's verdict on one cycle's drafts, each with a generator seeded alike (lesson 12's comparison)."""
    return {name: verifier(p, q, x, torch.Generator(device=p.device).manual_seed(seed)) for name, verifier in VERIFIERS.items()}
