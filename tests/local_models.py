"""Local model folders for loading tests: tiny Llamas with their own small BPE tokenizers."""

from __future__ import annotations

from pathlib import Path

from tokenizers import ByteLevelBPETokenizer
from transformers import PreTrainedTokenizerFast

from tests.tiny import tiny_llama

TEXTS = {
    "a": ["def add(a, b):\n    return a + b\n"] * 20 + ["import os, sys\nprint('hello world')\n"] * 20,
    "b": ["The quick brown fox jumps over the lazy dog.\n"] * 40,
}


def save_model_folder(folder: Path, corpus: str = "a", vocab_pad: int = 0, seed: int = 0, layers: int = 1) -> Path:
    """A tokenizer trained on one of two tiny corpora, and a random Llama over its vocabulary (+ vocab_pad rows)."""
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXTS[corpus], vocab_size=300, min_frequency=1, special_tokens=["<eos>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<eos>", pad_token="<eos>")
    model = tiny_llama(len(tokenizer) + vocab_pad, seed=seed, layers=layers)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
