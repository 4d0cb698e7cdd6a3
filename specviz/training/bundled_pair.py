"""Train the bundled pair: `python -m specviz.train`. One function per stage, run in the order of STAGES.

The defaults are the settings of the pair shipped in assets/ (assets/MODEL_CARD.md, assets/training_report.json):

1. corpus: this interpreter's standard-library `.py` files (~5% of them held out for validation) plus
   the library code of a fixed list of permissively licensed installed packages (`corpus.PACKAGES`);
2. tokenizer: byte-level BPE;
3. target: an 8-layer Llama of width 320 trained on the corpus, then deepened to 12 layers (each new layer
   a function-preserving copy, `training.grow`) and trained further: the deeper target costs more per
   step, which makes the draft relatively cheaper;
4. loop-free self-training (`training.loop_free`): the target learns, from its own greedy text, to take a
   different turn where it would loop;
5. draft: a ~2M-parameter one-layer Llama distilled from the target's logits, on the corpus and on the
   target's own greedy continuations (`training.on_policy`);
6. plain draft: the same draft architecture trained on tokens alone, for fewer steps, to show that
   alignment with the target matters;
7. evaluation (`training.evaluate`): distinct-4, a syntax check and samples of greedy completions of
   held-out code, and for the bundled folder the CLI benchmark of both pairs, into the report.

Stages 1-3 take about 1 h 15 min on 2 CPU cores; `--only-target` stops after them and `--reuse-grown` starts
after them (from --work; `--reuse-target` after the 8-layer target), so the later stages can be rerun alone.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from specviz.models.stored import pack_weights
from specviz.process.logs import configure as configure_logging
from specviz.training import architectures, corpus, evaluate, grow, loop_free, on_policy
from specviz.training.evaluate import ASSETS
from specviz.training.loop import TrainSettings, train
from specviz.training.loop_free import LoopFreeSettings
from specviz.training.tokenizer import save_tokenizer, train_tokenizer

log = logging.getLogger(__name__)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m specviz.train", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ASSETS, help="folder for the three model folders")
    parser.add_argument("--work", type=Path, default=Path(".train_work"), help="scratch folder for checkpoints")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--target-steps", type=int, default=2600)
    parser.add_argument("--target-learning-rate", type=float, default=3e-3)
    parser.add_argument("--grow-after", default="1,3,5,7", help="layers of the trained target to follow with a new layer")
    parser.add_argument("--grown-steps", type=int, default=800, help="training of the deepened target")
    parser.add_argument("--grown-learning-rate", type=float, default=1e-3)
    parser.add_argument(
        "--loop-free-steps", type=int, default=300, help="most steps of loop-free self-training (it stops once probes pass)"
    )
    parser.add_argument("--draft-steps", type=int, default=1000)
    parser.add_argument("--plain-draft-steps", type=int, default=175)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--sequence-length", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch threads (the shipped pair: 2, on a 2-core machine with nothing else running)",
    )
    parser.add_argument(
        "--reuse-target",
        action="store_true",
        help="start from the language-model target saved in --work/target-lm (and its tokenizer)",
    )
    parser.add_argument("--reuse-grown", action="store_true", help="start from the deepened target saved in --work/target-grown")
    parser.add_argument("--only-target", action="store_true", help="stop once the deepened target is saved")
    parser.add_argument("--on-policy-rows", type=int, default=2048, help="greedy target continuations for the draft")
    parser.add_argument("--on-policy-share", type=float, default=0.5, help="share of each draft batch drawn from them")
    parser.add_argument("--skip-evaluation", action="store_true", help="do not measure the saved pair at the end")
    parser.add_argument("--evaluate-only", action="store_true", help="only measure the pair in --out and update its report")
    return parser.parse_args()


def encode_stream(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> torch.Tensor:
    """All files as one token stream, separated by end-of-text."""
    stream: list[int] = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        stream.extend(ids)
        stream.append(tokenizer.eos_token_id)
    return torch.tensor(stream, dtype=torch.long)


def save_model(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast | None, folder: Path, packed: bool = False) -> None:
    """A plain transformers folder, weights in bf16 to keep the bundle small; `packed` adds them xz-compressed (the
    file the bundle keeps). A draft gets no tokenizer (None): it reads with its target's."""
    shutil.rmtree(folder, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(folder)
    model.to(torch.float32)
    if tokenizer is not None:
        save_tokenizer(tokenizer, folder)
    if packed:
        pack_weights(folder)


@dataclass
class Training:
    """What the stages hand on to each other: the arguments, the report being written, the data and the target."""

    args: argparse.Namespace
    report: dict
    started: float = field(default_factory=time.perf_counter)
    tokenizer: PreTrainedTokenizerFast | None = None
    train_texts: list[str] = field(default_factory=list)
    validation_texts: list[str] = field(default_factory=list)
    train_tokens: torch.Tensor | None = None
    validation_tokens: torch.Tensor | None = None
    target: LlamaForCausalLM | None = None

    @property
    def lm_target_folder(self) -> Path:
        return self.args.work / "target-lm"  # the 8-layer target before growth, with its tokenizer and report

    @property
    def grown_folder(self) -> Path:
        return self.args.work / "target-grown"  # the deepened target before loop-free self-training

    def settings(self, steps: int, learning_rate: float) -> TrainSettings:
        a = self.args
        return TrainSettings(
            steps=steps,
            batch_size=a.batch_size,
            sequence_length=a.sequence_length,
            learning_rate=learning_rate,
            warmup_steps=a.warmup_steps,
            seed=a.seed,
        )

    def train_and_save(self, role: str, folder: str, config, train_settings: TrainSettings, **teaching) -> LlamaForCausalLM:
        """A fresh model of `config`, trained and saved under --out/folder, its result in the report under `role`."""
        torch.manual_seed(self.args.seed)  # initial weights depend on the seed alone, so --reuse-target gives the same drafts
        model = architectures.build(config)
        work = self.args.work / role
        result = train(model, self.train_tokens, self.validation_tokens, train_settings, work, description=role, **teaching)
        self.report[role] = {"parameters": architectures.count_parameters(model), **vars(result)}
        tokenizer = self.tokenizer if folder == "pycode-target" else None  # the drafts read with the target's
        save_model(model, tokenizer, self.args.out / folder, packed=True)  # the bundle keeps every weights file packed
        return model


def build_corpus(run: Training) -> None:
    """1. The standard library and the listed packages' code, with held-out standard-library files."""
    run.train_texts, run.validation_texts, split, packages = corpus.build_corpus()
    run.report["corpus"] = {
        "root": str(corpus.stdlib_root()),
        "site_packages": str(corpus.site_packages_root()),
        "train_files": len(run.train_texts),
        "stdlib_train_files": len(run.train_texts) - sum(p.files for p in packages),
        "validation_files": len(run.validation_texts),
        "train_bytes": sum(len(t) for t in run.train_texts),
        "package_bytes": sum(p.bytes for p in packages),
        "packages": [vars(p) for p in packages],
        "validation_files_list": [p.relative_to(corpus.stdlib_root()).as_posix() for p in split.validation],
    }


def build_tokenizer(run: Training) -> None:
    """2. A byte-level BPE tokenizer (or the saved one, when reusing a target), and the corpus as token streams."""
    args = run.args
    if args.reuse_target or args.reuse_grown:
        run.tokenizer = PreTrainedTokenizerFast.from_pretrained(run.lm_target_folder)
    else:
        run.tokenizer = train_tokenizer(run.train_texts, args.vocab_size)
        save_tokenizer(run.tokenizer, args.work / "tokenizer")  # beside the checkpoints, so a stopped run is still usable
    run.train_tokens = encode_stream(run.tokenizer, run.train_texts)
    run.validation_tokens = encode_stream(run.tokenizer, run.validation_texts)
    run.report["corpus"].update(train_tokens=len(run.train_tokens), validation_tokens=len(run.validation_tokens))
    log.info(
        "corpus: %d train files (%s tokens), %d validation files",
        len(run.train_texts),
        f"{len(run.train_tokens):,}",
        len(run.validation_texts),
    )


def train_target(run: Training) -> None:
    """3. The target, a language model of 8 layers (or the saved one with --reuse-target; nothing with --reuse-grown)."""
    args = run.args
    if args.reuse_grown:
        return  # grow_target loads the deepened target
    if args.reuse_target:
        run.target = LlamaForCausalLM.from_pretrained(run.lm_target_folder, dtype=torch.float32)
        run.report["target"] = json.loads((run.lm_target_folder / "report.json").read_text())
        return
    config = architectures.target_config(len(run.tokenizer))
    run.target = run.train_and_save("target", "pycode-target", config, run.settings(args.target_steps, args.target_learning_rate))
    save_model(run.target, run.tokenizer, run.lm_target_folder)
    (run.lm_target_folder / "report.json").write_text(json.dumps(run.report["target"], indent=2) + "\n")


def grow_target(run: Training) -> None:
    """3a. Deepened (each listed layer followed by a zero-output copy), then trained on unseen windows; saved as the target."""
    args = run.args
    if args.reuse_grown:
        run.target = LlamaForCausalLM.from_pretrained(run.grown_folder, dtype=torch.float32)
        saved = json.loads((run.grown_folder / "report.json").read_text())
        run.report["target"], run.report["target_grown"] = saved["target"], saved["target_grown"]
    else:
        target = run.target
        grow.deepen(target, [int(layer) for layer in args.grow_after.split(",") if layer])
        grown_settings = replace(run.settings(args.grown_steps, args.grown_learning_rate), warmup_steps=50, seed=args.seed + 1)
        work = args.work / "target_grown"
        result = train(target, run.train_tokens, run.validation_tokens, grown_settings, work, description="grown")
        run.report["target_grown"] = {
            "parameters": architectures.count_parameters(target),
            "layers": target.config.num_hidden_layers,
        }
        run.report["target_grown"].update(vars(result))
        save_model(target, run.tokenizer, run.grown_folder)
        grown_report = {k: run.report[k] for k in ("target", "target_grown")}
        (run.grown_folder / "report.json").write_text(json.dumps(grown_report, indent=2) + "\n")
    save_model(run.target, run.tokenizer, args.out / "pycode-target", packed=True)


def teach_loop_free(run: Training) -> None:
    """4. The target learns from its own text to turn away where greedy decoding would loop; saved as the shipped target."""
    args = run.args
    if not args.loop_free_steps:
        return
    loop_free_settings = LoopFreeSettings(max_steps=args.loop_free_steps, seed=args.seed)
    result, probes = loop_free.finetune(run.target, run.train_tokens, run.validation_tokens, loop_free_settings)
    run.report["target_loop_free"] = {**vars(result), "settings": vars(loop_free_settings), "probes": probes}
    save_model(run.target, run.tokenizer, args.out / "pycode-target", packed=True)


def distil_draft(run: Training) -> None:
    """5. The draft, distilled from the target's logits on the corpus and on the target's own greedy text."""
    args = run.args
    started_rows = time.perf_counter()
    rows = on_policy.greedy_continuations(
        run.target, run.train_tokens, args.on_policy_rows, prefix_length=64, sequence_length=args.sequence_length, seed=args.seed
    )
    run.report["on_policy"] = {"rows": len(rows), "tokens": rows.numel(), "seconds": time.perf_counter() - started_rows}
    distil = replace(run.settings(args.draft_steps, 3e-3), on_policy_share=args.on_policy_share)
    config = architectures.draft_config(len(run.tokenizer))
    run.train_and_save("draft_distilled", "pycode-draft", config, distil, teacher=run.target, on_policy=rows)


def train_plain_draft(run: Training) -> None:
    """6. The same draft architecture on tokens alone, for fewer steps; then the report is written."""
    config = architectures.draft_config(len(run.tokenizer))
    run.train_and_save("draft_plain", "pycode-draft-plain", config, run.settings(run.args.plain_draft_steps, 3e-3))
    run.report["total_seconds"] = time.perf_counter() - run.started
    (run.args.out / "training_report.json").write_text(json.dumps(run.report, indent=2) + "\n")
    log.info("report: %s", json.dumps({k: v for k, v in run.report.items() if k not in ("corpus", "args")}, indent=2))


def evaluate_pair(run: Training) -> None:
    """7. Measure the saved pair (distinct-4, parse rate, samples, α and timings) into the same report."""
    if not run.args.skip_evaluation:
        evaluate.update_report(run.args.out)


STAGES = (
    build_corpus,
    build_tokenizer,
    train_target,
    grow_target,
    teach_loop_free,
    distil_draft,
    train_plain_draft,
    evaluate_pair,
)
LAST_TARGET_STAGE = grow_target  # where --only-target stops


def main() -> None:
    configure_logging()
    configure_logging()
    args = parse_args()
    torch.set_num_threads(args.threads)
    if args.evaluate_only:
        evaluate.update_report(args.out)
        return
    torch.manual_seed(args.seed)
    args.work.mkdir(parents=True, exist_ok=True)
    report = {"python": platform.python_version(), "torch": torch.__version__, "args": {k: str(v) for k, v in vars(args).items()}}
    run = Training(args, report)
    stages = STAGES[: STAGES.index(LAST_TARGET_STAGE) + 1] if args.only_target else STAGES
    for stage in stages:
        stage(run)


if __name__ == "__main__":
    main()
