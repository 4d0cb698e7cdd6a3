"""Load models one after the other in this fresh interpreter, as a deployment starts, and write the seconds as JSON.

Run by specviz.deployment.load_timing.cold_load as `python -m specviz.deployment.cold_load OUT DEVICE DTYPE REFERENCE...`
(the seconds go to the file OUT, so nothing a library prints on the way can be mistaken for them):
each model through the app's own `load_model` (packed weights unpacked, a borrowed embedding borrowed, the move to the
device), and the imports before them (torch, transformers). The first reference is the target; a later draft that
borrows its embedding borrows it from there, as the app's `load_pair` does.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported inside main, where its import is timed
    import torch


def load_in_order(references: list[str], device: torch.device, dtype: torch.dtype) -> list[float]:
    """Each model's load seconds as the app measures them, loaded in order and kept in memory."""
    from specviz.models.loading import load_model  # ours: not counted with the imports

    loaded = []
    for reference in references:
        loaded.append(load_model(reference, device, dtype, target=loaded[0].model if loaded else None))
    return [model.load_s for model in loaded]


def main() -> None:
    started = time.perf_counter()
    import torch
    from transformers import AutoModelForCausalLM  # noqa: F401  (timed with torch: transformers' model code)
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    imported = time.perf_counter()
    out, device, dtype, references = Path(sys.argv[1]), torch.device(sys.argv[2]), getattr(torch, sys.argv[3]), sys.argv[4:]
    out.write_text(json.dumps({"load_s": load_in_order(references, device, dtype), "import_s": imported - started}))


if __name__ == "__main__":
    main()
