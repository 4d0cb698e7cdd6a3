"""The acceptance test's decision against the algorithm written out, its display numbers, and what the cycle's clock counts."""

import time

import pytest
import torch
import torch.nn.functional as F

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import CachedDecoder, Cycle, DecodeSettings, SamplingSettings, speculative_decode
from specviz.engine import speculative as speculative_module
from specviz.engine.acceptance import explain_verdict, judge_drafts
from specviz.engine.sampling import residual, warp
from tests.tiny import fake_vocabulary, tiny_llama

VOCAB = 50
GREEDY = SamplingSettings()


def greedy_by_definition(target_logits: torch.Tensor, drafts: list[int]) -> tuple[int, int]:
    """Leviathan et al. with p and q one-hot (greedy): accept while p(x)/q(x) ≥ 1, then draw from norm(max(0, p − q))."""
    p = F.one_hot(target_logits.argmax(-1), VOCAB).float()
    q = F.one_hot(torch.tensor(drafts), VOCAB).float()
    n = 0
    while n < len(drafts) and p[n, drafts[n]] / q[n, drafts[n]] >= 1.0:
        n += 1
    new_token = residual(p[n], q[n]).argmax() if n < len(drafts) else p[n].argmax()
    return n, int(new_token)


@pytest.mark.parametrize("seed", range(40))
def test_greedy_decision_is_the_algorithm_with_one_hot_distributions(seed):
    generator = torch.Generator().manual_seed(seed)
    k = 1 + seed % 4
    target_logits = torch.randn(k + 1, VOCAB, generator=generator)
    best = target_logits.argmax(-1).tolist()
    wrong_from = seed % (k + 1)  # drafts agree with the target's argmax up to here, then one differs
    drafts = [best[i] if i < wrong_from else (best[i] + 1) % VOCAB for i in range(k)]
    verdict = judge_drafts(target_logits, drafts, None, GREEDY, 1.0, generator)
    assert (verdict.n_accepted, verdict.new_token_id) == greedy_by_definition(target_logits, drafts)
    assert verdict.n_accepted == min(wrong_from, k)


def test_lenient_greedy_accepts_while_p_of_the_draft_is_near_the_top():
    target_logits = torch.full((3, VOCAB), -10.0)
    target_logits[0, 3], target_logits[0, 4] = 2.0, 1.9  # draft 4 is a near-tie with the argmax 3
    target_logits[1, 7], target_logits[1, 8] = 2.0, -1.0  # draft 8 is far below the argmax 7
    target_logits[2, 9] = 5.0
    exact = judge_drafts(target_logits, [4, 8], None, GREEDY, 1.0, torch.Generator())
    lenient = judge_drafts(target_logits, [4, 8], None, GREEDY, 0.5, torch.Generator())
    assert (exact.n_accepted, exact.new_token_id) == (0, 3)
    assert (lenient.n_accepted, lenient.new_token_id) == (1, 7)


def test_display_numbers_under_greedy():
    target_logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(3))
    best = target_logits.argmax(-1).tolist()
    drafts = [best[0], (best[1] + 1) % VOCAB]
    draft_logits = torch.randn(2, VOCAB)
    verdict = judge_drafts(target_logits, drafts, None, GREEDY, 1.0, torch.Generator())
    shown = explain_verdict(verdict, target_logits, drafts, None, draft_logits, GREEDY)
    softmax = torch.softmax(target_logits, -1)
    assert shown.p_shown == pytest.approx([softmax[0, drafts[0]].item(), softmax[1, drafts[1]].item()])
    assert shown.q_shown == pytest.approx(torch.softmax(draft_logits, -1)[[0, 1], drafts].tolist())
    assert shown.overlap == [1.0, 0.0]  # one-hot p and q: they overlap fully where the draft is the argmax
    assert shown.top_residual == [(best[1], 1.0)]
    assert [token for token, _ in shown.top_p[2]] == torch.topk(target_logits[2], 5).indices.tolist()


def test_display_numbers_under_sampling_come_from_the_tested_distributions():
    settings = SamplingSettings(temperature=0.8, top_k=10)
    target_logits = torch.zeros(2, VOCAB)
    target_logits[0, :10] = torch.linspace(3.0, 1.0, 10)  # p spread over ten tokens
    draft_logits = torch.full((1, VOCAB), -5.0)
    draft_logits[0, 4] = 5.0  # q nearly all on token 4, where p is small: p(4)/q(4) ≈ 0.08
    q = warp(draft_logits, settings)
    p = warp(target_logits, settings)
    ratio = (p[0, 4] / q[0, 4]).item()
    assert ratio < 0.2
    seed = next(seed for seed in range(100) if torch.rand(1, generator=torch.Generator().manual_seed(seed)).item() > ratio)
    verdict = judge_drafts(target_logits, [4], q, settings, 1.0, torch.Generator().manual_seed(seed))
    assert verdict.n_accepted == 0, "u > p/q: the draft is rejected"
    shown = explain_verdict(verdict, target_logits, [4], q, draft_logits, settings)
    assert shown.p_shown == pytest.approx([p[0, 4].item()])
    assert shown.accept_probability == pytest.approx([ratio])
    assert shown.overlap == pytest.approx([torch.minimum(p[0], q[0]).sum().item()])
    expected = torch.topk(residual(p[0], q[0]), 5)
    assert [token for token, _ in shown.top_residual] == expected.indices.tolist()
    assert verdict.new_token_id != 4 and verdict.new_token_id < 10, "resampled from max(0, p − q): not 4, inside top-k"


def slowed(function, seconds: float):
    def slow(*args, **kwargs):
        time.sleep(seconds)
        return function(*args, **kwargs)

    return slow


def cycles_of_a_run() -> list[Cycle]:
    target, draft = tiny_llama(VOCAB, seed=0), tiny_llama(VOCAB, seed=1, layers=1)
    events = speculative_decode(
        CachedDecoder(target, VOCAB),
        ModelDrafter(CachedDecoder(draft, VOCAB)),
        [5, 6, 7],
        DecodeSettings(gamma=2, max_new_tokens=6),
        fake_vocabulary(),
    )
    return [event for event in events if isinstance(event, Cycle)]


def test_the_cycle_clock_holds_the_decision_but_not_the_display_work(monkeypatch):
    """The baseline's timed step is forward, warp and draw; a cycle's overhead holds its acceptance decision, and not
    the numbers only the UI shows."""
    delay_s = 0.2
    monkeypatch.setattr(speculative_module, "explain_verdict", slowed(speculative_module.explain_verdict, delay_s))
    cycles = cycles_of_a_run()
    assert cycles and all(cycle.overhead_s < delay_s / 2 for cycle in cycles)
    assert all(cycle.bonus_top_p for cycle in cycles)  # the display numbers are still there

    monkeypatch.setattr(speculative_module, "judge_drafts", slowed(speculative_module.judge_drafts, delay_s))
    assert all(cycle.overhead_s >= delay_s for cycle in cycles_of_a_run())
