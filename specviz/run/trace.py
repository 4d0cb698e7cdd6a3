"""A recorded run (speculative events + the autoregressive baseline) as plain data and JSON.

A trace recorded on a GPU can be replayed in a classroom with no GPU: every view is a pure
function of it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

from specviz.engine.events import Cycle, DraftPosition, RunStarted, SameDraftsVerdict, Step, Summary
from specviz.engine.tally import Tally
from specviz.process.machine_load import OtherLoad
from specviz.run.chosen_setting import ChosenSetting
from specviz.run.pair_info import PairInfo
from specviz.run.trace_schema import TRACE_FORMAT, checked_trace, parse_trace_json


@dataclass
class Trace:
    pair: PairInfo = field(default_factory=PairInfo)  # name, models, device, dtype, sizes: for display only
    prompt: str = ""
    started: RunStarted | None = None
    cycles: list[Cycle] = field(default_factory=list)
    summary: Summary | None = None
    baseline_steps: list[Step] = field(default_factory=list)
    baseline: Summary | None = None
    round_speedups: tuple[float, ...] = ()  # every back-to-back measurement; the trace is the median one
    other_load: OtherLoad | None = None  # other programs' use of the processor while this was timed
    setting: ChosenSetting | None = None  # `gamma: auto`'s choice for this machine, where the run drafted it (or knew it)
    # the machine's memory read rate in GB/s just before and just after the timed rounds (never inside them): on a
    # machine that moves between two states, which one the run was timed in (docs/performance.md)
    memory_read_gb_s: tuple[float, ...] = ()

    @property
    def complete(self) -> bool:
        return self.summary is not None

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": TRACE_FORMAT,
                "pair": self.pair.to_json(),
                "prompt": self.prompt,
                "started": asdict(self.started) if self.started else None,
                "cycles": [asdict(cycle) for cycle in self.cycles],
                "summary": asdict(self.summary) if self.summary else None,
                "baseline_steps": [asdict(step) for step in self.baseline_steps],
                "baseline": asdict(self.baseline) if self.baseline else None,
                "round_speedups": list(self.round_speedups),
                "other_load": self.other_load.to_json() if self.other_load else None,
                "setting": self.setting.to_json() if self.setting else None,
                "memory_read_gb_s": list(self.memory_read_gb_s),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Trace:
        """Parse a trace, every field checked first (specviz.run.trace_schema): InputError, a ValueError, with one sentence if it is not one."""
        raw = checked_trace(parse_trace_json(text))
        return cls(
            pair=PairInfo.from_json(raw.get("pair") or {}),
            prompt=raw.get("prompt", ""),
            started=_build(RunStarted, raw["started"]) if raw.get("started") else None,
            cycles=[_cycle(c) for c in raw.get("cycles", [])],
            summary=_summary(raw["summary"]) if raw.get("summary") else None,
            baseline_steps=[_build(Step, s) for s in raw.get("baseline_steps", [])],
            baseline=_summary(raw["baseline"]) if raw.get("baseline") else None,
            round_speedups=tuple(raw.get("round_speedups", ())),
            other_load=OtherLoad.from_json(raw["other_load"]) if raw.get("other_load") else None,
            setting=ChosenSetting.from_json(raw["setting"]) if raw.get("setting") else None,
            memory_read_gb_s=tuple(raw.get("memory_read_gb_s", ())),
        )


def _tuples(value):
    """JSON lists back into the tuples the frozen events use."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def _build(kind, data: dict):
    names = {f.name for f in fields(kind)}
    return kind(**{k: _tuples(v) for k, v in data.items() if k in names})


def _cycle(data: dict) -> Cycle:
    positions = tuple(_build(DraftPosition, p) for p in data.get("positions", []))
    verdicts = tuple(_build(SameDraftsVerdict, v) for v in data.get("verdicts", []))
    return _build(Cycle, {**data, "positions": positions, "verdicts": verdicts})


def _summary(data: dict) -> Summary:
    return _build(Summary, {**data, "tally": _build(Tally, data.get("tally") or {})})
