"""A head reads its target's tensors from the file once a weight form packed them (models/target_tensors.py), including
the LM head of a target whose file stores it once, as the embedding (tied, like SmolLM2-135M)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specviz.models.target_tensors import readout_rows, target_tensor
from specviz.models.weight_forms import apply_form


def test_a_tied_targets_lm_head_is_read_as_its_embedding_after_a_form_untied_it(tmp_path):
    """int8 packs the head into its own copy and unties the config, so a head asks the file for `lm_head.weight`,
    which a tied model's file never held: the SmolLM2 pair's feature head failed to load ("holds no tensor lm_head.weight")."""
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    target = LlamaForCausalLM.from_pretrained(tmp_path).eval()
    embedding = target.get_input_embeddings().weight.detach().clone()
    apply_form(target, "int8")
    assert readout_rows(target) == "lm_head.weight", "the form untied the config: the head asks for the LM head"
    assert torch.equal(target_tensor(target, "lm_head.weight").float(), embedding.float()), "a tied LM head is the embedding"
