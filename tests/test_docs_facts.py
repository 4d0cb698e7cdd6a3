"""The facts the README and docs/ state about the code are read from the code: how many lessons and which, the
commands, the pairs, what installing needs. A lesson, command or pair added or removed fails here until the pages say so.

(Drafter lists, flags, paths, links and measured numbers have their own tests: test_docs_commands.py, test_doc_numbers.py.)
"""

from __future__ import annotations

import re
from pathlib import Path

from specviz.cli import COMMANDS
from specviz.models.catalogue import load_catalogue
from specviz.ui.lessons import lessons

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = {path.name: path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}
PAGES = {"README.md": README, **{f"docs/{name}": text for name, text in DOCS.items()}}
README_MOST_LINES = 200


def every_lesson():
    """The lessons the page builds where every optional pair is there (the SmolLM2 pair, the coder pair and its head)."""
    return lessons("pycode-distilled", "pycode-plain", "smollm2", coder_pair="coder", coder_head=True)


def test_the_readme_stays_short():
    lines = README.count("\n")
    assert lines <= README_MOST_LINES, f"README.md is {lines} lines, over {README_MOST_LINES}: move detail into docs/"


def test_the_readme_says_what_installing_needs():
    assert "g++" in README and "apt-get install g++" in README, "the README names the C++ compiler the kernels need"
    assert "pip install ." in README and "specviz --help" in README, "installing as a package, and its command"
    assert "[LICENSE](LICENSE)" in README and "MIT" in README, "the licence"
    assert "[THIRD_PARTY_NOTICES.md](THIRD_PARTY_NOTICES.md)" in README, "and where the vendored code's licences are"
    required = re.search(r'^requires-python\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), flags=re.MULTILINE)[1]
    oldest = re.fullmatch(r">=\s*(\d+\.\d+)", required)
    assert oldest, f"pyproject.toml's requires-python is {required!r}: say in the README what it means"
    assert f"Python {oldest[1]} or later" in README, f"the README names the oldest Python, {oldest[1]} ({required})"


def test_every_count_and_list_of_lessons_is_the_pages():
    built = every_lesson()
    count = len(built)
    assert [lesson.key for lesson in built] == [f"lesson-{n}" for n in range(1, count + 1)], "lessons are numbered in order"
    page = DOCS["page.md"]
    for name, text in (("README.md", README), ("docs/page.md", page)):
        said = re.findall(r"(\w+) one-click scenarios", text)
        assert said and set(said) == {str(count)}, f"{name} gives the lessons as {said}, the page has {count}"
    assert f"`#lesson-1` … `#lesson-{count}`" in page, f"docs/page.md names the buttons #lesson-1 … #lesson-{count}"
    section = page[page.index("\n## Lessons\n") :]
    listed = re.findall(r"^(\d+)\. \*\*(.+?)\*\*", section, flags=re.MULTILINE)
    assert listed == [(str(n), lesson.title) for n, lesson in enumerate(built, start=1)], (
        "docs/page.md's list of lessons, in order and by title, is the one specviz/ui/lessons.py builds"
    )


def test_every_list_of_commands_names_them_all():
    listed = re.search(r"`python -m specviz ((?:[a-z]+ \| )+[a-z]+)`", DOCS["architecture.md"])
    assert listed and listed[1].split(" | ") == list(COMMANDS), f"architecture.md's command list is not {COMMANDS}"
    described = README[README.index("## The command line") :]
    missing = [name for name in COMMANDS if f"`{name}`" not in described]
    assert not missing, f"the README's command line section does not describe {missing}"


def test_the_pairs_the_pages_name_are_the_catalogues():
    catalogue = load_catalogue()
    named = {(page, name) for page, text in PAGES.items() for name in re.findall(r"--pair[ =]([a-z0-9][\w.-]*)", text)}
    unknown = sorted(f"{page}: {name}" for page, name in named if name not in catalogue.pairs)
    assert len(named) >= 10 and not unknown, f"pages name pairs models.yaml does not have: {unknown}"
    pairs_section = README[README.index("## The pairs") : README.index("## The command line")]
    unlisted = [name for name in catalogue.offline_pairs() if f"**`{name}`**" not in pairs_section]
    assert not unlisted, f"the README's pairs section leaves out the pairs that run offline: {unlisted}"


def test_the_real_pairs_have_names_of_their_own():
    """Two real pairs ship (the SmolLM2 pair and the coder pair): "the real pair" would say which one only by context."""
    vague = [
        f"{page}:{text[: match.start()].count(chr(10)) + 1}"
        for page, text in PAGES.items()
        for match in re.finditer(r"\bthe real pair\b", text, flags=re.IGNORECASE)
    ]
    assert not vague, "say 'the SmolLM2 pair' or 'the coder pair', not 'the real pair': " + ", ".join(vague)
