"""What the user asked for, by name: every field a request may carry (page or API) with its type and range, the
page's run inputs as one RunRequest, and the engine settings it validates into.

The one home of what a request may hold: RUN_FIELDS and THEORY_FIELDS here (and SCORE_FIELDS, beside the score
panel's prompt sets) give each field's name on the page and its range, and `checked` answers a wrong value with
one sentence naming both (specviz.checked). The engine's DecodeSettings.validate stays the engine's own guard for
callers that are not a request (CLI, library).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from specviz.checked import Check, InputError, choice, fail, flag, number, text, whole
from specviz.drafting.registry import STRATEGIES, tree_drafter_keys
from specviz.engine.settings import MAX_GAMMA, MAX_SEED, VERIFICATIONS, DecodeSettings, SamplingSettings
from specviz.engine.tree_shape import MAX_TREE_DEPTH, MAX_TREE_NODES, TreeShape
from specviz.run.runner import MAX_PROMPT_CHARS
from specviz.serving.pair_cache import catalogue

SLOW_MOTION_S = 8.0  # the default playback lasts about this long, whatever the pair and the machine
SLOW_MOTION = f"slow motion ({SLOW_MOTION_S:g} s)"
PLAYBACK = {"real pace": 1.0, SLOW_MOTION: None, "10× slower": 10.0, "50× slower": 50.0}  # choice → slowdown; None: fitted
DEFAULT_PLAYBACK = SLOW_MOTION
MAX_PLAYBACK_S = 600.0  # no playback lasts longer, whatever a trace's timings and the pace: a longer one is sped up
AcceptanceRule = Literal["exact", "block", "match", "greedy", "lenient"]  # the page's "Verification" choice
ACCEPTANCE_RULES = ("exact", "block", "match", "greedy", "lenient")  # exact, block, match: engine/verifiers.py
MAX_NEW_TOKENS = 256  # the page's slider and any request: what one run may ask for (its time budget)
MAX_TEMPERATURE = 2.0
MAX_TOP_K = 1_000_000  # beyond any vocabulary: the same as off
CHAIN = "chain"  # the token tree field's word for no tree: γ drafts in a row
TREE_CHOICES = (CHAIN, "3x2x1:2", "4x2x1x1:1", "2x2x1")  # the page's offer; any shape may be typed
TREE_LABEL = f"Token tree: {CHAIN} (γ in a row), or children per depth (at most {MAX_TREE_NODES} nodes, {MAX_TREE_DEPTH} deep)"
TREE_INFO = (
    "3x2x1:2: 3 guesses at depth 1, 2 children per branching node at depth 2, 1 at depth 3; :2 lets only the 2 likeliest "
    f"nodes of a depth branch. Trees take the {' or '.join(tree_drafter_keys())} drafter, exact or greedy."
)
TREE_CONTROL = dict(choices=TREE_CHOICES, label=TREE_LABEL, info=TREE_INFO, allow_custom_value=True)  # the page's Dropdown
_SHAPE = re.compile(
    r"\s*\d{1,3}(\s*[x×*]\s*\d{1,3})*\s*(:\s*\d{1,3})?\s*"  # widths per depth: 4x2x1, 4x2x1:2
    r"|\s*(nodes|depth|width)\s*=\s*\d{1,3}(\s*,\s*(nodes|depth|width)\s*=\s*\d{1,3}){0,2}\s*"  # nodes=16,depth=5
)


@dataclass(frozen=True)
class Field:
    """A value a request may carry: the name the page shows, its check, and what an empty box means (None: wrong)."""

    label: str
    check: Check
    when_empty: Any = None

    def read(self, value: Any) -> Any:
        if value is None and self.when_empty is not None:
            return self.when_empty
        return self.check(value, self.label)


def pair_names() -> list[str]:
    return list(catalogue().pairs)


def tree_shape(value: Any, name: str) -> str:
    """ "chain", or a token tree's shape in its own spelling ("4x2x1:2"): the sentence for a wrong one never repeats it."""
    allowed = (
        f"{CHAIN!r}, children per depth such as 3x2x1 (optionally :N), or nodes=16,depth=5 "
        f"(at most {MAX_TREE_NODES} nodes, {MAX_TREE_DEPTH} deep)"
    )
    if isinstance(value, str) and value.strip().lower() in ("", CHAIN):
        return CHAIN
    if not isinstance(value, str) or len(value) > 80 or not _SHAPE.fullmatch(value):
        raise fail(name, allowed, value)
    try:
        return TreeShape.parse(value).text
    except ValueError as error:  # its numbers only: the text matched the pattern
        raise InputError(f"{name} must be {allowed}: {error}.") from None


RUN_FIELDS = {
    "pair": Field("Pair", choice(pair_names)),
    "prompt": Field("Prompt", text(MAX_PROMPT_CHARS)),
    "gamma": Field("γ (drafts per cycle)", whole(1, MAX_GAMMA)),
    "auto": Field("γ auto", flag, when_empty=False),
    "tree": Field("Token tree", tree_shape, when_empty=CHAIN),
    "temperature": Field("Temperature", number(0, MAX_TEMPERATURE)),
    "top_k": Field("top-k", whole(0, MAX_TOP_K), when_empty=0),
    "top_p": Field("top-p", number(0, 1, above_low=True)),
    "max_new_tokens": Field("Max new tokens", whole(1, MAX_NEW_TOKENS)),
    "seed": Field("Seed", whole(0, MAX_SEED), when_empty=0),
    "drafter": Field("Drafting strategy", choice(STRATEGIES)),
    "verification": Field("Verification", choice(list(ACCEPTANCE_RULES))),
    "lenience": Field("Lenience", number(0, 1, above_low=True)),
    "playback": Field("Playback", choice(PLAYBACK)),
}
SETTING_FIELDS = {name: field for name, field in RUN_FIELDS.items() if name not in ("pair", "prompt", "playback", "auto")}
THEORY_FIELDS = {  # the Theory tab's sliders
    "alpha": Field("α", number(0, 0.99)),
    "tau": Field("τ", number(0, 1)),
    "gamma_value": Field("γ", whole(1, 32)),
}


def checked(values: Mapping[str, Any], table: Mapping[str, Field]) -> dict[str, Any]:
    """Every field of the table, checked (InputError: one sentence naming the field and its range); a field with no
    empty value must be there; names the table does not know are ignored."""
    if not isinstance(values, Mapping):
        raise InputError("The request must name its fields.")
    missing = [field.label for name, field in table.items() if name not in values and field.when_empty is None]
    if missing:
        raise InputError(f"The request is missing {', '.join(missing)}.")
    return {name: field.read(values.get(name)) for name, field in table.items()}


@dataclass(frozen=True)
class RunRequest:
    """Everything the user chose for one run, by name."""

    pair: str
    prompt: str
    gamma: int = 4
    auto: bool = False  # draft what `gamma: auto` measured to pay for the pair here, instead of γ and the tree
    tree: str = CHAIN  # or a token tree's shape, "3x2x1:2"
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    drafter: str = "model"
    verification: AcceptanceRule = "exact"
    lenience: float = 0.5
    playback: str = DEFAULT_PLAYBACK

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> RunRequest:
        """From {field name: value} as the page or a script sent them, every value checked (InputError otherwise).

        Names the request does not know are ignored; the pair and the prompt must be there, a missing setting keeps
        its default, and an emptied number box (None) means its default where it has one (seed, top-k).
        """
        if not isinstance(values, Mapping):
            raise InputError("The request must name its fields.")
        defaults = {f.name: f.default for f in fields(cls) if f.name not in ("pair", "prompt")}
        request = cls(**checked(defaults | {name: values[name] for name in values if name in RUN_FIELDS}, RUN_FIELDS))
        request.settings()  # and the settings they make together (a tree with a chain-only drafter), answered at once
        return request

    def settings(self) -> DecodeSettings:
        """The engine's settings, their fields checked first as a request's are (InputError with one sentence); with
        `auto`, γ and the tree as asked until the run applies the measured choice (ui/runs.py)."""
        request = replace(self, **checked(vars(self), SETTING_FIELDS))
        tree = None if request.tree == CHAIN else TreeShape.parse(request.tree)
        if tree is not None and request.drafter not in tree_drafter_keys():
            raise InputError(
                f"Token tree: the {request.drafter} drafter drafts chains only; a tree needs one of {', '.join(tree_drafter_keys())}."
            )
        return DecodeSettings(
            max_new_tokens=request.max_new_tokens,
            gamma=request.gamma,
            sampling=SamplingSettings(
                temperature=0.0 if request.verification == "greedy" else request.temperature,
                top_k=request.top_k,
                top_p=request.top_p,
            ),
            seed=request.seed,
            lenience=request.lenience if request.verification == "lenient" else 1.0,
            tree=tree,
            verification=request.verification if request.verification in VERIFICATIONS else "exact",
            compare_verifiers=tree is None and request.verification in VERIFICATIONS and request.temperature > 0,
        ).validate()


def slowdown(playback: str, recorded_s: float) -> float:
    """How many times slower than real a run recorded in `recorded_s` seconds plays back: never faster than real,
    unless that would last longer than MAX_PLAYBACK_S (a long run, or a shared trace's timings).

    Slow motion fits the run into SLOW_MOTION_S, so a new user waits the same few seconds for a 0.4 s run of the
    bundled pair and a 5 s run of a real model; the other choices are fixed factors.
    """
    factor = PLAYBACK.get(playback, PLAYBACK[DEFAULT_PLAYBACK])
    if factor is None:
        factor = max(1.0, SLOW_MOTION_S / recorded_s) if recorded_s > 0 else 1.0
    return min(factor, MAX_PLAYBACK_S / recorded_s) if recorded_s > 0 else factor
