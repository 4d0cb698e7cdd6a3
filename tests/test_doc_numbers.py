"""Every measured number in README.md and docs/ equals the results file it came from.

A measured number is written with its source right after it, in an HTML comment a reader of the rendered page does
not see (docs/testing.md, "Numbers in the docs"):

    <!-- results: assets/smollm2-135m-eagle/distill_report.json -->   the file the keys below read, until the next one
    α 0.469<!-- measured.rows.1.alpha -->                             a dotted key into that file (list items by index)
    about 47<!-- measured.rows.1.alpha % --> %                        a unit after the key: the file's value in it
    5.2<!-- smollm2_head.parameters M -->M parameters                 (%, k, M, MB, MiB, GB, min, ms, µs; the file
    1.2<!-- benchmarks/results/x.json#rows.0.nu -->                   holds fractions, counts, bytes and seconds)
                                                                      and a file named in the key itself
    28,480<!-- kept_token_ids.len -->                                 how many items a list holds

Keys of a benchmarks/results/ file start inside its "results" (beside "command", "machine" and "date"), or at
`machine.` for what the file recorded of the machine (its measured read bandwidth, its load).
Rounding: the doc's number is the file's value rounded to the digits the doc shows (0.47 stands for 0.465 … 0.475).

A quoted number with no source fails, unless it is in UNMEASURED below with the reason it was not measured (a
setting, a threshold, a limit, a formula's example, a definition). Quoted, outside code: a number with a unit (×,
tokens/s, ms, s, minutes, %, MB …) or after α, τ, ν; and without a unit, any number with a decimal point (0.463), any
of three digits or more or with thousands separators (2085, 3,711), and both numbers of a count (39 of 41). Not
quoted: a number inside a name or a version (SmolLM2, Q4_1, 6.31.0), a citation's year and a paper's numbering
(et al. 2023, Theorem 3.8, arXiv 2211.17192), and a small integer without a unit (γ 4, 2 threads, lesson 8): in
prose those are settings and counts of things, and a measured one is written with its source like any other.
Pure text and JSON: nothing is loaded or run.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NUMBER = r"(?<![\w.,/-])(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)"
SOURCED = re.compile(NUMBER + r"<!--(?!\s*results:)\s*(.*?)\s*-->")
DECLARED = re.compile(r"<!--\s*results:\s*(\S+)\s*-->")
UNITS = (
    r"(?:×(?!\s?\d)|x\b|tokens/s|tok/s|tokens per s|ms\b|µs\b|s\b|%|MB\b|GB\b|MiB\b|GiB\b|KB\b|M\b|min\b|h\b"
    r"|minutes?\b|seconds?\b|hours?\b)"
)
LOOKS_MEASURED = re.compile(NUMBER + r"\s?" + UNITS + r"|(?:[ατν]|ν\(\d+\))\s?[=≈]?\s?" + NUMBER)
# a number without a unit, not inside a name or a version (SmolLM2, Q4_1, 0.5B, 6.31.0)
BARE = re.compile(NUMBER + r"(?![\w.]*\d)(?!\w)")
COUNT = re.compile(NUMBER + r"\s+of\s+(?:the\s+)?" + NUMBER + r"(?![\w.]*\d)(?!\w)")  # 39 of 41: both are quoted
# a citation's year, a paper's numbering: "et al. 2023", "ICLR 2025", "Theorem 3.8", "arXiv 2211.17192"
REFERENCE = re.compile(r"(?:et al\.,?|ICLR|Theorem|Corollary|Algorithm|Table|Section|arXiv)\s+$")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)

# Quoted numbers that were not measured, page by page: each entry is the page's own text around the number (its words
# in order; a phrase may hold several numbers) and the reason it has no results file. An entry the page no longer
# writes, or that exempts no number, fails, so the list cannot go stale.
UNMEASURED: dict[str, dict[str, str]] = {
    "README.md": {
        "1.05×": "the verdict's threshold (readings.speed_verdict)",
        "0.95×": "the verdict's threshold (readings.speed_verdict)",
        "10×": "a playback speed (a setting)",
        "50×": "a playback speed (a setting)",
        "10 MB": "the Hub's limit for a file outside LFS",
        "Python 3.10": "the oldest Python specviz supports (pyproject.toml's requires-python; tests/test_docs_facts.py)",
        "u = 0.31 ≤ p/q = 0.52": "an example of the sentence the page writes",
    },
    "docs/algorithm.md": {
        "256 new": "the run's setting",
        "τ = 0": "Leviathan et al.'s Table 1 assumes it",
        "(0.6, 2) → 1.96 / 1.53; (0.7, 3) → 2.53 / 1.58; (0.8, 2) → 2.44 / 1.23; (0.8, 5) → 3.69 / 1.63; (0.9, 2) → "
        "2.71 / 1.11; (0.9, 10) → 6.86 / 1.60": "Leviathan et al.'s Table 1, which tests/test_theory.py recomputes",
        "τ = 0.01": "a worked example of the formula (tests/test_theory.py)",
        "α = 0.8": "a worked example of the formula (tests/test_theory.py)",
        "0.9975": "a worked example of the formula (tests/test_theory.py)",
        "3.51×": "a worked example of the formula (tests/test_theory.py)",
        "4.23×": "a worked example of the formula (tests/test_theory.py)",
        "1.05 or more": "the verdict's threshold (readings.speed_verdict)",
        "at most 0.95": "the verdict's threshold (readings.speed_verdict)",
    },
    "docs/cli.md": {
        "hidden size up to 512": "the limit decode_glue_threads sets (engine/compiled.SMALL_HIDDEN), a setting",
        '"confidence 0.31 < 0.40"': "an example of a draft's stop reason",
        "confidence 0.4": "transformers' default threshold",
        "within 0.05": "the tolerance tests/test_score.py holds",
        "α = 0.5 … 0.9": "the α the command prices beside the pair's (settings)",
        "(0.7, labelled assumed": "the α assumed when none is given (a setting)",
        "acceptance > 2.0": "a rule of thumb's threshold, from the article",
        "25 %": "a rule of thumb's range, from the article",
        "e.g. 0.53,0.12,0.07,0.03,0.02": "an example of the option's value",
    },
    "docs/hosting.md": {
        "10 MB": "the Hub's limit for a plain git push",
        "60 MiB": "the limit tests/test_stored.py holds",
    },
    "docs/numbers.md": {
        "0 ms": "what a burst's gaps are, by definition",
        "1.05×": "the verdict's threshold (readings.speed_verdict)",
        "0.95×": "the verdict's threshold (readings.speed_verdict)",
    },
    "docs/page.md": {
        "8 s": "playback and waiting settings",
        "10×": "a playback speed (a setting)",
        "50×": "a playback speed (a setting)",
        "u = 0.71 > p/q = 0.42": "an example of the sentence the page writes",
        "u = 0.83 > p/q = 0.40": "an example of the sentence the page writes",
        "u = 0.31 ≤ p/q = 0.52": "an example of the sentence the page writes",
        "temperature 0.8": "the lesson's setting",
        "8 MiB": "a limit of a shared trace (ui/request.py)",
        "10 minutes": "a limit of a shared trace's playback",
        "20,000 characters": "a limit of a request (ui/request.py)",
        "256 new tokens": "a limit of a request (ui/request.py)",
    },
    "docs/architecture.md": {
        "fit in 6 s": "the recorder's budget for timed rounds, a setting (serving/recorder.py, ROUNDS_BUDGET_S)",
    },
    "docs/testing.md": {
        "60 MiB": "the limit tests/test_stored.py holds",
        "0.2 s": "a test's planted delay",
    },
    "docs/pairs.md": {
        "Why 2.2× is out of reach": "issue 44's goal, a target, not a measurement",
        "is 1.36 at its α and γ 1, close to the 1.31 measured. With α 0.75 it would be 1.6 at γ 1 and 1.9 at γ 3; 2.2× "
        "needs α 0.85 at γ 3 or 0.93 at γ 2": "the theory's speedup (analysis/theory.expected_speedup_with_verify_cost) "
        "at the head's measured τ and ν in coder_drafters.json, computed for an α, not measured",
        "α 0.75 with hundreds": "the α the issue asks of an EAGLE head (EAGLE's papers), a goal, not a measurement here",
        "122 school topics × 18 questions; 3,711 everyday requests": "the sizes of the built-in prompt lists "
        "(specviz/training/prompt_data/, counted by tests/test_chat_prompts.py): data, not a measurement; with the 1,113 below they "
        "make bundle_facts.json's 7,020 requests",
        "1,113 about people": "the size of a built-in prompt list (specviz/training/prompt_data/world.json)",
        "1.5 epochs": "the training's setting (its command in the head's distill_report.json)",
        "1.5×": "the speedup a well-accepted draft gives, the pair's goal",
        "default 5,000": "the option's default",
        "15–500 characters": "the filter's settings (specviz/training/sharegpt_prompts.py)",
        "1,117,320,768 bytes": "the pinned file's size (models.yaml, checked at fetch)",
        "491,400,064 bytes": "the pinned file's size (models.yaml, checked at fetch)",
        "16 MB": "the sizes benchmarks/verify_cost_by_size.py sweeps (settings)",
        "2 GB": "the sizes benchmarks/verify_cost_by_size.py sweeps (settings)",
        "128 new tokens": "the run's setting",
        "q(x) < 0.4": "transformers' default threshold",
    },
    "docs/performance.md": {
        "memory read 35–36 GB/s around it": "an example of the sentence the numbers bar writes",
        "a sum over 512 MB": "the buffer the read-rate probe sums (analysis/cache_fit.read_rate_now_gb_s), a setting",
        "hidden size up to 512": "the limit decode_glue_threads sets (engine/compiled.SMALL_HIDDEN), a setting",
        "hidden size 576": "SmolLM2-135M's width (its config.json)",
        "the limit of 512": "the limit decode_glue_threads sets (engine/compiled.SMALL_HIDDEN), a setting",
        "8,192-token": "SmolLM2's context length (its config.json)",
        "189 MB": "computed from SmolLM2's config, as the line shows",
        "16 MB": "the sizes benchmarks/verify_cost_by_size.py sweeps (settings)",
        "256 MB": "the sizes benchmarks/verify_cost_by_size.py sweeps (settings)",
        "1 GB": "the sizes benchmarks/verify_cost_by_size.py sweeps (settings)",
        "--sizes 16,256,1024": "the sizes benchmarks/verify_cost_by_size.py was asked for (settings)",
        "0.59 bytes a weight": "the w4a8 form's definition: 19 bytes for 32 weights (kernels/forms.py)",
        "over 512 MB": "the buffer analysis/cache_fit.measure_read_bandwidth sums (its default)",
        "with VNNI, 32 MiB L3": "the machine's specification (lscpu), not a measurement",
        "once: ~25 s": "the build's announced estimate, a string in specviz/kernels/build.py",
        "128 new tokens": "the run's setting",
        "--max-new-tokens 128": "the run's setting",
        "32 MiB L3 cache": "the machine's specification (lscpu), not a measurement",
        "after 128 and": "the contexts nu_by_context.py was asked for (settings)",
        "after 256:": "the contexts nu_by_context.py was asked for (settings)",
        "(goal: within 10 %)": "issue 51's goal, quoted beside the measured spread",
        "while they fit in 6 s": "the Run's rounds budget (serving/recorder.ROUNDS_BUDGET_S), a setting",
        "within 10 % of the median": "the steadiness rule (analysis/readings.STEADY_WITHIN), a setting",
        "a standard deviation of 10 %": "pyperf's documented warning threshold, a setting of another tool",
        "about 3 ms (300,000 iterations)": "libgomp's documented default spin count (GOMP_SPINCOUNT), not a measurement",
        "spins 100 iterations": "libgomp's throttled spin count for more threads than CPUs (its source), not a measurement",
        "on 80,000 floats": "the probe's size (benchmarks/openmp_regions.py), a setting",
        "within 0.90–1.10 was met": "issue 51's goal, quoted beside the measured page ÷ bench",
        "Runs (≤ 10 %) was not": "issue 51's goal, quoted beside the measured spread",
        "(goal 0.90–1.10)": "issue 51's goal, quoted beside the measured ratio",
        "Within 10 % for SmolLM2": "issue 51's goal, quoted beside the measured ratios",
        "(within 5 % of it)": "issue 51's goal, quoted beside the measured ratio",
        "goal of 10 %), and": "issue 51's goal, quoted beside the measured ratio",
        "read 0.97 of its prediction and 0.946": "the same script's run in plain float32 this session, replaced by this one (its output is in the commit that replaced it)",
        "read 3.19, 3.82 and 3.63 ms": "an earlier run of the same huge-page check this session (its output, quoted in the commit)",
        "against 4.81, 4.50 and 4.49": "an earlier run of the same huge-page check this session (its output, quoted in the commit)",
    },
    "docs/production.md": {
        "576": "SmolLM2-135M's width (its config.json): the checkpoint's shapes are definitions",
        "1728": "SmolLM2-135M's shapes (its config.json): three streams of 576",
        "192": "SmolLM2-135M's shapes (its config.json): 3 key/value heads of 64",
        "1152": "SmolLM2-135M's shapes (its config.json): two inputs of 576",
        "49,152": "SmolLM2's vocabulary size (its config.json)",
        "90 %": "the threshold tests/test_export_llama_cpp.py holds",
    },
    "docs/trees.md": {
        "293-token": "a test's context length (a setting)",
        "197-token": "a test's context length (a setting)",
        "6,000 samples": "the test's sample count (a setting)",
        "20,000 passes": "the test's pass count (a setting)",
        "about 30,000 shapes": "the size of the search at the engine's limits (tree_theory.family), not a measurement",
    },
}


SCALES = {"%": 100, "k": 1e-3, "M": 1e-6, "G": 1e-9, "MB": 1e-6, "MiB": 2**-20, "GB": 1e-9, "min": 1 / 60, "ms": 1e3, "µs": 1e6}


GENERATED = re.compile(r"<!-- (\S+\.json) -->\n.*?\n<!-- /\1 -->", re.DOTALL)  # a block a benchmark renders from its file


def without_code(text: str) -> str:
    """The page with its code (fenced blocks and `spans`) blanked, lines kept: examples there are not quotes. A block
    between `<!-- NAME.json -->` and `<!-- /NAME.json -->` is a benchmark's own rendering of its results file, which
    its own test compares whole (tests/test_export.py: docs/production.md's table), so it is blanked too."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    return CODE.sub(blank, GENERATED.sub(blank, text))


def _page_name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def measured_values(record: dict):
    """A results file's values: under "results" in benchmarks/results/ (beside command, machine, date), else the file."""
    return record["results"] if {"command", "machine", "date", "results"} <= set(record) else record


def _value(data, key: str):
    for part in key.split("."):
        if isinstance(data, list):
            data = len(data) if part == "len" else data[int(part)]  # `len`: how many items the list holds
        else:
            data = data[part]
    return data


def sourced_numbers(page: Path) -> list[tuple[str, str, str, str]]:
    """(shown number, results file, key, the line) for every sourced number of a page, in order."""
    found, current = [], None
    text = without_code(page.read_text())
    events = sorted(
        [(m.start(), "file", m) for m in DECLARED.finditer(text)] + [(m.start(), "number", m) for m in SOURCED.finditer(text)],
        key=lambda e: e[0],
    )
    for start, kind, match in events:
        if kind == "file":
            current = match.group(1)
            continue
        shown, key = match.group(1), match.group(2)
        file = current
        if "#" in key:
            file, key = key.split("#", 1)
        line = text.count("\n", 0, start) + 1
        found.append((shown, file, key, f"{_page_name(page)}:{line}"))
    return found


def matches(shown: str, value: float) -> bool:
    """The shown number is `value` rounded to the shown digits."""
    digits = len(shown.split(".")[1]) if "." in shown else 0
    return abs(float(shown.replace(",", "")) - value) <= 0.5 * 10**-digits + 1e-9


ALL_SOURCED = [entry for page in PAGES for entry in sourced_numbers(page)]


def test_the_docs_quote_sourced_numbers():
    assert len(ALL_SOURCED) >= 20, "the README and docs/ quote measured numbers, each with its results file"


@pytest.mark.parametrize(("shown", "file", "key", "where"), ALL_SOURCED, ids=[e[3] for e in ALL_SOURCED])
def test_a_quoted_number_equals_its_results_file(shown, file, key, where):
    assert file, f"{where}: {shown} names key {key!r} but no file (put <!-- results: PATH --> before it)"
    path = ROOT / file
    assert path.is_file(), f"{where}: {shown}'s results file {file} does not exist"
    key, _, unit = key.partition(" ")
    assert unit in ("", *SCALES), f"{where}: unknown unit {unit!r} after {key} (one of {', '.join(SCALES)})"
    try:
        record = json.loads(path.read_text())
        value = _value(record, key) if key.startswith("machine.") else _value(measured_values(record), key)
    except (KeyError, IndexError, ValueError) as error:
        pytest.fail(f"{where}: {file} has no {key!r} ({error!r})")
    assert isinstance(value, (int, float)), f"{where}: {file}:{key} is {value!r}, not a number"
    value = value * SCALES.get(unit, 1)
    assert matches(shown, value), f"{where}: the page says {shown}, {file}:{key} holds {value} (rounded: not equal)"


def test_every_source_comment_follows_its_number():
    """`**0.469**<!-- key -->` would check nothing: the key must follow the digits directly (`**0.469<!-- key -->**`)."""
    orphans = []
    for page in PAGES:
        text = without_code(page.read_text())
        for match in re.finditer(r"<!--(?!\s*results:)\s*(.*?)\s*-->", text, flags=re.DOTALL):
            if not re.search(NUMBER + r"$", text[max(0, match.start() - 30) : match.start()]):
                orphans.append(f"{_page_name(page)}:{text.count(chr(10), 0, match.start()) + 1}: <!-- {match.group(1)} -->")
    assert not orphans, "source comments with no number right before them:\n" + "\n".join(orphans)


def unsourced(page: Path) -> list[str]:
    name = _page_name(page)
    return [f"{name}:{line}: {text!r}" for line, text in unsourced_in(page.read_text(), UNMEASURED.get(name, {}))]


def prose(text: str) -> str:
    """The page as the detector reads it, positions kept: code blanked, every comment `<!---->` (so "number<!--"
    still shows a source), and link targets blanked (a path or an anchor quotes nothing)."""
    text = re.sub(
        r"<!--.*?-->", lambda m: "<!--" + re.sub(r"[^\n]", "", m.group(0)[4:-3]) + "-->", without_code(text), flags=re.DOTALL
    )
    return re.sub(r"\]\([^)\s]*\)", lambda m: "](" + " " * (len(m.group(0)) - 3) + ")", text)


def quoted(text: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of every quoted number in `prose(page)` with no source comment right after its digits."""
    found, taken = [], []
    for match in LOOKS_MEASURED.finditer(text):  # with a unit, or after α, τ, ν
        taken.append(match.span())
        if not text.startswith("<!--", match.end()):
            found.append((*match.span(), match.group(0)))
    counts = {start for match in COUNT.finditer(text) for start in (match.start(1), match.start(2))}
    for match in BARE.finditer(text):  # without a unit
        start, end = match.span(1)
        shown = match.group(1)
        if any(a <= start < b for a, b in taken) or text.startswith("<!--", end) or REFERENCE.search(text[:start][-20:]):
            continue
        if "." in shown or "," in shown or len(shown.lstrip("-")) >= 3 or start in counts:
            found.append((start, end, shown))
    return sorted(found)


def exempt_spans(text: str, exempt) -> list[tuple[int, int]]:
    """Where the page writes an UNMEASURED entry (its words in order, any whitespace between)."""
    return [match.span() for phrase in exempt for match in re.finditer(phrase_pattern(phrase), text)]


def phrase_pattern(phrase: str) -> str:
    return r"\s+".join(re.escape(word) for word in phrase.split())


def unsourced_in(text: str, exempt) -> list[tuple[int, str]]:
    """(line, text) of every quoted number with no source comment right after it and no UNMEASURED entry around it."""
    text = prose(text)
    spans = exempt_spans(text, exempt)
    return [
        (text.count("\n", 0, start) + 1, shown)
        for start, end, shown in quoted(text)
        if not any(a <= start and end <= b for a, b in spans)
    ]


def test_the_detector_finds_planted_numbers_and_passes_sourced_ones():
    planted = "Plain 152 tokens/s, **1.27×** the other, α 0.43, a step 5.9 ms, 47 % of drafts, ν(2) = 1.21, 16.6M weights."
    assert [text for _, text in unsourced_in(planted, set())] == [
        "152 tokens/s",
        "1.27×",
        "α 0.43",
        "5.9 ms",
        "47 %",
        "ν(2) = 1.21",
        "16.6M",
    ]
    sourced = "Plain 152<!-- a --> tokens/s, **1.27<!-- b -->×**, α 0.43<!-- c -->, `--threads 2 ms` in code, a 4x2x1 tree."
    assert unsourced_in(sourced, set()) == []
    assert unsourced_in("a threshold of 1.05×", {"1.05×"}) == []


def test_the_detector_finds_numbers_without_a_unit():
    """A decimal, a number of three digits or more, and both numbers of a count are quoted, unit or not."""
    planted = "Agreement rose from 0.463 / 0.410, in 2085 steps over 3,711 requests; 39 of 41 drafts agreed."
    assert [text for _, text in unsourced_in(planted, set())] == ["0.463", "0.410", "2085", "3,711", "39", "41"]
    sourced = "Agreement rose from 0.463<!-- a --> in 2085<!-- b --> steps; 39<!-- c --> of 41<!-- d --> drafts agreed."
    assert unsourced_in(sourced, set()) == []
    not_quoted = (
        "γ 4 on 2 threads, lesson 8, SmolLM2-135M in Q4_1, Qwen2.5-Coder 0.5B, a 4x2x1 tree, gradio 6.31.0, "
        "Leviathan et al. 2023 (Theorem 3.8, arXiv 2211.17192), [the results](benchmarks/results/x_2048.json), `0.75` in code."
    )
    assert unsourced_in(not_quoted, set()) == []
    assert unsourced_in("(0.6, 2) → 1.96 / 1.53;\n(0.7, 3) → 2.53", {"(0.6, 2) → 1.96 / 1.53; (0.7, 3) → 2.53"}) == [], (
        "an UNMEASURED phrase covers every number in it, across a line break"
    )


def test_no_measured_looking_number_without_a_source():
    missing = [hit for page in PAGES for hit in unsourced(page)]
    assert not missing, (
        "quoted numbers that name no results file (add <!-- KEY --> after each, see docs/testing.md, or list a "
        "setting, limit or example in UNMEASURED with its reason):\n" + "\n".join(missing)
    )


def test_every_unmeasured_exception_says_why_and_still_exempts_a_number():
    problems = []
    for name, entries in UNMEASURED.items():
        text = prose((ROOT / name).read_text())
        numbers = quoted(text)
        for phrase, reason in entries.items():
            if not reason.strip():
                problems.append(f"{name}: {phrase!r} gives no reason")
            spans = exempt_spans(text, [phrase])
            if not spans:
                problems.append(f"{name}: {phrase!r} is no longer on the page (remove it)")
            elif not any(a <= start and end <= b for start, end, _ in numbers for a, b in spans):
                problems.append(f"{name}: {phrase!r} holds no quoted number (remove it)")
    assert not problems, "UNMEASURED entries to fix:\n" + "\n".join(problems)


def test_results_files_name_their_command_machine_and_date():
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    for path in files:
        record = json.loads(path.read_text())
        for field in ("command", "machine", "date", "results"):
            assert field in record, f"{path.relative_to(ROOT)} has no {field!r} (benchmarks/results.py writes it)"
        for field in ("cpu", "kernels", "cores", "torch"):
            assert field in record["machine"], f"{path.relative_to(ROOT)}'s machine has no {field!r}"


def test_the_rounding_rule():
    assert matches("0.47", 0.4686) and matches("0.469", 0.4686) and matches("47", 46.86)
    assert not matches("0.43", 0.4686) and not matches("0.468", 0.4686)
    assert matches("1,072", 1072.4) and matches("17,838", 17838)


def test_algorithm_md_numbers_the_cycles_steps_as_the_code_does():
    """docs/algorithm.md names the function that runs one cycle; its numbered phase comments are the page's steps."""
    page = (ROOT / "docs" / "algorithm.md").read_text()
    section = page.split("## The exact algorithm (one cycle)", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^(\d+)\. \*\*(.+?)\*\*", section, flags=re.MULTILINE)
    named = re.search(r"`(specviz/[\w/]+\.py):(\w+)` is this cycle", section)
    assert steps and named, "algorithm.md lists the cycle's steps and names the function that runs them"
    source = (ROOT / named.group(1)).read_text()
    functions = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)]
    body = next((ast.get_source_segment(source, f) for f in functions if f.name == named.group(2)), None)
    assert body, f"{named.group(1)} has no function {named.group(2)} (algorithm.md names it)"
    numbered = re.findall(r"^\s*# (\d+)\. (.+)$", body, flags=re.MULTILINE)
    assert [n for n, _ in numbered] == [n for n, _ in steps], (
        f"algorithm.md's steps {[f'{n}. {name}' for n, name in steps]} against {named.group(2)}'s phase comments "
        f"{[f'{n}. {text}' for n, text in numbered]}"
    )


def test_the_bundles_facts_file_matches_the_assets():
    """benchmarks/results/bundle_facts.json is rewritten when assets/ changes (python benchmarks/bundle_facts.py)."""
    from benchmarks.bundle_facts import facts

    recorded = json.loads((ROOT / "benchmarks" / "results" / "bundle_facts.json").read_text())["results"]
    assert facts() == recorded, "assets/ changed since bundle_facts.json was written: run python benchmarks/bundle_facts.py"
