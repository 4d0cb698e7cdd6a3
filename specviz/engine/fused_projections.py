"""Projections that read the same input, computed by one weight-only kernel call: q/k/v, and gate/up (int4, int8, and
the vnni4 form, models/vnni4.py, whose packed buffers are blocks of 32 output channels that concatenate bit for bit).

A step of SmolLM2-135M makes 211 int4 matrix products of a few dozen microseconds each; fusing q, k and v into one
call and gate and up into another makes it 121. It changes nothing in the arithmetic: the weight-only kernels give
every output channel its own dot product over the input (int4: groups of 32 along the input, each with its own scale
and offset; int8: one scale per channel), so the channels of a fused call are the separate calls' channels, bit for
bit (tests/test_fast_path.py checks it in int8 and int4, tests/test_real_feature_head.py on the real pair). Float weights
are not fused: a float GEMM may block its work by the number of output channels, so there fusing could round
differently; they keep one call per projection.

The modules are recognised by their buffers (models/weight_forms.py's Int4WeightOnly and Int8WeightOnly), not
imported: the engine sits below the models room. The fused weights are one tensor, and the original modules' weights
become views into it, so fusing adds no copy of the codes (only of the small int4 scale tables).
"""

from __future__ import annotations

import torch
from torch import nn

INT4_BLOCK = 64  # the CPU int4 packing interleaves output channels in blocks of 64: parts must start on a block


class FusedProjections(nn.Module):
    """`forward(x)` = the parts' outputs side by side, `(rows, Σ out_features)`, in one kernel call."""

    def __init__(self, parts: list[nn.Module]) -> None:
        super().__init__()
        self.in_features = parts[0].in_features
        self.out_features = sum(part.out_features for part in parts)
        self.vnni4 = _is_vnni4(parts[0])
        self.int4 = hasattr(parts[0], "packed") and not self.vnni4
        if self.vnni4:  # every buffer is blocked by 32 output channels: the parts' blocks side by side
            self.kernel = type(parts[0]).kernel  # the parts' own op (models/vnni4.py), not imported: engine sits below models
            for name in ("packed", "scales", "qzeros", "compensation"):
                self.register_buffer(name, _shared_rows(parts, name))
        elif self.int4:
            self.group = parts[0].group
            self.register_buffer("packed", _shared_rows(parts, "packed"))
            self.register_buffer("scales_and_zeros", torch.cat([part.scales_and_zeros for part in parts], dim=1))
        else:
            self.register_buffer("weight_int8", _shared_rows(parts, "weight_int8"))
            self.register_buffer("scales", _shared_rows(parts, "scales"))
        biased = getattr(parts[0], "bias", None) is not None  # fuse() fuses parts that all have one or none has
        self.register_buffer("bias", torch.cat([part.bias for part in parts]) if biased else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (rows, in_features) bf16 → (rows, out_features)
        if self.vnni4:  # the bias goes into the op's own epilogue, as in each part alone
            return self.kernel()(x, self.packed, self.scales, self.qzeros, self.compensation, self.bias)
        if self.int4:
            out = torch.ops.aten._weight_int4pack_mm_for_cpu.default(x, self.packed, self.group, self.scales_and_zeros)
        else:
            out = torch.ops.aten._weight_int8pack_mm.default(x, self.weight_int8, self.scales)
        return out if self.bias is None else out + self.bias  # each part's bias on its own channels, as alone


def fuse(parts: list[nn.Module]) -> FusedProjections | None:
    """One module for `parts` (same input, same weight-only form), or None where fusing could change a bit."""
    if len({getattr(part, "bias", None) is None for part in parts}) > 1:
        return None  # some with a bias, some without: kept apart
    if all(_is_int4(part) for part in parts):
        groups = {part.group for part in parts}
        if len(groups) == 1 and all(part.out_features % INT4_BLOCK == 0 for part in parts):
            return FusedProjections(parts)
    if all(_is_int8(part) for part in parts):
        return FusedProjections(parts)
    if all(_is_vnni4(part) for part in parts):  # packed in blocks of 32 output channels: parts concatenate bit for bit
        return FusedProjections(parts)
    return None


def _is_vnni4(module: nn.Module) -> bool:
    return hasattr(module, "compensation") and hasattr(module, "qzeros") and hasattr(module, "packed")


def _is_int4(module: nn.Module) -> bool:
    return hasattr(module, "packed") and hasattr(module, "scales_and_zeros") and hasattr(module, "group")


def _is_int8(module: nn.Module) -> bool:
    return hasattr(module, "weight_int8") and hasattr(module, "scales")


def _shared_rows(parts: list[nn.Module], name: str) -> torch.Tensor:
    """The parts' `name` buffers stacked along the output channels; each part's buffer becomes a view of its rows."""
    fused = torch.cat([getattr(part, name) for part in parts], dim=0)
    start = 0
    for part in parts:
        rows = getattr(part, name).shape[0]
        setattr(part, name, fused[start : start + rows])  # same values, now sharing the fused storage
        start += rows
    return fused
