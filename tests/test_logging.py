"""The library logs, the commands print: a command's stdout holds its output alone, so `--json` is JSON whatever the
library has to say (specviz/process/logs.py)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from tests.test_cli import specviz

PACKAGE = Path(__file__).resolve().parents[1] / "specviz"
COMMANDS = PACKAGE / "cli"  # each command prints its own output; everything else logs


def test_nothing_outside_the_commands_prints():
    """A `print` anywhere in the library (called, or passed on as a progress callback) writes into the output of
    whichever command runs it: `specviz run --json` would stop being JSON. Modules log to
    `logging.getLogger(__name__)` instead."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(COMMANDS):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Name) and node.id == "print":
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not found, f"print in the library (log instead: logging.getLogger(__name__)): {found}"


def test_json_output_stays_json_when_the_library_warns():
    """A real warning on the way (compiling asked for, no C++ compiler: the fast path says it runs eager) goes to
    stderr, one line each, and stdout still parses as the command's JSON."""
    result = specviz(
        "run", "--prompt", "def main():\n", "--max-new-tokens", "8", "--gamma", "3", "--json",
        env={"SPECVIZ_COMPILE": "1", "CXX": "/no/such/c++"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "no C++ compiler" in line]
    assert warned, f"the injected warning did not happen, so this test tested nothing; stderr: {result.stderr!r}"
    assert all(" WARNING specviz." in line for line in warned), warned  # our logger's one-line format, each
    assert any("WARNING specviz.engine.compiled: " in line for line in warned), warned  # the fast path runs eager
    try:
        output = json.loads(result.stdout)
    except json.JSONDecodeError as error:
        raise AssertionError(f"stdout is not pure JSON ({error}): {result.stdout[:400]!r}") from None
    assert len(output["new_token_ids"]) == 8 and output["engine"] == "eager"
