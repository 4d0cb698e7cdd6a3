"""A feature head's draft step in each weight form, and how often the form keeps the head's guess.

    python benchmarks/head_forms.py [--pair smollm2-135m-distilled] [--threads 2] [--answers 20] [--answers-file F]
                                    [--by-module]

τ is a draft step over a target step. A feature head is small (one layer and 8,192 kept head rows), so its step is
mostly reading its ~10M weights: int8 or int4 weight-only halves or quarters the bytes. A form only changes the
draft, so speculation stays exact; what it can cost is α, when the quantised head's argmax differs from the head's
as trained. This prints, per form, the median time of one draft step (one position through the layer, then the
kept-row logits) and the share of teacher-forced positions, over the committed answers, where the form's argmax
equals the as-trained head's (bf16), and where each equals the target's own next token.

--by-module finds the matrix a 4-bit form hurts: the head in int8 with one matrix at a time in w4a8. A low-rank
head's fuse drafts as its factors (models/low_rank.py's PassThroughLowRank), which no form packs; the rows marked
"merged" pack it as one matrix, s·[0 | I] + B·A, as the head drafted before.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402

from specviz.kernels import w4a8  # noqa: E402
from specviz.models.feature_head import FeatureCache, head_in_form, load_head  # noqa: E402
from specviz.models.loading import load_pair  # noqa: E402
from specviz.serving.pair_cache import catalogue  # noqa: E402
from specviz.training.distill.answers import load_answers  # noqa: E402

ANSWERS = Path(__file__).resolve().parent.parent / "assets" / "training" / "smollm2-135m-answers.npz"


@torch.inference_mode()
def teacher_forced(target, examples, layers):
    """(token ids, the target's features side by side) for each prompt + answer."""
    out = []
    for example in examples:
        ids = torch.tensor([example.prompt_ids + example.answer_ids])
        hidden = target(input_ids=ids, output_hidden_states=True).hidden_states
        out.append((ids[0], len(example.prompt_ids), torch.cat([hidden[layer] for layer in layers], dim=-1)[0]))
    return out


@torch.inference_mode()
def guesses(head, sequences) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's argmax (as a token id) at every answer position, and the target's next token there."""
    guessed, truth = [], []
    for ids, answer_start, features in sequences:
        predicted = head.step(ids[1:], features[:-1], FeatureCache())  # position i reads (f_{i-1}, x_i)
        rows = head.kept_logits(predicted).argmax(-1)
        guessed.append(head.kept_ids[rows][answer_start - 2 : -1])  # guesses of x_{i+1} for answer tokens
        truth.append(ids[answer_start:])
    return torch.cat(guessed), torch.cat(truth)


@torch.inference_mode()
def step_ms(head, ids, features, repeats: int = 300) -> float:
    cache = FeatureCache()
    head.step(ids[1:60], features[:59], cache)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        head.kept_logits(head.step(ids[60:61], features[59:60], cache))
        times.append(time.perf_counter() - started)
        cache.truncate(59)
    return statistics.median(times) * 1e3


MATRICES = ("fuse", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def by_module(reference, target, sequences, as_trained, truth) -> None:
    """The head in int8 with one matrix in w4a8, each in turn; and the fuse merged into one matrix, packed as the
    rest of the head is (as it drafted before it ran as its factors)."""

    def agreement(head) -> str:
        guessed, _ = guesses(head, sequences)
        return f"{(guessed == as_trained).float().mean().item():11.3f}  {(guessed == truth).float().mean().item():8.3f}"

    def with_fuse_merged(form: str):
        head = load_head(reference, target)
        merged = torch.nn.Linear(head.fuse.weight.shape[1], head.fuse.weight.shape[0], bias=False)
        merged.weight.data = head.fuse.weight.detach().float()
        head.fuse = merged
        return head_in_form(head, form)

    print(f"{'the head in int8, but':34s} {'= bf16 head':>11s}  {'= target':>8s}")
    as_loaded = load_head(reference, target, dtype=torch.bfloat16)  # the matrices each row packs in w4a8
    for name in MATRICES:
        matrix = getattr(as_loaded, name)
        if isinstance(matrix, torch.nn.Linear):
            head = head_in_form(load_head(reference, target), "int8")
            setattr(head, name, w4a8.W4A8Linear(matrix))
            print(f"{name + ' in w4a8':34s} {agreement(head)}", flush=True)
    for form in ("int8", "w4a8"):
        print(f"{'fuse merged, all in ' + form:34s} {agreement(with_fuse_merged(form))}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="smollm2-135m-distilled")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--answers", type=int, default=20, help="committed answers to compare the forms' guesses on")
    parser.add_argument("--answers-file", type=Path, default=ANSWERS, help="the target's answers (.npz) to read them from")
    parser.add_argument("--by-module", action="store_true", help="which matrix w4a8 hurts (needs the w4a8 kernel)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(args.pair, catalogue().get(args.pair), catalogue().offline_pairs())
    target, reference = pair.target.model, pair.feature_head.reference
    sequences = teacher_forced(
        target, load_answers(args.answers_file)[-args.answers :], pair.feature_head.head.shape.feature_layers
    )
    sequences = [(ids, start, features.to(torch.bfloat16)) for ids, start, features in sequences]
    print(f"target weights: {pair.target.form}; {args.threads} threads; {args.answers} committed answers")
    print(f"{'form':10s} {'step':>9s}  {'= bf16 head':>11s}  {'= target':>8s}")
    as_trained, truth = guesses(load_head(reference, target), sequences)
    for form in ("bf16", "int8", "int4", *(("w4a8",) if w4a8.available() else ())):
        head = load_head(reference, target)
        if form != "bf16":
            head_in_form(head, form)
        guessed, _ = guesses(head, sequences)
        ids, _, features = sequences[0]
        print(
            f"{form:10s} {step_ms(head, ids, features):6.3f} ms  {(guessed == as_trained).float().mean().item():11.3f}"
            f"  {(guessed == truth).float().mean().item():8.3f}",
            flush=True,
        )
    if args.by_module and w4a8.available():
        by_module(reference, target, sequences, as_trained, truth)


if __name__ == "__main__":
    main()
