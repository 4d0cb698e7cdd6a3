"""The last word on any error in a handler: one plain sentence for the user, the traceback only in the server's log.

Every handler the page or the API can call is wrapped in `in_sentences`: a wrong value (InputError and the
other errors whose message is written for users) shows its sentence and is logged as one line; anything else is
logged with its traceback and the user reads SOMETHING_WENT_WRONG, never an exception's text. The server keeps
serving. Every gr.Error leaving here says `print_exception=False`, so gradio prints no traceback of its own.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable

import gradio as gr

from specviz.checked import InputError
from specviz.engine.settings import SettingsError
from specviz.models.catalogue import CatalogueError, PairError
from specviz.run.runner import PromptError

log = logging.getLogger("specviz")
FOR_USERS = (InputError, SettingsError, PromptError, PairError, CatalogueError)  # their messages are sentences for users
OUT_OF_MEMORY = "The device ran out of memory: try a smaller pair, fewer new tokens or a shorter prompt."
SOMETHING_WENT_WRONG = "Something went wrong on our side; it has been logged. Please try again, or try other settings."


def refused(message: str, title: str = "Error", duration: float | None = 10) -> gr.Error:
    """The user's sentence, logged as one line: a refused input is no failure, so gradio prints no traceback."""
    log.warning("refused: %s", message)
    return gr.Error(message, duration=duration, title=title, print_exception=False)


def user_error(error: Exception) -> gr.Error:
    """One sentence for the user; only unexpected errors are logged with their traceback, once."""
    if isinstance(error, gr.Error):
        return refused(error.message, error.title, error.duration)
    if type(error).__name__ == "OutOfMemoryError":
        return refused(OUT_OF_MEMORY)
    if isinstance(error, FOR_USERS):
        return refused(str(error))
    log.error("a handler failed", exc_info=error)
    return gr.Error(SOMETHING_WENT_WRONG, print_exception=False)  # its traceback is logged above


def in_sentences(handler: Callable) -> Callable:
    """The handler (a function or a generator) with every exception turned into user_error's sentence."""
    if inspect.isgeneratorfunction(handler):

        @functools.wraps(handler)
        def streaming(*args, **kwargs):
            try:
                yield from handler(*args, **kwargs)
            except Exception as error:
                raise user_error(error) from None

        return streaming

    @functools.wraps(handler)
    def answering(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except Exception as error:
            raise user_error(error) from None

    return answering
