"""A head's matrix as its target's own matrix plus a low-rank change: W = s·W_base + B·A.

A feature head for a 1.5B target copies the target's last decoder layer: 50M weights, 100 MB in bf16, which the
repository cannot carry. Trained as s·W_base + B·A with W_base frozen (the target's matrix, or a fixed one such as an
identity), only s, A and B are the head's own: rank 64 over a 1,536-wide layer is a few MB. The base is read back from
the target when the head loads (models/target_tensors.py), so the head ships as its change alone, the way LoRA
adapters ship (Hu et al. 2021), and runs as plain merged matrices: drafting costs what a full head costs.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class LowRankLinear(nn.Module):
    """y = s · x W_baseᵀ + (x Aᵀ) Bᵀ, with W_base frozen (a buffer, never shipped) and s, A, B trained."""

    def __init__(self, base: torch.Tensor, rank: int, base_scale: float = 1.0, seed: int = 0) -> None:
        super().__init__()
        out_features, in_features = base.shape
        self.register_buffer("base", base.detach().float().clone(), persistent=False)
        generator = torch.Generator().manual_seed(seed)
        self.scale = nn.Parameter(torch.tensor(float(base_scale)))
        # B starts at zero, so the layer starts as s·W_base exactly (LoRA's initialisation)
        self.lora_a = nn.Parameter(torch.randn(rank, in_features, generator=generator) * in_features**-0.5)
        self.lora_b = nn.Parameter(torch.zeros(out_features, rank))

    @property
    def rank(self) -> int:
        return self.lora_a.shape[0]

    @property
    def weight(self) -> torch.Tensor:
        """The merged matrix (out, in)."""
        return self.scale * self.base + self.lora_b @ self.lora_a

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = F.linear(x, self.base.to(x.dtype)) * self.scale.to(x.dtype)
        return base + F.linear(F.linear(x, self.lora_a.to(x.dtype)), self.lora_b.to(x.dtype))

    def own_state(self) -> dict[str, torch.Tensor]:
        """What the head ships for this matrix: s, A and B."""
        return {"scale": self.scale.detach().reshape(1), "lora_a": self.lora_a.detach(), "lora_b": self.lora_b.detach()}


class PassThroughLowRank(nn.Module):
    """y = s · x[..., start : start + out] + (x Aᵀ) Bᵀ: a low-rank change over a base that passes a slice of the input
    through (a feature head's fuse, s·[0 | I | 0] + B·A), run as its factors, without the base's matrix.

    Merged and put in a 4-bit form, such a matrix loses its change: each block of weights that holds a 1 of the base
    is scaled for it, and the change's small entries beside it round to 0 (the coder head's fuse in 4-bit (vnni4) kept 0.70 of
    the head's guesses; its other matrices in 4-bit, 0.95). As factors it is exact, and costs rank · (in + out)
    multiply-adds instead of in · out."""

    def __init__(self, scale: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, start: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(scale.detach().float().reshape(()).clone(), requires_grad=False)
        self.lora_a = nn.Parameter(lora_a.detach().float().clone(), requires_grad=False)
        self.lora_b = nn.Parameter(lora_b.detach().float().clone(), requires_grad=False)
        self.start = start

    @property
    def weight(self) -> torch.Tensor:
        """The merged matrix (out, in), as a plain linear layer would hold it."""
        out_features, in_features = self.lora_b.shape[0], self.lora_a.shape[1]
        base = torch.zeros(out_features, in_features, dtype=self.lora_a.dtype, device=self.lora_a.device)
        base[:, self.start : self.start + out_features] = torch.eye(out_features, dtype=base.dtype, device=base.device)
        return self.scale * base + self.lora_b @ self.lora_a

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        passed = x[..., self.start : self.start + self.lora_b.shape[0]] * self.scale.to(x.dtype)
        return passed + F.linear(F.linear(x, self.lora_a.to(x.dtype)), self.lora_b.to(x.dtype))


def merged_weight(base: torch.Tensor, scale: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor) -> torch.Tensor:
    """s·W_base + B·A in float32 (the one formula, for loading a shipped change)."""
    return scale.float().reshape(()) * base.float() + lora_b.float() @ lora_a.float()


def parameter_count(rank: int, out_features: int, in_features: int) -> int:
    """s, A and B."""
    return 1 + rank * (out_features + in_features)
