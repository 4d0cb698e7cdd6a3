"""What a trace keeps of the pair it was recorded on: names, sizes, device and load times, as plain typed data.

It travels inside exported traces (as JSON), so a replay on another machine shows the pair it was measured on.
Every field has a default: a trace from before a field existed, or one recorded with no pair, still reads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class PairInfo:
    name: str = ""  # the catalogue name; "" where no pair is known
    target: str = ""  # the target's reference (a hub id, or a path under assets/)
    draft: str = ""
    device: str = ""  # "cpu", "cuda:0", ...
    cpu_capability: str | None = None  # torch's CPU kernels ("AVX2", "AVX512"); None off a CPU
    dtype: str = ""  # "float32", "bfloat16", ...
    target_parameters: int = 0
    draft_parameters: int = 0
    target_weight_mb: float = 0.0
    draft_weight_mb: float = 0.0
    load_s: float = 0.0  # tokenizers and both models, as the pair was loaded
    shared_vocab: int = 0
    chat_template: bool = False  # prompts are wrapped in the pair's chat template
    model_load_s: dict | None = None  # PairLoadTimes.to_json() and its cold source; None until timed
    compile: dict | None = (
        None  # the fast path's CompileReport per model ({role: {compiled, seconds, reason}}); None: eager or compiling
    )
    weight_form: str | None = None  # the target's weights on a CPU (kernels/forms.py; None: as loaded)
    weight_kernel: str | None = None  # which kernel computes that form here, and why it was chosen
    feature_head: str | None = None  # the feature head's reference, where the pair has one
    feature_head_parameters: int | None = None
    feature_head_weight_mb: float | None = None
    feature_head_form: str | None = None
    memory: dict | None = None  # MemoryReport.to_json() of the recorded run

    @property
    def known(self) -> bool:
        return bool(self.name)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> PairInfo:
        """From to_json's dict (keys it does not know are passed over); ValueError if it is not a record."""
        if not isinstance(data, dict):
            raise ValueError(f"the pair is not a record: {data!r}")
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})
