"""Do two checkouts' bundled models compute the same, bit for bit? For a change to how assets/ stores the models.

    python benchmarks/bundle_identity.py save /tmp/before.pt     # in the checkout before the change
    python benchmarks/bundle_identity.py save /tmp/after.pt      # in the checkout after it
    python benchmarks/bundle_identity.py compare /tmp/before.pt /tmp/after.pt

`save` loads every pair whose models ship in assets/ as the app loads it (the real pair in float32 and in its own
form, int4 target and int8 head), feeds both models the same random token ids and keeps their logits, a sha256 of
every weight, and the feature head's parameters. `compare` says, per entry, identical or different (exit status 1).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse
import hashlib

import torch
from transformers.utils import logging

from specviz.models.catalogue import load_catalogue
from specviz.models.loading import load_pair

LOADS = [
    ("pycode-distilled", None),
    ("pycode-plain", None),
    ("smollm2-135m-distilled", "float32"),
    ("smollm2-135m-distilled", None),
]


def weights_sha256(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def fingerprints() -> dict:
    found = {}
    catalogue = load_catalogue()
    for name, dtype in LOADS:
        pair = load_pair(name, catalogue.get(name), catalogue.offline_pairs(), dtype=dtype)
        ids = torch.randint(0, pair.shared_vocab_size, (2, 48), generator=torch.Generator().manual_seed(1))
        key = f"{name}/{dtype or 'its own dtype'}"
        with torch.no_grad():
            for role, loaded in (("target", pair.target), ("draft", pair.draft)):
                found[f"{key}/{role} logits"] = loaded.model(ids).logits
                found[f"{key}/{role} weights sha256"] = weights_sha256(loaded.model)
        if pair.feature_head is not None:
            found[f"{key}/feature head weights sha256"] = weights_sha256(pair.feature_head.head)
        print(f"{key}: target form {pair.target.form or 'plain'}", flush=True)
    return found


def compare(before: dict, after: dict) -> bool:
    same_everywhere = before.keys() == after.keys()
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key), after.get(key)
        same = a is not None and b is not None and (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b)
        same_everywhere &= same
        shape = f" {tuple(a.shape)}" if isinstance(a, torch.Tensor) else ""
        print(f"{'identical' if same else 'DIFFERENT'}  {key}{shape}")
    return same_everywhere


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("save").add_argument("out", type=Path)
    comparing = verbs.add_parser("compare")
    comparing.add_argument("before", type=Path)
    comparing.add_argument("after", type=Path)
    args = parser.parse_args()
    logging.set_verbosity_error()
    if args.verb == "save":
        torch.save(fingerprints(), args.out)
    else:
        sys.exit(0 if compare(torch.load(args.before), torch.load(args.after)) else 1)


if __name__ == "__main__":
    main()
