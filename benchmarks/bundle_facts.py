"""The bundle's sizes and counts, as the docs quote them: weights packed and unpacked, parameters, training answers.

    python benchmarks/bundle_facts.py

Reads the files in assets/ (safetensors headers, the packed target, the answer files); runs no model, so the numbers
do not depend on the machine's load. Writes benchmarks/results/bundle_facts.json (benchmarks/results.py).
"""

from __future__ import annotations

import json
import lzma
import struct
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.results import write_results  # noqa: E402

ASSETS = ROOT / "assets"


def parameters(path: Path) -> dict[str, int]:
    """Each tensor's element count, from a safetensors file's header (nothing loaded; a packed one's stream start)."""
    with lzma.open(path) if path.suffix == ".xz" else path.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
    return {name: int(np.prod(entry["shape"])) for name, entry in header.items() if name != "__metadata__"}


def unpacked_bytes(path: Path) -> int:
    """The size of a packed safetensors file once unpacked, from its header alone (the start of the stream)."""
    with lzma.open(path) as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
    return 8 + length + max(entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__")


def answers(path: Path) -> dict:
    data = np.load(path)
    return {
        "requests": int(len(data["answer_lengths"])),
        "answer_tokens": int(data["answer_lengths"].sum()),
        "bytes": path.stat().st_size,
    }


def facts() -> dict:
    """Every size and count the docs quote about assets/, read from the files."""
    packed = ASSETS / "pycode-target" / "model.safetensors.xz"
    draft_packed = ASSETS / "smollm2-135m-draft" / "model.safetensors.xz"
    head_packed = ASSETS / "smollm2-135m-eagle" / "feature_head.safetensors.xz"
    draft = parameters(draft_packed)
    draft_config = json.loads((ASSETS / "smollm2-135m-draft" / "config.json").read_text())
    kept = len(json.loads((ASSETS / "smollm2-135m-draft" / "draft_vocabulary.json").read_text())["kept_token_ids"])
    head = parameters(head_packed)
    head_kept = len(json.loads((ASSETS / "smollm2-135m-eagle" / "feature_head.json").read_text())["kept_token_ids"])
    hidden = draft_config["hidden_size"]
    files = sorted((ASSETS / "training").glob("*.npz"))
    return {
        "pycode_target": {"packed_bytes": packed.stat().st_size, "unpacked_bytes": unpacked_bytes(packed)},
        "smollm2_draft": {
            "file_parameters": sum(draft.values()),
            "kept_rows": kept,
            "memory_parameters": sum(draft.values()) + kept * hidden,  # its own, plus the head rows it copies
        },
        "smollm2_head": {
            "parameters": sum(head.values()),
            "kept_rows": head_kept,
            "head_rows_parameters": head_kept * hidden,
            "memory_parameters": sum(head.values()) + head_kept * hidden,
        },
        "file_bytes": {  # every weights file as git keeps it, packed (docs/hosting.md: the Hub's 10 MB limit)
            "pycode_target_packed": packed.stat().st_size,
            "pycode_draft_packed": (ASSETS / "pycode-draft" / "model.safetensors.xz").stat().st_size,
            "pycode_draft_plain_packed": (ASSETS / "pycode-draft-plain" / "model.safetensors.xz").stat().st_size,
            "smollm2_draft_packed": draft_packed.stat().st_size,
            "smollm2_draft_unpacked": unpacked_bytes(draft_packed),
            "smollm2_head_packed": head_packed.stat().st_size,
            "smollm2_head_unpacked": unpacked_bytes(head_packed),
            "smollm2_eagle3_packed": (ASSETS / "smollm2-135m-eagle3" / "model.safetensors.xz").stat().st_size,
        },
        "training_answers": {path.stem: answers(path) for path in files},
        "training_answers_bytes": sum(path.stat().st_size for path in files),
    }


def main() -> None:
    values = facts()
    print(json.dumps(values, indent=1))
    write_results("bundle_facts", values)


if __name__ == "__main__":
    main()
