"""Hostile input for the tests of tests/test_untrusted_*.py: a trace whose strings carry markup, and broken traces."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable

from tests.tiny import record_tiny_trace

MARKUP = "<img src=x onerror=alert(1)> **bold** [link](http://example.com) `code` <b>b</b>"
PAIR = {  # every key the run details show, each string carrying markup
    "name": MARKUP,
    "target": MARKUP,
    "draft": MARKUP,
    "device": MARKUP,
    "dtype": MARKUP,
    "cpu_capability": MARKUP,
    "weight_form": MARKUP,
    "target_parameters": 16_600_000,
    "draft_parameters": 2_100_000,
    "target_weight_mb": 63.3,
    "draft_weight_mb": 8.0,
    "load_s": 0.5,
    "shared_vocab": 32,
    "chat_template": False,
}


def markup_trace() -> dict:
    """A real recorded trace (two tiny models) whose pair, prompt and token texts all carry HTML and Markdown."""
    return copy.deepcopy(_markup_trace())


@functools.cache
def _markup_trace() -> dict:
    raw = json.loads(record_tiny_trace().to_json())
    raw["pair"], raw["prompt"] = dict(PAIR), MARKUP
    raw["started"]["prompt_texts"] = [MARKUP] * len(raw["started"]["prompt_texts"])
    for cycle in raw["cycles"]:
        cycle["new_token_text"] = MARKUP
        for position in cycle["positions"]:
            position["text"] = MARKUP
    raw["cycles"][0]["draft_stop"] = MARKUP
    return raw


def _set(path: str, value) -> Callable[[dict], None]:
    """A change to one field of a trace, given as a dotted path ("cycles.0.draft_s")."""

    def change(raw: dict) -> None:
        *parents, last = path.split(".")
        node = raw
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(last) if isinstance(node, list) else last] = value

    return change


# name → (change to a good trace, what the answer must say): the cases of issue 29 and more
BROKEN_TRACES: dict[str, tuple[Callable[[dict], None], str]] = {
    "a cycle of 1e9 s": (_set("cycles.0.draft_s", 1e9), "trace.cycles[0].draft_s must be a number of seconds from 0 to 86,400"),
    "a cycle of 1e300 s": (_set("cycles.1.verify_s", 1e300), "trace.cycles[1].verify_s must be a number of seconds"),
    "a prefill of 1e300 s": (_set("summary.prefill_s", 1e300), "trace.summary.prefill_s must be a number of seconds"),
    "a baseline step of 1e9 s": (_set("baseline_steps.0.step_s", 1e9), "trace.baseline_steps[0].step_s must be"),
    "cycles: [1, 2]": (_set("cycles", [1, 2]), "trace.cycles[0] must be a record"),
    "cycles: null": (_set("cycles", None), "trace.cycles must be a list"),
    "γ of 10^30": (_set("started.gamma", 10**30), "trace.started.gamma must be a whole number from 1 to 64"),
    "a token id of 10^400": (
        _set("cycles.0.positions.0.token_id", 10**400),
        "trace.cycles[0].positions[0].token_id must be a whole",
    ),
    "a tally of 10^30": (_set("summary.tally.accepted", 10**30), "trace.summary.tally.accepted must be a whole number"),
    "10^40 parameters": (_set("pair.target_parameters", 10**40), "trace.pair.target_parameters must be a whole number"),
    "q = NaN": (_set("cycles.0.positions.0.q", float("nan")), "trace.cycles[0].positions[0].q must be a probability from 0 to 1"),
    "an infinite overhead": (_set("cycles.0.overhead_s", float("inf")), "trace.cycles[0].overhead_s must be a number of seconds"),
    "n_accepted as text": (_set("cycles.0.n_accepted", "1"), "trace.cycles[0].n_accepted must be a whole number"),
    "n_accepted past the drafts": (_set("cycles.0.n_accepted", 9), "trace.cycles[0].n_accepted must be"),
    "γ of 2.5": (_set("started.gamma", 2.5), "trace.started.gamma must be a whole number from 1 to 64 (got 2.5)"),
    "a cycle out of place": (_set("cycles.1.index", 7), "trace.cycles[1].index must be 1"),
    "a ranked entry of two": (_set("cycles.0.positions.0.top_p", [[1, 2]]), "trace.cycles[0].positions[0].top_p[0] must be"),
    "a pair that is a list": (_set("pair", [1]), "trace.pair must be a record"),
    "a prompt of 10^5 characters": (_set("prompt", "x" * 100_000), "trace.prompt is 100,000 characters; the limit is 20,000"),
    "a missing mode": (lambda raw: raw["started"].pop("mode"), "trace.started.mode is missing"),
    "a status that is not one": (
        _set("cycles.0.positions.0.status", "<b>"),
        "trace.cycles[0].positions[0].status must be one of",
    ),
    "no format": (lambda raw: raw.pop("format"), "it is not a specviz trace"),
}
BROKEN_FILES: dict[str, tuple[bytes, str]] = {  # name → (file bytes, what the answer must say)
    "a binary file named .json": (bytes(range(256)) * 40, "it is not text"),
    "JSON nested 100,000 deep": (b"[" * 100_000 + b"]" * 100_000, "its JSON nests too deeply"),
    "an integer of 5,000 digits": (b'{"format": "specviz-trace/2", "prompt": ' + b"9" * 5000 + b"}", "it is not valid JSON"),
    "not JSON": (b"<html><img src=x></html>", "it is not valid JSON"),
    "a JSON list": (b"[1, 2]", "it is not a specviz trace"),
}


def broken_trace(name: str) -> bytes:
    """The good trace with one change: the file's bytes."""
    raw = markup_trace()
    BROKEN_TRACES[name][0](raw)
    return json.dumps(raw).encode()
