"""The weight-only forms on torch's own CPU kernels: weights in int8 or int4, activations in bf16, each row with its own
accumulator in a fixed order (torch 2.13's `_weight_int8pack_mm` and `_weight_int4pack_mm_for_cpu` run the same
per-row micro-kernel for 1 to 4 rows at a time on AVX-512, AVX2 and the scalar build, and call no oneDNN)."""

from __future__ import annotations

import torch
from torch import nn

INT4_GROUP = 32
INT4_BLOCK = 64  # the CPU int4 packing interleaves output channels in blocks of 64: joined parts must start on a block


class Int8WeightOnly(nn.Module):
    """y = x Wᵀ (+ b) with W stored as int8 and one bf16 scale per output channel; x in bf16."""

    form_name = "int8"

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        keep_bias(self, linear)
        weight = linear.weight.detach().float()  # (out, in)
        scales = (weight.abs().amax(dim=1) / 127).clamp(min=1e-12)
        self.register_buffer("weight_int8", torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scales.to(torch.bfloat16))
        self.in_features, self.out_features = linear.in_features, linear.out_features

    @staticmethod
    def supports(linear: nn.Linear) -> bool:
        return True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        out = torch.ops.aten._weight_int8pack_mm.default(rows, self.weight_int8, self.scales)  # (rows, out)
        return with_bias(out, self.bias).view(*x.shape[:-1], self.out_features)

    @classmethod
    def concatenated(cls, parts: list[Int8WeightOnly]) -> Int8WeightOnly:
        """One layer computing `parts` side by side: every output channel is its own dot product, bit for bit."""
        joined = empty_like_parts(cls, parts)
        joined.register_buffer("weight_int8", shared_rows(parts, "weight_int8"))
        joined.register_buffer("scales", shared_rows(parts, "scales"))
        return joined


class Int4WeightOnly(nn.Module):
    """y = x Wᵀ (+ b) with W stored as 4-bit codes in groups of 32 along the input, each with a bf16 scale and offset."""

    form_name = "int4"

    def __init__(self, linear: nn.Linear, group: int = INT4_GROUP) -> None:
        super().__init__()
        keep_bias(self, linear)
        weight = linear.weight.detach().float()  # (out, in)
        n_out, n_in = weight.shape
        grouped = weight.view(n_out, n_in // group, group)
        low, high = grouped.amin(dim=-1), grouped.amax(dim=-1)
        scale = ((high - low) / 15).clamp(min=1e-12)  # (out, groups)
        codes = torch.round((grouped - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).view(n_out, n_in)
        # the kernel computes (code − 8) · scale + zero, so zero = low + 8 · scale
        zero = low + 8 * scale
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1))
        self.register_buffer(
            "scales_and_zeros", torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous().to(torch.bfloat16)
        )
        self.group = group
        self.in_features, self.out_features = n_in, n_out

    @staticmethod
    def supports(linear: nn.Linear) -> bool:
        return linear.in_features % INT4_GROUP == 0 and linear.out_features % 16 == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu.default(rows, self.packed, self.group, self.scales_and_zeros)
        return with_bias(out, self.bias).view(*x.shape[:-1], self.out_features)

    @classmethod
    def concatenated(cls, parts: list[Int4WeightOnly]) -> Int4WeightOnly | None:
        """One layer computing `parts` side by side, where each part is whole blocks of 64 channels; else None."""
        if len({part.group for part in parts}) > 1 or any(part.out_features % INT4_BLOCK for part in parts):
            return None
        joined = empty_like_parts(cls, parts)
        joined.group = parts[0].group
        joined.register_buffer("packed", shared_rows(parts, "packed"))
        joined.register_buffer("scales_and_zeros", torch.cat([part.scales_and_zeros for part in parts], dim=1))
        return joined


def keep_bias(module: nn.Module, linear: nn.Linear) -> None:
    """The linear layer's bias (Qwen2's q, k and v have one), kept in bf16 beside the quantised weight; None if it has none."""
    bias = linear.bias.detach().to(torch.bfloat16) if linear.bias is not None else None
    module.register_buffer("bias", bias)


def with_bias(out: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The product plus the bias, added to each row alone (elementwise: a row's values do not depend on the others)."""
    return out if bias is None else out + bias


def empty_like_parts(cls: type[nn.Module], parts: list[nn.Module]) -> nn.Module:
    """A layer of the parts' class with no weights yet, their joined bias, and their summed output width."""
    joined = cls.__new__(cls)
    nn.Module.__init__(joined)
    biased = parts[0].bias is not None
    joined.register_buffer("bias", torch.cat([part.bias for part in parts]) if biased else None)
    joined.in_features, joined.out_features = parts[0].in_features, sum(part.out_features for part in parts)
    return joined


def shared_rows(parts: list[nn.Module], name: str) -> torch.Tensor:
    """The parts' `name` buffers stacked along the output channels; each part's buffer becomes a view of its rows."""
    fused = torch.cat([getattr(part, name) for part in parts], dim=0)
    start = 0
    for part in parts:
        rows = getattr(part, name).shape[0]
        setattr(part, name, fused[start : start + rows])  # same values, now sharing the fused storage
        start += rows
    return fused
