"""Run details and traces: the pair's device, sizes and memory; export the run on screen as a JSON trace, or replay a
shared one (read within its size limit and checked field by field, run/trace_schema.py, before it plays)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

import gradio as gr
from gradio.components import Component

from specviz.checked import InputError
from specviz.run.trace import Trace
from specviz.run.trace_schema import read_trace_text
from specviz.ui import runs, texts
from specviz.ui.guard import in_sentences
from specviz.ui.parts.screen import PLAYING, Screen
from specviz.ui.request import DEFAULT_PLAYBACK


@dataclass
class Traces:
    details: gr.Markdown
    import_file: gr.File

    def outputs(self) -> list[Component]:
        return [self.details]

    def show(self, update: runs.Update) -> dict:
        if update.trace is None or not update.trace.pair.known:
            return {}
        return {self.details: texts.details_markdown(update.trace.pair)}


@in_sentences
def export_trace(trace: Trace | None):
    if trace is None or not trace.complete:
        raise gr.Error("Nothing to export yet: run a prompt first.")
    handle = tempfile.NamedTemporaryFile("w", suffix=".specviz.json", prefix="trace-", delete=False)
    handle.write(trace.to_json())
    handle.close()
    return handle.name


def build(trace: gr.State) -> Traces:
    """The tab's contents; `trace` holds the run on screen. A replay is wired by wire_replay, once the screen is laid out."""
    details = gr.Markdown("No pair loaded yet.", elem_id="details")
    with gr.Row():
        export_button = gr.Button("Export this run as a JSON trace", elem_id="export")
        export_file = gr.File(label="trace", elem_id="export-file")
    import_file = gr.File(label="Replay a trace (.json)", file_types=[".json"], type="filepath", elem_id="import")
    export_button.click(export_trace, trace, export_file)
    return Traces(details, import_file)


def wire_replay(traces: Traces, prompt: gr.Textbox, screen: Screen) -> None:
    """An uploaded trace plays on the screen as a run would, its prompt in the prompt box."""

    @in_sentences
    def import_trace(path: str | None, http: gr.Request):
        if not path:
            return
        try:
            trace = Trace.from_json(read_trace_text(path))
        except InputError as error:
            raise gr.Error(f"Cannot replay that file: {error}") from None
        ticket = screen.start(http)
        yield {prompt: trace.prompt}
        yield from screen.play(runs.play(trace, DEFAULT_PLAYBACK, ticket, screen.sessions), ticket)

    traces.import_file.upload(import_trace, traces.import_file, screen.outputs() | {prompt}, **PLAYING)
