"""Judge candidate code presets on a trained pair, to choose the built-in ones.

    python benchmarks/preset_candidates.py [--folder assets] [--json out.json]

For each candidate (the current presets, then alternates), greedy, 96 new tokens: the target's distinct-4
and parse check (as `specviz.training.evaluate` measures them), and greedy α at γ = 4 of the distilled and
the plain draft (as the engine counts it). A preset should show the target writing code a class can read
(no loop, parses) and the alignment lesson (distilled α well above plain); the numbers are printed, the
choice is made by a person and recorded in `specviz/prompts/sets.py`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from specviz.engine import DecodeSettings
from specviz.models.catalogue import Pair
from specviz.models.loading import LoadedPair, load_pair
from specviz.prompts.sets import PROMPTS
from specviz.run.runner import run
from specviz.training.evaluate import distinct_n, greedy_completion, parses_as_python

ALTERNATES = [  # earlier presets and other candidates, judged beside the current presets
    "try:\n    import json\nexcept ImportError:\n    json = None\n\n\ndef dump(obj):\n    return",
    "import os\nimport sys\n\n\ndef main():\n    args = sys",
    "    for key, value in sorted(mapping.items()):\n        if key",
    "def parse_args(argv=None):\n    parser = argparse.ArgumentParser(",
    'class Timer:\n    """Context manager that measures elapsed time."""\n\n    def __enter__(self):\n        self',
    "def load_json(path):\n    with open(path, encoding='utf-8') as f:\n        return",
    "class Counter:\n    def __init__(self):\n        self.counts = {}\n\n    def add(self, key):\n        self",
    'def flatten(items):\n    """Yield the items of nested lists."""\n    for item in items:\n        if isinstance(item',
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n    def __repr__(self):\n        return",
    "def binary_search(items, target):\n    low, high = 0, len(items) - 1\n    while low <= high:\n        mid",
    "class Node:\n    def __init__(self, value, next=None):\n        self.value = value\n        self",
    "def read_lines(path):\n    lines = []\n    with open(path) as f:\n        for line in f:\n            line",
    "def __eq__(self, other):\n    if not isinstance(other, self.__class__):\n        return",
    "    def close(self):\n        if self._file is not None:\n            self",
]


def folder_pair(folder: Path, draft: str) -> LoadedPair:
    """The bundled pair's target with one of its drafts, loaded from folder as the app loads a pair."""
    pair = Pair(target=str((folder / "pycode-target").resolve()), draft=str((folder / draft).resolve()), description=draft)
    return load_pair(draft, pair, offline_pairs=[])


def greedy_alpha(pair: LoadedPair, prompt: str) -> float:
    """α (the tally's maximum-likelihood estimate) of one greedy run at γ = 4, 96 new tokens."""
    return list(run(pair, prompt, DecodeSettings(max_new_tokens=96, gamma=4)))[-1].tally.alpha


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("assets"))
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(2)
    distilled, plain = folder_pair(args.folder, "pycode-draft"), folder_pair(args.folder, "pycode-draft-plain")
    target, tokenizer = distilled.target.model, distilled.tokenizer
    rows = []
    for index, prompt in enumerate(PROMPTS["code"] + ALTERNATES):
        new_ids, ended = greedy_completion(target, tokenizer, prompt)
        completion = tokenizer.decode(new_ids)
        row = {
            "index": index,
            "preset": index < len(PROMPTS["code"]),
            "distinct_4": round(distinct_n(new_ids), 3),
            "parses": parses_as_python(prompt + completion, complete=ended),
            "alpha_distilled": round(greedy_alpha(distilled, prompt), 3),
            "alpha_plain": round(greedy_alpha(plain, prompt), 3),
            "prompt": prompt,
            "completion": completion,
        }
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("prompt", "completion")}))
        print(prompt + "⟦" + completion + "⟧\n", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
