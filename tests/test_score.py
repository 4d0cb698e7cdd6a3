"""The draft scorecard (teacher forcing) against what generation measures, on the bundled pair."""

import pytest

from specviz.analysis.score import ScoredText, score_token_ids, scorecard
from specviz.analysis.timing import StepTimes
from specviz.engine import Cycle, DecodeSettings, SamplingSettings
from specviz.models.catalogue import load_catalogue
from specviz.models.loading import load_pair
from specviz.prompts.sets import PROMPTS
from specviz.run.runner import encode_prompt, run
from tests.test_cli import specviz, specviz_json

TIMES = StepTimes(
    draft_step_s=0.001, target_step_s=0.01, verify_s=0.012, gamma=4, context=64, repeats=1
)  # fixed: no timing in tests


def run_and_score(pair, prompt: str, sampling: SamplingSettings, seed: int = 0):
    """One speculative run, and the scorecard of the text it produced, teacher-forced."""
    settings = DecodeSettings(max_new_tokens=48, gamma=4, sampling=sampling, seed=seed)
    prompt_ids = encode_prompt(pair, prompt, 48, 4)
    events = list(run(pair, prompt, settings))
    scored = score_token_ids(pair, prompt_ids + list(events[-1].new_token_ids), sampling)
    return prompt_ids, events, scored


def positions_tested(prompt_ids, events):
    """(index in the scored text of the token predicted, the run's DraftPosition) for every draft the run tested."""
    position = len(prompt_ids)
    for cycle in (e for e in events if isinstance(e, Cycle)):
        for offset, draft in enumerate(cycle.positions[: cycle.n_accepted + 1]):
            yield position + offset, draft
        position += len(cycle.emitted_token_ids)


def test_greedy_scorecard_agrees_with_the_run_position_by_position(bundled_pair):
    """On the target's own greedy continuation, every position a run tests is a teacher-forced position.

    Under greedy the draft sees exactly the committed tokens (its accepted drafts *are* those tokens), so
    the scorecard's argmax agreement at a tested position is the run's verdict there. Over the whole
    continuation the scorecard's α also counts the positions after a fully accepted window (the bonus
    tokens), which no run tests: they follow γ agreements, so on text where agreement comes in runs the
    scorecard reads slightly higher than the run's α. The difference stays under 0.05.
    """
    agree = tested = scored_sum = scored_n = 0
    for prompt in PROMPTS["code"][:4]:
        prompt_ids, events, scored = run_and_score(bundled_pair, prompt, SamplingSettings())
        for index, draft in positions_tested(prompt_ids, events):
            expected = 1.0 if draft.status == "accepted" else 0.0
            assert scored.overlaps[index - 1] == expected, f"position {index}: scorecard and run disagree"
            agree += expected
            tested += 1
        continuation = scored.overlaps[len(prompt_ids) - 1 :]
        scored_sum += sum(continuation)
        scored_n += len(continuation)
        summary = events[-1]
        assert summary.tally.accepted + summary.tally.rejections == sum(1 for _ in positions_tested(prompt_ids, events))
    run_alpha, score_alpha = agree / tested, scored_sum / scored_n
    assert abs(score_alpha - run_alpha) < 0.05, f"scorecard α {score_alpha:.3f} vs run α {run_alpha:.3f}"


def test_scoring_the_targets_own_continuations_predicts_the_runs_alpha(bundled_pair):
    """`score --continue N`: the public way to get the α a run will see, from prompts alone."""
    prompts = PROMPTS["code"][4:8]
    card = scorecard(bundled_pair, prompts, SamplingSettings(), 4, TIMES, continue_tokens=48)
    assert card.tokens_scored == 48 * len(prompts), "only the continuations are scored, with the prompts as context"
    tally = None
    for prompt in prompts:
        summary = list(run(bundled_pair, prompt, DecodeSettings(max_new_tokens=48, gamma=4)))[-1]
        tally = summary.tally if tally is None else tally + summary.tally
    assert abs(card.alpha - tally.alpha) < 0.05, f"scorecard α {card.alpha:.3f} vs run α {tally.alpha:.3f}"


def test_sampled_overlaps_are_the_runs_own(bundled_pair):
    """Under sampling, Σ min(p, q) at a tested position is exactly what the engine's verification computed there."""
    sampling = SamplingSettings(temperature=0.8, top_k=20)
    for seed, prompt in enumerate(PROMPTS["code"][:2]):
        prompt_ids, events, scored = run_and_score(bundled_pair, prompt, sampling, seed=seed)
        for index, draft in positions_tested(prompt_ids, events):
            assert scored.overlaps[index - 1] == pytest.approx(draft.overlap, abs=2e-3), f"position {index}"


def test_long_texts_are_scored_in_windows(bundled_pair):
    ids = encode_prompt(bundled_pair, "\n".join(PROMPTS["code"]), 1, 1)
    whole = score_token_ids(bundled_pair, ids, SamplingSettings())
    windowed = score_token_ids(bundled_pair, ids, SamplingSettings(), window=32)
    assert len(whole.overlaps) == len(windowed.overlaps) == len(ids) - 1, "every position scored once"
    assert windowed.overlaps[:31] == whole.overlaps[:31], "the first window sees the same context"
    assert abs(windowed.alpha - whole.alpha) < 0.1, "a quarter-window of context is enough context for most positions"


def test_distilled_draft_scores_higher_than_plain(bundled_pair):
    """As in bench: alignment with the target, not size, sets α."""
    catalogue = load_catalogue()
    plain = load_pair("pycode-plain", catalogue.get("pycode-plain"), catalogue.offline_pairs())
    texts = PROMPTS["code"]
    distilled_card = scorecard(bundled_pair, texts, SamplingSettings(), 4, TIMES)
    plain_card = scorecard(plain, texts, SamplingSettings(), 4, TIMES)
    assert distilled_card.alpha > plain_card.alpha + 0.1, f"distilled {distilled_card.alpha:.3f} vs plain {plain_card.alpha:.3f}"
    m = distilled_card.readings
    assert m.tau == pytest.approx(0.1) and m.verify_cost == pytest.approx(1.2), "τ and ν come from the timed steps"
    assert distilled_card.to_dict()["best_speedup"] >= distilled_card.to_dict()["predicted_speedup"]
    assert [g for g, _, _ in distilled_card.speedup_curve(8)] == list(range(1, 9))
    hardest = distilled_card.hardest(3)
    assert [h.overlap for h in hardest] == sorted(h.overlap for h in hardest) and hardest[0].overlap == 0.0


def test_scored_text_alpha_is_the_mean_overlap():
    text = ScoredText((1, 2, 3), ("a", "b", "c"), (1.0, 0.5), ("b", "x"), ("b", "c"))
    assert text.alpha == 0.75


def test_score_command_json():
    output = specviz_json("score", "--prompts", "code", "--repeats", "2", "--json")
    assert {
        "alpha",
        "alpha_by_text",
        "tokens_scored",
        "tau",
        "verify_cost",
        "predicted_speedup",
        "best_gamma",
        "best_speedup",
    } <= output.keys()
    assert len(output["alpha_by_text"]) == len(PROMPTS["code"]) and 0 < output["alpha"] < 1
    assert output["tokens_scored"] > 100
    self_draft = output["self_draft"]  # greedy: the target as its own draft keeps every draft under every verifier
    assert set(self_draft) == {"exact", "block", "match"}
    assert output["gamma"] == 1, "a `gamma: auto` pair is scored at γ 1 unless --gamma says otherwise"
    for name, row in self_draft.items():
        assert row["alpha"] == 1.0 and row["tokens_per_cycle"] == output["gamma"] + 1, f"{name}: every draft kept: {row}"
    at_four = specviz_json("score", "--prompts", "code", "--repeats", "1", "--gamma", "4", "--json")["self_draft"]
    assert all(row["tokens_per_cycle"] == 5.0 for row in at_four.values()), "at γ 4, all four drafts and the bonus"


def test_self_draft_keeps_every_draft_at_any_temperature_but_match(bundled_pair):
    """The sanity row at temperature 1: token by token and block keep every draft; match draws its own token."""
    from specviz.analysis.self_draft import self_draft_line, self_draft_tallies
    from specviz.engine import SamplingSettings
    from specviz.run.runner import encode_prompt

    ids = encode_prompt(bundled_pair, PROMPTS["code"][0], 40, 4)
    tallies = self_draft_tallies(bundled_pair, ids, SamplingSettings(temperature=1.0), gamma=4)
    assert tallies["exact"].alpha == 1.0 and tallies["block"].alpha == 1.0
    assert tallies["exact"].mean_acceptance_length == 5.0 and tallies["block"].mean_acceptance_length == 5.0
    assert tallies["match"].alpha < 1.0, "match keeps a draft only when the target's own draw equals it"
    assert "exact α 1.000, 5.00 tokens/pass" in self_draft_line(tallies, 4)


@pytest.mark.parametrize(
    "args,complaint",
    [
        (["score", "--gamma", "0"], "γ"),
        (["score", "--temperature", "-1"], "temperature"),
        (["score", "--prompts", "no-such-set"], "prompt set"),
        (["score", "--pair", "no-such-pair"], "unknown pair"),
        (["score", "--repeats", "0"], "repeats"),
        (["score", "--top-p", "x"], "top-p"),
        (["score", "--continue", "-1"], "--continue"),
        (["score", "--threads", "0"], "threads"),
    ],
)
def test_score_bad_input_is_one_line(args, complaint):
    result = specviz(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and complaint in lines[0], result.stderr
