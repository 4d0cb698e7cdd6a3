"""What every AdamW fit in specviz shares: its settings and its warm-up + cosine learning rate."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class OptimiserSettings:
    """Batch size, AdamW's learning rate and weight decay, the warm-up, and the seed of the batch order."""

    batch_size: int = 16
    learning_rate: float = 2e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    seed: int = 0


@dataclass
class TrainingLog:
    """Running train loss at each validated step, and the seconds spent so far."""

    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0


def learning_rate_at(step: int, settings: OptimiserSettings, steps: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak at `steps`."""
    if step < settings.warmup_steps:
        return settings.learning_rate * (step + 1) / settings.warmup_steps
    progress = (step - settings.warmup_steps) / max(1, steps - settings.warmup_steps)
    return settings.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
