"""The command lines the README and docs/ show parse with the real argument parsers, and docs/cli.md names every flag.

A renamed or removed flag fails here instead of in a reader's terminal. Parsing only: nothing is loaded or run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

from specviz.cli import COMMANDS, build_parser
from specviz.drafting.registry import drafter_keys, tree_drafter_keys

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BASH_BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)
OURS = (("python", "-m", "specviz"), ("python", "-m", "specviz.train"), ("python", "app.py"))


def command_lines(text: str) -> list[list[str]]:
    """Each of our commands in the text's ```bash blocks, as words: continuations joined, comments, `&&` chains and
    leading VAR=value assignments taken apart."""
    found = []
    for block in BASH_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            command: list[str] = []
            for word in [*words, "&&"]:
                if word in ("&&", ";", "||", "|"):
                    while command and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", command[0]):
                        command.pop(0)
                    if any(tuple(command[: len(ours)]) == ours for ours in OURS):
                        found.append(command)
                    command = []
                else:
                    command.append(word)
    return found


def shown_commands() -> list[tuple[str, list[str]]]:
    return [(page.relative_to(ROOT).as_posix(), words) for page in PAGES for words in command_lines(page.read_text())]


def complaint(words: list[str]) -> str | None:
    """None when the command line parses, else what its parser said."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            if words[:3] == ["python", "-m", "specviz"]:
                build_parser(words[3:]).parse_args(words[3:])
            elif words[:3] == ["python", "-m", "specviz.train"]:
                from specviz.training.bundled_pair import parse_args

                saved, sys.argv = sys.argv, ["specviz.train", *words[3:]]
                try:
                    parse_args()
                finally:
                    sys.argv = saved
            elif words[2:]:
                return f"app.py takes no arguments, got {words[2:]}"
    except SystemExit as exit:
        return said.getvalue().strip() or f"exit status {exit.code}"
    return None


def test_the_pages_show_commands_to_check():
    shown = shown_commands()
    assert len(shown) >= 20, f"only {len(shown)} command lines found: is the ```bash block pattern still right?"
    readme = [words for page, words in shown if page == "README.md"]
    assert ["python", "app.py"] in readme, "the README's first command runs the app"
    assert complaint(["python", "-m", "specviz", "run", "--prompt", "x", "--no-such-flag"]), "a bad flag must be caught"
    assert complaint(["python", "app.py", "--port", "1"]), "app.py takes no arguments"


@pytest.mark.parametrize(
    ("page", "words"), shown_commands(), ids=lambda value: value if isinstance(value, str) else " ".join(value[:4])
)
def test_a_shown_command_line_parses(page, words):
    assert complaint(words) is None, f"{page}: `{shlex.join(words)}` does not parse: {complaint(words)}"


def test_docs_cli_names_every_flag_of_every_command():
    documented = (ROOT / "docs" / "cli.md").read_text()
    parser = build_parser([])
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction)).choices
    missing = [
        f"{name} {flag}"
        for name in COMMANDS
        for action in commands[name]._actions
        for flag in action.option_strings
        if flag not in ("-h", "--help") and f"`{flag}`" not in documented
    ]
    assert not [name for name in COMMANDS if f"### `{name}`" not in documented], "every command has its section"
    assert not missing, f"docs/cli.md does not name: {', '.join(missing)}"


NAMED_PATH = re.compile(r"(?<![\w/.~-])((?:specviz|tests|benchmarks|assets|docs|\.ci)/[\w./-]*[\w/])")
NOT_HERE_YET = {"assets/pycode-target/model.safetensors"}  # unpacked from its .xz on first load (specviz/models/stored.py)


def test_every_path_the_pages_name_exists():
    """A module moved or renamed leaves its old path in the docs: listed here, page by page."""
    stale = [
        f"{page.relative_to(ROOT).as_posix()}: {path}"
        for page in PAGES
        for path in NAMED_PATH.findall(page.read_text())
        if path not in NOT_HERE_YET and not (ROOT / path).exists()
    ]
    assert not stale, "paths named in the docs that do not exist:\n" + "\n".join(stale)


DRAFTER_CHOICES = re.compile(r"--drafter`? ((?:[a-z0-9]+\\?\|)+[a-z0-9]+)")  # --drafter model|adaptive|…, `\|` in tables
DRAFTER_SENTENCE = re.compile(r"`--drafter` takes ([^(.]*)")
TREE_DRAFTERS = re.compile(r"(?:grow trees \(|drafts chains only \()([^)]*)\)")


def drafter_lists(text: str) -> list[tuple[str, list[str]]]:
    """Each list of drafters a page gives: ("all", keys) for the --drafter choices, ("trees", keys) for those that grow trees."""
    lists = [("all", re.split(r"\\?\|", found)) for found in DRAFTER_CHOICES.findall(text)]
    lists += [("all", re.findall(r"`([a-z0-9]+)`", found)) for found in DRAFTER_SENTENCE.findall(text)]
    lists += [("trees", re.findall(r"`([a-z0-9]+)`", found)) for found in TREE_DRAFTERS.findall(text.replace("\n", " "))]
    return lists


def test_every_list_of_drafters_in_the_docs_names_them_all():
    """A drafter registered in specviz/drafting/registry.py is missing from no list the pages give."""
    expected = {"all": set(drafter_keys()), "trees": set(tree_drafter_keys())}
    found = [(page.relative_to(ROOT).as_posix(), kind, keys) for page in PAGES for kind, keys in drafter_lists(page.read_text())]
    assert len(found) >= 8, f"only {len(found)} drafter lists found: are the patterns still right?"
    wrong = [
        f"{page} ({kind}): {keys}, not {sorted(expected[kind])}" for page, kind, keys in found if set(keys) != expected[kind]
    ]
    assert not wrong, "drafter lists that leave one out or name one that is not registered:\n" + "\n".join(wrong)
    strategies = (ROOT / "docs" / "pairs.md").read_text()
    assert not [key for key in drafter_keys() if f"| `{key}` |" not in strategies], "pairs.md's table has a row per drafter"
    assert drafter_lists("`--drafter model|lookup`; grow trees (`model` or\n`feature`)") == [
        ("all", ["model", "lookup"]),
        ("trees", ["model", "feature"]),
    ], "the patterns read a list written across lines"


RESULTS = ROOT / "benchmarks" / "results"
KEPT_BY_COMMAND = re.compile(r"benchmarks/results\.py ([a-z0-9_]+)")  # `python benchmarks/results.py name -- command`


def results_names() -> set[str]:
    """The names of results files: those a benchmark writes (write_results), those the pages' commands save, those kept."""
    scripts = "\n".join(path.read_text() for path in sorted((ROOT / "benchmarks").glob("*.py")))
    pages = "\n".join(page.read_text() for page in PAGES)
    written = set(re.findall(r'write_results\("([a-z0-9_]+)"', scripts)) | set(KEPT_BY_COMMAND.findall(pages))
    return written | {path.stem for path in RESULTS.glob("*.json")}


def test_every_results_file_the_pages_name_is_kept():
    """A page that names NAME.json of a benchmark quotes a file the repository keeps; else it gives the command only."""
    names = results_names()
    assert {"first_start", "llama_cpp_side_by_side", "bench_real_pair"} <= names, "the names are read from the benchmarks"
    missing = [
        f"{page.relative_to(ROOT).as_posix()}: {name}.json"
        for page in PAGES
        for name in re.findall(r"(?<![\w-])([\w-]+)\.json", page.read_text())
        if name in names and not (RESULTS / f"{name}.json").is_file()
    ]
    assert not missing, "results files named in the docs that benchmarks/results/ does not keep:\n" + "\n".join(missing)


LINK_TO_HEADING = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")  # [text](page.md#heading) or [text](#heading)


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#+ (.*)$", re.sub(r"```.*?```", "", text, flags=re.DOTALL), flags=re.MULTILINE):
        anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        repeat = sum(1 for seen in anchors if re.fullmatch(re.escape(anchor) + r"(-\d+)?", seen))
        anchors.add(f"{anchor}-{repeat}" if repeat else anchor)
    return anchors


def test_every_link_to_a_heading_finds_it():
    """A heading renamed leaves links to its old anchor: listed here, page by page."""
    broken = [
        f"{page.relative_to(ROOT).as_posix()}: {target}#{anchor}"
        for page in PAGES
        for target, anchor in LINK_TO_HEADING.findall(page.read_text())
        if (page.parent / target).suffix in (".md", "")
        and anchor not in heading_anchors((page.parent / target if target else page).read_text())
    ]
    assert heading_anchors("# `--gamma auto`: what pays\n## Notes\n## Notes") == {"--gamma-auto-what-pays", "notes", "notes-1"}
    assert not broken, "links to headings that do not exist:\n" + "\n".join(broken)
