"""The lessons: one button each (in the controls' column), and the panel where a lesson explains the run it measured.

A lesson sets the request's inputs to its scenario, runs it like Run, measures its comparison runs, then explains
(runs.run_lesson)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
from gradio.components import Component

from specviz.ui import runs
from specviz.ui.guard import in_sentences
from specviz.ui.lessons import Lesson
from specviz.ui.parts.screen import AS_SENT, PLAYING, Screen, on_gpu
from specviz.ui.request import RUN_FIELDS


@dataclass
class LessonPanel:
    text: gr.HTML
    chart: gr.Plot

    def outputs(self) -> list[Component]:
        return [self.text, self.chart]

    def show(self, update: runs.Update) -> dict:
        out = {self.text: update.lesson} if update.lesson is not None else {}
        if update.lesson_chart is not None:
            out[self.chart] = gr.update(value=update.lesson_chart, visible=True)
        return out


def buttons(lessons: list[Lesson]) -> list[tuple[gr.Button, Lesson]]:
    with gr.Accordion("Lessons: one click each", open=True, elem_id="lessons"):
        return [
            (gr.Button(f"{n}. {lesson.title}", size="sm", elem_id=lesson.key, elem_classes=["sv-lesson"]), lesson)
            for n, lesson in enumerate(lessons, start=1)
        ]


def panel() -> LessonPanel:
    return LessonPanel(
        text=gr.HTML("", elem_id="lesson", elem_classes=["sv-lesson-text"]),
        chart=gr.Plot(visible=False, elem_id="lesson-chart", show_label=False),
    )


def wire(
    lesson_buttons: list[tuple[gr.Button, Lesson]], panel: LessonPanel, inputs: dict[str, Component], screen: Screen
) -> None:
    """Each button sets `inputs` (by RunRequest field name) to its lesson's request, keeps the chosen playback, and
    plays the lesson on `screen` (which shows `panel`)."""
    outputs = screen.outputs() | set(inputs.values())
    for button, lesson in lesson_buttons:
        button.click(on_gpu(lesson_clicked(lesson, panel, inputs, screen)), [inputs["playback"]], outputs, **PLAYING, **AS_SENT)


def lesson_clicked(lesson: Lesson, panel: LessonPanel, inputs: dict[str, Component], screen: Screen):
    @in_sentences
    def lesson_clicked(playback_choice: str, http: gr.Request):
        playback_choice = RUN_FIELDS["playback"].read(playback_choice)
        ticket = screen.start(http)
        request = lesson.request
        yield {component: getattr(request, name) for name, component in inputs.items() if name != "playback"} | {
            panel.chart: gr.update(visible=False)
        }
        yield from screen.play(runs.run_lesson(lesson, playback_choice, ticket, screen.sessions), ticket)

    return lesson_clicked
