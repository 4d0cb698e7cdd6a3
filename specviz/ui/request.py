"""What the user asked for, by name: the page's inputs as one RunRequest, and the engine settings it validates into."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from specviz.engine.settings import DecodeSettings, SamplingSettings, SettingsError

SLOW_MOTION_S = 8.0  # the default playback lasts about this long, whatever the pair and the machine
SLOW_MOTION = f"slow motion ({SLOW_MOTION_S:g} s)"
PLAYBACK = {"real pace": 1.0, SLOW_MOTION: None, "10× slower": 10.0, "50× slower": 50.0}  # choice → slowdown; None: fitted
DEFAULT_PLAYBACK = SLOW_MOTION
AcceptanceRule = Literal["exact", "greedy", "lenient"]  # the page's "Verification" choice: how drafts are accepted


@dataclass(frozen=True)
class RunRequest:
    """Everything the user chose for one run, by name."""

    pair: str
    prompt: str
    gamma: int = 4
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    drafter: str = "model"
    verification: AcceptanceRule = "exact"
    lenience: float = 0.5
    playback: str = DEFAULT_PLAYBACK

    @classmethod
    def from_values(cls, values: dict[str, object]) -> RunRequest:
        """From {field name: value}; names the request does not know are ignored, missing ones keep their defaults."""
        names = {f.name for f in fields(cls)}
        return cls(**{name: value for name, value in values.items() if name in names and value is not None})

    def settings(self) -> DecodeSettings:
        """The engine's settings, validated (SettingsError with one sentence if a value is out of range)."""
        try:
            temperature = 0.0 if self.verification == "greedy" else float(self.temperature)
            return DecodeSettings(
                max_new_tokens=int(self.max_new_tokens),
                gamma=int(self.gamma),
                sampling=SamplingSettings(temperature=temperature, top_k=int(self.top_k or 0), top_p=float(self.top_p)),
                seed=int(self.seed or 0),
                lenience=float(self.lenience) if self.verification == "lenient" else 1.0,
            ).validate()
        except (TypeError, ValueError) as error:
            if isinstance(error, SettingsError):
                raise
            raise SettingsError(f"a setting is not a number: {error}") from None


def slowdown(playback: str, recorded_s: float) -> float:
    """How many times slower than real a run recorded in `recorded_s` seconds plays back: never faster than real.

    Slow motion fits the run into SLOW_MOTION_S, so a new user waits the same few seconds for a 0.4 s run of the
    bundled pair and a 5 s run of a real model; the other choices are fixed factors.
    """
    factor = PLAYBACK.get(playback, PLAYBACK[DEFAULT_PLAYBACK])
    if factor is None:
        return max(1.0, SLOW_MOTION_S / recorded_s) if recorded_s > 0 else 1.0
    return factor
