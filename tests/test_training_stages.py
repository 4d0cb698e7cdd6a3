"""The training stages that change a model's shape or its data: depth growth and on-policy batches."""

from dataclasses import replace

import torch
from transformers import LlamaForCausalLM

from specviz.engine import CachedDecoder
from specviz.training.grow import deepen
from specviz.training.loop import TrainSettings, training_batch
from specviz.training.on_policy import greedy_continuations
from tests.tiny import tiny_llama


def test_deepening_keeps_the_function_and_survives_save_and_load(tmp_path):
    model = tiny_llama(vocab_size=48, layers=3)
    ids = torch.randint(0, 48, (2, 12), generator=torch.Generator().manual_seed(1))
    before = model(ids).logits
    deepen(model, after=[0, 2])
    assert model.config.num_hidden_layers == len(model.model.layers) == 5
    assert torch.allclose(model(ids).logits, before, atol=1e-5), "the new layers must start as the identity"
    model.save_pretrained(tmp_path)
    reloaded = LlamaForCausalLM.from_pretrained(tmp_path).eval()
    assert len(reloaded.model.layers) == 5 and torch.allclose(reloaded(ids).logits, before, atol=1e-5)


def test_deepened_model_decodes_with_a_kv_cache_like_without(tmp_path):
    model = deepen(tiny_llama(vocab_size=48, layers=2), after=[1])
    with torch.no_grad():  # make the new layer do something, so each layer's cache slot matters
        model.model.layers[2].self_attn.o_proj.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(2))
    ids = [3, 14, 15, 9, 26]
    full = model(torch.tensor([ids])).logits[0, -1]
    decoder = CachedDecoder(model, 48)
    decoder.feed(ids[:3])
    stepped = decoder.feed(ids[3:])[-1]
    assert torch.allclose(stepped, full, atol=1e-4)


def test_on_policy_rows_are_corpus_prefixes_then_the_models_greedy_text():
    model = tiny_llama(vocab_size=40, layers=1, sharpness=4.0)
    tokens = torch.arange(1000) % 40
    rows = greedy_continuations(model, tokens, count=5, prefix_length=6, sequence_length=16, batch_size=2)
    assert rows.shape == (5, 16)
    for row in rows:
        prefix = row[:6]
        assert ((prefix[1:] - prefix[:-1]) % 40 == 1).all(), "the prefix is a window of the corpus"
        with torch.autocast("cpu", dtype=torch.bfloat16):  # generated under the same bf16 autocast as training uses
            reference = model.generate(prefix[None], attention_mask=torch.ones(1, 6), max_new_tokens=10, do_sample=False)
        assert row[6:].tolist() == reference[0, 6:].tolist()


def test_training_batches_mix_in_the_requested_share_of_on_policy_rows():
    settings = TrainSettings(steps=1, batch_size=8, sequence_length=10, learning_rate=1e-3, on_policy_share=0.25)
    corpus = torch.zeros(500, dtype=torch.long)
    rows = torch.ones(30, 12, dtype=torch.long)
    batch = training_batch(corpus, settings, torch.Generator().manual_seed(0), rows)
    assert batch.shape == (8, 10)
    assert batch.all(dim=1).sum() == 2 and (batch.sum(dim=1) == 0).sum() == 6
    assert (training_batch(corpus, settings, torch.Generator(), None) == 0).all(), "without rows, corpus only"


def test_the_ban_forbids_repeating_the_continuations_own_ngrams_but_not_the_prompts():
    from specviz.training.loop_free import ContinuationNGramBan

    ban = ContinuationNGramBan(batch_size=1, prefix_length=2, total_length=12, n=3)
    scores = torch.zeros(1, 10)
    scores[0, 7] = 5.0  # the model wants token 7
    written = [7, 8, 7, 8, 7, 8]  # prompt [7, 8], then the continuation 7, 8, 7, 8; generate() calls once per token
    for length in range(3, 6):
        assert torch.isfinite(ban(torch.tensor([written[:length]]), scores.clone())).all(), "copying the prompt is allowed"
    out = ban(torch.tensor([written]), scores.clone())
    assert out[0, 7] == float("-inf") and torch.isfinite(out[0, :7]).all(), "7 after (7, 8) would repeat the 3-gram (7, 8, 7)"
    assert ban.overridden[0].nonzero().flatten().tolist() == [6] and ban.banned[0, 6] == 7


def test_the_correction_raises_the_turn_taken_and_lowers_the_looping_token():
    from specviz.training.loop_free import correction_loss

    sequences = torch.tensor([[1, 2, 3, 4]])
    overridden = torch.tensor([[False, False, True, False]])
    banned = torch.tensor([[0, 0, 2, 0]])  # at position 2 the model wanted 2 again; it wrote 3
    looping = torch.zeros(1, 4, 5)
    looping[0, 1, 2] = 6.0  # logits at position 1 predict position 2
    turning = torch.zeros(1, 4, 5)
    turning[0, 1, 3] = 6.0
    assert correction_loss(looping, sequences, overridden, banned) > correction_loss(turning, sequences, overridden, banned)
    assert correction_loss(looping, sequences, overridden & False, banned) == 0, "no override, nothing to correct"


def test_loop_free_training_probes_greedy_loops_and_stops_once_they_are_gone():
    from specviz.training.loop_free import LoopFreeSettings, finetune

    torch.manual_seed(0)
    model = tiny_llama(vocab_size=40, layers=1)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit 0: greedy writes token 0 forever
    tokens = torch.randint(0, 40, (2000,), generator=torch.Generator().manual_seed(0))
    settings = LoopFreeSettings(
        max_steps=40, learning_rate=1e-2, batch_size=8, prefix_length=8, continuation_length=24, ngram=3,
        lm_sequence_length=32, probe_every=5, probe_rows=8, stop_mean_distinct=0.5, stop_min_distinct=0.3,
        max_validation_loss=99.0,
    )  # fmt: skip
    result, probes = finetune(model, tokens, tokens[:500], settings)
    assert probes[0]["distinct_4_mean"] < 0.1, "the probe must see the loop"
    assert probes[-1]["distinct_4_mean"] >= 0.5 and probes[-1]["distinct_4_min"] >= 0.3
    assert result.steps == probes[-1]["step"] < 40, "it stops at the first probe that passes"
    guarded = replace(settings, max_validation_loss=0.0)
    assert finetune(model, tokens, tokens[:500], guarded)[0].steps == 0, "and before it costs too much validation loss"
