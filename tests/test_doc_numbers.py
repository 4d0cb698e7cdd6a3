"""Every measured number in README.md and docs/ equals the results file it came from.

A measured number is written with its source right after it, in an HTML comment a reader of the rendered page does
not see (docs/testing.md, "Numbers in the docs"):

    <!-- results: assets/smollm2-135m-eagle/distill_report.json -->   the file the keys below read, until the next one
    α 0.469<!-- measured.rows.1.alpha -->                             a dotted key into that file (list items by index)
    about 47<!-- measured.rows.1.alpha % --> %                        a unit after the key: the file's value in it
    5.2<!-- smollm2_head.parameters M -->M parameters                 (%, k, M, MB, MiB, GB, min, ms, µs; the file
    1.2<!-- benchmarks/results/x.json#rows.0.nu -->                   holds fractions, counts, bytes and seconds)
                                                                      and a file named in the key itself

Keys of a benchmarks/results/ file start inside its "results" (beside "command", "machine" and "date").
Rounding: the doc's number is the file's value rounded to the digits the doc shows (0.47 stands for 0.465 … 0.475).
A number that looks measured (followed by ×, tokens/s, ms, s, %, MB …, or after α, τ, ν) and has no source fails,
unless it is one of UNMEASURED below: settings, thresholds, limits and the examples in formulas. Pure text and JSON:
nothing is loaded or run.
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
UNITS = r"(?:×(?!\s?\d)|x\b|tokens/s|tok/s|tokens per s|ms\b|µs\b|s\b|%|MB\b|GB\b|MiB\b|GiB\b|KB\b|M\b|min\b|h\b)"
LOOKS_MEASURED = re.compile(NUMBER + r"\s?" + UNITS + r"|(?:[ατν]|ν\(\d+\))\s?[=≈]?\s?" + NUMBER)
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)

# Numbers that look measured but are not: settings, thresholds, limits, definitions and worked examples. Each entry
# is the text as the page writes it (number and unit), exempt on that page only; an entry the page no longer has
# fails, so the list cannot go stale.
UNMEASURED: dict[str, set[str]] = {
    "README.md": {
        "1.05×",  # the verdict's threshold (readings.speed_verdict)
        "0.95×",
        "10×",  # playback speeds
        "50×",
        "135M",  # the model's name
        "10 MB",  # the Hub's limit for a file outside LFS
    },
    "docs/algorithm.md": {
        "τ = 0",  # Leviathan et al.'s Table 1 and a worked example of the formula (tests/test_theory.py)
        "τ = 0.01",
        "α = 0.8",
        "3.51×",
        "4.23×",
    },
    "docs/cli.md": {
        "α = 0.5",  # settings and the article's rules of thumb
        "25 %",
    },
    "docs/hosting.md": {
        "10 MB",  # the Hub's limit for a plain git push
        "60 MiB",  # the limit tests/test_stored.py holds
    },
    "docs/numbers.md": {
        "0 ms",  # what a burst's gaps are, by definition
        "1.05×",  # the verdict's thresholds
        "0.95×",
    },
    "docs/page.md": {
        "8 s",  # playback and waiting settings, limits
        "10×",
        "50×",
        "8 MiB",
    },
    "docs/testing.md": {
        "135M",  # the model's name
        "60 MiB",  # the limit tests/test_stored.py holds
        "0.2 s",  # a test's planted delay
    },
    "docs/pairs.md": {
        "1.5×",  # the speedup a well-accepted draft gives, the pair's goal
        "16 MB",  # the sizes benchmarks/verify_cost_by_size.py sweeps (settings)
        "2 GB",
    },
    "docs/performance.md": {
        "16 MB",  # the sizes benchmarks/verify_cost_by_size.py sweeps (settings)
        "256 MB",
        "2 GB",
        "189 MB",  # computed from SmolLM2's config, as the line shows
        "2 ×",
        "64 ×",
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
        data = data[int(part)] if isinstance(data, list) else data[part]
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
        value = _value(measured_values(json.loads(path.read_text())), key)
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
    return [f"{name}:{line}: {text!r}" for line, text in unsourced_in(page.read_text(), UNMEASURED.get(name, set()))]


def unsourced_in(text: str, exempt: set[str]) -> list[tuple[int, str]]:
    """(line, text) of every measured-looking number with no source comment right after it."""
    text = without_code(text)
    text = re.sub(r"<!--.*?-->", "<!---->", text, flags=re.DOTALL)  # keep "number<!--" visible, drop the keys
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(0))
        for match in LOOKS_MEASURED.finditer(text)
        if not text.startswith("<!--", match.end()) and match.group(0) not in exempt
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


def test_no_measured_looking_number_without_a_source():
    missing = [hit for page in PAGES for hit in unsourced(page)]
    assert not missing, (
        "numbers that look measured but name no results file (add <!-- KEY --> after each, see docs/testing.md, "
        "or list a setting in UNMEASURED):\n" + "\n".join(missing)
    )


def test_every_unmeasured_exception_is_still_on_its_page():
    stale = [
        f"{name}: {text!r}"
        for name, texts in UNMEASURED.items()
        for text in texts
        if text not in CODE.sub(" ", (ROOT / name).read_text())
    ]
    assert not stale, "exceptions no page writes any more (remove them from UNMEASURED):\n" + "\n".join(stale)


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
