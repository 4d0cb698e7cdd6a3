"""The tally against cycles counted by hand: every number the app, CLI and bench show comes from it."""

import pytest

from specviz.engine.events import Cycle, DraftPosition
from specviz.engine.tally import Tally


def drafted(statuses: str, overlaps: list[float] | None = None) -> tuple[DraftPosition, ...]:
    """'aar-' → accepted, accepted, rejected, unverified."""
    kinds = {"a": "accepted", "r": "rejected", "-": "unverified"}
    positions = []
    for i, key in enumerate(statuses):
        tested = key != "-"
        overlap = (overlaps[i] if overlaps else 0.5) if tested else None
        positions.append(
            DraftPosition(
                i, f"t{i}", kinds[key], q=0.5, p=0.4 if tested else None, accept_probability=None, u=None, overlap=overlap
            )
        )
    return tuple(positions)


def cycle(statuses: str, emitted: int, draft_s: float = 0.004, verify_s: float = 0.01, overlaps=None) -> Cycle:
    positions = drafted(statuses, overlaps)
    n_accepted = statuses.count("a")
    rejected = "r" in statuses
    return Cycle(
        index=0,
        gamma=len(positions),
        positions=positions,
        n_accepted=n_accepted,
        resampled_token_id=7 if rejected else None,
        bonus_token_id=None if rejected else 7,
        new_token_text="x",
        bonus_top_p=(),
        emitted_token_ids=tuple(range(emitted)),
        draft_s=draft_s,
        verify_s=verify_s,
        overhead_s=0.001,
        n_draft_forwards=len(positions),
        lossy=False,
    )


# Hand-counted run, γ = 4:
#   1. a a r -   rejection after 2: 3 tested, 2 accepted, emits 2 + resampled = 3
#   2. a a a a   all accepted: bonus, 4 tested, emits 5
#   3. r - - -   rejected at once: 1 tested, emits 1
#   4. a a a a   all accepted, but end-of-text was the 2nd draft: emits 2 (cut), the test still accepted 4
#   5. (none)    window shrank to 0 at the token limit: a plain target step, emits 1
HAND = [
    cycle("aar-", 3, overlaps=[0.9, 0.8, 0.3, 0]),
    cycle("aaaa", 5, overlaps=[0.9, 0.9, 0.8, 0.7]),
    cycle("r---", 1, overlaps=[0.2, 0, 0, 0]),
    cycle("aaaa", 2, overlaps=[1.0, 1.0, 1.0, 1.0]),
    cycle("", 1, draft_s=0.0),
]


def test_counts_match_the_hand_count():
    tally = Tally.of(HAND)
    assert tally.cycles == 5
    assert tally.drafted == 16
    assert tally.accepted == 2 + 4 + 0 + 4
    assert tally.rejections == 2, "cycles 1 and 3; the empty window is not a rejection"
    assert tally.tested == 3 + 4 + 1 + 4
    assert tally.emitted == 3 + 5 + 1 + 2 + 1


def test_both_alpha_estimators_and_the_biased_one():
    tally = Tally.of(HAND)
    assert tally.alpha == pytest.approx(10 / 12), "accepted / (accepted + rejections)"
    assert tally.alpha_naive == pytest.approx(10 / 16), "accepted / drafted counts never-tested drafts"
    tested_overlaps = [0.9, 0.8, 0.3] + [0.9, 0.9, 0.8, 0.7] + [0.2] + [1.0] * 4
    assert tally.alpha_analytic == pytest.approx(sum(tested_overlaps) / len(tested_overlaps))


def test_tokens_per_cycle_counts_what_was_emitted_and_acceptance_length_what_was_accepted():
    tally = Tally.of(HAND)
    assert tally.tokens_per_cycle == pytest.approx(12 / 5), "the end-of-text cut shows in emitted tokens"
    assert tally.mean_acceptance_length == pytest.approx(1 + 10 / 5)


def test_acceptance_histogram_and_by_position():
    tally = Tally.of(HAND)
    assert tally.accepted_histogram == (2, 0, 1, 0, 2), "cycles by number accepted, γ + 1 long"
    assert tally.tested_by_position == (4, 3, 3, 2)
    assert tally.accepted_by_position == (3, 3, 2, 2)
    assert tally.acceptance_by_position == pytest.approx([3 / 4, 1.0, 2 / 3, 1.0])


def test_times_per_step_and_per_pass():
    tally = Tally.of(HAND)
    assert tally.draft_step_s == pytest.approx(4 * 0.004 / 16)
    assert tally.verify_pass_s == pytest.approx(0.01)


def test_running_tallies_end_where_the_fold_ends_and_sums_merge_runs():
    running = Tally.running(HAND)
    assert [t.cycles for t in running] == [1, 2, 3, 4, 5]
    assert running[-1] == Tally.of(HAND)
    assert running[0].alpha == pytest.approx(2 / 3)
    assert Tally.of(HAND[:2]) + Tally.of(HAND[2:]) == Tally.of(HAND), "bench adds tallies over prompts"


def test_an_empty_tally_has_no_numbers():
    tally = Tally()
    assert tally.alpha is None and tally.alpha_analytic is None and tally.tokens_per_cycle is None
    assert tally.draft_step_s is None and tally.acceptance_by_position == []


def test_a_sampled_run_counts_like_the_engine(bundled_pair):
    """Against the engine on a real sampled run: the Summary's tally is the fold of its own cycles, recounted here by hand."""
    from specviz.engine import DecodeSettings, SamplingSettings
    from specviz.run.runner import run

    events = list(
        run(
            bundled_pair,
            "def main():\n    x",
            DecodeSettings(max_new_tokens=40, gamma=3, sampling=SamplingSettings(temperature=0.9), seed=3),
        )
    )
    cycles = [e for e in events if isinstance(e, Cycle)]
    tally = events[-1].tally
    assert tally == Tally.of(cycles)
    statuses = [p.status for c in cycles for p in c.positions]
    assert tally.accepted == statuses.count("accepted") and tally.rejections == statuses.count("rejected")
    assert tally.tested == statuses.count("accepted") + statuses.count("rejected")
    assert tally.emitted == len(events[-1].new_token_ids)
