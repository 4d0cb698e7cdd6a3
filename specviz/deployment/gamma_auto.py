"""γ auto, in one place: the chain or token tree that pays for this pair on this machine, chosen by measuring it the
way the runs will run, kept per machine and pair, and measured once in the background for the page.

Choosing (`choose_setting`), all measured in this process, with the threads, engine and warm caches its runs use:
  1. α by depth and rank: one calibration run of the pair's own drafter over the calibration prompts, drafting a tree
     that offers the target three first choices and a chain of three below the first (a drafter that drafts chains
     only drafts a chain of four: its acceptance by position);
  2. the target alone over the same prompts, prompt by prompt in alternating order with the calibration run: its step
     as the baseline run times it, the loop's own work included;
  3. ν(k), a verify pass over k rows in those steps, k = 1 … MAX_ROWS: the shape of the curve timed pass by pass on
     the engine the runs use (analysis/timing.measure_pass_seconds, after as many cached tokens as the calibration's
     passes followed), its level set by what the calibration's own cycles cost inside the run (a pass after the
     draft's steps, with the cycle's bookkeeping): a pass timed back to back cost 1.23 steps where the same pass inside
     a run cost 2.13 (docs/performance.md);
  4. τ: a draft forward's time over that step, for each kind of shape: a tree's forwards (a depth's nodes at once,
     with the tree's bookkeeping) cost more than a chain's one row (τ 0.15–0.17 against 0.08 for the bundled pair,
     benchmarks/tau_by_shape.py), so a drafter of trees also runs a short chain (CALIBRATION_CHAIN) over the same
     prompts, and chains and trees are priced at a τ timed on their own kind;
  5. the check: the chosen shape runs once over the calibration prompts (the target alone beside it again); where its
     own cycles cost another ν or τ than predicted, the curve and its kind's τ are set by them and the choice made
     again, and checked once more where the new choice is of a kind whose τ no run has timed yet.
The choice is analysis/tree_theory.choose_tree's: the shape that maximises E ÷ (ν(rows) + depth·τ). When no shape is
predicted to beat the target alone, one sentence says so and why, in measured terms (the verify pass's cost and where
the target's weights sit against this CPU's cache, or the draft's α against its τ), and what was asked still runs.

Keeping (`remembered_setting`): the page, `run`, `bench`, `report` and `export` read the same entry, so they draft the
same chain or tree. Its key is everything the measurement depends on: the CPU (its model name, its flags, its
last-level cache), torch's version, kernel capability and thread count, the device, the pair (its models, dtype and
weight forms, and the build of our own kernel where a form runs it), the engine its step runs on (compiled or eager),
the drafter and the sampling (greedy, or the temperature). Change any of them and the next run measures again; a
measurement that ran while other programs used the processor is kept for ten minutes only. The calibration runs on the
pair's own prompts (its domain's first presets), never on the prompt of the run that asked, so every entry point
chooses alike. The entries live in one JSON file, `$SPECVIZ_CACHE/settings.json` (else ~/.cache/specviz); deleting it
measures everything again.

For the page (`known`, `prepare`, `result`): measured once per process in the background, timed as the server times
a Run (serving/recorder.timed_quietly: on its timed thread, in the measuring slot once no background work runs, our
compile worker stopped), so nothing of ours runs beside it and its ν is the Run's; the choice a run drafted travels in its trace as
run/chosen_setting.ChosenSetting.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import torch

from specviz.analysis.cache_fit import last_level_cache_bytes, mib, read_rate_now_gb_s
from specviz.analysis.readings import speed_verdict, tau_in_run, verify_costs_in_run
from specviz.analysis.timing import measure_pass_seconds
from specviz.analysis.tree_theory import RankAcceptance, TreeChoice, TreeOption, choose_tree, measured_rank_acceptance
from specviz.drafting.registry import strategy
from specviz.engine import Cycle, DecodeSettings, RunStarted, SamplingSettings, Tally
from specviz.engine.tree_shape import TreeShape
from specviz.models.loading import LoadedPair
from specviz.process import machine_load
from specviz.process.machine_load import LoadMeter
from specviz.run.chosen_setting import ChosenSetting
from specviz.run.runner import run
from specviz.run.timing_conditions import slice_order

log = logging.getLogger("specviz")

MAX_ROWS = 8  # the largest verify pass priced: on a CPU, passes beyond a few rows cost several steps
CALIBRATION_TREE = TreeShape.parse("3x1x1x1:1")  # three first choices, then a chain below the first
CALIBRATION_CHAIN = 4
CALIBRATION_PROMPTS = 2  # the pair's first presets of its domain (prompts/sets.py)
CALIBRATION_TOKENS = 48


@dataclass(frozen=True)
class AutoChoice:
    """What the measurements predict: the fastest shape (a chain or a tree), the fastest chain, and their inputs."""

    choice: TreeChoice
    verify_costs: dict[int, float]  # ν(k)
    target_weight_bytes: int | None = None  # for the sentence that says why nothing pays, where nothing does
    cache_bytes: int | None = None  # this CPU's last-level cache (None off a CPU, or where the OS does not say)

    @property
    def best(self) -> TreeOption:
        """The fastest shape, a chain or a tree (choose_tree's winner)."""
        return self.choice.tree

    @property
    def pays(self) -> bool:
        """Faster than the target alone by the one rule for every speedup (break-even within ±5 %)."""
        return speed_verdict(self.best.speedup) == "faster"

    @property
    def gamma(self) -> int:
        """The chain to draft: the best shape's when it is a chain, else the best chain's."""
        return self.choice.chain.depth

    @property
    def tree(self) -> TreeShape | None:
        """The tree to draft instead of a chain, where one is predicted fastest."""
        return None if self.best.is_chain else self.best.shape

    @property
    def label(self) -> str:
        """ "γ 2", or "tree 2x1:1"."""
        return f"tree {self.tree.text}" if self.tree else f"γ {self.gamma}"

    def sentence(self) -> str:
        """One line: "on this machine: γ 2, predicted 1.40× …", or that nothing pays and why, in measured terms."""
        best = self.best
        inputs = f"α {self.choice.acceptance.alpha:.2f}, τ {self.choice.best_tau:.2f}, ν({best.rows}) {best.verify_cost:.2f}"
        if not self.pays:
            return (
                f"on this machine nothing pays for this pair: {self.reason()} (best predicted {best.speedup:.2f}×, "
                f"{self.label}; {inputs})"
            )
        return f"on this machine: {self.label}, predicted {best.speedup:.2f}× the target alone ({inputs})"

    def reason(self) -> str:
        """Why no shape pays, from the numbers measured: the verify pass's cost where a free pass would pay (and where
        the target's weights sit against this CPU's cache), else the draft's acceptance against its cost."""
        best = self.best
        free_pass = best.tokens_per_pass / (1 + best.draft_cost)  # the same shape if its pass cost one target step
        if speed_verdict(free_pass) != "faster":
            alpha, tau = self.choice.acceptance.alpha, self.choice.best_tau
            return (
                f"the draft is accepted α {alpha:.2f} of the time and a draft step costs τ {tau:.2f} target steps, "
                f"so even a verify pass as cheap as one step would give {free_pass:.2f}×"
            )
        rows, nu = best.rows, best.verify_cost
        weights, cache = self.target_weight_bytes, self.cache_bytes
        if not weights or not cache:
            return f"a {rows}-row verify pass costs {nu:.2f} target steps here"
        if weights <= cache:
            return f"the target's {mib(weights)} sit in this CPU's {mib(cache)} cache, so a {rows}-row pass costs {nu:.2f} steps"
        return (
            f"the target's {mib(weights)} stream from memory (this CPU's cache is {mib(cache)}), yet a {rows}-row pass "
            f"costs {nu:.2f} steps: the kernels' arithmetic for each extra row decides"
        )

    def chosen(self, reused: bool = False) -> ChosenSetting:
        """As plain data: what the cache keeps and a trace carries."""
        return ChosenSetting(
            gamma=self.gamma,
            tree=self.tree.text if self.tree else "",
            predicted_speedup=self.best.speedup,
            chain_speedup=self.choice.chain.speedup,
            pays=self.pays,
            sentence=self.sentence(),
            alpha=self.choice.acceptance.alpha,
            tau=self.choice.best_tau,
            verify_costs=dict(self.verify_costs),
            measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            reused=reused,
        )

    def to_json(self) -> dict:
        return {
            "chosen": self.best.label,
            "gamma": self.gamma,
            "tree": self.tree.text if self.tree else None,
            "predicted_speedup": self.best.speedup,
            "predicted_tokens_per_pass": self.best.tokens_per_pass,
            "pays": self.pays,
            "sentence": self.sentence(),
            "alpha": self.choice.acceptance.alpha,
            "acceptance_by_rank": [list(rates) for rates in self.choice.acceptance.by_depth],
            "tau": self.choice.best_tau,
            "chain_tau": self.choice.tau,
            "tree_tau": self.choice.tree_tau,
            "verify_curve": {str(rows): nu for rows, nu in self.verify_costs.items()},
        }


@dataclass(frozen=True)
class Calibration:
    """What one short speculative run over the calibration prompts measured, cycle by cycle, as runs run."""

    acceptance: RankAcceptance | None  # α by depth and rank (the calibration shape's; None where nothing was tested)
    draft_s_per_forward: float
    context: int  # the cached tokens its verify passes followed, on average
    rows: tuple[int, ...]  # each cycle's verify pass: its rows…
    pass_s: tuple[float, ...]  # …and its seconds inside the run
    fixed_s_per_cycle: float  # each cycle's time besides drafting and verifying: the test, rollback, the loop's own work
    step_s: float  # the target alone's seconds per new token over the same prompts, timed alternately with the cycles


def choose_setting(pair: LoadedPair, prompts: list[str], settings: DecodeSettings, drafter: str) -> AutoChoice:
    """Measure α by depth and rank, the target's step, ν(k) and τ for this pair here, the way its runs run, then
    choose; run the choice once and choose again on what its own cycles cost (module docstring)."""
    prompts = prompts[:CALIBRATION_PROMPTS]
    drafts_trees = strategy(drafter).grows_trees
    calibration = calibrate(pair, prompts, settings, drafter)
    if calibration.acceptance is None or calibration.draft_s_per_forward <= 0:
        raise ValueError("the calibration run drafted nothing to test: give a longer prompt or more new tokens")
    passes = measure_pass_seconds(pair.target.model, pair.shared_vocab_size, MAX_ROWS, context=calibration.context, repeats=5)
    taus = {shape_kind(calibration_shape(drafts_trees)): tau_in_run(calibration.draft_s_per_forward, calibration.step_s)}
    if drafts_trees:  # a tree's forwards cost more than a chain's: a chain's own τ, so chains are not priced at a tree's
        chained = calibrate(pair, prompts, settings, drafter, shape=TreeShape.chain(CALIBRATION_CHAIN))
        if chained.draft_s_per_forward > 0:
            taus["chain"] = tau_in_run(chained.draft_s_per_forward, chained.step_s)
    choice = choice_from(calibration.acceptance, calibration, taus, passes, pair)

    def drafted(choice: AutoChoice) -> TreeShape:  # what a run drafts: a drafter of chains drafts the best chain
        return choice.tree if drafts_trees and choice.tree else TreeShape.chain(choice.gamma)

    for _ in range(MAX_CHECKS):
        shape = drafted(choice)
        checked = calibrate(pair, prompts, settings, drafter, shape=shape)
        if not checked.pass_s or checked.draft_s_per_forward <= 0:
            break
        taus[shape_kind(shape)] = tau_in_run(checked.draft_s_per_forward, checked.step_s)  # the shape's own forwards
        choice = choice_from(calibration.acceptance, checked, taus, passes, pair)  # its own cycles set ν's level
        if shape_kind(drafted(choice)) in taus:  # what it drafts was priced at a τ timed on its own kind of shape
            break
    return choice


MAX_CHECKS = 2  # the chosen shape, and once more where the choice then moves to a kind whose τ no run has timed


def calibration_shape(drafts_trees: bool) -> TreeShape:
    """What the first calibration run drafts: the calibration tree, or a chain for a drafter of chains."""
    return CALIBRATION_TREE if drafts_trees else TreeShape.chain(CALIBRATION_CHAIN)


def shape_kind(shape: TreeShape) -> str:
    return "chain" if shape.is_chain else "tree"


def choice_from(
    acceptance: RankAcceptance, cycles: Calibration, taus: dict[str, float], passes: dict[int, float], pair: LoadedPair
) -> AutoChoice:
    """The choice from measured parts: ν(k) = (a pass over k rows as the run meets it + a cycle's fixed time) ÷ the
    target's step as its run takes it; τ by kind of shape (`taus`: "chain", "tree", each a draft forward ÷ the step
    of the run that timed it), a kind not yet timed priced at the other's."""
    costs = verify_costs_in_run(passes, cycles.rows, cycles.pass_s, cycles.fixed_s_per_cycle, cycles.step_s)
    chain_tau = taus.get("chain", taus.get("tree"))
    tree_tau = taus.get("tree", chain_tau)
    cache = last_level_cache_bytes() if pair.device.type == "cpu" else None
    choice = choose_tree(acceptance, chain_tau, costs, MAX_ROWS, tree_tau=tree_tau)
    return AutoChoice(choice, costs, pair.target.weight_bytes, cache)


def calibration_run(settings: DecodeSettings, shape: TreeShape | None = None) -> DecodeSettings:
    """The calibration's settings: the run's sampling, its length at most CALIBRATION_TOKENS, `shape` drafted (a chain
    as γ, a tree as itself)."""
    short = replace(settings, max_new_tokens=min(settings.max_new_tokens, CALIBRATION_TOKENS), adaptive_gamma=False)
    if shape is None:
        return short
    return replace(short, gamma=shape.depth, tree=None if shape.is_chain else shape)


def calibrate(
    pair: LoadedPair, prompts: list[str], settings: DecodeSettings, drafter: str, shape: TreeShape | None = None
) -> Calibration:
    """One short run of the drafter over the prompts, drafting `shape` (default: the calibration tree, or a chain of
    CALIBRATION_CHAIN for a drafter of chains), every cycle's parts kept; and the target alone over each prompt, in
    alternating order with it (run/timing_conditions.slice_order), for the step a measured speedup divides by: its
    decoding seconds per new token (the prefill left out), the loop's own work included."""
    drafts_trees = strategy(drafter).grows_trees
    if shape is None:
        shape = calibration_shape(drafts_trees)
    calibration = calibration_run(settings, shape)
    cycles: list[Cycle] = []
    contexts: list[int] = []  # each verify pass's cached tokens: the prompt's, then every token written before it
    decode_s = alone_s = 0.0
    alone_tokens = 0
    for index, prompt in enumerate(prompts):
        for mode in slice_order(("speculative", "autoregressive"), index):
            if mode == "autoregressive":
                alone = list(run(pair, prompt, calibration_run(settings), mode="autoregressive"))[-1]
                alone_s += alone.wall_s - alone.prefill_s
                alone_tokens += max(0, alone.new_tokens - 1)  # the first new token comes from the prefill
                continue
            written = 0
            for event in run(pair, prompt, calibration, mode="speculative", drafter=drafter):
                if isinstance(event, RunStarted):
                    prompt_tokens = len(event.prompt_token_ids)
                elif isinstance(event, Cycle):
                    cycles.append(event)
                    contexts.append(prompt_tokens + written)
                    written += len(event.emitted_token_ids)
            decode_s += event.wall_s - event.prefill_s  # the last event: the run's Summary
    forwards = sum(cycle.n_draft_forwards for cycle in cycles)
    if drafts_trees and calibration.tree is not None:
        acceptance = measured_rank_acceptance((cycle.parents, cycle.accepted_nodes) for cycle in cycles if cycle.is_tree)
    else:
        acceptance = chain_acceptance(cycles)
    parts = sum(cycle.draft_s + cycle.verify_s for cycle in cycles)
    return Calibration(
        acceptance=acceptance,
        draft_s_per_forward=sum(cycle.draft_s for cycle in cycles) / forwards if forwards else 0.0,
        context=max(1, round(sum(contexts) / len(contexts))) if contexts else 1,
        rows=tuple(cycle.n_rows for cycle in cycles),
        pass_s=tuple(cycle.verify_s for cycle in cycles),
        fixed_s_per_cycle=max(0.0, decode_s - parts) / len(cycles) if cycles else 0.0,
        step_s=alone_s / max(1, alone_tokens),
    )


def chain_acceptance(cycles: list[Cycle]) -> RankAcceptance | None:
    """A chain's acceptance at each position given the ones before it were accepted (the Tally's conditional rate),
    as rank-1 rates by depth."""
    rates = [rate for rate in Tally.of(cycles).acceptance_by_position if rate is not None]
    return RankAcceptance(tuple((rate,) for rate in rates)) if rates else None


# Keeping: per machine and pair, in specviz's cache

FORMAT = 3  # 2: ν as the run meets it (issue 51); 3: τ timed on each kind of shape. Bump when what the measurement does changes: every kept entry is measured again
CPU_INFO = Path("/proc/cpuinfo")
BUSY_KEPT_S = machine_load.BUSY_KEPT_S  # a choice measured beside other work serves this long, then is measured again
_file_lock = threading.Lock()


def settings_path() -> Path:
    from specviz.models.sources import cache_root

    return cache_root() / "settings.json"


@functools.cache
def cpu_description(cpu_info: Path = CPU_INFO) -> dict:
    """The CPU as the measurement depends on it: its model name and a digest of its flags (Linux; empty elsewhere)."""
    try:
        text = cpu_info.read_text(errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "flags") and key not in fields:
            fields[key] = value.strip()
    flags = " ".join(sorted(fields.get("flags", "").split()))
    return {"model": fields.get("model name", ""), "flags": hashlib.sha256(flags.encode()).hexdigest()[:16]}


def conditions(pair: LoadedPair, drafter: str, sampling: SamplingSettings) -> dict:
    """Everything the choice depends on (module docstring), as plain JSON."""
    from specviz.engine.compiled import fast_models, pair_engine
    from specviz.kernels import forms

    device = pair.device
    return {
        "format": FORMAT,
        "cpu": cpu_description(),
        "last_level_cache_bytes": last_level_cache_bytes(),
        "kernels": torch.backends.cpu.get_cpu_capability(),
        # the kernels' instruction sets, OpenMP's wait policy and torch's huge pages (specviz/__init__.py), where the
        # environment sets them
        "isa_limits": {
            name: os.environ.get(name, "")
            for name in (
                "ATEN_CPU_CAPABILITY",
                "ONEDNN_MAX_CPU_ISA",
                "SPECVIZ_KERNEL_ISA",
                "OMP_WAIT_POLICY",
                "THP_MEM_ALLOC_ENABLE",
                "SPECVIZ_GLUE_THREADS",
            )
        },
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "pair": pair.name,
        "models": [part.reference for part in (pair.target, pair.draft, pair.feature_head) if part is not None],
        "dtype": str(pair.dtype).removeprefix("torch."),
        "weights": {
            "target": pair.target.form,
            "draft": pair.draft.form if pair.draft is not None else None,
            "feature_head": pair.feature_head.head.form if pair.feature_head is not None else None,
        },
        "engine": pair_engine(pair),
        # Inductor's loops on one thread or on torch's in each compiled model's decoding package (a narrow model's pass
        # costs differently in each: engine/compiled.decode_glue_threads)
        "glue_threads": {role: fast.glue_threads for role, fast in fast_models(pair).items()},
        # our own kernels' builds (kernels/forms.native_kernels: the library and its C++ source): a new kernel prices
        # the verify pass anew
        "native_kernels": sorted(
            {
                hashlib.sha256(text.encode()).hexdigest()[:16]
                for part in (pair.target, pair.draft)
                if part is not None
                for text in forms.native_kernels(part.model)
            }
        ),
        "drafter": drafter,
        "sampling": "greedy"
        if sampling.greedy
        else {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p},
    }


def key_of(described: dict) -> str:
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:24]


def _entries(path: Path) -> dict:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def kept_setting(described: dict, path: Path | None = None) -> ChosenSetting | None:
    """The choice kept for exactly these conditions, or None (never measures); one measured beside other work only
    for BUSY_KEPT_S after it was taken."""
    entry = _entries(path or settings_path()).get(key_of(described))
    if not isinstance(entry, dict) or entry.get("conditions") != described:
        return None
    if not machine_load.still_kept(entry.get("busy", False), entry.get("kept_at", 0)):
        return None
    try:
        return replace(ChosenSetting.from_json(entry["setting"]), reused=True)
    except (KeyError, TypeError, ValueError):
        return None  # an entry from an older specviz: measured again


def keep_setting(described: dict, chosen: ChosenSetting, busy: bool = False, path: Path | None = None) -> Path:
    """Keep the choice under its conditions (written whole, by rename: a reader never sees half a file); `busy`: it
    was measured while other work used the processor, so it is kept for BUSY_KEPT_S only."""
    path = path or settings_path()
    with _file_lock:
        entries = _entries(path)
        entries[key_of(described)] = {
            "conditions": described,
            "setting": replace(chosen, reused=False, auto=False).to_json(),
            "busy": busy,
            "kept_at": time.time(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        scratch.write_text(json.dumps(entries, indent=1))
        os.replace(scratch, path)
    return path


def calibration_prompts(pair: LoadedPair) -> list[str]:
    """The prompts `gamma: auto` calibrates on: the pair's domain's first presets (a chat coder pair: coding questions)."""
    from specviz.models.catalogue import CatalogueError, load_catalogue
    from specviz.prompts.sets import CODE_QUESTIONS, PROMPTS

    try:
        entry = load_catalogue().get(pair.name)
        domain = entry.domain
    except CatalogueError:  # a pair from --target and --draft
        domain = "prose"
    prompts = CODE_QUESTIONS if domain == "code" and pair.chat_template else PROMPTS[domain]
    return list(prompts[:CALIBRATION_PROMPTS])


def calibration_settings(sampling: SamplingSettings) -> DecodeSettings:
    """What the calibration run decodes with: the run's sampling, exact verification, the calibration's length."""
    return DecodeSettings(max_new_tokens=CALIBRATION_TOKENS, sampling=sampling)


def remembered_setting(
    pair: LoadedPair,
    drafter: str,
    sampling: SamplingSettings,
    on_measure: Callable[[], None] = lambda: None,
    own_work: Callable[[], str] = lambda: "",
    read_rate: Callable[[], float] = read_rate_now_gb_s,
) -> ChosenSetting:
    """The choice kept for this machine and pair, else measured now (ν(k) over 1–8 rows and one short calibration
    run: seconds on a small pair) and kept. Where other programs (our own compile worker among them) used the
    processor while it was measured, or this process did (`own_work`, as process/machine_load.LoadMeter asks it), it is
    kept for BUSY_KEPT_S only: the runs soon after reuse it, and a later one measures again. The memory read rate
    before and after (`read_rate`) is kept with it: on a machine with two states (docs/performance.md), the state the
    prediction was made in."""
    described = conditions(pair, drafter, sampling)
    found = kept_setting(described)
    if found is not None:
        return found
    on_measure()
    before = read_rate()
    with LoadMeter(own_work=own_work) as others:
        choice = choose_setting(pair, calibration_prompts(pair), calibration_settings(sampling), drafter)
    chosen = replace(choice.chosen(), read_gb_s=(before + read_rate()) / 2)  # the state it was measured in
    keep_setting(described, chosen, busy=others.result.busy)
    return chosen


# For the page: measured once per process, in the background, inside the server's quiet section

Timed = Callable[[Callable[[], ChosenSetting]], ChosenSetting]  # the server's way to time work (serving/recorder.timed_quietly)

_chosen: dict[str, tuple[ChosenSetting, float]] = {}  # key → (the choice this process measured, when)
_measuring: dict[str, threading.Thread] = {}
_errors: dict[str, Exception] = {}
_lock = threading.Lock()


def known(pair: LoadedPair, drafter: str, sampling: SamplingSettings) -> ChosenSetting | None:
    """The choice for the pair on this machine if this process or specviz's cache has it; never measures."""
    described = conditions(pair, drafter, sampling)
    kept = kept_setting(described)  # specviz's cache decides how long a choice serves (BUSY_KEPT_S)
    if kept is not None:
        return kept
    found = _chosen.get(key_of(described))  # measured by this process, and not (or no longer) kept on disk
    return found[0] if found is not None and time.monotonic() - found[1] < BUSY_KEPT_S else None


def prepare(
    pair: LoadedPair,
    drafter: str,
    sampling: SamplingSettings,
    timed: Timed = lambda work: work(),
    own_work: Callable[[], str] = lambda: "",
) -> threading.Thread | None:
    """Measure the choice in the background through `timed` (the server's: quietly, on its timed thread), unless it is
    known or already being measured: the thread that waits for it (join it, then `result`), or None where it is known."""
    if known(pair, drafter, sampling) is not None:
        return None
    key = key_of(conditions(pair, drafter, sampling))
    with _lock:
        running = _measuring.get(key)
        if running is not None and running.is_alive():
            return running
        _errors.pop(key, None)
        thread = _measuring[key] = threading.Thread(
            target=_measure, args=(key, pair, drafter, sampling, timed, own_work), name=f"gamma-auto-{pair.name}", daemon=True
        )
        thread.start()
    return thread


def _measure(key: str, pair: LoadedPair, drafter: str, sampling: SamplingSettings, timed: Timed, own_work) -> None:
    try:
        chosen = timed(lambda: remembered_setting(pair, drafter, sampling, own_work=own_work))
        _chosen[key] = (chosen, time.monotonic())
        log.info("%s, %s drafter: %s", pair.name, drafter, chosen.sentence)
    except Exception as error:  # the Run that waits says so and runs the γ on the page
        _errors[key] = error
        log.exception("measuring which setting pays for %s failed", pair.name)


def result(pair: LoadedPair, drafter: str, sampling: SamplingSettings) -> ChosenSetting | None:
    """After `prepare`'s thread ends: the choice, or None where measuring it failed (the log says why)."""
    key = key_of(conditions(pair, drafter, sampling))
    if key in _errors:
        return None
    found = _chosen.get(key)
    return found[0] if found else None
