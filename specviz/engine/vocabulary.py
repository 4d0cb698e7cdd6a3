"""The engine's only view of a tokenizer: token ids to text."""

from __future__ import annotations

from functools import lru_cache

from transformers import PreTrainedTokenizerBase


class Vocabulary:
    """Decodes token ids (each single token's text is cached) and knows the end-of-sequence id."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.eos_token_id: int | None = tokenizer.eos_token_id
        self.token_text = lru_cache(maxsize=65536)(self._decode_one)

    def _decode_one(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def text(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)
