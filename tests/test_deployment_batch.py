"""The batch-size prediction from given step costs, and the timing routine on tiny models (shapes, never wall times)."""

from __future__ import annotations

import pytest

from specviz.deployment.batch import BatchRow, BatchStepCosts, batch_row, batch_rows, stops_paying, stops_paying_sentence

ALPHA, GAMMA = 0.8, 4
E = (1 - ALPHA ** (GAMMA + 1)) / (1 - ALPHA)  # 3.3616 tokens per cycle
SMALL = BatchStepCosts(batch=1, draft_step_s=0.001, target_step_s=0.010, verify_s=0.011)  # τ 0.1, ν 1.1
LARGE = BatchStepCosts(batch=16, draft_step_s=0.004, target_step_s=0.020, verify_s=0.060)  # τ 0.2, ν 3


def test_prediction_from_given_step_costs():
    row = batch_row(SMALL, ALPHA, GAMMA)
    assert row.tau == pytest.approx(0.1) and row.verify_cost == pytest.approx(1.1)
    assert row.predicted_speedup == pytest.approx(E / (GAMMA * 0.1 + 1.1))
    assert row.predicted_speedup == pytest.approx((1 - ALPHA**5) / ((1 - ALPHA) * (GAMMA * 0.1 + 1.1)))
    large = batch_row(LARGE, ALPHA, GAMMA)
    assert large.predicted_speedup == pytest.approx(3.3616 / 3.8), "the verify pass at batch 16 costs 3 steps: a slowdown"
    assert large.to_json() == {
        "batch": 16,
        "tau": large.tau,
        "verify_cost": large.verify_cost,
        "predicted_speedup": large.predicted_speedup,
    }


def test_rows_are_sorted_and_show_where_speculation_stops_paying():
    middle = BatchStepCosts(batch=4, draft_step_s=0.002, target_step_s=0.012, verify_s=0.018)
    rows = batch_rows([LARGE, SMALL, middle], ALPHA, GAMMA)
    assert [r.batch for r in rows] == [1, 4, 16]
    assert stops_paying(rows) == 16
    assert "stops paying at batch 16" in stops_paying_sentence(rows)
    assert stops_paying(rows[:2]) is None
    assert "every batch size measured, up to 4" in stops_paying_sentence(rows[:2])
    assert "not pay even at batch 16" in stops_paying_sentence(rows[2:])
    assert stops_paying([BatchRow(64, 0.1, 5.0, 0.5), BatchRow(8, 0.1, 2.0, 0.9)]) == 8, (
        "the smallest failing batch, whatever the order"
    )


def test_a_dip_between_batch_sizes_that_pay_is_not_where_it_stops():
    noisy = [BatchRow(1, 0.1, 1.8, 0.99), BatchRow(4, 0.1, 1.2, 1.16), BatchRow(16, 0.1, 1.4, 1.28), BatchRow(64, 0.1, 2.5, 0.74)]
    assert stops_paying(noisy) == 64, "it stops past the largest batch that pays, not at an earlier dip"
    sentence = stops_paying_sentence(noisy)
    assert "stops paying at batch 64" in sentence and "though under 1.05× at batch 1" in sentence, sentence
    assert stops_paying(noisy[:3]) is None and "the largest batch size measured" in stops_paying_sentence(noisy[:3])


def test_timing_routine_on_tiny_models():
    from specviz.deployment.device import cuda_peak_bytes, measure_batch_costs
    from tests.tiny import tiny_llama

    target, draft = tiny_llama(64, seed=0, layers=2), tiny_llama(48, seed=1, layers=1)
    costs = measure_batch_costs(target, draft, vocab_size=48, gamma=3, batches=[1, 4], context=8, repeats=2)
    assert [c.batch for c in costs] == [1, 4]
    for c in costs:
        assert c.draft_step_s > 0 and c.target_step_s > 0 and c.verify_s > 0, f"every forward takes time: {c}"
    rows = batch_rows(costs, alpha=0.7, gamma=3)
    assert all(r.tau > 0 and r.verify_cost > 0 and r.predicted_speedup > 0 for r in rows)
    assert cuda_peak_bytes(target.device) is None, "no allocator peak off CUDA: the CPU estimates from tensors"


def test_each_timed_forward_leaves_the_cache_at_the_prefix():
    import torch

    from specviz.analysis.timing import fastest_seconds
    from specviz.deployment.device import _feeder, _prefilled_cache
    from tests.tiny import tiny_llama

    model = tiny_llama(64)
    with torch.inference_mode():
        cache = _prefilled_cache(model, torch.zeros(4, 10, dtype=torch.long))  # (batch, context)
        forward, undo = _feeder(model, cache, torch.ones(4, 5, dtype=torch.long))  # (batch, γ + 1)
        forward()
        assert cache.get_seq_length() == 15, "the timed forward feeds the γ + 1 tokens after the prefix"
        undo()
        assert cache.get_seq_length() == 10
        (seconds,) = fastest_seconds([(forward, undo)], model.device, repeats=2)
    assert seconds > 0
    assert cache.get_seq_length() == 10, "every repeat must see the same prefix, so the timer crops the cache back"
