"""The acceptance test's decision against the algorithm written out, the chain's fast path against the tree's walk, its
display numbers, and what the cycle's clock counts."""

import time

import pytest
import torch
import torch.nn.functional as F

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import CachedDecoder, Cycle, DecodeSettings, SamplingSettings, speculative_decode
from specviz.engine import speculative as speculative_module
from specviz.engine.acceptance import explain, judge, judge_sampled_tree
from specviz.engine.sampling import residual, warp
from specviz.engine.tree import TokenTree
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
    verdict = judge(target_logits, TokenTree.chain(drafts), None, GREEDY, generator)
    assert (verdict.n_accepted, verdict.new_token_id) == greedy_by_definition(target_logits, drafts)
    assert verdict.n_accepted == min(wrong_from, k)


def test_lenient_greedy_accepts_while_p_of_the_draft_is_near_the_top():
    target_logits = torch.full((3, VOCAB), -10.0)
    target_logits[0, 3], target_logits[0, 4] = 2.0, 1.9  # draft 4 is a near-tie with the argmax 3
    target_logits[1, 7], target_logits[1, 8] = 2.0, -1.0  # draft 8 is far below the argmax 7
    target_logits[2, 9] = 5.0
    exact = judge(target_logits, TokenTree.chain([4, 8]), None, GREEDY, torch.Generator())
    lenient = judge(target_logits, TokenTree.chain([4, 8]), None, GREEDY, torch.Generator(), lenience=0.5)
    assert (exact.n_accepted, exact.new_token_id) == (0, 3)
    assert (lenient.n_accepted, lenient.new_token_id) == (1, 7)


def test_display_numbers_under_greedy():
    target_logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(3))
    best = target_logits.argmax(-1).tolist()
    drafts = [best[0], (best[1] + 1) % VOCAB]
    draft_logits = torch.randn(2, VOCAB)
    chain = TokenTree.chain(drafts)
    verdict = judge(target_logits, chain, None, GREEDY, torch.Generator())
    shown = explain(verdict, target_logits, chain, None, draft_logits, GREEDY)
    softmax = torch.softmax(target_logits, -1)
    assert shown.status == ["accepted", "rejected"]
    assert shown.p == pytest.approx([softmax[0, drafts[0]].item(), softmax[1, drafts[1]].item()])
    assert shown.q == pytest.approx(torch.softmax(draft_logits, -1)[[0, 1], drafts].tolist())
    assert shown.overlap == [1.0, 0.0]  # one-hot p and q: they overlap fully where the draft is the argmax
    top_p, _, top_residual = shown.tops
    assert top_residual == [[], [(best[1], 1.0)]], "the residual is shown on the rejected draft only"
    for row in range(2):  # each draft shows the top of p where it was tested; the target's token came from row 1
        assert [token for token, _ in top_p[row]] == torch.topk(target_logits[row], 5).indices.tolist()
    assert shown.bonus_top_p == top_p[1]


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
    chain = TokenTree.chain([4])
    verdict = judge(target_logits, chain, q, settings, torch.Generator().manual_seed(seed))
    assert verdict.n_accepted == 0, "u > p/q: the draft is rejected"
    shown = explain(verdict, target_logits, chain, q, draft_logits, settings)
    assert shown.p == pytest.approx([p[0, 4].item()])
    assert shown.accept_probability == pytest.approx([ratio])
    assert shown.overlap == pytest.approx([torch.minimum(p[0], q[0]).sum().item()])
    expected = torch.topk(residual(p[0], q[0]), 5)
    assert [token for token, _ in shown.tops[2][0]] == expected.indices.tolist()
    assert verdict.new_token_id != 4 and verdict.new_token_id < 10, "resampled from max(0, p − q): not 4, inside top-k"


@pytest.mark.parametrize("seed", range(200))
def test_a_chains_fast_path_decides_exactly_as_the_trees_walk(seed):
    """A chain under sampling is judged by the vectorised token-by-token test; the tree's walk on the same chain must
    keep the same drafts, emit the same token, read the same uniforms and leave the generator in the same state."""
    rng = torch.Generator().manual_seed(seed)
    k = 1 + seed % 6
    settings = SamplingSettings(temperature=[0.6, 1.0, 1.4][seed % 3], top_k=[0, 8][seed % 2])
    target_logits = torch.randn(k + 1, VOCAB, generator=rng) * 2
    near = target_logits[:k] + torch.randn(k, VOCAB, generator=rng)  # a draft that mostly agrees, so paths get long
    deterministic = seed % 5 == 0  # a draft with no q (lookup): q is one-hot on each draft
    q = None if deterministic else warp(near, settings)  # (k, vocab)
    drafts = near.argmax(-1) if deterministic else torch.multinomial(q, 1, generator=rng).squeeze(-1)
    chain = TokenTree.chain(drafts.tolist())
    fast_generator, walk_generator = (torch.Generator().manual_seed(seed + 1) for _ in range(2))
    fast = judge(target_logits, chain, q, settings, fast_generator)
    walk = judge_sampled_tree(warp(target_logits, settings), chain, q, "without_replacement", walk_generator)
    assert (fast.accepted_nodes, fast.new_token_id, fast.is_bonus) == (walk.accepted_nodes, walk.new_token_id, walk.is_bonus)
    assert fast.tested_nodes == walk.tested_nodes
    assert torch.equal(fast.uniforms, walk.uniforms), "both read one uniform per draft, in order"
    tested = walk.tested_nodes
    assert torch.equal(fast.accept_probability[tested], walk.accept_probability[tested])
    assert torch.equal(fast_generator.get_state(), walk_generator.get_state()), "the next cycle's draws must not move"
    if not fast.is_bonus:
        assert torch.equal(fast.correction, walk.correction), "the same residual is drawn from after a rejection"


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
    monkeypatch.setattr(speculative_module, "explain", slowed(speculative_module.explain, delay_s))
    cycles = cycles_of_a_run()
    assert cycles and all(cycle.overhead_s < delay_s / 2 for cycle in cycles)
    assert all(cycle.bonus_top_p for cycle in cycles)  # the display numbers are still there

    monkeypatch.setattr(speculative_module, "judge", slowed(speculative_module.judge, delay_s))
    assert all(cycle.overhead_s >= delay_s for cycle in cycles_of_a_run())
