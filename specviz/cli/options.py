"""What every command shares: pair, sampling and prompt options, settings from them, and loading the pair they name.

Light (no torch at import): `theory` and `fetch` read it too. Only `resolve_pair` and `set_threads` reach torch,
when a command that loads models calls them.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from specviz.drafting.registry import drafter_keys, strategy, tree_drafter_keys
from specviz.engine import DecodeSettings, SamplingSettings
from specviz.engine.settings import VERIFICATIONS
from specviz.engine.tree_shape import TreeShape
from specviz.kernels import forms
from specviz.models.catalogue import Pair, load_catalogue

if TYPE_CHECKING:
    from specviz.models.loading import LoadedPair
    from specviz.run.chosen_setting import ChosenSetting

NA = "n/a"  # the command line's word for a number not measured
PAIR_TREE = "default"  # `--tree default`: the tree the pair names in models.yaml (its `tree:`)
TREE_HELP = (
    "children per depth, e.g. 4x2x1, with :N for only the N most probable nodes of a depth to branch (4x2x1:2); "
    "'default' is the pair's own tree (models.yaml)"
)


class UsageError(ValueError):
    """Bad arguments: printed as one line, exit status 2."""


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pair", help="a pair from models.yaml (default: its `default:`)")
    parser.add_argument("--target", help="target model: hub id or folder (with --draft, instead of --pair)")
    parser.add_argument("--draft", help="draft model: hub id or folder")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="default: the pair's, else fp32 on CPU")
    parser.add_argument(
        "--weights",
        choices=[forms.AUTO, *forms.names(), *forms.ALIASES],
        help="the models' weight form on a CPU (specviz/kernels/forms.py; the target's, and an independent draft's too); default: the pair's (models.yaml)",
    )


def at_least_one(text: str) -> int:
    """A count (--repeats, --threads, --samples): a whole number from 1, refused by argparse in one line otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a whole number (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def add_repeats_argument(parser: argparse.ArgumentParser, default: int, help: str | None = None) -> None:
    parser.add_argument("--repeats", type=at_least_one, default=default, help=help)


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads", type=at_least_one, help="CPU threads for torch (default: torch's; 1 is steadier on a shared machine)"
    )


def set_threads(threads: int) -> None:
    """Timed commands on a shared CPU: one thread is not held up waiting for a second one that was preempted."""
    import torch  # only commands with --threads get here, and they have loaded it

    torch.set_num_threads(threads)


def add_prompt_set_arguments(parser: argparse.ArgumentParser, repeats: int, repeats_help: str | None = None) -> None:
    """What a command timed over a prompt set takes (bench, score, report): the set, the repeats, the threads."""
    parser.add_argument(
        "--prompts",
        default="heldout",
        help="code|prose|repetitive|arithmetic|all|heldout[:N]|chat-heldout[:N]|code-questions[:N]|FILE",
    )
    add_repeats_argument(parser, repeats, repeats_help)
    add_threads_argument(parser)


def add_timed_pair_arguments(parser: argparse.ArgumentParser, repeats: int, repeats_help: str, gamma_help: str) -> None:
    """What a command that times one pair over a prompt set takes (score, report): the pair, the set, γ."""
    add_pair_arguments(parser)
    add_prompt_set_arguments(parser, repeats, repeats_help)
    parser.add_argument("--gamma", type=int, help=gamma_help)


def parse_batches(text: str | None) -> list[int]:
    """`--batch 1,4,16,64` as sorted distinct sizes; none given: no batch curve."""
    if text is None:
        return []
    try:
        batches = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise UsageError(f"--batch takes a comma-separated list of batch sizes, e.g. 1,4,16,64 (got {text!r})") from None
    if batches[0] < 1:
        raise UsageError(f"--batch sizes must be at least 1 (got {text!r})")
    return batches


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    parser.add_argument("--top-k", type=int, default=0, help="0 is off")
    parser.add_argument("--top-p", type=float, default=1.0)


def add_decoding_arguments(parser: argparse.ArgumentParser, several_verifications: bool = False) -> None:
    add_sampling_arguments(parser)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--drafter",
        choices=drafter_keys(),
        help="a drafting strategy (specviz/drafting/registry.py); default: the pair's own (models.yaml)",
    )
    parser.add_argument("--lenience", type=float, default=1.0, help="1 is exact; below 1 is lossy")
    add_verification_argument(parser, several=several_verifications)
    parser.add_argument("--adaptive-gamma", action="store_true", help="+2 after a full accept, -1 otherwise")


def add_verification_argument(parser: argparse.ArgumentParser, several: bool) -> None:
    """`--verification exact|block|match` (bench: a comma list, one row each, on the same prompts and seeds)."""
    words = "|".join(VERIFICATIONS)
    parser.add_argument(
        "--verification",
        default="exact",
        help=(
            f"how drafts are judged ({words}; bench: a comma list, e.g. exact,block,match): token by token, block "
            "verification (Sun et al. 2025), or llama.cpp's sample-and-match; all exact (engine/verifiers.py)"
            if several
            else f"how drafts are judged ({words}): token by token, block verification (Sun et al. 2025), or "
            "llama.cpp's sample-and-match; all exact (engine/verifiers.py)"
        ),
    )


def verifications_from(args: argparse.Namespace) -> list[str]:
    """The verifications --verification names, in order, once each (checked before any model loads)."""
    names = list(dict.fromkeys(part.strip() for part in str(args.verification).split(",")))
    unknown = [name for name in names if name not in VERIFICATIONS]
    if unknown or not names:
        raise UsageError(f"--verification takes {', '.join(VERIFICATIONS)} (got {args.verification!r})")
    return names


def sampling_from(args: argparse.Namespace) -> SamplingSettings:
    return SamplingSettings(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def settings_from(args: argparse.Namespace, gamma: int, seed: int | None = None, tree: TreeShape | None = None) -> DecodeSettings:
    """Validated decode settings (SettingsError names the bad one); with `tree`, a token tree's instead of a chain's."""
    return DecodeSettings(
        max_new_tokens=args.max_new_tokens,
        gamma=gamma,
        sampling=sampling_from(args),
        seed=args.seed if seed is None else seed,
        lenience=args.lenience,
        adaptive_gamma=args.adaptive_gamma,
        tree=tree,
        verification=verifications_from(args)[0],
    ).validate()


def add_tree_argument(parser: argparse.ArgumentParser, several: bool) -> None:
    """`--tree SHAPE` (run: draft this tree instead of a chain), or `--tree SHAPE [SHAPE ...]` (bench, report: tree
    rows beside the chain's)."""
    if several:
        parser.add_argument("--tree", nargs="+", metavar="SHAPE", help=f"also draft token trees of these shapes: {TREE_HELP}")
    else:
        parser.add_argument("--tree", metavar="SHAPE", help=f"draft a token tree of this shape instead of a chain: {TREE_HELP}")


def tree_shapes(args: argparse.Namespace, pair: Pair) -> list[TreeShape]:
    """The shapes --tree names, checked before any model loads: each parsed ('default': the pair's `tree:`), once
    each, in the order given, and the drafter able to grow trees."""
    texts = [args.tree] if isinstance(args.tree, str) else list(args.tree or [])
    shapes: list[TreeShape] = []
    for text in texts:
        if text.strip().lower() == PAIR_TREE:
            if pair.tree_shape is None:
                raise UsageError("--tree default: this pair names no tree in models.yaml; give a shape such as 2x2x1:1")
            shape = pair.tree_shape
        else:
            try:
                shape = TreeShape.parse(text)
            except ValueError as error:
                raise UsageError(f"--tree: {error}") from None
        if shape not in shapes:
            shapes.append(shape)
    drafter = getattr(args, "drafter", None) or pair.drafter
    if shapes and not strategy(drafter).grows_trees:
        raise UsageError(
            f"--tree: the {drafter} drafter drafts chains only; token trees need --drafter {' or '.join(tree_drafter_keys())}"
        )
    return shapes


def pair_from(args: argparse.Namespace) -> tuple[str, Pair]:
    """The catalogue entry --pair names, or an ad-hoc pair from --target and --draft (nothing loaded yet)."""
    catalogue = load_catalogue()
    if args.target or args.draft:
        if not (args.target and args.draft) or args.pair:
            raise UsageError("give either --pair NAME, or both --target and --draft")
        return "custom", Pair(target=args.target, draft=args.draft, description="from the command line")
    name = args.pair or catalogue.default
    return name, catalogue.get(name)


AUTO = "auto"  # `--gamma auto`: the chain or tree measured to be fastest here (deployment/gamma_auto.py)
GAMMA_HELP = "drafts per cycle; a comma list sweeps (2,4,6); 'auto' measures which chain or tree pays here; default: the pair's (models.yaml)"


def gammas_from(text: str | None, pair: Pair) -> list[int] | str:
    """--gamma as asked: the integers of a comma list, or "auto"; not given, the pair's own γ (models.yaml, where
    `gamma: auto` means auto too). Checked before any model loads."""
    chosen = str(pair.gamma) if text is None else text.strip().lower()
    if chosen == AUTO:
        return AUTO
    try:
        gammas = [int(part) for part in chosen.split(",")]
    except ValueError:
        raise UsageError(f"--gamma takes an integer, a comma-separated list or 'auto' (got {text!r})") from None
    for gamma in gammas:
        DecodeSettings(gamma=gamma).validate()
    return gammas


def choose_automatically(pair: LoadedPair, settings: DecodeSettings, drafter: str) -> ChosenSetting:
    """The chain or tree measured to pay here (deployment/gamma_auto.py: kept per machine and pair, measured the
    first time), said in one line on stderr."""
    from specviz.deployment.gamma_auto import remembered_setting, settings_path

    def measuring() -> None:
        _to_stderr(
            "Choosing γ (once for this machine and pair): a short calibration run of the drafter, the target alone, "
            "verify passes of 1–8 rows, then the choice run once…"
        )

    chosen = remembered_setting(pair, drafter, settings.sampling, on_measure=measuring)
    kept = f" (measured {chosen.measured_at}, kept in {settings_path()})" if chosen.reused else ""
    _to_stderr(chosen.sentence + kept)
    return chosen


def pair_and_gamma(args: argparse.Namespace) -> tuple[str, Pair, int]:
    """The pair the options name and its γ: --gamma, else the pair's own; the γ is checked before any model loads."""
    name, pair = pair_from(args)
    gamma = pair.start_gamma if args.gamma is None else args.gamma
    DecodeSettings(gamma=gamma).validate()
    return name, pair, gamma


def resolve_pair(args: argparse.Namespace) -> LoadedPair:
    """Load the pair the options name (torch and transformers load here, for the commands that run models)."""
    from specviz.models.loading import load_pair

    name, pair = pair_from(args)
    if getattr(args, "drafter", "unset") is None:
        args.drafter = pair.drafter  # the pair's own strategy: a feature head where it has one
    weights = getattr(args, "weights", None)
    loaded = load_pair(name, pair, load_catalogue().offline_pairs(), dtype=args.dtype, progress=_to_stderr, weights=weights)
    compile_before_timing(loaded)
    return loaded


def compile_before_timing(pair: LoadedPair) -> None:
    """Compile the fast path's graphs (or load them from Inductor's cache) before anything is timed, and say what it
    cost: compiling is part of a cold start, never of a measured run."""
    from specviz.engine.compiled import compile_summary, fast_models, warm_up_pair

    if any(fast.report.compiled for fast in fast_models(pair).values()):
        _to_stderr("Compiling the decode step (minutes the first time on 2 cores; seconds from the cache after)…")
    reports = warm_up_pair(pair)
    if any(report.compiled for report in reports.values()):  # an eager step was already announced in one line
        _to_stderr(compile_summary(reports))


def dtype_name(pair: LoadedPair) -> str:
    """The pair's dtype as a user writes it: `bfloat16`, not `torch.bfloat16`."""
    return str(pair.dtype).removeprefix("torch.")


def _to_stderr(message: str) -> None:
    """Fetching and converting a model takes a while: say what is happening, off the JSON on stdout."""
    print(message, file=sys.stderr)
