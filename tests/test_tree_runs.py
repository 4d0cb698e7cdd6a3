"""A token tree's run is the engine's ordinary event stream: the runner, the tally and the trace read it as a chain's.

Cycles carry one position per node and `parents`; the accepted path is `accepted_nodes`. The output still equals the
target's own greedy decoding, and a shared trace of a tree is checked like any other.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from specviz.checked import InputError
from specviz.engine import DecodeSettings
from specviz.engine.events import Cycle, DraftPosition, RunStarted, Summary
from specviz.engine.settings import SettingsError
from specviz.engine.tally import Tally
from specviz.engine.tree_shape import TreeShape
from specviz.run.runner import run
from specviz.run.trace import Trace
from tests.tiny import record_tiny_trace

PROMPT = "def fibonacci(n):\n"


def test_the_runner_decodes_a_tree_as_the_target_alone_would(bundled_pair):
    settings = DecodeSettings(max_new_tokens=32, tree=TreeShape.parse("3x2x1:2"))
    events = list(run(bundled_pair, PROMPT, settings, drafter="model"))
    plain = list(run(bundled_pair, PROMPT, settings, mode="autoregressive"))[-1]
    started, cycles, summary = events[0], [e for e in events if isinstance(e, Cycle)], events[-1]
    assert isinstance(started, RunStarted) and started.tree == "3x2x1:2" and started.gamma == 3
    assert isinstance(summary, Summary) and summary.new_token_ids == plain.new_token_ids
    assert all(cycle.is_tree and len(cycle.parents) == len(cycle.positions) for cycle in cycles[:-1])
    assert summary.tally.emitted == 32 and summary.tally.cycles == len(cycles)
    assert summary.tally.tokens_per_cycle > 1.5, "the bundled draft agrees with its target often: a tree must show it"
    for cycle in cycles:
        path_tokens = [cycle.positions[node].token_id for node in cycle.path]
        assert list(cycle.emitted_token_ids[: len(path_tokens)]) == path_tokens[: len(cycle.emitted_token_ids)]
        assert all(cycle.positions[node].status == "accepted" for node in cycle.path)


def test_a_chain_only_drafter_is_refused_for_trees_in_one_sentence(bundled_pair):
    with pytest.raises(SettingsError, match="chains only"):
        run(bundled_pair, PROMPT, DecodeSettings(tree=TreeShape.parse("2x2")), drafter="dynamic")


@pytest.mark.parametrize(
    "settings,complaint",
    [
        (DecodeSettings(tree=TreeShape((2, 2)), lenience=0.5), "exactly"),
        (DecodeSettings(tree=TreeShape((2, 2)), adaptive_gamma=True), "fixed shape"),
    ],
)
def test_settings_a_tree_cannot_take_are_refused(settings, complaint):
    with pytest.raises(SettingsError, match=complaint):
        settings.validate()


@pytest.mark.parametrize(
    "text,complaint",
    [
        ("", "widths per depth"),
        ("4x-1", "widths per depth"),
        ("9x9", "at most 64 nodes"),
        ("2x2:0", "at least 1"),
        ("nodes=8", "needs both"),
        ("nodes=80,depth=9,width=9", "at most 64 nodes"),
    ],
)
def test_bad_tree_shapes_are_one_sentence(text, complaint):
    with pytest.raises(ValueError, match=complaint):
        TreeShape.parse(text)


def test_a_shape_reads_back_as_typed():
    for text in ("4x2x1", "6x3x2x1:3", "1x1x1", "nodes=16,depth=5"):
        assert TreeShape.parse(text).text == text
    assert TreeShape.parse("4 × 2").n_nodes == 12 and TreeShape.parse("1x1x1").is_chain


def position(status: str) -> DraftPosition:
    return DraftPosition(token_id=1, text="a", status=status, q=0.5, p=0.5, accept_probability=0.5, u=None, overlap=None)


def tree_cycle(statuses: str, parents: tuple[int, ...], path: tuple[int, ...], bonus: bool) -> Cycle:
    codes = {"a": "accepted", "r": "rejected", "u": "unverified"}
    return Cycle(
        index=0,
        gamma=max(len(path), 1),
        positions=tuple(position(codes[c]) for c in statuses),
        n_accepted=len(path),
        resampled_token_id=None if bonus else 2,
        bonus_token_id=2 if bonus else None,
        new_token_text="b",
        bonus_top_p=(),
        emitted_token_ids=(1,) * len(path) + (2,),
        draft_s=0.1,
        verify_s=0.2,
        overhead_s=0.0,
        n_draft_forwards=2,
        lossy=False,
        parents=parents,
        accepted_nodes=path,
    )


def test_a_tree_cycle_is_tallied_by_depth():
    """Depth 1: nodes 0 and 1 (node 1 accepted after node 0's rejection); depth 2: node 2 under node 1, rejected."""
    rejected_at_depth_2 = tree_cycle("rar", (-1, -1, 1), (1,), bonus=False)
    full_path = tree_cycle("aua", (-1, -1, 0), (0, 2), bonus=True)
    tally = Tally.of([rejected_at_depth_2, full_path])
    assert tally.drafted == 6 and tally.accepted == 3 and tally.rejections == 1
    assert tally.tested == 2 + 2, "depths tested: 1 and 2 in both cycles"
    assert tally.alpha == 3 / 4 and tally.tokens_per_cycle == 2.5
    assert tally.accepted_histogram == (0, 1, 1)
    assert tally.acceptance_by_position == [1.0, 0.5]


@pytest.fixture(scope="module")
def tree_trace() -> Trace:
    return record_tiny_trace(TreeShape.parse("3x2x1:2"))


def test_a_tree_trace_round_trips_through_json(tree_trace):
    text = tree_trace.to_json()
    again = Trace.from_json(text)
    assert again.to_json() == text and again.started.tree == "3x2x1:2"
    assert all(cycle.is_tree for cycle in again.cycles if cycle.positions)


@pytest.mark.parametrize(
    "break_it,complaint",
    [
        (lambda c: {**c, "parents": [c["parents"][0] + 5] + c["parents"][1:]}, "earlier node"),
        (lambda c: {**c, "parents": c["parents"][:-1]}, "one parent per drafted position"),
        (lambda c: {**c, "accepted_nodes": [len(c["parents"]) - 1], "n_accepted": 1}, "path from the root"),
        (lambda c: {**c, "bonus_token_id": 3, "resampled_token_id": 3}, "not both"),
    ],
)
def test_a_broken_tree_in_a_shared_trace_is_refused(tree_trace, break_it, complaint):
    raw = json.loads(tree_trace.to_json())
    raw["cycles"][0] = break_it(raw["cycles"][0])
    with pytest.raises(InputError, match=complaint):
        Trace.from_json(json.dumps(raw))


def test_a_chain_trace_carries_no_tree():
    chain = record_tiny_trace()
    assert chain.started.tree == "" and not any(cycle.is_tree for cycle in chain.cycles)
    assert replace(chain.cycles[0]).path == tuple(range(chain.cycles[0].n_accepted))
