"""The real pair as it ships: SmolLM2-135M-Instruct in its int4 weight-only form, drafted for by its feature head.

Exactness in that form needs a token's logits to be the same alone and inside a verify pass (checked bit for bit
on the target's own weights), and then greedy speculative output equal to plain decoding in the same form.
"""

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from specviz.drafting.drafters import FeatureDrafter
from specviz.engine import CachedDecoder, DecodeSettings, autoregressive_decode, speculative_decode
from specviz.models.catalogue import load_catalogue
from specviz.models.feature_head import load_head
from specviz.models.weight_forms import apply_form
from specviz.prompts.sets import CHAT_HELDOUT
from specviz.run.runner import encode_prompt
from tests.conftest import REAL_PAIR


@pytest.fixture(scope="module")
def int4_target(real_pair):
    model = AutoModelForCausalLM.from_pretrained(real_pair.target.reference, dtype=torch.bfloat16).eval()
    return apply_form(model, "int4")


def test_a_tokens_logits_are_the_same_alone_and_inside_a_5_row_verify_pass(real_pair, int4_target):
    prompt = encode_prompt(real_pair, CHAT_HELDOUT[0], 40, 4)
    tokens = [28, 1175, 314, 3276, 30]  # any five tokens: what matters is that they share one forward
    with torch.inference_mode():
        cache = DynamicCache(config=int4_target.config)
        int4_target(input_ids=torch.tensor([prompt]), cache=cache, use_cache=True)
        together = int4_target(input_ids=torch.tensor([tokens]), cache=cache, use_cache=True, logits_to_keep=5).logits[0]
        cache.crop(-5)
        alone = torch.stack(
            [int4_target(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1] for t in tokens]
        )
    assert torch.equal(alone, together), f"max |Δ logit| {(alone - together).abs().max():.3g}: rows are not independent"


@pytest.mark.parametrize("question", CHAT_HELDOUT[:3])
def test_feature_head_greedy_equals_plain_decoding_in_int4(real_pair, int4_target, question):
    head = load_head(load_catalogue().get(REAL_PAIR).feature_head_ref, int4_target)
    prompt = encode_prompt(real_pair, question, 48, 3)
    settings = DecodeSettings(max_new_tokens=48, gamma=3)
    vocab = real_pair.shared_vocab_size
    spec = list(
        speculative_decode(CachedDecoder(int4_target, vocab), FeatureDrafter(head, vocab), prompt, settings, real_pair.vocabulary)
    )
    plain = list(autoregressive_decode(CachedDecoder(int4_target, vocab), prompt, settings, real_pair.vocabulary))
    assert spec[-1].new_token_ids == plain[-1].new_token_ids, "greedy speculation parted from plain decoding in int4"
    assert spec[-1].tally.accepted > 0, "the feature head should have some drafts accepted"


def test_the_fast_path_keeps_transformers_int4_logits_and_its_rows_independent(real_pair, int4_target):
    """The static-cache forward, eager, with q/k/v and gate/up fused into one int4 call each, through a prefill,
    steps, a verify pass and a rollback: every token's logits are transformers' own to bf16 rounding (its attention
    sums in float32, transformers' in bf16 matmuls), and a verify pass's rows are its single steps, bit for bit."""
    from specviz.engine.compiled import FastDecoder, FastModel
    from specviz.kernels import forms

    fast = FastModel(int4_target, compile_step=False)
    assert all(forms.form_of(module).name == "int4" for module in [*fast.forward.qkv, *fast.forward.gate_up])
    vocab = real_pair.shared_vocab_size
    reference, decoder = CachedDecoder(int4_target, vocab), FastDecoder(fast, vocab)
    prompt = encode_prompt(real_pair, CHAT_HELDOUT[0], 64, 3)
    for tokens in (prompt, [504], [28, 3458, 314, 260], "rollback", [1107, 30], [42]):
        if tokens == "rollback":
            reference.truncate(len(prompt) + 2)
            decoder.truncate(len(prompt) + 2)
            continue
        expected, got = reference.feed(tokens, keep_last=len(tokens)), decoder.feed(tokens, keep_last=len(tokens))
        # bf16 activations summed in another order: measured up to 1.125 apart in a logit (3 of 2M), argmaxes agree
        torch.testing.assert_close(got, expected, rtol=0, atol=2.0, msg=lambda m, tokens=tokens: f"after {tokens[:4]}: {m}")
        assert (got.argmax(-1) == expected.argmax(-1)).float().mean() >= 0.95, f"after {tokens[:4]}: argmaxes parted"
    start = decoder.cached_length
    together = decoder.feed([28, 3458, 314, 260, 30], keep_last=5)
    decoder.truncate(start)
    alone = torch.cat([decoder.feed([token]) for token in [28, 3458, 314, 260, 30]])
    assert torch.equal(together, alone), f"max |Δ logit| {(together - alone).abs().max():.2e} between a pass and steps"
