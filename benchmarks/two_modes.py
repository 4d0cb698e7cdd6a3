"""Why one process's verify pass costs about 1.2 target steps and another's 1.6–1.9 (issue 51): several processes of
the same pair alive at once, each timing the same compiled step and verify pass in short slices, the slices
alternating between the processes so that every process sees the same machine state. A difference that lasts
across rounds belongs to the process (its threads' placement, its weights' addresses, its OpenMP runtime); one
that moves every process alike belongs to the machine.

    python benchmarks/two_modes.py --processes 2 --variants spin,spin-second-team,passive --rounds 12 --save two_modes

Each slice times, `--slice` times over: one target step (1 row), one verify pass of `--rows` rows straight after
it, and the same pass after `--rows` draft steps (as a speculative cycle runs it: the draft's weights and cache
between the target's). ν is each slice's median pass over its median step; a process's ν is the median of its
slices, and its spread the slices' range (max − min) ÷ 2. `--profile` also times, in every process, one profiled
slice (torch.profiler: each operator's own time per call). Variants start their processes with an environment or
thread count of their own (VARIANTS below), all interleaved in the same rounds.

Every slice also takes the machine's memory read rate before and after it (a sum over READ_MB), and the summary
sorts the slices by it: on a VM that moves between two states (reads at about 35 or 65 GB/s), each state's step, pass,
ν and τ per variant (docs/performance.md, "The machine's two states"):

    python benchmarks/two_modes.py --processes 2 --variants spin,glue-one-thread --rows 8 --rounds 30 --save machine_states_bundled
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import write_results  # noqa: E402

VARIANTS = {  # what each process group starts with: environment variables (None: unset), and torch's thread count
    "spin": ({"OMP_WAIT_POLICY": None}, None),  # libgomp's default (no policy set), as specviz runs
    "passive": (
        {"OMP_WAIT_POLICY": "PASSIVE"},
        None,
    ),  # idle threads sleep at once (specviz's server before serving/torch_threads.py)
    "active": ({"OMP_WAIT_POLICY": "ACTIVE"}, None),  # …or spin until the next parallel region
    "one-thread": ({}, 1),
    "huge-pages": ({"THP_MEM_ALLOC_ENABLE": "1"}, None),  # torch's large tensors on transparent huge pages
    # libgomp's default, with a second thread that ran one torch operation and stays alive, as a server's worker
    # threads do: libgomp then manages more threads than there are CPUs and cuts its spin-wait to 100 iterations
    "spin-second-team": ({"OMP_WAIT_POLICY": None, "TWO_MODES_SECOND_TEAM": "1"}, None),
    "passive-second-team": ({"OMP_WAIT_POLICY": "PASSIVE", "TWO_MODES_SECOND_TEAM": "1"}, None),
    # Inductor's own loops (the norms, the attention, the activations between the products) in the decoding package
    # on one thread for every model, or on torch's threads for every model (engine/compiled.decode_glue_threads: by
    # default, one thread for a model of hidden size up to 768); the products keep torch's threads either way
    "glue-one-thread": ({"SPECVIZ_GLUE_THREADS": "1"}, None),
    "glue-all-threads": ({"SPECVIZ_GLUE_THREADS": "all"}, None),
}
READ_MB = 256  # the buffer a slice's memory read rate is timed on: larger than this machine's cache (32 MiB)


def start_second_team() -> None:
    """A live thread that has run one parallel region: its own OpenMP team, for as long as the process lives."""
    import threading

    import torch

    ready = threading.Event()

    def other() -> None:
        torch.ones(1 << 20).add_(1)  # large enough for a parallel region
        ready.set()
        threading.Event().wait()

    threading.Thread(target=other, name="second-team", daemon=True).start()
    ready.wait()


def facts() -> dict:
    """Where this process's threads ran last, its OpenMP settings, its weights' memory (huge pages, alignment)."""
    import torch

    threads = []
    for task in sorted(os.listdir("/proc/self/task")):
        fields = Path(f"/proc/self/task/{task}/stat").read_text().rsplit(")", 1)[1].split()
        threads.append({"cpu": int(fields[36]), "cpu_s": (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")})
    huge = 0
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                huge = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {
        "pid": os.getpid(),
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "busy_threads": [t for t in threads if t["cpu_s"] >= 0.05],
        "anon_huge_page_bytes": huge,
    }


def weight_addresses(model) -> dict:
    """The offsets of the linear weights' data in their pages (4 KiB) and in 2 MiB: what alignment each got."""
    import torch

    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return {
        "count": len(weights),
        "page_offsets": sorted({w.data_ptr() % 4096 for w in weights}),
        "huge_page_offsets_kib": sorted({w.data_ptr() % 2**21 // 1024 for w in weights})[:8],
    }


def worker(conn, pair_name: str, threads: int | None, context: int, rows: int, seed: int) -> None:
    """Load the pair as `bench` does, then time slices on command until told to stop."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    if os.environ.get("TWO_MODES_SECOND_TEAM"):
        start_second_team()
    from specviz.cli.options import compile_before_timing
    from specviz.engine.compiled import decoder_for, pair_engine
    from specviz.models.catalogue import load_catalogue
    from specviz.models.loading import load_pair

    catalogue = load_catalogue()
    pair = load_pair(pair_name, catalogue.get(pair_name), catalogue.offline_pairs(), progress=lambda _: None)
    compile_before_timing(pair)
    vocab = pair.shared_vocab_size
    ids = torch.randint(0, vocab, (context + rows,), generator=torch.Generator().manual_seed(seed)).tolist()
    memory = torch.ones(READ_MB * 2**20 // 4)

    def read_gb_s() -> float:  # the machine's memory read rate now: the best of two sums over `memory`
        best = float("inf")
        for _ in range(2):
            started = time.perf_counter()
            memory.sum()
            best = min(best, time.perf_counter() - started)
        return memory.numel() * 4 / best / 1e9

    with torch.inference_mode():
        target, draft = decoder_for(pair.target.model, vocab), decoder_for(pair.draft.model, vocab)
        target.feed(ids[:context])
        draft.feed(ids[:context])
        pending = ids[context:]

        def timed(forward) -> float:
            started = time.perf_counter()
            forward()
            return time.perf_counter() - started

        def one_slice(count: int) -> dict:
            step, passes, after_draft, draft_step = [], [], [], []
            read_before = read_gb_s()
            for _ in range(count):
                step.append(timed(lambda: target.feed(pending[:1], keep_last=1)))
                target.truncate(context)
                passes.append(timed(lambda: target.feed(pending, keep_last=rows)))
                target.truncate(context)
                drafted = 0.0
                for token in pending:
                    drafted += timed(lambda token=token: draft.feed([token], keep_last=1))
                draft_step.append(drafted / rows)
                draft.truncate(context)
                after_draft.append(timed(lambda: target.feed(pending, keep_last=rows)))
                target.truncate(context)
            return {
                "step": step,
                "pass": passes,
                "pass_after_draft": after_draft,
                "draft_step": draft_step,
                "read_gb_s": [read_before, read_gb_s()],  # the machine's read rate before and after the slice
            }

        one_slice(3)  # warm
        conn.send({"facts": facts(), "weights": weight_addresses(pair.target.model), "engine": pair_engine(pair)})
        while True:
            command, count = conn.recv()
            if command == "stop":
                break
            if command == "slice":
                conn.send(one_slice(count))
            elif command == "profile":
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CPU]) as profiled:
                    one_slice(count)
                table = sorted(profiled.key_averages(), key=lambda e: -e.self_cpu_time_total)[:10]
                conn.send([(e.key, e.count, e.self_cpu_time_total / max(1, e.count)) for e in table])
            elif command == "facts":
                conn.send(facts())


def median_ratio(numerators: list[float], denominators: list[float]) -> float:
    return statistics.median(numerators) / statistics.median(denominators)


def machine_states(processes: list[dict], rows: int) -> list[dict]:
    """Every process's slices grouped by the machine's memory read rate around them: where the rates fall in two
    clusters (the fastest slice's rate over 1.4 × the slowest's), a slice is "low" or "high" by the geometric midpoint,
    and one whose rate before and after lie on either side of it (the machine changed during the slice) is left out;
    per variant and state, the medians of each slice's step, pass, draft step, ν and τ."""
    rates = sorted(rate for each in processes for s in each["slices"] for rate in s["read_gb_s"])
    low, high = rates[len(rates) // 20], rates[-1 - len(rates) // 20]
    split = (low * high) ** 0.5 if high > 1.4 * low else None
    grouped: dict[tuple[str, str], list[dict]] = {}
    for each in processes:
        for s in each["slices"]:
            sides = {"low" if split and rate < split else "high" if split else "one" for rate in s["read_gb_s"]}
            if len(sides) == 1:
                grouped.setdefault((each["variant"], sides.pop()), []).append(s)
    states = []
    for (variant, state), slices in sorted(grouped.items()):

        def median(key: str, slices: list[dict] = slices) -> float:
            return statistics.median(statistics.median(s[key]) for s in slices)

        states.append(
            {
                "variant": variant,
                "state": state,
                "slices": len(slices),
                "read_gb_s": statistics.median(statistics.mean(s["read_gb_s"]) for s in slices),
                "step_ms": 1000 * median("step"),
                "pass_ms": 1000 * median("pass"),
                "draft_step_ms": 1000 * median("draft_step"),
                "nu": statistics.median(median_ratio(s["pass"], s["step"]) for s in slices),
                "tau": statistics.median(median_ratio(s["draft_step"], s["step"]) for s in slices),
            }
        )
        row = states[-1]
        print(
            f"{variant:>16}, memory read {row['read_gb_s']:.0f} GB/s ({row['slices']} slices): step {row['step_ms']:.2f} ms, "
            f"pass of {rows} rows {row['pass_ms']:.2f} ms, ν({rows}) {row['nu']:.2f}, draft step {row['draft_step_ms']:.3f} ms, "
            f"τ {row['tau']:.3f}"
        )
    return states


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="pycode-distilled")
    parser.add_argument("--processes", type=int, default=3, help="processes per variant")
    parser.add_argument("--variants", default="spin,spin-second-team,passive", help=f"a comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--slice", type=int, default=8, help="steps and passes per slice")
    parser.add_argument("--rows", type=int, default=5)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--save", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [name for name in variants if name not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}: choose from {', '.join(VARIANTS)}")

    spawn = multiprocessing.get_context("spawn")
    processes = []  # (variant, connection, process, what it said when ready)
    for variant in variants:
        environment, threads = VARIANTS[variant]
        for number in range(args.processes):
            saved = {key: os.environ.get(key) for key in environment}
            for key, value in environment.items():
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
            ours, theirs = spawn.Pipe()
            child = spawn.Process(target=worker, args=(theirs, args.pair, threads, args.context, args.rows, number))
            child.start()
            for key, value in saved.items():
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
            processes.append({"variant": variant, "conn": ours, "process": child, "ready": ours.recv(), "slices": []})
            print(f"{variant} #{number}: ready ({processes[-1]['ready']['engine']})", flush=True)
    try:
        for round_number in range(args.rounds):
            order = processes[round_number % len(processes) :] + processes[: round_number % len(processes)]
            for each in order:
                each["conn"].send(("slice", args.slice))
                each["slices"].append(each["conn"].recv())
        profiles = []
        if args.profile:
            for each in processes:
                each["conn"].send(("profile", args.slice))
                profiles.append(each["conn"].recv())
        for each in processes:
            each["conn"].send(("facts", 0))
            each["facts_after"] = each["conn"].recv()
    finally:
        for each in processes:
            try:
                each["conn"].send(("stop", 0))
            except (BrokenPipeError, OSError):
                pass
            each["process"].join(10)

    rows = []
    for index, each in enumerate(processes):
        slices = each["slices"]
        nu = [median_ratio(s["pass"], s["step"]) for s in slices]
        nu_after = [median_ratio(s["pass_after_draft"], s["step"]) for s in slices]
        row = {
            "variant": each["variant"],
            "step_ms": 1000 * statistics.median(statistics.median(s["step"]) for s in slices),
            "pass_ms": 1000 * statistics.median(statistics.median(s["pass"]) for s in slices),
            "draft_step_ms": 1000 * statistics.median(statistics.median(s["draft_step"]) for s in slices),
            "nu": statistics.median(nu),
            "nu_spread": (max(nu) - min(nu)) / 2,
            "nu_after_draft": statistics.median(nu_after),
            "nu_by_round": nu,
            "ready": each["ready"],
            "facts_after": each["facts_after"],
            "profile": profiles[index] if profiles else None,
        }
        rows.append(row)
        cpus = [t["cpu"] for t in each["facts_after"]["busy_threads"]]
        print(
            f"{row['variant']:>10} pid {each['facts_after']['pid']}: step {row['step_ms']:.2f} ms, pass of {args.rows} rows "
            f"{row['pass_ms']:.2f} ms, ν({args.rows}) {row['nu']:.2f} (slices {min(nu):.2f}–{max(nu):.2f}), after draft steps "
            f"{row['nu_after_draft']:.2f}, draft step {row['draft_step_ms']:.2f} ms; busy threads on cpus {cpus}"
        )
        if row["profile"]:
            for name, count, self_us in row["profile"][:6]:
                print(f"      {name:<44} {count:>5} calls {self_us:9.1f} µs each")
    print("by the machine's memory read rate around each slice:")
    states = machine_states(processes, args.rows)
    values = {
        "pair": args.pair,
        "rows": args.rows,
        "context": args.context,
        "slice": args.slice,
        "processes": rows,
        "machine_states": states,
    }
    if args.save:
        print(f"wrote {write_results(args.save, values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
