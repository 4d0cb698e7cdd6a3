"""The fast path's step compiled ahead of time: a model's whole static-cache forward as one AOTInductor package.

torch.compile of one decoder layer left a Python wrapper and Dynamo's entry around every layer call: on SmolLM2-135M
(30 layers, 2 CPU threads) about 4 ms of a 9.4 ms step. AOTInductor exports the whole stack once (every layer and
the final norm; the embedding lookup stays one eager operation) and compiles it to a C++ function: a step is then
one call with no Python inside, 5.5–6 ms.

- One package serves every number of rows, one included, and every layout of their keys: the rows' count and the
  attended width are symbols of the export, and each row names the cache slots it attends over, in order
  (static_cache.Rows). A decode step, a chain's verify pass and a token tree's verify pass run the same kernels, and
  a token's arithmetic is the same alone, inside a pass, and as a tree node over its path's keys (the attention is
  written as reductions the compiler fuses, static_cache.reduced_attention).
- The weights that run are the model's own tensors, handed to the package at load time without a copy
  (`load_constants(user_managed=True)`), so a package never runs stale weights.
- Packages live in specviz's cache under a key of everything the code depends on (torch's version, the CPU's
  kernels, the thread count Inductor compiled for, the model's layout and weight forms, and this engine's source), so
  a restart loads one in about a second instead of compiling it (about a minute for SmolLM2-135M on 2 cores).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import tempfile
from pathlib import Path

import torch
from torch import nn

from specviz.engine import static_cache
from specviz.engine.static_cache import Rows, StaticLlama
from specviz.kernels import forms

FOLDER_NAME = "specviz-aot"  # beside Inductor's own caches (engine/compiled.py's use_inductor_cache)


class WholeStack(nn.Module):
    """StaticLlama's forward after the embedding, as export takes it: its one stack loop (`layers_forward`). The
    embedding lookup stays outside (one eager operation), so the package carries no copy of the embedding table."""

    def __init__(self, forward: StaticLlama) -> None:
        super().__init__()
        self.stack = forward

    def forward(
        self, x, positions, slots, visible, prefix, tail, cache
    ):  # (n, hidden), Rows' five, [(2 · kv_heads, length, head_dim)]
        return tuple(self.stack.layers_forward(x, Rows(positions, slots, visible, prefix, tail), cache))


class CompiledModule:
    """A loaded package: called with the export's input tensors in order, returns its outputs as a list."""

    def __init__(self, package, constants: dict[str, torch.Tensor]) -> None:
        self._constants = constants  # the package reads these tensors in place: kept alive here
        self._loader = package.loader

    def __call__(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        return self._loader.boxed_run(list(tensors))


def stack_export(forward: StaticLlama, new_cache):
    """What exporting the stack takes: the module, example inputs, their symbolic sizes, and what its key describes.
    The ranges cover every step a request can take, a lone first token (its context padded to two slots) included.
    `new_cache(length)` makes a throwaway cache for the example inputs."""
    context = forward.max_length
    rows = torch.export.Dim("rows", min=1, max=context)
    seen = torch.export.Dim("seen", min=2, max=context)  # a size-1 dimension would be specialised: two at least
    depth = torch.export.Dim("depth", min=1, max=context)
    length = torch.export.Dim("length", min=3, max=context)
    cache = new_cache(8)
    embedding = forward.embed_tokens.weight
    device = embedding.device
    rows_in = torch.zeros(3, embedding.shape[1], dtype=embedding.dtype, device=device)
    positions = torch.arange(3, 6, device=device)
    tail = torch.full((3, 2), -1, dtype=torch.long, device=device)
    example = (rows_in, positions, positions.clone(), torch.arange(6, device=device), positions + 1, tail, cache)
    shapes = ({0: rows}, {0: rows}, {0: rows}, {0: seen}, {0: rows}, {0: rows, 1: depth}, [{1: length}] * len(cache))
    described = {"max_length": context, "device": device.type}
    return WholeStack(forward), example, shapes, described, (static_cache, forms)


def load_or_compile_module(module: nn.Module, example: tuple, shapes: tuple, described: dict, sources: tuple):
    """`module`'s package and how it was had: "loaded" from the cache, or "compiled" now (exported with `example`
    and the symbolic `shapes`) and saved. Its key is everything the code depends on: `described`, the modules of
    `sources`, this file, torch, the CPU's kernels, the thread count, and the module's tensors' names, shapes and
    dtypes (not their values, which are read live)."""
    path = package_path(module, described, sources)
    how = "loaded"
    if not path.is_file():
        compile_package(module, example, shapes, path, described.get("glue_threads"))
        how = "compiled"
    return load(module, path), how


def package_path(module: nn.Module, described: dict, sources: tuple) -> Path:
    return package_folder() / f"{package_key(module, described, sources)}.pt2"


def package_key(module: nn.Module, described: dict, sources: tuple) -> str:
    """Everything a package's code depends on, hashed: not the weights' values, which are loaded live."""
    texts = [inspect.getsource(source) for source in sources]
    with open(__file__, encoding="utf-8") as handle:
        texts.append(handle.read())
    texts += forms.native_kernels(module)  # a custom op's library and C++ (kernels/w4a8.py): its schema is in it
    described = {
        **described,
        "module": type(module).__qualname__,
        "torch": torch.__version__,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),  # Inductor writes the thread count into its parallel loops
        "tensors": [(name, tuple(t.shape), str(t.dtype)) for name, t in _named_tensors(module).items()],
        "sources": [hashlib.sha256(text.encode()).hexdigest() for text in texts],
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:24]


def package_folder() -> Path:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()) / FOLDER_NAME


def compile_package(module: nn.Module, example: tuple, shapes: tuple, path: Path, glue_threads: int | None = None) -> None:
    """Export the module with its sizes symbolic, compile it to C++ and save the package, without the weights: they
    are the model's own tensors, handed over at load time. The few scalars the compiler makes itself (each int4
    product's group size) are recorded beside the package (`scalars_path`). `glue_threads` is the thread count of
    Inductor's own loops (the norms, the attention, the activations between the products), torch's by default; the
    products' kernels keep torch's threads either way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    configs = {
        "emulate_precision_casts": True,  # round to bf16 between fused operations where eager rounds
        # no copy of the weights in the package: a copy kept resident cost 1.95 GB beside Qwen2.5-Coder-1.5B's int4 weights
        "aot_inductor.package_constants_in_so": False,
    }
    if glue_threads is not None:
        configs["cpp.threads"] = glue_threads  # written into every parallel loop of the generated C++
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch, torch.inference_mode():  # the caches' mode
        exported = torch.export.export(module, example, dynamic_shapes=shapes, strict=False)
        made = torch._inductor.aoti_compile_and_package(
            exported, package_path=str(Path(scratch) / path.name), inductor_configs=configs
        )
        scalars = made_scalars(made, module)
        scalars_path(path).write_text(json.dumps(scalars))
        os.replace(made, path)  # whole or not at all (its scalars first): another process never loads half a package


def scalars_path(path: Path) -> Path:
    return path.with_suffix(".scalars.json")


def made_scalars(package: str, module: nn.Module) -> dict[str, int]:
    """The constants the compiler made itself, by name, with their values: each is the group size of the int4 product
    it feeds (read from the package's generated C++, where it sits right after that product's packed weight)."""
    import zipfile

    by_flat_name = {name.replace(".", "_"): name for name in _named_tensors(module)}
    modules = dict(module.named_modules())
    with zipfile.ZipFile(package) as archive:
        code = "\n".join(archive.read(name).decode() for name in archive.namelist() if name.endswith("wrapper.cpp"))
    declared = set(re.findall(r'constants_info_\[\d+\]\.name = "(constant\d+)"', code))
    scalars = {}
    for packed, constant in re.findall(r"_weight_int4pack_mm\w*\([^;]*?\b(\w+_packed), (constant\d+),", code):
        owner = by_flat_name.get(packed, "").removesuffix(".packed")
        scalars[constant] = int(modules[owner].group) if owner in modules else None
    unknown = sorted(name for name in declared if scalars.get(name) is None)
    if unknown:
        raise RuntimeError(f"the compiled step needs constants this engine cannot supply: {unknown[:3]}")
    return scalars


def load(module: nn.Module, path: Path) -> CompiledModule:
    """The package at `path`, reading the module's own weights in place (the package holds none): every weight it
    names is the module's own tensor, so what runs is always the loaded model."""
    package = torch._inductor.aoti_load_package(str(path))
    tensors = _named_tensors(module)
    scalars = json.loads(scalars_path(path).read_text()) if scalars_path(path).is_file() else {}
    names = package.get_constant_fqns()
    unknown = [name for name in names if name not in tensors and name not in scalars]
    if unknown:
        raise RuntimeError(f"the compiled package names weights this model lacks: {unknown[:3]}")
    constants = {name: tensors[name] if name in tensors else torch.tensor(scalars[name]) for name in names}
    package.load_constants(constants, check_full_update=True, user_managed=True)
    return CompiledModule(package, constants)


def _named_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer by its export name (persistent or not; a shared tensor under each of its names)."""
    named = dict(module.named_parameters(remove_duplicate=False))
    named.update(module.named_buffers(remove_duplicate=False))
    return {name: tensor.detach() for name, tensor in named.items()}
