"""Where specviz's messages go: one short line each on stderr, so a command's stdout holds its output alone.

Every module logs to `logging.getLogger(__name__)` (a child of the "specviz" logger) and prints nothing; a command's
entry (`specviz`, `python -m specviz.train`, the training scripts, the compile worker) and `python app.py` call
`configure()` once. Importing specviz configures nothing: an application that embeds it keeps its own logging.
"""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever `sys.stderr` is when a message is logged (pytest swaps it per test)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure(level: int = logging.INFO) -> None:
    """specviz's messages at `level` and above on stderr, `12:03:04 WARNING specviz.engine.compiled: …`; a second
    call changes nothing. Other libraries' loggers keep their own settings."""
    logger = logging.getLogger("specviz")
    if not any(isinstance(handler, _Stderr) for handler in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
        logger.addHandler(handler)
    logger.setLevel(level)
