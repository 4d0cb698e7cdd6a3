"""The distillation recipe, stage by stage: answers → vocabulary → draft → fit → save → measure.

Each stage is one function; `STAGES` lists them once, in order. Work in progress lives in `<out>/.work`
(answer shards, the fit checkpoint), so running the same command again resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from specviz.models import eagle3_head
from specviz.models.eagle3_head import Eagle3Head, default_aux_layers
from specviz.models.feature_head import WEIGHTS_FILE, FeatureHead, head_from_target, load_head, own_weight_bytes, save_head
from specviz.models.reduced_head import mark_sharing, save_vocabulary
from specviz.training.distill.answers import load_answers, save_answers
from specviz.training.distill.card import write_card
from specviz.training.distill.collect import Example, collect, end_token_ids, load_examples
from specviz.training.distill.draft_model import DraftShape, build_draft, build_sharing_draft, kept_token_ids
from specviz.training.distill.eagle3_fit import (
    Eagle3FitSettings,
    calibration_layers,
    fit_eagle3,
    head_from_feature_head,
    layers_read,
)
from specviz.training.distill.feature_fit import FeatureFitSettings, FeatureSequence, fit_head, target_features
from specviz.training.distill.fit import FitSettings, KeptHead, evaluate, fit

logger = logging.getLogger(__name__)


@dataclass
class Recipe:
    """Everything the recipe needs; the report records it."""

    out: Path
    prompts: list[str]
    max_new_tokens: int = 128
    answer_batch_size: int = 24
    chat_template: bool = True
    validation_share: float = 0.05
    shape: DraftShape = field(default_factory=DraftShape)
    fit: FitSettings = field(default_factory=FitSettings)
    max_prompts: int | None = None  # stop collecting after this many (None: all); the rest can be added later
    work_folder: Path | None = None  # answer shards and the fit checkpoint; default <out>/.work
    measure_prompts: list[str] = field(default_factory=list)  # held-out prompts for the last stage (none: skipped)
    measure_gammas: tuple[int, ...] = (1, 2, 3)
    measure_new_tokens: int = 96
    measure_dtype: torch.dtype | None = None  # the dtype the pair will run in (None: the target's as loaded)
    measure_weights: str | None = None  # the target's weight form while measuring (a pair's `weights`; None: as loaded)
    measure_only: bool = False  # re-measure the draft already in `out` (its report and card are rewritten)
    init_head: Path | None = None  # (feature) continue from this saved head: its kept ids and weights, not a fresh start
    command: str | None = None  # the command line that ran the recipe, for the card
    kind: str = "model"  # "model": an independent small LM; "feature": an EAGLE-style head on the target's features
    answers: tuple[Path, ...] = ()  # the target's answers as token ids (.npz): read if there, else collected and written
    feature_fit: FeatureFitSettings = field(default_factory=FeatureFitSettings)
    feature_layers: tuple[int, ...] = (-1,)  # the target's hidden states a feature head reads: the last, then lower ones
    eagle3_fit: Eagle3FitSettings = field(default_factory=Eagle3FitSettings)
    aux_layers: tuple[int, ...] | None = None  # (eagle3) the residual streams fc reads (None: vLLM's default 2, N//2, N−3)
    head_rank: int | None = None  # (feature) the target's last layer + a rank-r change per matrix (None: full matrices)
    head_mlp_rank: int | None = None  # (feature) the MLP matrices' rank (None: head_rank)

    @property
    def work(self) -> Path:
        return self.work_folder or self.out / ".work"


@dataclass
class State:
    """What the stages hand each other."""

    target: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    report: dict = field(default_factory=dict)
    examples: list[Example] = field(default_factory=list)
    kept_ids: list[int] | None = None
    draft: PreTrainedModel | None = None
    head: FeatureHead | Eagle3Head | None = None


def collect_answers(recipe: Recipe, state: State) -> None:
    """1. The target answers the prompts; p's top-k is kept at every answer token. Answer files already written
    are read instead (all of them, in order); a missing one is collected from the prompts and written."""
    started = time.perf_counter()
    prompts = recipe.prompts[: recipe.max_prompts] if recipe.max_prompts else recipe.prompts
    missing = [path for path in recipe.answers if not path.is_file()]
    if len(missing) > 1:
        raise ValueError(f"only one answers file can be collected in a run; missing: {', '.join(map(str, missing))}")
    examples = []
    for path in recipe.answers:
        if path.is_file():
            examples += load_answers(path)
        else:
            examples += _collected(recipe, state, prompts, path)
    if not recipe.answers:
        examples = _collected(recipe, state, prompts, None)
    state.examples = examples[: recipe.max_prompts] if recipe.max_prompts and not missing else examples
    source = "collected" if not recipe.answers else ", ".join(path.name for path in recipe.answers)
    _report_answers(recipe, state, started, source=source)


def _collected(recipe: Recipe, state: State, prompts: list[str], path: Path | None) -> list[Example]:
    """The prompts' answers, in shards of their own (one folder per answers file: a rerun resumes, never mixes)."""
    shards = collect(
        state.target,
        state.tokenizer,
        prompts,
        recipe.work / "answers" / (path.stem if path is not None else ""),
        recipe.max_new_tokens,
        recipe.answer_batch_size,
        recipe.chat_template,
    )
    examples = load_examples(shards)
    if path is not None:
        meta = {"target_dtype": str(state.target.dtype), "max_new_tokens": recipe.max_new_tokens}
        save_answers(examples, path, meta)
    return examples


def _report_answers(recipe: Recipe, state: State, started: float, source: str) -> None:
    ended = sum(example.answer_ids[-1] in end_token_ids(state.target, state.tokenizer) for example in state.examples)
    state.report["data"] = {
        "prompts": len(state.examples),
        "answer_tokens": sum(len(example.answer_ids) for example in state.examples),
        "answers_ended_by_the_target": ended,
        "max_new_tokens": recipe.max_new_tokens,
        "chat_template": recipe.chat_template,
        "collect_s_this_run": round(time.perf_counter() - started, 1),
        "source": source,
    }


def choose_vocabulary(recipe: Recipe, state: State) -> None:
    """2. The draft's head keeps the ids carrying the most of the target's probability on its own answers."""
    vocab_size = state.target.config.vocab_size
    size = recipe.shape.head_vocabulary
    if not size or size >= vocab_size:
        state.kept_ids = None
        state.report["vocabulary"] = {"head": vocab_size, "kept": "all"}
        return
    mass = torch.zeros(vocab_size)
    for example in state.examples:
        if example.top_ids.numel():
            mass.index_add_(0, example.top_ids.flatten().long(), example.top_probs.flatten().float())
        else:  # answers kept as ids only: the target's own tokens stand for its probability mass
            mass.index_add_(0, torch.tensor(example.answer_ids), torch.ones(len(example.answer_ids)))
    if recipe.init_head is not None and eagle3_head.is_eagle3_head(recipe.init_head):  # its draft vocabulary
        state.kept_ids = eagle3_head.draft_vocabulary(recipe.init_head)
    elif recipe.init_head is not None:  # a continued head keeps the rows it was trained to read out
        state.kept_ids = json.loads((recipe.init_head / "feature_head.json").read_text())["kept_token_ids"]
    else:
        state.kept_ids = kept_token_ids(mass, size, end_token_ids(state.target, state.tokenizer))
    kept = set(state.kept_ids)
    answers = [token for example in state.examples for token in example.answer_ids]
    state.report["vocabulary"] = {
        "head": len(state.kept_ids),
        "of": vocab_size,
        "answer_tokens_covered": round(sum(token in kept for token in answers) / max(1, len(answers)), 4),
        "probability_mass_covered": round(float(mass[state.kept_ids].sum() / mass.sum()), 4),
    }


def fit_draft(recipe: Recipe, state: State) -> None:
    """3. A new draft, its embedding projected from the target's, fitted to p on the answers."""
    if recipe.shape.share_embeddings:
        state.draft = build_sharing_draft(state.target, recipe.shape)
    else:
        state.draft = build_draft(state.target, recipe.shape, seed=recipe.fit.seed)
    examples = list(state.examples)
    random.Random(recipe.fit.seed).shuffle(examples)
    n_validation = max(1, int(len(examples) * recipe.validation_share))
    validation, train = examples[:n_validation], examples[n_validation:]
    head = KeptHead(state.kept_ids or list(range(state.target.config.vocab_size)), state.target.config.vocab_size)
    pad_id = end_token_ids(state.target, state.tokenizer)[0]
    log = fit(state.draft, head, train, validation, pad_id, recipe.fit, recipe.work / "fit.pt")
    _, agreement = evaluate(state.draft, head, validation, pad_id, recipe.fit)
    state.report["fit"] = {
        "settings": asdict(recipe.fit),
        "train_examples": len(train),
        "validation_examples": len(validation),
        "log": asdict(log),
        "best_validation_greedy_agreement": round(agreement, 4),
        "seconds": round(log.seconds, 1),
    }


def save_draft(recipe: Recipe, state: State) -> None:
    """4. Weights (bf16), config, the kept ids and the report; no tokenizer: the draft reads with its target's."""
    recipe.out.mkdir(parents=True, exist_ok=True)
    draft = state.draft.to(torch.bfloat16)
    draft.generation_config.eos_token_id = end_token_ids(state.target, state.tokenizer)
    if recipe.shape.share_embeddings:  # the embedding (and tied head) are the target's: not shipped
        own = {name: value for name, value in draft.state_dict().items() if "embed_tokens" not in name and "lm_head" not in name}
        draft.save_pretrained(recipe.out, state_dict=own)
        mark_sharing(recipe.out)
    else:
        draft.save_pretrained(recipe.out)
    if state.kept_ids is not None:
        save_vocabulary(recipe.out, state.kept_ids, state.target.config.vocab_size)
    parameters = sum(p.numel() for p in draft.parameters() if p.requires_grad or not recipe.shape.share_embeddings)
    shape = asdict(recipe.shape)
    if recipe.shape.share_embeddings:  # the target's width and heads; only the layer count is the recipe's
        config = draft.config
        shape.update(hidden=config.hidden_size, ffn=config.intermediate_size, heads=config.num_attention_heads)
    state.report["draft"] = {"shape": shape, "parameters": parameters, "bytes": (recipe.out / "model.safetensors").stat().st_size}
    write_report(recipe, state)


def write_report(recipe: Recipe, state: State) -> None:
    """distill_report.json, and the model card written from it."""
    (recipe.out / "distill_report.json").write_text(json.dumps(state.report, indent=2))
    if state.report.get("draft", {}).get("kind") != "eagle3":  # an EAGLE-3 head's card is its report (for now)
        write_card(recipe.out, state.report)


def measure_draft(recipe: Recipe, state: State) -> None:
    """5. The saved draft against the target alone on held-out prompts, greedy: bench's own α, τ, ν and speedups."""
    if not recipe.measure_prompts:
        return
    from specviz.deployment.benchmark import bench  # the numbers have one home: the same code as `python -m specviz bench`
    from specviz.engine import DecodeSettings
    from specviz.models.loading import load_feature_head, load_model, loaded_model, pair_of
    from specviz.models.weight_forms import apply_form, choose_form, head_form_beside
    from specviz.run.runner import run

    started = time.perf_counter()
    target = state.target.to(recipe.measure_dtype) if recipe.measure_dtype else state.target  # the last stage: no cast back
    form = choose_form(recipe.measure_weights, target.device)
    if form is not None:  # as load_pair puts a pair's target in its form
        apply_form(target, form)
    device, dtype = target.device, target.dtype
    if recipe.kind in ("feature", "eagle3"):  # the head alone beside its target, loaded as specviz loads it
        pair = pair_of(
            recipe.out.name, loaded_model("target", target), None, state.tokenizer, recipe.chat_template, device, dtype
        )
        pair.feature_head = load_feature_head(str(recipe.out), target, head_form_beside(form))
    else:
        draft = load_model(str(recipe.out), device, dtype, target=target)  # as specviz will load it: shared embedding, cut head
        pair = pair_of(
            recipe.out.name, loaded_model("target", target), draft, state.tokenizer, recipe.chat_template, device, dtype
        )
    settings = DecodeSettings(max_new_tokens=recipe.measure_new_tokens)  # greedy
    result = bench(
        pair,
        recipe.measure_prompts,
        settings,
        list(recipe.measure_gammas),
        repeats=1,
        with_transformers=False,
        with_dynamic=False,
        drafter=recipe.kind,  # "model" or "feature": the registry's key for this kind of draft
    )
    keys = (
        *("method", "gamma", "tokens_per_s", "speedup", "decode_speedup", "alpha", "tau", "verify_cost", "tokens_per_cycle"),
        "conditional_acceptance_rate_per_pos",
    )
    sampled = replace(settings, gamma=recipe.measure_gammas[0])
    samples = [
        {"prompt": prompt, "answer": list(run(pair, prompt, sampled, drafter=recipe.kind))[-1].text}
        for prompt in recipe.measure_prompts[:2]
    ]
    state.report["measured"] = {
        "prompts": len(recipe.measure_prompts),
        "max_new_tokens": recipe.measure_new_tokens,
        "dtype": str(dtype).removeprefix("torch."),
        "weights": form or "as loaded",
        "head_weights": pair.feature_head.head.form if pair.feature_head else None,
        "device": str(device),
        "greedy_identical": result["greedy_identical"],
        "rows": [{key: row.get(key) for key in keys} for row in result["rows"]],
        "samples": samples,
        "seconds": round(time.perf_counter() - started, 1),
        "command": recipe.command if recipe.measure_only else None,  # a re-measurement names its own command
    }
    write_report(recipe, state)


def fit_feature_head(recipe: Recipe, state: State) -> None:
    """3. (feature) The target's features over its own answers, then a head fitted to predict them."""
    examples = list(state.examples)
    random.Random(recipe.feature_fit.seed).shuffle(examples)
    n_validation = max(1, int(len(examples) * recipe.validation_share))
    if recipe.init_head is not None:
        saved_layers = tuple(json.loads((recipe.init_head / "feature_head.json").read_text())["shape"]["feature_layers"])
        if saved_layers != tuple(recipe.feature_layers):
            raise ValueError(f"{recipe.init_head} reads layers {saved_layers}: give the same --feature-layers to continue it")
    started = time.perf_counter()
    sequences = [(example.prompt_ids + example.answer_ids, len(example.prompt_ids)) for example in examples]
    features, computed = stored_features(recipe, state, sequences)
    features_s = time.perf_counter() - started
    validation, train = features[:n_validation], features[n_validation:]
    kept = state.kept_ids or list(range(state.target.config.vocab_size))
    if recipe.init_head is not None:  # continued: its weights in float32 for training, its shape and kept ids as saved
        state.head = load_head(recipe.init_head, state.target, dtype=torch.float32, trainable=True).train()
        earlier = json.loads((recipe.init_head / "distill_report.json").read_text())
        state.report["continued_from"] = {
            "command": earlier.get("command"),
            "train_tokens": earlier["fit"]["train_tokens"],
            "steps": earlier["fit"]["log"]["steps"][-1],
            "seconds": earlier["fit"]["seconds"],
            "features_s": earlier["fit"]["features_s"],
            "validation_agreement_first_draft": earlier["fit"]["validation_agreement_first_draft"],
        }
    else:
        state.head = head_from_target(state.target, kept, recipe.feature_layers, recipe.head_rank, recipe.head_mlp_rank)
    log = fit_head(state.head, train, validation, recipe.feature_fit, progress=logger.info)
    state.report["fit"] = {
        "settings": asdict(recipe.feature_fit),
        "train_examples": len(train),
        "validation_examples": len(validation),
        "train_tokens": sum(len(s.token_ids) for s in train),
        "features_dtype": str(state.target.dtype).removeprefix("torch."),
        "features_s": round(features_s, 1),
        "features_computed_sequences": computed,  # the rest were read from the work folder's shards
        "log": asdict(log),
        "validation_agreement_first_draft": log.validation_agreement_first[-1],
        "validation_agreement_second_draft": log.validation_agreement_second[-1],
        "seconds": round(log.seconds, 1),
    }


def stored_features(recipe: Recipe, state: State, sequences: list[tuple[list[int], int]]) -> tuple[list, int]:
    """The target's features over the sequences, computed once and kept in the work folder (bf16, outside the repo):
    a rerun, a continued fit, or a fit on more answers reads what is stored and runs the target only over sequences no
    stored shard holds, which it stores as a new shard. Shards are keyed by the target, its dtype and the layers.
    Returns the features in the sequences' order and how many sequences the target ran over."""
    target_key = hashlib.sha256(
        repr((state.target.config.name_or_path, str(state.target.dtype), recipe.feature_layers)).encode()
    ).hexdigest()[:16]
    stored: dict[tuple[tuple[int, ...], int], dict] = {}
    for shard in sorted(recipe.work.glob(f"features-{target_key}-*.pt")):
        rows = torch.load(shard)
        stored.update({(tuple(row["token_ids"].tolist()), row["answer_start"]): row for row in rows})
        logger.info("target features read from %s (%d sequences)", shard, len(rows))
    keys = [(tuple(ids), start) for ids, start in sequences]
    missing = list(dict.fromkeys(key for key in keys if key not in stored))
    if missing:
        if stored:
            logger.info("target features for %d sequences not stored yet", len(missing))
        features = target_features(state.target, [(list(ids), start) for ids, start in missing], recipe.feature_layers)
        rows = [{"token_ids": f.token_ids, "features": f.features, "answer_start": f.answer_start} for f in features]
        shard_key = hashlib.sha256(repr(missing).encode()).hexdigest()[:16]
        path = recipe.work / f"features-{target_key}-{shard_key}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        torch.save(rows, partial)
        partial.rename(path)
        stored.update(zip(missing, rows))
    return [FeatureSequence(**stored[key]) for key in keys], len(missing)


def save_feature_head(recipe: Recipe, state: State) -> None:
    """4. (feature) The head's own weights (bf16) and shape; the embedding and head rows stay the target's."""
    save_head(state.head, recipe.out)
    parameters = sum(p.numel() for p in state.head.parameters())  # a low-rank head: its scales and factors, what ships
    state.report["draft"] = {
        "kind": "feature",
        "shape": asdict(state.head.shape),
        "parameters": parameters,
        "bytes": (recipe.out / WEIGHTS_FILE).stat().st_size,
    }
    low_rank = json.loads((recipe.out / "feature_head.json").read_text()).get("low_rank")
    if low_rank:
        state.report["draft"]["low_rank"] = {"layer": low_rank["layer"], "ranks": low_rank["ranks"]}
    write_report(recipe, state)


def fit_eagle3_head(recipe: Recipe, state: State) -> None:
    """3. (eagle3) A head in EAGLE-3's form, warm-started from the feature head `init_head` (else from nothing but the
    target's rows), fitted with the training-time test over the target's answers, read batch by batch."""
    examples = list(state.examples)
    random.Random(recipe.eagle3_fit.seed).shuffle(examples)
    n_validation = min(recipe.eagle3_fit.validation_sequences, max(1, int(len(examples) * recipe.validation_share)))
    sequences = [(example.prompt_ids + example.answer_ids, len(example.prompt_ids)) for example in examples]
    validation, train = sequences[:n_validation], sequences[n_validation:]
    aux = recipe.aux_layers or default_aux_layers(state.target.config.num_hidden_layers)
    if recipe.init_head is None:
        raise ValueError("an EAGLE-3 head is warm-started from a trained feature head (or continued): give --init-head")
    if eagle3_head.is_eagle3_head(recipe.init_head):  # continued: its weights in float32, lm_head frozen as saved
        state.head = eagle3_head.load_head(recipe.init_head, state.target, dtype=torch.float32)
        state.head.lm_head.weight.requires_grad_(not state.head.lm_head_borrowed)
        earlier = json.loads((recipe.init_head / "distill_report.json").read_text())
        state.report["continued_from"] = {key: earlier.get(key) for key in ("command", "warm_start", "continued_from")}
        state.report["continued_from"].update(
            steps=earlier["fit"]["steps"], seconds=earlier["fit"]["seconds"], sequences_seen=earlier["fit"]["sequences_seen"]
        )
    else:
        old = load_head(recipe.init_head, state.target, dtype=torch.float32)
        calibration = target_features(state.target, train[:24], calibration_layers(old, aux), batch_size=8)
        state.head, warm = head_from_feature_head(state.target, old, aux, calibration)
        state.report["warm_start"] = {
            "from": str(recipe.init_head),
            "what": "lm_head: the target's readout rows (its embedding where tied, else its LM head) of the feature head's "
            "kept ids (frozen, not shipped); norm: a "
            "constant (the feature head's readout argmax); fc: ridge least squares from the aux states to the feature "
            "head's fused input, embedding term included; q/k/v: hidden half the feature head's, embedding half zero; "
            "o_proj, post-attention norm, MLP: the feature head's",
            **warm,
        }
    state.head.train()
    aux = state.head.shape.aux_layers  # a continued head reads the layers it was trained on
    settings = recipe.eagle3_fit
    if "continued_from" in state.report:  # another batch order than the run it continues
        settings = replace(settings, seed=settings.seed + 1)
    started = time.perf_counter()
    validation_features = target_features(state.target, validation, layers_read(aux))
    features_s = time.perf_counter() - started
    log = fit_eagle3(
        state.head,
        state.target,
        train,
        validation_features,
        settings,
        checkpoint=recipe.work / "eagle3-checkpoint",
        progress=logger.info,
    )
    state.report["fit"] = {
        "settings": asdict(settings),
        "train_examples": len(train),
        "validation_examples": len(validation),
        "sequences_seen": log.sequences_seen,
        "train_tokens_seen_approx": int(log.sequences_seen * sum(len(ids) for ids, _ in train) / max(1, len(train))),
        "validation_features_s": round(features_s, 1),
        "log": asdict(log),
        "steps": log.steps[-1],
        "validation_agreement_per_depth": log.validation_agreement[-1],
        "validation_agreement_first_draft": log.validation_agreement[-1][0],
        "seconds": round(log.seconds, 1),
    }


def save_eagle3(recipe: Recipe, state: State) -> None:
    """4. (eagle3) config.json + model.safetensors in the standard layout (lm_head rebuilt at load, not shipped)."""
    eagle3_head.save_head(state.head, recipe.out)
    parameters, _ = own_weight_bytes(state.head)
    state.report["draft"] = {
        "kind": "eagle3",
        "shape": asdict(state.head.shape),
        "parameters": parameters,
        "bytes": (recipe.out / eagle3_head.WEIGHTS_FILE).stat().st_size,
    }
    write_report(recipe, state)


STAGES = (collect_answers, choose_vocabulary, fit_draft, save_draft, measure_draft)
FEATURE_STAGES = (collect_answers, choose_vocabulary, fit_feature_head, save_feature_head, measure_draft)
EAGLE3_STAGES = (collect_answers, choose_vocabulary, fit_eagle3_head, save_eagle3, measure_draft)


def distill(recipe: Recipe, target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, target_reference: str) -> dict:
    """Run every stage; return the report (also written to <out>/distill_report.json)."""
    report = {"target": target_reference, "recipe_prompts": len(recipe.prompts), "command": recipe.command}
    state = State(target.eval(), tokenizer, report=report)
    if recipe.measure_only:  # the draft in `out` as it is: only its measurement is new
        state.report = {**json.loads((recipe.out / "distill_report.json").read_text()), "measured": None}
        measure_draft(recipe, state)
        return state.report
    stages = {"feature": FEATURE_STAGES, "eagle3": EAGLE3_STAGES}.get(recipe.kind, STAGES)
    for stage in stages:
        stage(recipe, state)
    return state.report
