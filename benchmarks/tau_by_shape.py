"""What a draft forward costs in a tree and in a chain, in one process: γ auto's calibration tree and a chain, each run
as γ auto's calibration runs them (deployment/gamma_auto.calibrate: the pair's own prompts, the target alone beside
each run for the step), alternating, `--rounds` times. γ auto prices each kind of shape at the τ timed on its own kind
because these differ.

    python benchmarks/tau_by_shape.py --pair pycode-distilled --chain 7 --rounds 2 --save tau_by_shape_bundled
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("SPECVIZ_COMPILE", "1")  # as the CLI and the page run

import torch  # noqa: E402

from benchmarks.results import write_results  # noqa: E402
from specviz.cli.options import compile_before_timing  # noqa: E402
from specviz.deployment import gamma_auto  # noqa: E402
from specviz.engine import SamplingSettings  # noqa: E402
from specviz.engine.tree_shape import TreeShape  # noqa: E402
from specviz.models.loading import load_pair  # noqa: E402
from specviz.serving.pair_cache import catalogue  # noqa: E402


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="pycode-distilled")
    parser.add_argument("--chain", type=int, default=7, help="the chain's γ")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()
    pair = load_pair(args.pair, catalogue().get(args.pair), catalogue().offline_pairs())
    compile_before_timing(pair)
    prompts = gamma_auto.calibration_prompts(pair)
    settings = gamma_auto.calibration_settings(SamplingSettings())
    shapes = {"tree": gamma_auto.CALIBRATION_TREE, "chain": TreeShape.chain(args.chain)}
    taus: dict[str, list[float]] = {kind: [] for kind in shapes}
    for round_index in range(args.rounds):
        for kind in list(shapes)[:: 1 if round_index % 2 == 0 else -1]:
            timed = gamma_auto.calibrate(pair, prompts, settings, "model", shape=shapes[kind])
            taus[kind].append(timed.draft_s_per_forward / timed.step_s)
            print(
                f"{kind} {shapes[kind].text}: a draft forward {1000 * timed.draft_s_per_forward:.3f} ms, τ {taus[kind][-1]:.3f}"
            )
    if args.save:
        shape_text = {kind: shape.text for kind, shape in shapes.items()}
        write_results(args.save, {"pair": args.pair, "shapes": shape_text, "tau": taus, "rounds": args.rounds})


if __name__ == "__main__":
    main()
