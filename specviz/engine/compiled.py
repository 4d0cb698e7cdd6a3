"""The fast path: a model's step over a static KV cache, compiled ahead of time into one C++ function per model.

gpt-fast's design, with AOTInductor instead of torch.compile's Python wrapper (engine/aot_step.py): every layer and
the final norm (the embedding lookup stays one eager operation) are exported once with their sizes symbolic and
compiled into a package that serves every row count, one included, so a decode step and a verify pass run the same
kernels and a token's logits are bit-identical alone and inside a pass. The attended length and the cache's length
are symbolic too, so nothing recompiles as a request grows. Packages are kept in specviz's cache folder: a restart loads one in about a second.

`FastDecoder` is `CachedDecoder` with the same methods, so the engine, the drafters and the rollback helper do not
know which one they hold. Where compiling cannot work (no C++ compiler on a CPU machine, or the compiler fails), the
same static-cache forward runs eager, and one line says so. `CompiledPart` owns a package (build, cache, load, warm
up) for the target, the draft and a feature head alike; a request keeps the engine it started on to its last token.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from specviz.engine.aot_step import CompiledModule, load_or_compile_module, package_path, stack_export
from specviz.engine.kv_cache import Decoder
from specviz.engine.static_cache import Rows, StaticLlama, is_supported
from specviz.engine.tree_rows import TreeRows
from specviz.kernels.build import INSTALL_HINT, cxx_compiler

log = logging.getLogger(__name__)

ATTRIBUTE = "_specviz_fast_path"  # where a model keeps its FastModel
CACHE_CHUNK = 512  # the static cache grows in steps of this many positions (a request rarely needs more than one)
SMALL_HIDDEN = 512  # a model this narrow or narrower decodes with Inductor's own loops on one thread (decode_glue_threads)
LONG_ROWS = 64  # a forward of more rows than this (a prompt) takes the long-prompt package where there is one


@dataclass
class CompileReport:
    """What compiling cost this process (compiling the package cold, or loading it from the cache), or why it is eager."""

    compiled: bool
    seconds: dict[str, float] = field(default_factory=dict)  # "compile" (export and compile, cold) or "load" (cached)
    reason: str | None = None  # why the step runs eager

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())


def use_inductor_cache(folder: str) -> None:
    """Inductor's on-disk caches (FX graphs, compiled kernels) in `folder` (unless the user chose one): kept across
    reboots, unlike torch's default under /tmp, so a restart reuses them."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") in (None, os.path.abspath(default_cache_dir())):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder


def timed_build(report: CompileReport, what: str, make):
    """`make()` (load a package from the cache, or compile one), timed into `report` as "load" or "compile"; on
    failure, one line says so, `report` turns eager, and None is returned: a broken toolchain must not stop decoding."""
    started = time.perf_counter()
    try:
        built, how = make()
    except Exception as error:
        reason = f"compiling {what} failed ({type(error).__name__}: {str(error).splitlines()[0][:160]}), so it runs eager"
        log.warning("%s.", reason)
        report.compiled, report.reason = False, reason
        return None
    report.seconds["compile" if how == "compiled" else "load"] = time.perf_counter() - started
    return built


def compiler_missing(device: torch.device) -> str | None:
    """Why compiling cannot work here, in one sentence; None when it can. (With torch.compile of one layer, AVX2
    kernels once gave NaN logits; the AOTInductor package matched eager under ATEN_CPU_CAPABILITY=avx2 in float32,
    int8 and int4, so AVX2 compiles too.)"""
    if device.type != "cpu" or cxx_compiler() is not None:
        return None
    return f"no C++ compiler on this machine, so the fast path runs uncompiled (eager): {INSTALL_HINT}"


def compile_wanted(model: PreTrainedModel) -> tuple[bool, str | None]:
    """Whether to compile the model's step, and why not when not: $SPECVIZ_COMPILE=1 or 0 decides; unset, every model
    compiles. A package holds no copy of the weights (engine/aot_step.py reads the model's own tensors), so a large
    model costs no more memory compiled than eager: Qwen2.5-Coder-1.5B's package is a few MB. Compiled logits are not
    transformers' own to the bit (Inductor sums in its own order: up to 0.6 apart in bf16 on the real pair), but a
    token's logits are the same alone and inside a verify pass, so speculation stays exactly the compiled target's
    greedy output; in float32 they agree to rounding."""
    chosen = os.environ.get("SPECVIZ_COMPILE", "").strip().lower()
    if chosen in ("0", "false", "no"):
        return False, "compiling is off ($SPECVIZ_COMPILE=0)"
    return True, None


def decode_glue_threads(model: PreTrainedModel) -> int | None:
    """The thread count of Inductor's own loops (norms, attention, activations: the glue between the products) in the
    package that decodes: 1 for a narrow model on a machine where torch runs several threads, None (torch's count)
    otherwise. A narrow model's glue is a few microseconds of work per loop, and a two-thread loop's start and join
    cost more than that: on 2 AMD EPYC cores the bundled target's 8-row verify pass took 4.8 or 7.2 ms with the loops
    on both threads, as the virtual machine switched between its two states, and 5.2 or 5.4 ms with them on one; for
    Qwen2.5-Coder-1.5B (hidden size 1536) one thread gained nothing (docs/performance.md, "The machine's two states").
    The products keep torch's threads, and a long prompt goes through a package with the loops on every thread
    (`LongPromptPackage`): the same arithmetic in the same order, so the same bits. $SPECVIZ_GLUE_THREADS=1 puts every
    model's loops on one thread, =all on torch's."""
    chosen = os.environ.get("SPECVIZ_GLUE_THREADS", "").strip().lower()
    if model.device.type != "cpu" or torch.get_num_threads() == 1 or chosen == "all":  # a GPU's kernels are not these
        return None
    if chosen == "1":
        return 1
    return 1 if getattr(model.config, "hidden_size", SMALL_HIDDEN + 1) <= SMALL_HIDDEN else None


class CompiledPart:
    """What owns one compiled package (engine/aot_step.py): building it, finding it in the cache, loading it and
    warming it up, for a model's stack (FastModel) and a feature head's draft step (models/head_fast_path.FastHead)
    alike. A part says what it exports (`export`); until its package is loaded, or where compiling cannot work, the
    same module runs eager. Which of the two a request runs is chosen when it starts, and kept to its end."""

    what = "the step"  # as the failure line names it
    glue_threads: int | None = None  # Inductor's loops' threads in the package: None is torch's (decode_glue_threads)

    def __init__(self, compile_step: bool, device: torch.device) -> None:
        missing = compiler_missing(device) if compile_step else None
        self.report = CompileReport(compiled=compile_step and missing is None, reason=missing)
        if not compile_step:
            self.report.reason = "compiling is off"
        self.package: CompiledModule | None = None  # once compiled or loaded
        self._building = threading.Lock()

    def export(self) -> tuple:
        """(module, example inputs, their symbolic sizes, what the package's key describes, the source modules)."""
        raise NotImplementedError

    @property
    def engine(self) -> str:
        """What a request starting now runs on: "compiled" (the package is loaded) or "eager"."""
        return "compiled" if self.package is not None else "eager"

    def build(self) -> CompiledModule | None:
        """Load the package from the cache, or export and compile it here (timed); on failure, eager from then on.
        Exporting traces the modules, which patches them for the whole process: only a process that runs no request
        meanwhile may compile (the CLI before it times anything, serving/compile_worker.py)."""
        with self._building:
            if self.package is None and self.report.compiled:
                self.package = timed_build(self.report, self.what, lambda: load_or_compile_module(*self.export()))
            return self.package

    def is_cached(self) -> bool:
        """Whether building means loading a cached package (about a second), not compiling one."""
        module, _example, _shapes, described, sources = self.export()
        return package_path(module, described, sources).is_file()

    def load_cached(self) -> bool:
        """Load the package if the cache holds it (never compiles): whether requests now run compiled."""
        if self.package is None and self.report.compiled and self.is_cached():
            self.build()
        return self.package is not None

    def warm_up(self) -> CompileReport:
        """Compile (or load) the package now, in this process: a request then never waits for the compiler."""
        self.build()
        return self.report


class FastModel(CompiledPart):
    """One model's static-cache forward, its step (the package, or the same forward eager) and a pool of caches."""

    def __init__(self, model: PreTrainedModel, compile_step: bool) -> None:
        super().__init__(compile_step, model.device)
        if compile_step and not self.report.compiled:
            log.warning("%s.", self.report.reason)
        self.model = model
        self.context = getattr(model.config, "max_position_embeddings", None) or 2048
        self.forward = StaticLlama(model, max_length=self.context)
        self.device = model.device
        self.dtype = self.forward.embed_tokens.weight.dtype
        self.lm_head = model.get_output_embeddings()
        self.positions = torch.arange(self.context, device=self.device)
        self.counts = self.positions + 1  # a causal row at position p sees p + 1 keys
        self.no_tail = torch.full((self.context, 1), -1, device=self.device)  # plain rows attend over the context only
        self._free: list[list[torch.Tensor]] = []
        self._lock = threading.Lock()
        self.glue_threads = decode_glue_threads(model) if self.report.compiled else None
        self.long_prompts = LongPromptPackage(self) if self.glue_threads is not None else None

    def export(self) -> tuple:
        module, example, shapes, described, sources = stack_export(self.forward, self.throwaway_cache)
        if self.glue_threads is not None:
            described = {**described, "glue_threads": self.glue_threads}
        return module, example, shapes, described, sources

    def throwaway_cache(self, length: int) -> list[torch.Tensor]:
        return self.forward.new_cache(length, self.dtype)

    def warm_up(self) -> CompileReport:
        """The decoding package, then the long-prompt one where there is one: its seconds count into the report."""
        self.build()
        if self.long_prompts is not None and self.package is not None:
            self.long_prompts.build()
            for name, seconds in self.long_prompts.report.seconds.items():
                self.report.seconds[name] = self.report.seconds.get(name, 0.0) + seconds
        return self.report

    def is_cached(self) -> bool:
        return super().is_cached() and (self.long_prompts is None or self.long_prompts.is_cached())

    def load_cached(self) -> bool:
        """Load the cached packages (never compiles): whether requests run compiled and nothing is left to compile."""
        loaded = super().load_cached()
        if self.long_prompts is None or not loaded:
            return loaded
        return self.long_prompts.load_cached() or not self.long_prompts.report.compiled

    def new_cache(self, length: int) -> list[torch.Tensor]:
        """A cache for `length` positions (one tensor per layer): a pooled one if long enough, else a new one."""
        with self._lock:
            for i, cache in enumerate(self._free):
                if cache[0].shape[1] >= length:
                    return self._free.pop(i)
        return self.forward.new_cache(length, self.dtype)

    def release_all(self, held: list[list[torch.Tensor]]) -> None:
        """Return a decoder's caches to the pool (emptying its list, so none is returned twice)."""
        with self._lock:
            self._free.extend(held)
            held.clear()

    def stepper(self):
        """The step a request starting now runs from its first token to its last: the loaded package's, else eager.
        A package loaded later serves the requests that start after it: a request never switches engines halfway,
        and the package's range covers every step a request can take (one token included, up to the context).

        A step feeds rows at positions start…, or a token tree's rows (`tree`, written at slots start…, each at its
        depth's position seeing only its keys): the same package (or eager forward) with other rows (static_cache.Rows),
        and returns the hidden states of every layer (transformers' order)."""
        package = self.package  # None: the same stack eager
        long_package = self.long_prompts.package if self.long_prompts is not None else None

        def step(token_ids: torch.Tensor, start: int, cache: list[torch.Tensor], tree: TreeRows | None = None):
            n = token_ids.shape[0]
            rows = self.rows(n, start, tree)
            if package is None:
                return self.forward(token_ids, rows, cache)
            x = self.forward.embed_tokens(token_ids)  # one eager lookup: the package carries no embedding table
            chosen = long_package if long_package is not None and n > LONG_ROWS else package
            return [x, *chosen(x, *rows, *cache)]

        return step

    def rows(self, n: int, start: int, tree: TreeRows | None) -> Rows:
        """The forward's rows: plain decoding's (n rows at positions start…, causal), or a token tree's. The context
        is at least two slots wide (a lone first token's second slot is masked): the export's floor."""
        slots = self.positions[start : start + n]
        if tree is not None:
            prefix, tail = tree.prefix.to(self.device), tree.tail.to(self.device)
            visible = self.positions[: max(2, int(tree.prefix.max()))]
            return Rows(tree.positions.to(self.device), slots, visible, prefix, tail)
        visible = self.positions[: max(2, start + n)]
        return Rows(slots, slots, visible, self.counts[start : start + n], self.no_tail[:n])


class LongPromptPackage(CompiledPart):
    """A narrow model's second package: the same stack with Inductor's loops on torch's threads, for forwards of more
    than `LONG_ROWS` rows (a prompt). With them on one thread a 900-token prompt took 1.75x as long on the bundled
    target (benchmarks/results/glue_threads_prefill_bundled.json). Its loops split the same work over more threads
    and reduce nothing across them, so a row's bits are the decoding package's (tests/test_fast_path.py checks it):
    which package fed a prompt changes no decision. Until it is built, a long prompt takes the decoding package."""

    what = "the long-prompt step"

    def __init__(self, fast: FastModel) -> None:
        super().__init__(fast.report.compiled, fast.device)
        self.fast = fast

    def export(self) -> tuple:
        return stack_export(self.fast.forward, self.fast.throwaway_cache)


def fast_model(model: PreTrainedModel) -> FastModel | None:
    """The model's fast path, if it was turned on (`enable`)."""
    return getattr(model, ATTRIBUTE, None)


def enable(model: PreTrainedModel, compile_step: bool | None = None) -> FastModel | None:
    """Give a model the fast path (once): None where its layout is not one the static-cache forward knows."""
    existing = fast_model(model)
    if existing is not None:
        return existing
    if not is_supported(model):
        return None
    reason = None
    if compile_step is None:
        compile_step, reason = compile_wanted(model)
    fast = FastModel(model, compile_step)
    if reason:
        fast.report.reason = reason
    object.__setattr__(model, ATTRIBUTE, fast)  # not a submodule: the model's state dict stays as it was
    return fast


class FastDecoder(Decoder):
    """CachedDecoder's interface over a static cache: rollback moves `cached_length`; nothing is copied."""

    def __init__(self, fast: FastModel, vocab_size: int) -> None:
        self.fast = fast
        self.model = fast.model
        self.vocab_size = vocab_size
        self.device = fast.device
        self.cached_length = 0
        self.engine = fast.engine  # what this request runs on, from its first token to its last
        self._step = fast.stepper()
        self.cache = fast.new_cache(min(CACHE_CHUNK, fast.context))
        self._held = [self.cache]  # returned to the pool when this decoder is dropped
        weakref.finalize(self, fast.release_all, self._held)

    @property
    def capacity(self) -> int:
        """Positions the cache holds before it must grow."""
        return self.cache[0].shape[1]

    def reset(self) -> None:
        self.cached_length = 0

    def truncate(self, length: int) -> None:
        """Forget cached positions from `length` on: only the length moves."""
        self.cached_length = min(self.cached_length, length)

    def _forward(self, token_ids, keep_last, layers=(), hidden_last=1, rows: TreeRows | None = None):
        if not isinstance(token_ids, torch.Tensor):
            token_ids = torch.tensor(token_ids, dtype=torch.long, device=self.device)
        token_ids = token_ids.view(-1)
        end = self.cached_length + token_ids.shape[0]
        if end > self.capacity:
            self._grow(end)
        states = self._step(token_ids, self.cached_length, self.cache, rows)
        self.cached_length = end
        logits = self.fast.lm_head(states[-1][-keep_last:])[:, : self.vocab_size].float()  # (keep_last, vocab)
        if not layers:
            return logits, None
        return logits, torch.cat([states[layer][-hidden_last:] for layer in layers], dim=-1)

    def forward_tree(self, token_ids, rows: TreeRows, keep_last: int, layers=(), hidden_last: int = 1):
        """A token tree's rows after the cache (engine/tree.py): each at its depth's position, seeing only its keys."""
        return self._forward(token_ids, keep_last, layers, hidden_last, rows=rows)

    def move_positions(self, slots: torch.Tensor, destination: int) -> None:
        """Copy the entries at `slots` to destination, destination + 1, …: only those entries move, in every layer."""
        end = destination + len(slots)
        for layer_cache in self.cache:  # (2 · kv_heads, length, head_dim): keys, then values
            layer_cache[:, destination:end] = layer_cache.index_select(1, slots)

    def _grow(self, length: int) -> None:
        """A longer cache (rare: a long prompt or answer); the filled positions move over once."""
        if length > self.fast.context:
            raise ValueError(f"{length} positions exceed the model's context of {self.fast.context}")
        size = min(self.fast.context, -(-length // CACHE_CHUNK) * CACHE_CHUNK)
        cache = self.fast.new_cache(size)
        for new, old in zip(cache, self.cache):
            new[:, : self.cached_length] = old[:, : self.cached_length]
        self.fast.release_all(self._held)
        self.cache = cache
        self._held.append(cache)


def fast_models(pair) -> dict[str, FastModel]:
    """The pair's models (and feature head) that run on the fast path, by role."""
    parts = (("target", pair.target), ("draft", pair.draft), ("feature head", getattr(pair, "feature_head", None)))
    found = {
        role: fast_model(getattr(part, "model", None) or getattr(part, "head", None)) for role, part in parts if part is not None
    }
    return {role: fast for role, fast in found.items() if fast is not None}


def warm_up_pair(pair) -> dict[str, CompileReport]:
    """Compile (or load from Inductor's cache) the step graphs of a loaded pair's models: what it cost, per model."""
    return {role: fast.warm_up() for role, fast in fast_models(pair).items()}


def load_cached_packages(pair) -> dict[str, FastModel]:
    """Load the packages the cache holds for the pair's models (about a second each; nothing compiles): the models
    still waiting for a package to be compiled, by role."""
    return {role: fast for role, fast in fast_models(pair).items() if fast.report.compiled and not fast.load_cached()}


def pair_engine(pair) -> str:
    """What a request on the pair starting now runs on: "compiled" when every model on the fast path has its package
    loaded, "eager" when none has (or compiling is off), "transformers" when no model is on the fast path."""
    engines = {fast.engine for fast in fast_models(pair).values()}
    if not engines:
        return "transformers"
    return engines.pop() if len(engines) == 1 else "partly compiled"


@contextmanager
def eager_meanwhile(pair) -> Iterator[None]:
    """Requests that start inside run the eager step, as before the packages loaded (benchmarks compare the two)."""
    held = [(fast, fast.package) for fast in fast_models(pair).values()]
    for fast, _package in held:
        fast.package = None
    try:
        yield
    finally:
        for fast, package in held:
            fast.package = package


def compile_summary(reports: dict[str, CompileReport]) -> str:
    """One line: what compiling cost (a cold compile takes minutes on 2 cores, a cached restart seconds), or why eager."""
    parts = []
    for role, report in reports.items():
        if report.compiled:
            graphs = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in sorted(report.seconds.items()))
            parts.append(f"{role}: {graphs}")
        else:
            parts.append(f"{role}: eager ({report.reason})")
    return "compiled step: " + ("; ".join(parts) if parts else "none (no model on the fast path)")


def decoder_for(model: PreTrainedModel, vocab_size: int):
    """The decoder the engine feeds: the fast path where the model has it, else transformers' dynamic cache."""
    fast = fast_model(model)
    if fast is not None:
        return FastDecoder(fast, vocab_size)
    from specviz.engine.kv_cache import CachedDecoder

    return CachedDecoder(model, vocab_size)
