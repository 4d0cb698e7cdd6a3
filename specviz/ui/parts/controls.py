"""What the user asks for: the pair picker, a preset prompt, the prompt, and the settings, as {RunRequest field name:
component} (Run, Step and the lessons read them by name, never by position)."""

from __future__ import annotations

import gradio as gr
from gradio.components import Component

from specviz.drafting.registry import drafter_choices
from specviz.engine.settings import MAX_GAMMA
from specviz.run.runner import MAX_PROMPT_CHARS
from specviz.serving import pair_cache
from specviz.ui.choices import pair_choices, preset_choices
from specviz.ui.guard import in_sentences
from specviz.ui.parts.screen import AS_SENT
from specviz.ui.request import (
    ACCEPTANCE_RULES,
    DEFAULT_PLAYBACK,
    MAX_NEW_TOKENS,
    MAX_TEMPERATURE,
    PLAYBACK,
    RUN_FIELDS,
    TREE_CONTROL,
    RunRequest,
)

AUTO_INFO = (
    "measured once per machine and pair (verify passes of 1–8 rows and a short calibration run), kept in specviz's "
    "cache; moving γ or the tree drafts what you pick instead"
)
VERIFICATION_INFO = (
    "exact: the min(1, p/q) test, token by token · block: the block judged jointly (Sun et al. 2025) · "
    "match: keep a draft while it equals the target's own sample (llama.cpp) · greedy: argmax · "
    "lenient: accepts more, LOSSY"
)


@in_sentences
def preset_picked(value: object):
    """A preset into the prompt box; anything that is not one of the presets leaves the box as it is."""
    return value if value in {prompt for _, prompt in preset_choices()} else gr.update()


def prompt_box(default: RunRequest) -> dict[str, Component]:
    """The pair and the prompt, with a menu of preset prompts that fills the prompt box."""
    pair = gr.Dropdown(pair_choices(), value=default.pair, label="Draft → target pair", elem_id="pair")
    preset = gr.Dropdown(
        preset_choices(), label="Preset prompt (code, prose, repetitive, arithmetic)", value=None, elem_id="preset"
    )
    prompt = gr.Textbox(
        default.prompt, label=f"Prompt (up to {MAX_PROMPT_CHARS:,} characters)", lines=5, max_lines=14, elem_id="prompt"
    )
    preset.change(preset_picked, preset, prompt, **AS_SENT)
    return {"pair": pair, "prompt": prompt}


def settings(default: RunRequest, pair: gr.Dropdown) -> dict[str, Component]:
    """Every other field of a RunRequest; picking a pair sets its γ, temperature and drafter."""
    with gr.Accordion("Settings", open=True):
        auto = gr.Checkbox(
            value=default.auto,
            label="γ auto: draft the chain or tree measured to pay on this machine",
            info=AUTO_INFO,
            elem_id="gamma-auto",
        )
        gamma = gr.Slider(1, MAX_GAMMA, value=default.gamma, step=1, label="γ: drafts per cycle", elem_id="gamma")
        tree = gr.Dropdown(value=default.tree, elem_id="tree-shape", **TREE_CONTROL)
        verification = gr.Radio(
            list(ACCEPTANCE_RULES), value="exact", label="Verification", info=VERIFICATION_INFO, elem_id="verification"
        )
        lenience = gr.Slider(
            0.05,
            1.0,
            value=0.5,
            step=0.05,
            label="Lenience l: accept if u ≤ p / (l·q). LOSSY below 1",
            visible=False,
            elem_id="lenience",
        )
        temperature = gr.Slider(
            0.0, MAX_TEMPERATURE, value=0.0, step=0.05, label="Temperature (0 = greedy)", elem_id="temperature"
        )
        max_new_tokens = gr.Slider(
            1, MAX_NEW_TOKENS, value=default.max_new_tokens, step=1, label="Max new tokens", elem_id="max-new-tokens"
        )
        playback = gr.Radio(
            list(PLAYBACK),
            value=DEFAULT_PLAYBACK,
            label="Playback of the measured run (timings are always the real ones)",
            elem_id="playback",
        )
    with gr.Accordion("More settings", open=False):
        drafter = gr.Radio(drafter_choices(), value=default.drafter, label="Drafting strategy", elem_id="drafter")
        with gr.Row():
            top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p", elem_id="top-p")
            top_k = gr.Number(0, label="top-k (0 = off)", precision=0, minimum=0, elem_id="top-k")
        seed = gr.Number(0, label="Seed", precision=0, minimum=0, elem_id="seed")

    @in_sentences
    def pair_defaults(name: str):
        chosen = pair_cache.catalogue().get(RUN_FIELDS["pair"].read(name))
        return {gamma: chosen.start_gamma, auto: chosen.gamma == "auto", temperature: chosen.temperature, drafter: chosen.drafter}

    pair.input(pair_defaults, pair, [gamma, auto, temperature, drafter], **AS_SENT)
    for by_hand in (gamma, tree):  # a γ or a tree picked by hand is drafted as picked
        by_hand.input(lambda: False, None, auto, **AS_SENT)
    verification.change(lambda mode: gr.update(visible=mode == "lenient"), verification, lenience, **AS_SENT)
    return dict(
        gamma=gamma,
        auto=auto,
        tree=tree,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
        drafter=drafter,
        verification=verification,
        lenience=lenience,
        playback=playback,
    )
