"""`python -m specviz run | bench | score | hardware | theory | report`: the command-line face of the engine.

One module per command (run, bench, score, hardware, theory, report), each with `add_parser` and `command`; a
command validates everything it can before loading a model, and bad input becomes one line on stderr with
exit status 2. Every flag and JSON key is documented in the README, "Command line".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch
from transformers.utils import logging

from specviz.cli import bench, distill, fetch, hardware, report, run, score, theory
from specviz.cli.options import UsageError, resolve_pair, settings_from
from specviz.cli.run import run_to_dict
from specviz.deployment.hardware import HardwareError
from specviz.engine import SettingsError
from specviz.models.catalogue import CatalogueError
from specviz.models.loading import PairError
from specviz.runner import PromptError

__all__ = ["UsageError", "main", "resolve_pair", "run_to_dict", "settings_from"]
COMMANDS = (run, bench, score, hardware, theory, report, distill, fetch)  # in --help's order


class OneLineParser(argparse.ArgumentParser):
    """argparse's own complaints (a missing option, a bad choice) as one line, like ours, instead of the usage block."""

    def error(self, message: str) -> None:
        self.exit(2, f"specviz: error: {self.prog.removeprefix('python -m ')}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m specviz", description="Speculative decoding, run for real.")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def set_threads(threads: int) -> None:
    """Timed commands on a shared CPU: one thread is not held up waiting for a second one that was preempted."""
    if threads < 1:
        raise UsageError(f"--threads must be at least 1 (got {threads})")
    torch.set_num_threads(threads)


def quiet_libraries() -> None:
    """Keep library progress bars and advice off the CLI's output."""
    logging.set_verbosity_error()
    logging.disable_progress_bar()


def main(argv: Sequence[str] | None = None) -> int:
    quiet_libraries()
    args = build_parser().parse_args(argv)
    try:
        threads = getattr(args, "threads", None)
        if threads is not None:
            set_threads(threads)
        return args.handler(args)
    except (UsageError, SettingsError, PromptError, PairError, CatalogueError, ValueError) as error:
        print(f"specviz: error: {error}", file=sys.stderr)
        return 2
    except HardwareError as error:
        print(f"specviz: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
