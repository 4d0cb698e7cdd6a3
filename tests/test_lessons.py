"""Every lesson measures its runs and explains them with *those* numbers (no canned claims)."""

from dataclasses import replace

import pytest

from specviz.analysis.readings import readings_of_trace
from specviz.deployment.gamma_auto import remembered_setting
from specviz.serving import recorder
from specviz.ui.lessons import FIXES, Measured, lessons, setting_note


def measured(pair, label, request) -> Measured:
    """The request measured as the page measures it: γ auto drafts the choice kept for this machine and pair."""
    request = replace(request, max_new_tokens=16)
    settings, chosen = request.settings(), None
    if request.auto:
        chosen = replace(remembered_setting(pair, request.drafter, settings.sampling), auto=True)
        settings = chosen.applied(settings)
    trace = recorder.measure_run(pair, request.prompt, settings, request.drafter, repeat_budget_s=0, setting=chosen)
    return Measured(label, request, trace, readings_of_trace(trace))


@pytest.mark.parametrize("index", range(7))
def test_each_lesson_explains_its_own_measurements(bundled_pair, index):
    lesson = lessons("pycode-distilled", "pycode-distilled")[index]  # one loaded pair stands in for both
    main = measured(bundled_pair, "main", lesson.request)
    extra = [measured(bundled_pair, label, request) for label, request in lesson.extra]
    text = lesson.explain(main, extra)
    assert "Question" in text, "every lesson ends with a question for the class"
    numbers = [main.readings.alpha] + [e.readings.alpha for e in extra]
    for value in numbers:
        assert f"{value:.2f}" in text, f"α = {value:.2f} measured in this lesson is missing from its text"
    assert f"{main.readings.measured_speedup:.2f}" in text


def test_the_verifiers_lesson_walks_through_its_own_cycle(bundled_pair):
    """Lesson 12: the three verifiers' α and speedups measured back to back, the same-drafts table from the first run,
    and a cycle where the verdicts differ, walked through with that cycle's own numbers."""
    from specviz.analysis.same_drafts import first_split, same_drafts_tallies

    lesson = next(lesson for lesson in lessons("pycode-distilled", "pycode-distilled") if lesson.key == "lesson-12")
    main = measured(bundled_pair, "main", replace(lesson.request, max_new_tokens=48))
    extra = [measured(bundled_pair, label, replace(request, max_new_tokens=48)) for label, request in lesson.extra]
    assert [m.trace.started.verification for m in (main, *extra)] == ["exact", "block", "match"]
    text = lesson.explain(main, extra)
    assert "Question" in text and "same distribution of texts" in text
    for m in (main, *extra):
        assert f"{m.readings.alpha:.2f}" in text and f"{m.readings.measured_speedup:.2f}" in text
    tallies = same_drafts_tallies(main.trace.cycles)
    assert set(tallies) == {"exact", "block", "match"}, "every cycle of the first run was judged three ways"
    for tally in tallies.values():
        assert f"{tally.mean_acceptance_length:.2f}" in text
    split = first_split(main.trace.cycles)
    if split is not None:  # at temperature 0.8 the verdicts almost always part somewhere
        block = next(v for v in split.verdicts if v.verification == "block")
        assert f"Cycle {split.index + 1}" in text and f"h = {block.accept_probability[-1]:.2f}" in text


def test_the_lenient_lesson_shows_where_the_text_left_the_targets():
    from specviz.ui.lessons import _diff_html

    html = _diff_html("return x + 1", "return x - 1")
    assert "<del" in html and "<ins" in html and "return x" in html


def test_the_first_lesson_drafts_gamma_auto_and_says_what_it_measured(bundled_pair, tmp_path, monkeypatch):
    """The page's first Run is lesson 1's: it drafts what γ auto measured for the bundled pair on this machine (or why
    nothing pays here), and says so."""
    import html

    from specviz.deployment import gamma_auto

    monkeypatch.setattr(gamma_auto, "settings_path", lambda: tmp_path / "settings.json")
    lesson = lessons("pycode-distilled", "pycode-plain")[0]
    assert lesson.key == "lesson-1" and lesson.request.auto
    main = measured(bundled_pair, "main", lesson.request)
    chosen = main.trace.setting
    drafted = f"tree {main.trace.started.tree}" if main.trace.started.tree else f"γ {main.trace.started.gamma}"
    assert chosen.auto and drafted == chosen.label
    note = setting_note(lesson, main)
    assert note.startswith("<p class='sv-setting'>γ auto, on this machine") and html.escape(chosen.sentence) in note
    if not chosen.pays:
        assert "nothing pays for this pair: " in note, "where nothing pays, one sentence says why"


def test_a_lesson_that_fixes_its_setting_says_so_and_names_the_measured_one(bundled_pair):
    from specviz.run.chosen_setting import ChosenSetting

    all_lessons = lessons("pycode-distilled", "pycode-plain", "smollm2-135m-distilled", 1, "coder")
    fixed = [lesson for lesson in all_lessons if not lesson.request.auto]
    assert {lesson.key for lesson in fixed} <= FIXES.keys(), "every lesson that fixes its setting says why"
    assert {lesson.key for lesson in all_lessons if lesson.request.auto} == {"lesson-1", "lesson-8"}
    sweep = next(lesson for lesson in fixed if lesson.key == "lesson-3")
    main = measured(bundled_pair, "main", sweep.request)
    unknown = setting_note(sweep, main)
    assert f"This lesson fixes γ = {sweep.request.gamma} to sweep γ" in unknown and "a Run with γ auto drafts" in unknown
    known = replace(main, trace=replace(main.trace, setting=ChosenSetting(gamma=2, predicted_speedup=1.4)))
    assert "γ auto, measured on this machine, drafts γ 2 for this pair (predicted 1.40×)" in setting_note(sweep, known)


def test_lessons_have_button_ids_and_distinct_scenarios():
    all_lessons = lessons("pycode-distilled", "pycode-plain")
    assert len(all_lessons) >= 6 and all(lesson.key.startswith("lesson-") for lesson in all_lessons)
    assert len({lesson.request for lesson in all_lessons}) == len(all_lessons)


def assert_quotes_its_report(said: str, report: dict) -> None:
    """The lesson's sentence carries the report's training minutes and answer tokens, and says when a run continued."""
    tokens = report["data"]["answer_tokens"]
    amount = f"{tokens / 1e6:.2f} million" if tokens >= 1e6 else f"{tokens / 1000:.0f} thousand"
    assert f"{report['fit']['seconds'] / 60:.0f} minutes" in said and amount in said, said
    assert ("continuing an earlier one" in said) == ("continued_from" in report), "a continued head says so"


def test_the_real_model_lesson_quotes_its_drafts_own_report():
    import json
    from pathlib import Path

    from specviz.models.catalogue import load_catalogue
    from specviz.ui.lessons import _distillation

    report = json.loads((Path(load_catalogue().get("smollm2-135m-distilled").draft_ref) / "distill_report.json").read_text())
    said = _distillation("smollm2-135m-distilled")
    assert_quotes_its_report(said, report)
    assert _distillation("no-such-pair") == "was distilled by specviz", "no report: no numbers made up"


@pytest.mark.parametrize("key", ["lesson-8", "lesson-9", "lesson-10"])
def test_the_real_model_lessons_explain_their_own_measurements(real_pair, key):
    """The real pair's lessons (its feature head, the exactness lesson, three drafters side by side) on SmolLM2."""
    lesson = next(lesson for lesson in lessons("pycode-distilled", "pycode-plain", real_pair.name, 3) if lesson.key == key)
    main = measured(real_pair, "main", lesson.request)
    if lesson.request.auto:  # lesson 8 drafts γ auto: what pays for the pair here, measured once, and says it
        import html

        assert main.trace.setting.sentence.startswith("on this machine"), main.trace.setting.sentence
        assert html.escape(main.trace.setting.sentence) in setting_note(lesson, main)
    extra = [measured(real_pair, label, request) for label, request in lesson.extra]
    text = lesson.explain(main, extra)
    assert "Question" in text
    runs = [main, *extra]
    if key == "lesson-9":  # the exactness lesson counts the answers identical to plain decoding
        identical = sum(m.trace.summary.new_token_ids == m.trace.baseline.new_token_ids for m in runs)
        assert f"<b>{identical} identical</b>" in text, f"{identical} of {len(runs)} identical, not what the text says"
        return
    for m in runs:
        if m.readings.alpha is not None:
            assert f"{m.readings.alpha:.2f}" in text, f"α = {m.readings.alpha:.2f} measured in {key} is missing from its text"


def test_the_real_model_lesson_quotes_its_feature_heads_own_report():
    import json
    from pathlib import Path

    from specviz.models.catalogue import load_catalogue
    from specviz.ui.lessons import _distillation

    folder = Path(load_catalogue().get("smollm2-135m-distilled").feature_head_ref)
    report = json.loads((folder / "distill_report.json").read_text())
    said = _distillation("smollm2-135m-distilled", "feature_head_ref")
    assert_quotes_its_report(said, report)


def test_the_coder_lesson_explains_both_pairs_from_their_own_measurements(bundled_pair):
    """Lesson 13 (the Qwen2.5-Coder pair beside the bundled one; the bundled pair stands in for both here): each pair's
    weights against this CPU's cache, its ν at the same rows a pass, α, τ and speedup, and what the two ν say."""
    from specviz.analysis.cache_fit import last_level_cache_bytes

    lesson = next(
        lesson for lesson in lessons("pycode-distilled", "pycode-plain", coder_pair="coder") if lesson.key == "lesson-13"
    )
    assert lesson.request.pair == "coder" and lesson.advises
    assert lesson.extra[0][1].gamma == lesson.request.gamma, "both pairs verify the same number of rows a pass"
    main = measured(bundled_pair, "main", replace(lesson.request, pair="pycode-distilled"))
    main = replace(main, verify_curve={1: 1.0, 2: 1.04, 4: 1.13})  # what the advice's measurement hands the lesson
    extra = [measured(bundled_pair, label, request) for label, request in lesson.extra]
    text = lesson.explain(main, extra)
    assert "Question" in text
    assert "ν(2) 1.04, ν(4) 1.13" in text and "GB/s (measured just now)" in text
    for m in (main, *extra):
        assert f"{m.readings.verify_cost:.2f}" in text and f"{m.readings.alpha:.2f}" in text
    if last_level_cache_bytes() is not None:
        assert "cache" in text and ("fit in this CPU" in text or "reads them from memory" in text)
    said = ("the cache decides", "the cache does not decide", "the kernels decide", "cannot show what the cache does")
    assert any(phrase in text for phrase in said), "the lesson says what the two ν show"


def test_the_coder_drafters_lesson_measures_the_sibling_the_head_and_lookup_at_one_gamma(bundled_pair):
    """Lesson 14 (where the coder pair has a feature head): one question drafted three ways at the same fixed γ, each
    drafter's α, τ, ν and speedup from its own run (the bundled pair stands in for the coder pair here)."""
    keys = [lesson.key for lesson in lessons("pycode-distilled", "pycode-plain", coder_pair="coder")]
    assert "lesson-14" not in keys, "without a head for the coder target there is nothing to compare"
    lesson = next(
        lesson
        for lesson in lessons("pycode-distilled", "pycode-plain", coder_pair="coder", coder_head=True)
        if lesson.key == "lesson-14"
    )
    drafters = [lesson.request.drafter, *(request.drafter for _, request in lesson.extra)]
    assert drafters == ["feature", "model", "lookup"]
    assert {request.gamma for _, request in lesson.extra} == {lesson.request.gamma}, "one γ for all three"
    standing_in = [replace(lesson.request, pair="pycode-distilled", drafter="model")]
    standing_in += [replace(request, pair="pycode-distilled") for _, request in lesson.extra]
    runs = [measured(bundled_pair, f"run {n}", request) for n, request in enumerate(standing_in)]
    text = lesson.explain(runs[0], runs[1:])
    assert "Question" in text and "Fastest here" in text
    for m in runs:
        assert f"{m.readings.alpha:.2f}" in text and f"{m.readings.verify_cost:.2f}" in text
        assert f"{m.readings.measured_speedup:.2f}×" in text


@pytest.mark.parametrize(
    ("streamed", "small", "fits", "phrase"),
    [
        (1.10, 1.60, True, "the cache decides"),
        (1.65, 1.30, True, "the kernels decide"),
        (1.34, 1.30, True, "the cache does not decide"),
        (1.34, 1.14, False, "cannot show what the cache does"),
    ],
)
def test_what_two_verify_costs_say_about_the_cause(streamed, small, fits, phrase):
    from specviz.analysis.cache_fit import cause_sentence

    said = cause_sentence(streamed, small, fits)
    assert phrase in said and f"{streamed:.2f}" in said and f"{small:.2f}" in said
    assert cause_sentence(None, small, fits) is None


def test_a_lesson_that_reads_slower_says_why_in_measured_terms(bundled_pair):
    from specviz.ui.lessons import slower_reason

    lesson = lessons("pycode-distilled", "pycode-distilled")[2]  # γ too large: its main run drafts far too much
    run = measured(bundled_pair, "main", lesson.request)
    reason = slower_reason(run)
    if run.readings.speed_verdict == "slower":
        assert reason is not None and f"{run.readings.measured_speedup:.2f}×" in reason
        assert f"{run.readings.verify_cost:.2f}" in reason and f"{run.readings.alpha:.2f}" in reason
    else:
        assert reason is None, "only a slower run gets the sentence"
