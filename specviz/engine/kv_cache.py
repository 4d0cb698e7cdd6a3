"""A causal LM behind its KV cache, and the one helper that rolls a cache back after verification."""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from specviz.engine.tree_rows import TreeRows


class Decoder:
    """What the engine asks of a model behind its cache: feed tokens that follow it, get logits (and hidden states).

    A decoder keeps `model`, `vocab_size`, `device` and `cached_length`, and implements `_forward`, `reset` and
    `truncate`, and for token trees `forward_tree` and `move_positions`: CachedDecoder over transformers' cache,
    engine/compiled.py's FastDecoder over a static one.
    """

    engine = "transformers"  # what runs the forward: FastDecoder says "compiled" or "eager"
    _rows_exact: bool | None = None

    @property
    def rows_exact(self) -> bool:
        """Whether a verify pass gives each row the bits of its one-token step on every CPU (weight_forms'
        engine/row_exactness.py): greedy speculation then equals plain decoding to the token; else only up to rounding."""
        if self._rows_exact is None:
            from specviz.engine.row_exactness import model_rows_independent

            self._rows_exact = model_rows_independent(self.model, self.engine)
        return self._rows_exact

    def forward_tree(
        self,
        token_ids: list[int] | torch.Tensor,
        rows: TreeRows,
        keep_last: int,
        layers: tuple[int, ...] = (),
        hidden_last: int = 1,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A token tree's rows after the cache (engine/tree.py): each at its depth's position, seeing only its keys."""
        raise NotImplementedError

    def move_positions(self, slots: torch.Tensor, destination: int) -> None:
        """Copy the cache entries at `slots` to positions destination, destination + 1, …"""
        raise NotImplementedError

    @torch.inference_mode()
    def feed(self, token_ids: list[int] | torch.Tensor, keep_last: int = 1) -> torch.Tensor:
        """Run the model on tokens that follow the cache; return logits of the last `keep_last` of them."""  # (keep_last, vocab)
        return self._forward(token_ids, keep_last)[0]

    @torch.inference_mode()
    def feed_with_hidden_states(
        self,
        token_ids: list[int] | torch.Tensor,
        keep_last: int = 1,
        hidden_last: int | None = None,
        layers: tuple[int, ...] = (-1,),
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Like feed, plus hidden states (what EAGLE-style drafters read) at the last `hidden_last` positions (default:
        `keep_last`): those of `layers` (indices into transformers' hidden_states; −1 is the last, after the final norm)
        side by side."""  # (keep_last, vocab), (hidden_last, hidden · len(layers))
        return self._forward(token_ids, keep_last, layers, hidden_last or keep_last)


class CachedDecoder(Decoder):
    """Feeds new tokens to a model through its KV cache, so the prefix is never recomputed."""

    def __init__(self, model: PreTrainedModel, vocab_size: int) -> None:
        self.model = model
        self.vocab_size = vocab_size  # logits are cut to the length the pair shares
        self.device = model.device
        self.cache = DynamicCache(config=model.config)

    @property
    def cached_length(self) -> int:
        return self.cache.get_seq_length()

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)

    def _forward(
        self,
        token_ids: list[int] | torch.Tensor,
        keep_last: int,
        layers: tuple[int, ...] = (),
        hidden_last: int = 1,
        **masking,  # attention_mask and position_ids, for a tree's rows (engine/tree.py); a chain needs neither
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not isinstance(token_ids, torch.Tensor):
            token_ids = torch.tensor(token_ids, dtype=torch.long, device=self.device)
        output = self.model(
            input_ids=token_ids.view(1, -1),
            **masking,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=keep_last,
            output_hidden_states=bool(layers),
        )
        logits = output.logits[0, -keep_last:, : self.vocab_size].float()
        if not layers:
            return logits, None
        return logits, torch.cat([output.hidden_states[layer][0, -hidden_last:] for layer in layers], dim=-1)

    def forward_tree(self, token_ids, rows: TreeRows, keep_last: int, layers=(), hidden_last: int = 1):
        """transformers' forward with the tree's mask and positions, passed with this forward only. In a weight-only
        form the model attends with models/row_attention.py, which gathers each node's context and ancestors in
        order, as a one-token step of its path holds them: a node's logits are its path's to the bit. With another
        attention (eager, SDPA) they are its path's within rounding: its cousins' keys sit masked between its
        ancestors, and the kernels' sums can round differently around them."""
        visible = rows.visible()  # (rows, keys) bool
        dtype = self.model.dtype
        mask = torch.full(visible.shape, torch.finfo(dtype).min, dtype=dtype).masked_fill(visible, 0.0)  # additive
        return self._forward(
            token_ids,
            keep_last,
            layers,
            hidden_last,
            attention_mask=mask[None, None].to(self.device),
            position_ids=rows.positions[None].to(self.device),
        )

    def move_positions(self, slots: torch.Tensor, destination: int) -> None:
        end = destination + len(slots)
        for layer in self.cache.layers:
            layer.keys[..., destination:end, :] = layer.keys.index_select(-2, slots)
            layer.values[..., destination:end, :] = layer.values.index_select(-2, slots)

    def truncate(self, length: int) -> None:
        """Forget cached positions from `length` on."""
        surplus = self.cached_length - length
        if surplus > 0:
            self.cache.crop(-surplus)


def rollback_to_accepted(decoder: CachedDecoder, committed: list[int]) -> list[int]:
    """Roll the cache back to the accepted prefix; return the committed tokens it has yet to see.

    The cache holds the previous committed tokens plus the drafts fed this cycle. The committed
    sequence now ends with the accepted drafts and the target's own token, so its first
    `len(committed) - 1` tokens agree with the cache wherever both exist.
    """
    valid_length = min(decoder.cached_length, len(committed) - 1)
    decoder.truncate(valid_length)
    return committed[valid_length:]


@torch.inference_mode()
def compact_to_path(decoder: Decoder, tree_start: int, path_nodes: list[int]) -> None:
    """After a token tree's verify pass (engine/tree.py): keep the cache before the tree, then the accepted path's nodes.

    The cache holds `tree_start` positions, then one entry per node in node order. Each node was computed at its
    depth's position attending to its ancestors only, so the path's entries, moved side by side, are the cache a
    chain of the same tokens would have left. Only those entries move (a static cache's length is then set; no
    whole-cache copy). Call `rollback_to_accepted` after it, as after a chain.
    """
    kept = len(path_nodes)
    if path_nodes != list(range(kept)):  # a chain's accepted prefix is already in place
        decoder.move_positions(torch.tensor(path_nodes, dtype=torch.long, device=decoder.device) + tree_start, tree_start)
    decoder.truncate(tree_start + kept)


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so wall-clock timings are real."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
