"""The schema of a JSON trace: every field's type and range, checked before anything of a shared file is used.

A trace replayed in the app may come from anyone, so a file is read within a size limit, decoded as
UTF-8 JSON, and every value is checked here (types, ranges, lengths, finite numbers, how the cycles
fit together) before specviz.run.trace builds its events. Any failure is one InputError naming the field,
such as "trace.cycles[3].draft_s must be a number of seconds from 0 to 86,400 (got 1e+300)."
"""

from __future__ import annotations

import json
from pathlib import Path

from specviz.checked import InputError, choice, fixed, flag, items, number, optional, record, record_of, text, whole
from specviz.engine.events import Cycle, DraftPosition, RunStarted, SameDraftsVerdict, Step, Summary
from specviz.engine.settings import MAX_SEED, VERIFICATIONS
from specviz.engine.tally import Tally
from specviz.process.machine_load import OtherLoad
from specviz.run.chosen_setting import ChosenSetting
from specviz.run.runner import MAX_PROMPT_CHARS

TRACE_FORMAT = "specviz-trace/2"
MAX_TRACE_BYTES = 8 * 2**20  # an exported run of 256 tokens is a few hundred KB
MAX_SECONDS = 86_400  # any one duration in a trace: a day (what playback takes is capped apart, ui/request.py)
MAX_CYCLES = 10_000
MAX_TOKENS = 100_000  # token ids in one list: a prompt, a run's new tokens
MAX_WINDOW = 64  # drafts in one cycle
MAX_RANKED = 100  # entries of p, q or the residual kept per position
MAX_TOKEN_ID = 2**31 - 1
MAX_COUNT = 10**9
MAX_TOKEN_CHARS = 1_000
MAX_TEXT_CHARS = 1_000_000
MAX_NAME_CHARS = 500

SECONDS = number(0, MAX_SECONDS, allowed=f"a number of seconds from 0 to {MAX_SECONDS:,}")
PROBABILITY = number(0, 1 + 1e-4, allowed="a probability from 0 to 1")  # float32 sums may pass 1 by a rounding
TOKEN_ID = whole(0, MAX_TOKEN_ID)
TOKEN_TEXT = text(MAX_TOKEN_CHARS)
NAME = text(MAX_NAME_CHARS)
COUNT = whole(0, MAX_COUNT)
MODE = choice(["speculative", "autoregressive"])
RANKED = items(fixed(TOKEN_ID, TOKEN_TEXT, PROBABILITY, says="a [token id, text, probability] triple"), MAX_RANKED)

DRAFT_POSITION = record_of(
    DraftPosition,
    {
        "token_id": TOKEN_ID,
        "text": TOKEN_TEXT,
        "status": choice(["accepted", "rejected", "unverified"]),
        "q": PROBABILITY,
        "p": optional(PROBABILITY),
        "accept_probability": optional(PROBABILITY),
        "u": optional(PROBABILITY),
        "overlap": optional(PROBABILITY),
        "top_p": RANKED,
        "top_q": RANKED,
        "top_residual": RANKED,
    },
)
SAME_DRAFTS_VERDICT = record_of(
    SameDraftsVerdict,
    {
        "verification": choice(list(VERIFICATIONS)),
        "n_accepted": whole(0, MAX_WINDOW),
        "new_token_id": TOKEN_ID,
        **dict.fromkeys(["accept_probability", "uniforms", "block_weights", "p", "q"], items(PROBABILITY, MAX_WINDOW)),
    },
)
RUN_STARTED = record_of(
    RunStarted,
    {
        "mode": MODE,
        "prompt_token_ids": items(TOKEN_ID, MAX_TOKENS),
        "prompt_texts": items(TOKEN_TEXT, MAX_TOKENS),
        "gamma": whole(1, MAX_WINDOW),
        "temperature": number(0, 100),
        "top_k": whole(0, MAX_TOKEN_ID),
        "top_p": number(0, 1, above_low=True),
        "seed": whole(0, MAX_SEED),
        "drafter": NAME,
        "lenience": number(0, 1, above_low=True),
        "lossy": flag,
        "adaptive_gamma": flag,
        "max_new_tokens": whole(1, MAX_TOKENS),
        "prefill_s": SECONDS,
        "tree": text(MAX_NAME_CHARS),
        "engine": choice(["", "compiled", "eager", "transformers"]),
        "verification": choice(list(VERIFICATIONS)),
        "threads": whole(0, 100_000),
        "rows_exact": flag,
    },
)
CYCLE = record_of(
    Cycle,
    {
        "index": whole(0, MAX_CYCLES),
        "gamma": whole(0, MAX_WINDOW),
        "positions": items(DRAFT_POSITION, MAX_WINDOW),
        "n_accepted": whole(0, MAX_WINDOW),
        "resampled_token_id": optional(TOKEN_ID),
        "bonus_token_id": optional(TOKEN_ID),
        "new_token_text": TOKEN_TEXT,
        "bonus_top_p": RANKED,
        "emitted_token_ids": items(TOKEN_ID, MAX_WINDOW + 1),
        "draft_s": SECONDS,
        "verify_s": SECONDS,
        "overhead_s": SECONDS,
        "n_draft_forwards": COUNT,
        "lossy": flag,
        "draft_stop": optional(NAME),
        "released_s": optional(SECONDS),
        "parents": items(whole(-1, MAX_WINDOW), MAX_WINDOW),
        "accepted_nodes": items(whole(0, MAX_WINDOW), MAX_WINDOW),
        "verdicts": items(SAME_DRAFTS_VERDICT, len(VERIFICATIONS)),
    },
)
STEP = record_of(Step, {"index": whole(0, MAX_TOKENS), "token_id": TOKEN_ID, "text": TOKEN_TEXT, "step_s": SECONDS})
TALLY = record_of(
    Tally,
    {
        **dict.fromkeys(["cycles", "drafted", "accepted", "rejections", "tested", "overlaps", "emitted"], COUNT),
        "overlap_sum": number(0, MAX_COUNT),
        **dict.fromkeys(["draft_s", "verify_s", "overhead_s"], SECONDS),
        **dict.fromkeys(["accepted_histogram", "tested_by_position", "accepted_by_position"], items(COUNT, MAX_WINDOW + 1)),
    },
)
SUMMARY = record_of(
    Summary,
    {
        "mode": MODE,
        "new_token_ids": items(TOKEN_ID, MAX_TOKENS),
        "text": text(MAX_TEXT_CHARS),
        "wall_s": SECONDS,
        "prefill_s": SECONDS,
        "stop_reason": choice(["max_new_tokens", "eos", "stopped"]),
        "tally": TALLY,
        "step_s": SECONDS,
        "lossy": flag,
    },
)
OTHER_LOAD = record_of(OtherLoad, {"other_cores": optional(number(0, 100_000)), "settle_s": SECONDS, "own_work": NAME})
BYTES = whole(0, 2**60)
MODEL_MEMORY = record(
    {"reference": NAME, "parameters": BYTES, "weight_bytes": BYTES, "kv_bytes_per_token": BYTES},
    required=["reference", "parameters", "weight_bytes", "kv_bytes_per_token"],
)
MEMORY = record(
    {
        "target": MODEL_MEMORY,
        "draft": MODEL_MEMORY,
        "autoregressive_peak_bytes": BYTES,
        "speculative_peak_bytes": BYTES,
        "peak_source": NAME,
        "added_bytes": whole(-(2**60), 2**60),
        "added_fraction": optional(number(-1e6, 1e6)),
    },
    required=["target", "draft", "autoregressive_peak_bytes", "speculative_peak_bytes", "peak_source", "added_bytes"]
    + ["added_fraction"],
)
LOAD_TIMES = record({"cold_s": SECONDS, "warm_s": optional(SECONDS)}, required=["cold_s"])  # the app times no warm load
PAIR_LOAD_TIMES = record({"target": LOAD_TIMES, "draft": LOAD_TIMES, "cold_source": NAME}, required=["target", "draft"])
MEGABYTES = number(0, 2**40)
COMPILE_REPORT = record(  # engine/compiled.py's CompileReport of one model
    {"compiled": flag, "seconds": record(dict.fromkeys(["compile", "load"], SECONDS)), "reason": optional(NAME)},
    required=["compiled"],
)
PAIR = record(  # what the run-details panel shows (models.pair_cache.pair_info); every key optional, unknown ones dropped
    {
        **dict.fromkeys(["name", "target", "draft", "device", "dtype"], NAME),
        **dict.fromkeys(["cpu_capability", "weight_form", "feature_head", "feature_head_form"], optional(NAME)),
        "weight_kernel": optional(NAME),
        **dict.fromkeys(["target_parameters", "draft_parameters"], BYTES),
        "feature_head_parameters": optional(BYTES),
        **dict.fromkeys(["target_weight_mb", "draft_weight_mb"], MEGABYTES),
        "feature_head_weight_mb": optional(MEGABYTES),
        "load_s": SECONDS,
        "shared_vocab": TOKEN_ID,
        "chat_template": flag,
        "model_load_s": optional(PAIR_LOAD_TIMES),
        "compile": optional(record(dict.fromkeys(["target", "draft"], COMPILE_REPORT))),
        "memory": optional(MEMORY),
    }
)
MAX_PRICED_ROWS = 64  # ν(k) is priced up to a few rows; a tree never verifies more than 64 nodes
SPEEDUP = number(0, 1e6)
CHOSEN_SETTING = record_of(  # run/chosen_setting.py: what `gamma: auto` chose, and on what ν(k)
    ChosenSetting,
    {
        "gamma": whole(1, MAX_WINDOW),
        "tree": text(MAX_NAME_CHARS),
        "predicted_speedup": optional(SPEEDUP),
        "chain_speedup": optional(SPEEDUP),
        "pays": flag,
        "sentence": text(MAX_TOKEN_CHARS),
        "alpha": optional(PROBABILITY),
        "tau": optional(number(0, 1e6)),
        "verify_costs": record({str(rows): number(0, 1e6) for rows in range(1, MAX_PRICED_ROWS + 1)}),
        "measured_at": NAME,
        "reused": flag,
        "auto": flag,
        "read_gb_s": optional(number(0, 1e6)),
    },
)
TRACE = record(
    {
        "format": choice([TRACE_FORMAT]),
        "pair": optional(PAIR),
        "prompt": text(MAX_PROMPT_CHARS),
        "started": optional(RUN_STARTED),
        "cycles": items(CYCLE, MAX_CYCLES),
        "summary": optional(SUMMARY),
        "baseline_steps": items(STEP, MAX_TOKENS),
        "baseline": optional(SUMMARY),
        "round_speedups": items(number(0, 1e6), 100),
        "other_load": optional(OTHER_LOAD),
        "setting": optional(CHOSEN_SETTING),
        "memory_read_gb_s": items(number(0, 1e6), 2),
    },
    required=["format"],
)


def checked_trace(raw: object) -> dict:
    """The trace's JSON value with every field checked and how its parts fit together.

    InputError otherwise, whose message completes "Cannot replay that file: …".
    """
    if not isinstance(raw, dict) or raw.get("format") != TRACE_FORMAT:
        raise InputError(f"it is not a specviz trace (its format must be {TRACE_FORMAT!r}).")
    trace = TRACE(raw, "trace")
    for i, cycle in enumerate(trace.get("cycles", ())):
        _check_cycle(cycle, f"trace.cycles[{i}]", i)
    for i, step in enumerate(trace.get("baseline_steps", ())):
        if step["index"] != i:
            raise InputError(f"trace.baseline_steps[{i}].index must be {i}, its place in the list (got {step['index']}).")
    if (trace.get("cycles") or trace.get("summary")) and not trace.get("started"):
        raise InputError("it has cycles or a summary but no 'started' record.")
    if trace.get("baseline") and not trace.get("summary"):
        raise InputError("it has a baseline but no summary of the speculative run.")
    return trace


def _check_cycle(cycle: dict, name: str, place: int) -> None:
    """A cycle's numbers must describe one real cycle: its place, its window, and the target's one token."""
    drafted, accepted = len(cycle.get("positions", ())), cycle["n_accepted"]
    if cycle["index"] != place:
        raise InputError(f"{name}.index must be {place}, its place in the list (got {cycle['index']}).")
    if accepted > drafted:
        raise InputError(f"{name}.n_accepted must be from 0 to its {drafted} drafted positions (got {accepted}).")
    if len(cycle["emitted_token_ids"]) > accepted + 1:
        raise InputError(f"{name}.emitted_token_ids must hold at most n_accepted + 1 = {accepted + 1} tokens.")
    if cycle.get("parents") or cycle.get("accepted_nodes"):
        _check_tree(cycle, name)
        return
    if cycle.get("resampled_token_id") is not None and accepted == drafted:
        raise InputError(f"{name} has a resampled token but no rejected draft: n_accepted must be below {drafted}.")
    if drafted and accepted == drafted and cycle.get("bonus_token_id") is None:
        raise InputError(f"{name} accepted all {drafted} drafts but has no bonus_token_id.")
    if drafted and accepted < drafted and cycle.get("resampled_token_id") is None:
        raise InputError(f"{name} rejected a draft but has no resampled_token_id.")


def _check_tree(cycle: dict, name: str) -> None:
    """A tree's cycle: a parent per node, before it; an accepted path from the root down; the target's one token."""
    parents, path = cycle.get("parents", ()), cycle.get("accepted_nodes", ())
    if len(parents) != len(cycle.get("positions", ())):
        raise InputError(f"{name}.parents must give one parent per drafted position ({len(cycle.get('positions', ()))}).")
    for node, parent in enumerate(parents):
        if parent >= node:
            raise InputError(f"{name}.parents[{node}] must be −1 or an earlier node (got {parent}).")
    if len(path) != cycle["n_accepted"]:
        raise InputError(f"{name}.accepted_nodes must hold n_accepted = {cycle['n_accepted']} nodes.")
    for above, node in zip((-1, *path), path):
        if node >= len(parents) or parents[node] != above:
            raise InputError(f"{name}.accepted_nodes must be a path from the root down (node {node} is not a child of {above}).")
    ends_at_leaf = (path[-1] if path else -1) not in parents
    if ends_at_leaf != (cycle.get("bonus_token_id") is not None) or ends_at_leaf == (cycle.get("resampled_token_id") is not None):
        raise InputError(
            f"{name} must have a bonus_token_id where its path ends at a leaf, else a resampled_token_id, and not both."
        )


def parse_trace_json(text: str) -> object:
    """JSON text to a value; a file that is not JSON (or nests beyond reason, or holds a 5,000-digit number) is one sentence."""
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError("its JSON nests too deeply for a specviz trace.") from None
    except ValueError as error:  # JSONDecodeError, or an integer beyond Python's digit limit
        where = f" (line {error.lineno}, column {error.colno})" if isinstance(error, json.JSONDecodeError) else ""
        raise InputError(f"it is not valid JSON{where}.") from None


def read_trace_text(path: str | Path) -> str:
    """A trace file's text, read within MAX_TRACE_BYTES and decoded as UTF-8 (InputError otherwise)."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_TRACE_BYTES + 1)
    except OSError:
        raise InputError("it could not be read; please upload it again.") from None
    if len(data) > MAX_TRACE_BYTES:
        raise InputError(f"it is larger than {MAX_TRACE_BYTES // 2**20} MiB, the limit for a trace.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("it is not text (a trace is UTF-8 JSON).") from None
