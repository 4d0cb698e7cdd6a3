"""The training stages that change a model's shape or its data: depth growth and on-policy batches."""

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
