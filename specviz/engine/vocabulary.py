"""The engine's only view of a tokenizer: token ids to text, and which ids end a run.

Byte-level BPE splits some characters across tokens (é, an emoji, CJK): decoded alone, each part is "�".
So the text shown for a token is its *piece*: what it adds to the text decoded so far, given the tokens
before it. A token that ends mid-character adds nothing, and the token that completes the character shows
the whole of it, once. Joining the pieces gives exactly the decoded text, spaces and newlines included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

from transformers import PreTrainedTokenizerBase

REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that are not (yet) a whole character
LOOKBACK = 6  # tokens of context that settle a piece; no character spans more bytes than this


class Vocabulary:
    """Decodes token ids into pieces and whole texts, and knows every end-of-turn id."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, end_token_ids: Iterable[int | None] = ()) -> None:
        self.tokenizer = tokenizer
        self.eos_token_id: int | None = tokenizer.eos_token_id
        self.end_token_ids = frozenset(token for token in (tokenizer.eos_token_id, *end_token_ids) if token is not None)
        self.special_token_ids = frozenset(getattr(tokenizer, "all_special_ids", ()) or ())
        self.token_text = lru_cache(maxsize=65536)(self._decode_one)

    def _decode_one(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def ends_run(self, token_ids: Iterable[int]) -> int | None:
        """The index of the first end-of-turn token, or None."""
        return next((i for i, token in enumerate(token_ids) if token in self.end_token_ids), None)

    def pieces(self, context: Sequence[int], new: Sequence[int]) -> list[str]:
        """What each new token adds to the text after `context` ("" while a character is still incomplete)."""
        window = list(context[-LOOKBACK:])
        settled = self.tokenizer.decode(window).rstrip(REPLACEMENT)  # an incomplete character is finished by a new token
        pieces = []
        for end in range(1, len(new) + 1):
            text = self.tokenizer.decode(window + list(new[:end]))
            if text.endswith(REPLACEMENT):
                pieces.append("")
                continue
            pieces.append(text[len(settled) :])
            settled = text
        return pieces

    def text(self, token_ids: Sequence[int]) -> str:
        """The text of a run's new tokens, as `tokenizer.decode(ids, skip_special_tokens=True)` writes it."""
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)
