"""`python -m specviz run | bench | score | hardware | theory | report | distill | fetch | export`: the command-line face of the engine.

One module per command (specviz/cli/<command>.py), each with `add_parser` and `command`; the library does the work
and the module keeps the arguments and the printing. Only the module of the command being run is imported, so
`theory` loads no torch (tests/test_cli.py). A command validates everything it can before loading a model, and bad
input becomes one line on stderr with exit status 2. Every flag and JSON key is documented in docs/cli.md
(tests/test_docs_commands.py checks the flags).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import import_module

from specviz.cli.options import set_threads
from specviz.models.catalogue import PairError
from specviz.process.logs import configure as configure_logging

COMMANDS = ("run", "bench", "score", "hardware", "theory", "report", "distill", "fetch", "export")  # in --help's order
QUIET_LIBRARIES = {  # read by transformers and huggingface_hub as they load: no progress bars or advice in our output
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse's own complaints (a missing option, a bad choice) as one line, like ours, instead of the usage block."""

    def error(self, message: str) -> None:
        self.exit(2, f"specviz: error: {self.prog.removeprefix('python -m ')}: {message} (see --help)\n")


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser for this command line: the named command's module alone, or every command's for --help."""
    parser = OneLineParser(prog="python -m specviz", description="Speculative decoding, run for real.")
    commands = parser.add_subparsers(dest="command", required=True)
    named = [name for name in COMMANDS if list(argv[:1]) == [name]]
    for name in named or COMMANDS:
        import_module(f"specviz.cli.{name}").add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    for name, value in QUIET_LIBRARIES.items():
        os.environ.setdefault(name, value)
    configure_logging()  # the library's messages on stderr: stdout is the command's output alone (--json stays JSON)
    args = build_parser(argv).parse_args(argv)
    try:
        if getattr(args, "threads", None) is not None:
            set_threads(args.threads)
        return args.handler(args)
    except (ValueError, PairError) as error:  # UsageError, SettingsError, PromptError, CatalogueError are ValueErrors
        print(f"specviz: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
