"""`python -m specviz distill`'s stages end to end on a tiny target: answers, vocabulary, fit, save, resume, load.

The saved draft must load through specviz's own loading (reduced head, borrowed embedding) and keep greedy
speculative decoding identical to the target's greedy decoding.
"""

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from specviz.drafting.drafters import ModelDrafter
from specviz.engine import CachedDecoder, DecodeSettings, speculative_decode
from specviz.engine.vocabulary import Vocabulary
from specviz.models.loading import load_model
from specviz.models.reduced_head import ReducedHead
from specviz.training.distill.draft_model import DraftShape
from specviz.training.distill.fit import FitSettings
from specviz.training.distill.pipeline import Recipe, distill
from tests.test_greedy_exact import transformers_greedy
from tests.tiny import tiny_llama

ASSETS = Path(__file__).resolve().parent.parent / "assets"
PROMPTS = ["def add(a, b):", "import os", "class Stack:", "for i in range(10):", "x = [", "while True:"]


def tiny_target():
    """The bundled pair's tokenizer and a tiny random Llama that ends its answers at its end token."""
    tokenizer = AutoTokenizer.from_pretrained(ASSETS / "pycode-target")
    target = tiny_llama(len(tokenizer), seed=0, hidden=64, layers=2)
    target.generation_config.eos_token_id = tokenizer.eos_token_id
    return tokenizer, target


def feature_head_recipe(folder: Path, **changes) -> Recipe:
    """`--kind feature` sized for the tiny target: a 64-wide head, two epochs, measured on one prompt at γ 2."""
    from specviz.training.distill.feature_fit import FeatureFitSettings

    return Recipe(
        out=folder / "head",
        prompts=PROMPTS,
        max_new_tokens=6,
        answer_batch_size=4,
        chat_template=False,
        kind="feature",
        answers=(folder / "answers.npz",),
        shape=DraftShape(hidden=64, layers=1, ffn=128, heads=1, head_vocabulary=256),
        feature_fit=FeatureFitSettings(epochs=2, batch_size=2, validate_every=2),
        measure_prompts=["def main():"],
        measure_gammas=(2,),
        measure_new_tokens=8,
        **changes,
    )


@pytest.mark.parametrize("share_embeddings", [False, True])
def test_distill_writes_a_draft_that_loads_and_stays_exact(tmp_path, share_embeddings):
    tokenizer, target = tiny_target()
    recipe = Recipe(
        out=tmp_path / "draft",
        prompts=PROMPTS,
        max_new_tokens=6,
        answer_batch_size=4,
        chat_template=False,
        shape=DraftShape(hidden=64, layers=1, ffn=128, heads=1, head_vocabulary=256, share_embeddings=share_embeddings),
        fit=FitSettings(steps=4, batch_size=2, validate_every=2),
        measure_prompts=["def main():", "import sys"],
        measure_gammas=(2,),
        measure_new_tokens=8,
    )
    report = distill(recipe, target, tokenizer, "tiny")
    assert report["data"]["prompts"] == len(PROMPTS) and report["data"]["answer_tokens"] > 0
    assert report["vocabulary"]["head"] == 256 and len(report["fit"]["log"]["steps"]) == 2
    saved = json.loads((recipe.out / "distill_report.json").read_text())
    assert saved["draft"]["parameters"] == report["draft"]["parameters"]
    assert len(list((recipe.work / "answers").glob("shard-*.pt"))) == 2, "answers are kept in shards, for resuming"
    measured = saved["measured"]  # the last stage: bench's own numbers for the saved draft on held-out prompts
    assert measured["greedy_identical"] is True and measured["prompts"] == 2
    assert len(measured["samples"]) == 2 and all(sample["answer"] for sample in measured["samples"])
    card = (recipe.out / "MODEL_CARD.md").read_text()  # written from the report: the card's numbers are the report's
    assert f"{measured['rows'][1]['alpha']:.3f}" in card and f"**{report['data']['answer_tokens']:,} answer tokens**" in card
    target_alone, speculative = measured["rows"]
    assert target_alone["method"] == "autoregressive" and speculative["gamma"] == 2
    assert 0 <= speculative["alpha"] <= 1 and speculative["tau"] > 0 and speculative["verify_cost"] > 0

    again = distill(recipe, target, tokenizer, "tiny")  # resumes: answers from the shards, the fit from its checkpoint
    assert again["data"]["collect_s_this_run"] < report["data"]["collect_s_this_run"] + 5
    assert again["fit"]["log"]["steps"] == report["fit"]["log"]["steps"], "a finished fit is resumed, not redone"

    draft = load_model(str(recipe.out), torch.device("cpu"), torch.float32, target=target).model
    assert isinstance(draft.get_output_embeddings(), ReducedHead)
    if share_embeddings:
        assert draft.get_input_embeddings().weight is target.get_input_embeddings().weight, (
            "the embedding is borrowed, not copied"
        )
    vocabulary = Vocabulary(tokenizer)
    prompt = tokenizer("def main():").input_ids
    settings = DecodeSettings(max_new_tokens=20, gamma=3)
    decoders = CachedDecoder(target, len(tokenizer)), ModelDrafter(CachedDecoder(draft, len(tokenizer)))
    summary = list(speculative_decode(*decoders, prompt, settings, vocabulary))[-1]
    reference = transformers_greedy(target, prompt, 20)
    assert list(summary.new_token_ids) == reference[: len(summary.new_token_ids)], (
        "the distilled draft must not change greedy output"
    )

    # re-measured alone, in a weight form (as a pair with `weights: int8` runs): the report and card say so
    before = json.loads((recipe.out / "distill_report.json").read_text())
    remeasured = distill(replace(recipe, measure_only=True, measure_weights="int8"), target, tokenizer, "tiny")
    assert remeasured["fit"] == before["fit"] and remeasured["draft"] == before["draft"], "only the measurement is new"
    assert remeasured["measured"]["weights"] == "int8" and remeasured["measured"]["greedy_identical"] is True
    assert "int8 weight-only" in (recipe.out / "MODEL_CARD.md").read_text()


def test_distill_feature_head_trains_continues_and_stays_exact(tmp_path):
    """--kind feature end to end on a tiny target, then --init-head continues it: same kept ids, the earlier run named."""
    from specviz.drafting.drafters import FeatureDrafter
    from specviz.models.feature_head import load_head

    tokenizer, target = tiny_target()
    first = feature_head_recipe(tmp_path, feature_layers=(-1, 1), command="first")
    report = distill(first, target, tokenizer, "tiny")
    assert (tmp_path / "answers.npz").is_file(), "the answers are written as token ids, for any machine to retrain from"
    assert report["draft"]["kind"] == "feature" and report["measured"]["greedy_identical"] is True
    assert "continued_from" not in report

    second = replace(first, out=tmp_path / "continued", init_head=first.out, command="second")
    continued = distill(second, target, tokenizer, "tiny")
    assert continued["continued_from"]["command"] == "first"
    assert continued["continued_from"]["steps"] == report["fit"]["log"]["steps"][-1]
    earlier, later = load_head(first.out, target), load_head(second.out, target)
    assert later.kept_ids.tolist() == earlier.kept_ids.tolist(), "a continued head keeps the rows it reads out"
    assert not torch.equal(later.q_proj.weight, earlier.q_proj.weight), "and trains on"
    assert "This run continued a head trained before" in (second.out / "MODEL_CARD.md").read_text()
    with pytest.raises(ValueError, match="feature-layers"):
        distill(replace(second, out=tmp_path / "other", feature_layers=(-1,)), target, tokenizer, "tiny")

    prompt = tokenizer("def main():").input_ids
    settings = DecodeSettings(max_new_tokens=20, gamma=3)
    summary = list(
        speculative_decode(
            CachedDecoder(target, len(tokenizer)), FeatureDrafter(later, len(tokenizer)), prompt, settings, Vocabulary(tokenizer)
        )
    )[-1]
    assert list(summary.new_token_ids) == transformers_greedy(target, prompt, 20)


def test_a_low_rank_feature_head_ships_its_change_reads_stored_features_and_stays_exact(tmp_path, caplog):
    """--head-rank: the head trains as the target's last layer plus rank-r changes and ships the changes alone; the
    target's features are stored once in the work folder and read back by a rerun."""
    from specviz.models.feature_head import WEIGHTS_FILE, load_head

    tokenizer, target = tiny_target()
    recipe = feature_head_recipe(tmp_path, head_rank=4)
    report = distill(recipe, target, tokenizer, "tiny")
    assert report["measured"]["greedy_identical"] is True
    config = json.loads((recipe.out / "feature_head.json").read_text())
    assert config["low_rank"]["ranks"]["q_proj"] == 4 and config["low_rank"]["layer"] == 1
    assert report["draft"]["low_rank"]["ranks"] == config["low_rank"]["ranks"]
    assert "**Low rank**" in (recipe.out / "MODEL_CARD.md").read_text()
    full_matrices = 64 * 64 * 2 + 64 * 128 * 3  # q, o and the MLP of the 64-wide layer alone
    assert report["draft"]["parameters"] < full_matrices / 2, "only the changes ship"
    assert (recipe.out / WEIGHTS_FILE).stat().st_size < 2 * full_matrices
    assert len(list(recipe.work.glob("features-*.pt"))) == 1
    with caplog.at_level(logging.INFO, logger="specviz"):
        distill(replace(recipe, out=tmp_path / "again", work_folder=recipe.work), target, tokenizer, "tiny")
    assert "target features read from" in caplog.text
    again = json.loads((tmp_path / "again" / "distill_report.json").read_text())
    assert again["fit"]["features_computed_sequences"] == 0
    assert "read from the work folder" in (tmp_path / "again" / "MODEL_CARD.md").read_text()
    head = load_head(recipe.out, target)
    assert not torch.equal(head.q_proj.weight, target.model.layers[-1].self_attn.q_proj.weight), "the change is applied"


def test_stored_features_run_the_target_only_over_sequences_not_stored(tmp_path, monkeypatch):
    """A fit on more answers reads the stored shard and runs the target over the new sequences alone; what it returns
    for every sequence equals the target's features computed afresh."""
    from specviz.training.distill import pipeline
    from specviz.training.distill.feature_fit import target_features
    from specviz.training.distill.pipeline import State, stored_features

    tokenizer, target = tiny_target()
    recipe = Recipe(out=tmp_path / "head", prompts=PROMPTS, kind="feature", work_folder=tmp_path / "work")
    sequences = [(tokenizer(prompt).input_ids + [5, 6, 7], len(tokenizer(prompt).input_ids)) for prompt in PROMPTS[:4]]
    computed: list[int] = []

    def counted(target, batch, layers):
        computed.append(len(batch))
        return target_features(target, batch, layers, quiet=True)

    monkeypatch.setattr(pipeline, "target_features", counted)
    assert stored_features(recipe, State(target, tokenizer), sequences[:2])[1] == 2
    more, ran_over = stored_features(recipe, State(target, tokenizer), sequences + sequences[:1])
    assert computed == [2, 2] and ran_over == 2, "the second call runs the target over the two new sequences only"
    assert len(list(recipe.work.glob("features-*.pt"))) == 2
    fresh = target_features(target, sequences + sequences[:1], quiet=True)
    for got, want in zip(more, fresh, strict=True):
        assert torch.equal(got.token_ids, want.token_ids) and got.answer_start == want.answer_start
        assert torch.allclose(got.features.float(), want.features.float(), atol=2e-2)


def test_answers_files_are_read_in_order_and_the_missing_one_is_collected(tmp_path):
    """--answers A --answers B: A is read, B collected from the prompts and written; two missing files are refused."""
    from specviz.training.distill.answers import load_answers
    from specviz.training.distill.pipeline import State, collect_answers

    tokenizer, target = tiny_target()
    first = Recipe(out=tmp_path / "a", prompts=PROMPTS[:2], max_new_tokens=4, chat_template=False, answers=(tmp_path / "a.npz",))
    collect_answers(first, State(target, tokenizer))
    both = replace(first, out=tmp_path / "b", prompts=PROMPTS[2:5], answers=(tmp_path / "a.npz", tmp_path / "b.npz"))
    state = State(target, tokenizer)
    collect_answers(both, state)
    written = load_answers(tmp_path / "b.npz")
    assert [example.prompt_ids for example in written] == [tokenizer(prompt).input_ids for prompt in PROMPTS[2:5]]
    assert [example.answer_ids for example in state.examples] == [
        example.answer_ids for example in load_answers(tmp_path / "a.npz") + written
    ]
    assert state.report["data"]["prompts"] == 5 and state.report["data"]["source"] == "a.npz, b.npz"
    with pytest.raises(ValueError, match="only one answers file"):
        collect_answers(replace(both, answers=(tmp_path / "c.npz", tmp_path / "d.npz")), State(target, tokenizer))


@pytest.mark.parametrize(
    "args, complaint",
    [
        (["--kind", "feature", "--init-head", str(ASSETS / "smollm2-135m-eagle"), "--feature-layers=-1"], "-1,3,15,27"),
        (["--init-head", str(ASSETS / "smollm2-135m-eagle")], "--kind feature"),
        (["--answers", "/no/a.npz", "--answers", "/no/b.npz"], "only one"),
        ([f"--answers={ASSETS}/training/smollm2-135m-answers.npz"] * 2, "named twice"),
        (["--prompts", "self", "--self-prompts", "0"], "--self-prompts"),
        (["--prompts", "/no/such/prompts.txt"], "'self'"),
    ],
)
def test_bad_distill_arguments_are_one_line_before_any_model_loads(args, complaint, tmp_path):
    from tests.test_cli import specviz

    result = specviz("distill", "--pair", "smollm2-135m-distilled", "--out", str(tmp_path / "out"), *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and complaint in lines[0], result.stderr
