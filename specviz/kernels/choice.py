"""`auto`'s weight form, chosen by measurement: on first use per machine and model shape, each exact form this CPU runs
is timed on the model's own layer shapes (a one-token step and a 4-row verify pass, over enough copies of a layer that
its weights stream from memory as the whole model's do), and the fastest is kept in specviz's cache with the timings
that chose it. Nothing else of this process runs meanwhile: it happens while the model loads, before anything is timed.
Other programs may (in the app, the compile worker compiling another pair): a choice timed while they used the
processor is kept for BUSY_KEPT_S only, as γ auto's is, and then timed again, so one noisy minute does not pick a
machine's form for good (on an empty cache the app once timed SmolLM2's forms beside the worker and kept int8, its
w4a8 step read 392 ms against a 4-row pass of 71 ms)."""

from __future__ import annotations

import copy
import json
import logging
import math
import statistics
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from specviz.cache import cache_root
from specviz.kernels import cpu, forms, w4a8
from specviz.process.machine_load import BUSY_KEPT_S, LoadMeter, still_kept

log = logging.getLogger(__name__)

VERIFY_ROWS = 4  # the pass a chain of γ = 3 verifies: what speculation asks of the target besides its steps
ROUNDS = 7  # timed rounds per form, interleaved form by form; the median is kept
FALLBACK = "int4"  # what auto takes where nothing can be measured: torch's own kernel runs on every CPU


@dataclass(frozen=True)
class FormChoice:
    """The form auto took, why in one sentence, and the median seconds each candidate took (one step, one pass)."""

    form: str
    reason: str
    step_s: dict[str, float]
    pass_s: dict[str, float]


def layer_shapes(model: nn.Module) -> tuple[list[tuple[int, int]], int]:
    """(in, out) of the linear layers in the model's first decoder layer, and how many such layers it has; the LM head
    and embedding are left out (every form packs the head alike)."""
    config = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None) or 1
    blocks = [module for module in model.modules() if isinstance(module, nn.ModuleList) and len(module) == layers]
    scope = blocks[0][0] if blocks else model
    shapes = [(m.in_features, m.out_features) for m in scope.modules() if isinstance(m, nn.Linear)]
    return shapes, layers


def candidates(model: nn.Module | None = None) -> list[str]:
    """The row-independent packed forms this process can run (and that take every linear layer of `model`: a layer a
    form cannot take would stay a float GEMM, and the model would no longer be exact row by row)."""
    linears = [module for module in model.modules() if isinstance(module, nn.Linear)] if model is not None else []
    return [
        name
        for name in forms.packed_names()
        if forms.FORMS[name].rows_independent
        and forms.FORMS[name].why_not() is None
        and all(forms.FORMS[name].supports(linear) for linear in linears)
    ]


def fastest_exact(model: nn.Module) -> FormChoice:
    """The measured fastest exact form for this model's shapes on this machine (kept per machine, measured once)."""
    shapes, layers = layer_shapes(model)
    usable = [(n_in, n_out) for n_in, n_out in shapes if n_in % 32 == 0 and n_out % 64 == 0]
    names = candidates(model)
    if not usable or len(names) < 2:
        only = names[0] if names else FALLBACK
        return FormChoice(only, f"{only}: the only exact form to choose from here", {}, {})
    key = choice_key(usable, layers, names)
    kept = read_kept(key)
    if kept is not None:
        return kept
    log.warning("timing the weight forms %s on this model's shapes, once per machine (a few seconds)", ", ".join(names))
    with LoadMeter() as others:
        choice = measure(usable, layers, names)
    busy = others.result is not None and others.result.busy
    if busy:
        log.warning(
            "other programs used %.2f cores while the weight forms were timed: this choice (%s) is kept %.0f minutes only",
            others.result.other_cores or 0.0,
            choice.form,
            BUSY_KEPT_S / 60,
        )
    keep(key, choice, busy=busy)
    return choice


def choice_key(shapes: list[tuple[int, int]], layers: int, names: list[str]) -> str:
    path = w4a8.path() or "none"
    return json.dumps([cpu.model_name(), path, torch.__version__, torch.get_num_threads(), shapes, layers, names])


def choices_file():
    return cache_root() / "kernels" / "form_choices.json"


def read_kept(key: str) -> FormChoice | None:
    """The choice kept for `key`; None where there is none, or where it was timed beside other work over BUSY_KEPT_S ago."""
    try:
        found = json.loads(choices_file().read_text()).get(key)
    except (OSError, ValueError):
        return None
    if not found:
        return None
    if not still_kept(found.pop("busy", False), found.pop("kept_at", 0.0)):
        return None
    return FormChoice(**found)


def keep(key: str, choice: FormChoice, busy: bool = False) -> None:
    """Keep the choice (written whole, by rename); `busy`: timed beside other work, so kept for BUSY_KEPT_S only."""
    path = choices_file()
    try:
        kept = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        kept = {}
    kept[key] = {**asdict(choice), "busy": busy, "kept_at": time.time()}
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(kept, indent=1))
    temporary.replace(path)


def copies_to_stream(shapes: list[tuple[int, int]], layers: int) -> int:
    """Enough copies of one layer that they outgrow the last-level cache twice over (as the whole model does), at most
    the model's layer count."""
    cache = cpu.last_level_cache_bytes() or 32 * 2**20
    layer_bytes = sum(n_in * n_out for n_in, n_out in shapes) * 0.59
    return max(2, min(layers, math.ceil(2 * cache / layer_bytes) + 1))


def measure(shapes: list[tuple[int, int]], layers: int, names: list[str]) -> FormChoice:
    copies = copies_to_stream(shapes, layers)
    generator = torch.Generator().manual_seed(0)
    floats = [nn.Linear(n_in, n_out, bias=False).requires_grad_(False) for n_in, n_out in shapes]
    for linear in floats:
        linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * 0.02)
    stacks = {}
    for name in names:
        packed = [forms.FORMS[name].layer(linear) for linear in floats]
        stacks[name] = [copy.deepcopy(layer) for _ in range(copies) for layer in packed]
    inputs = {
        rows: {n_in: torch.randn(rows, n_in, generator=generator).bfloat16() for n_in, _ in shapes} for rows in (1, VERIFY_ROWS)
    }
    step: dict[str, list[float]] = {name: [] for name in names}
    verify: dict[str, list[float]] = {name: [] for name in names}
    with torch.inference_mode():
        for round_ in range(ROUNDS + 1):  # the first round warms up, untimed
            for name in names:
                for rows, into in ((1, step), (VERIFY_ROWS, verify)):
                    started = time.perf_counter()
                    for layer in stacks[name]:
                        layer(inputs[rows][layer.in_features])
                    if round_:
                        into[name].append((time.perf_counter() - started) * layers / copies)
    step_s = {name: statistics.median(step[name]) for name in names}
    pass_s = {name: statistics.median(verify[name]) for name in names}
    best = min(names, key=lambda name: step_s[name] + pass_s[name])
    others = ", ".join(f"{name} {1000 * step_s[name]:.0f} / {1000 * pass_s[name]:.0f} ms" for name in names if name != best)
    kernel = f" ({w4a8.describe()})" if best == "w4a8" else ""
    reason = (
        f"{best}{kernel} was fastest on this model's layers: a step {1000 * step_s[best]:.0f} ms and a {VERIFY_ROWS}-row "
        f"pass {1000 * pass_s[best]:.0f} ms, against {others}"
    )
    return FormChoice(best, reason, step_s, pass_s)
