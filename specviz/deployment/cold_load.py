"""Load models one after the other in this fresh interpreter, as a deployment starts, and print the seconds as JSON.

Run by specviz.deployment.load_timing.cold_load as `python -m specviz.deployment.cold_load DEVICE DTYPE REFERENCE...`:
each model's from_pretrained and move to the device, and the imports before them (torch, transformers).
"""

import json
import sys
import time


def main() -> None:
    started = time.perf_counter()
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    imported = time.perf_counter()
    from specviz.engine.kv_cache import synchronize  # ours: not counted with the imports

    device, dtype, references = torch.device(sys.argv[1]), getattr(torch, sys.argv[2]), sys.argv[3:]
    seconds, models = [], []
    for reference in references:
        begun = time.perf_counter()
        models.append(AutoModelForCausalLM.from_pretrained(reference, dtype=dtype).to(device).eval())
        synchronize(device)
        seconds.append(time.perf_counter() - begun)
    print(json.dumps({"load_s": seconds, "import_s": imported - started}))


if __name__ == "__main__":
    main()
