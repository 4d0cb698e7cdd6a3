"""What a speedup goal asks of the verify pass, from a grid's own measured α and τ (Leviathan et al.'s E ÷ (γτ + ν)).

    python benchmarks/speedup_ceiling.py --grid auto_vs_grid_coder_avx2only --goal 1.5 --save speedup_ceiling_avx2only

For every chain the grid measured (benchmarks/auto_vs_grid.py's rows: α, τ and ν as that chain's own cycles met them,
while decoding), prints and keeps:
  - the ceiling: the speedup theory gives at that α and τ if the verify pass cost no more than one step (ν = 1);
  - the ν the goal needs: the largest pass cost, in target steps, at which E ÷ (γτ + ν) still reaches `--goal`;
  - the ν the run measured, and its speedup while decoding.
A goal that needs ν below 1 at every γ is out of reach of any kernel at that α and τ; one that needs ν close to 1 asks
for a (γ+1)-row pass at the price of one step, i.e. a step with no arithmetic to spare. Reads results only: no model runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import FOLDER, write_results  # noqa: E402
from specviz.analysis.theory import expected_speedup, verify_cost_for_speedup  # noqa: E402


def chain_rows(grid: dict, goal: float) -> list[dict]:
    """Each measured chain: γ, its α, τ and ν while it ran, what it measured, its ceiling and the ν the goal needs."""
    return [
        {
            "gamma": row["gamma"],
            "alpha": row["alpha"],
            "tau": row["tau"],
            "measured_verify_cost": row["verify_cost"],
            "measured_decode_speedup": row["decode_speedup"],
            "ceiling_at_free_verify": expected_speedup(row["alpha"], row["gamma"], row["tau"]),  # Theorem 3.8: ν = 1
            "verify_cost_needed": verify_cost_for_speedup(row["alpha"], row["gamma"], row["tau"], goal),
        }
        for row in grid["grid"]
        if row["method"] == "speculative"
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", required=True, help="an auto_vs_grid results file in benchmarks/results (its NAME)")
    parser.add_argument("--goal", type=float, default=1.5, help="the speedup over the target alone asked for")
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()

    grid = json.loads((FOLDER / f"{args.grid}.json").read_text())["results"]
    rows = chain_rows(grid, args.goal)
    print(f"{grid['pair']}, chains measured in benchmarks/results/{args.grid}.json; goal {args.goal:.2f}×")
    print("   γ     α     τ   ceiling at ν=1   ν needed   ν measured   measured")
    for row in rows:
        print(
            f"{row['gamma']:>4}  {row['alpha']:.2f}  {row['tau']:.2f}   {row['ceiling_at_free_verify']:>10.2f}×"
            f"   {row['verify_cost_needed']:>8.2f}   {row['measured_verify_cost']:>10.2f}   "
            f"{row['measured_decode_speedup']:.2f}×"
        )
    best = max(rows, key=lambda row: row["ceiling_at_free_verify"])
    print(
        f"the highest ceiling: {best['ceiling_at_free_verify']:.2f}× at γ {best['gamma']}, "
        f"where the goal needs a {best['gamma'] + 1}-row pass to cost at most {best['verify_cost_needed']:.2f} steps "
        f"(measured: {best['measured_verify_cost']:.2f})"
    )
    if args.save:
        write_results(
            args.save,
            {"grid": args.grid, "pair": grid["pair"], "goal": args.goal, "chains": rows, "highest_ceiling": best},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
