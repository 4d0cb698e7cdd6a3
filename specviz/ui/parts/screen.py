"""What a run writes to: the parts that show a recorded run, the session's recording, and which run is current.

Every event that plays a run (Run, Step, a lesson, a replayed trace) lists the screen's outputs and yields
screen.show(update) for each runs.Update: each part answers for its own components, and the screen merges them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import gradio as gr
from gradio.components import Component

from specviz.ui.runs import Update
from specviz.ui.sessions import Sessions, Ticket

AS_SENT = dict(preprocess=False)  # handlers check the values as sent (ui/request.py): one sentence naming the field
PLAYING = dict(  # the events that play a run: the measuring slot, not the queue, serialises timings
    concurrency_limit=None, concurrency_id="play", trigger_mode="multiple", show_progress="hidden"
)

try:  # on a Hugging Face ZeroGPU Space, runs get a GPU; elsewhere this is a no-op
    import spaces

    on_gpu = spaces.GPU(duration=120)
except ImportError:

    def on_gpu(function):
        return function


class Shows(Protocol):
    """A part of the page that shows runs: its components, and what one Update changes there (parts left None: nothing)."""

    def outputs(self) -> list[Component]: ...

    def show(self, update: Update) -> dict: ...


class Stoppable(Shows, Protocol):
    def stopped(self) -> dict: ...


@dataclass
class Recorded:
    """The run on screen, in the session's state: its trace (inspector, export, Step) and Step's cursor."""

    trace: gr.State
    cursor: gr.State

    @classmethod
    def build(cls) -> Recorded:
        return cls(gr.State(None), gr.State((0, "decide")))

    def outputs(self) -> list[Component]:
        return [self.trace, self.cursor]

    def show(self, update: Update) -> dict:
        return {
            component: value
            for component, value in ((self.trace, update.trace), (self.cursor, update.cursor))
            if value is not None
        }


def session_of(http: gr.Request | None) -> str:
    return http.session_hash if http is not None and http.session_hash else "anonymous"


class Screen:
    """The parts a run writes to (the status line first: it has the last word after Stop) and each session's current run."""

    def __init__(self, status: Stoppable, recorded: Recorded, parts: Iterable[Shows], sessions: Sessions) -> None:
        self.status, self.recorded, self.sessions = status, recorded, sessions
        self.parts = [status, recorded, *parts]

    def outputs(self) -> set[Component]:
        return {component for part in self.parts for component in part.outputs()}

    def show(self, update: Update) -> dict:
        return {component: value for part in self.parts for component, value in part.show(update).items()}

    def start(self, http: gr.Request | None) -> Ticket:
        """A new run for the session: its older run stops at its next check."""
        return self.sessions.start(session_of(http))

    def stop(self, http: gr.Request | None) -> dict:
        self.sessions.stop(session_of(http))
        return self.status.stopped()

    def play(self, updates: Iterator[Update], ticket: Ticket) -> Iterator[dict]:
        """The run's updates for the page; when Stop retired the run, its last word is the stopped page.

        Stop does not cancel the run's event (a cancelled stream can leave its last output on the page after
        Stop's own); the run's generator notices Stop within 50 ms, or one cycle while measuring, and ends here.
        """
        for update in updates:
            yield self.show(update)
        if self.sessions.was_stopped(ticket):
            yield self.status.stopped()
