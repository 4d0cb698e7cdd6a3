"""A byte-level BPE tokenizer trained on the corpus and saved in transformers' format."""

from __future__ import annotations

from pathlib import Path

from tokenizers import ByteLevelBPETokenizer
from transformers import PreTrainedTokenizerFast

END_OF_TEXT = "<|endoftext|>"


def train_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train byte-level BPE on texts; the one special token separates files."""
    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2, special_tokens=[END_OF_TEXT])
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        eos_token=END_OF_TEXT,
        bos_token=END_OF_TEXT,
        unk_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
        model_max_length=1024,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: Path) -> None:
    """Save so that `AutoTokenizer.from_pretrained(folder)` loads it."""
    tokenizer.save_pretrained(folder)
