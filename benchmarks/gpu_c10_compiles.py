"""What C10's timed workers pay for inside the clock on CUDA: many seeds in one process, each
run's speed beside what it compiled, so a slow run is told from noise.

    python3 benchmarks/gpu_c10_compiles.py --out DIR [--models nemotron,qwen3] [--runs 12]

Per model, C10's subject and plan (gates/procedures.c10_subject, gates/test_c10_performance.plan);
per contract on this tree, C10's own driver (gates/timed_worker.drive): an untimed warm-up
process of WARM_UP_SEEDS seeds, as the gate starts with, then one process of `runs` fresh
seeds. Each run records the decode graphs captured, the Triton kernels compiled, the
specializations Triton made or loaded (its jit_cache_hook) and the driver allocations inside
the clock. A specialization of a kernel the process had already specialised names the
argument keys that differ from the nearest earlier one: the integer that needs
`do_not_specialize` or a bucket. Raw results are written before the table.
"""
import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from gates.baseline import ROOT  # noqa: E402
from gates.inputs import fresh_seed  # noqa: E402
from gates.procedures import c10_subject  # noqa: E402
from gates.test_c10_performance import WARM_UP_SEEDS, plan, subject_size  # noqa: E402
from gates.timed_worker import drive  # noqa: E402

CONTRACTS = ("fast", "consistent")
SPECIALIZATION = re.compile(r"^(?P<kernel>[^\[]+)\[(?P<options>[^\]]*)\]\((?P<arguments>.*)\)$")


def arguments(description: str) -> tuple:
    """(kernel, {argument: key}) of one specialization as Triton's hook describes it."""
    match = SPECIALIZATION.match(description)
    if match is None:
        return description, {}
    pairs = (a.split(": ", 1) for a in match["arguments"].split(", ") if ": " in a)
    return match["kernel"], {name: key for name, key in pairs}


def what_differs(description: str, earlier: list) -> str:
    """The argument keys in which `description` differs from the nearest earlier
    specialization of the same kernel ('new kernel' when there is none)."""
    kernel, keys = arguments(description)
    before = [keys_seen for name, keys_seen in map(arguments, earlier) if name == kernel]
    if not before:
        return f"{kernel}: new kernel"
    nearest = min(before, key=lambda seen: sum(seen.get(k) != v for k, v in keys.items()))
    changed = ", ".join(f"{k} {nearest.get(k)} -> {v}" for k, v in keys.items() if nearest.get(k) != v)
    return f"{kernel}: {changed or 'same keys, other options'}"


def progress(line: str) -> None:
    print(time.strftime("%H:%M:%S"), line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="nemotron,qwen3")
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke test on the cut")
    args = parser.parse_args()
    record = {**provenance(), "args": vars(args), "models": {}}
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="c10-compiles-") as folder:
            progress(f"{model}: seeding the subject's weights")
            subject = c10_subject({"model": model, "size": subject_size(model, args.device), "checkpoint": None,
                                   "folder": folder})
            asked = plan(args.device, fresh_seed(), subject)
            entry = record["models"][model] = {"plan": asked, "contracts": {}}
            tokens = asked["workload"]["num_sequences"] * asked["workload"]["new_tokens"]
            for contract in CONTRACTS:
                side = dict(asked, weights_file=subject["weights_file"], contract=contract)
                progress(f"{model}, {contract}: warm-up process")
                warm = drive(ROOT, side, [fresh_seed() for _ in range(WARM_UP_SEEDS)])
                progress(f"{model}, {contract}: {args.runs} runs in one process")
                timed = drive(ROOT, side, [fresh_seed() for _ in range(args.runs)])
                entry["contracts"][contract] = {"tokens": tokens, "warm_up": warm, "timed": timed}
        write_raw(record, args.out, f"gpu_c10_compiles-{model}")
        summarize(model, entry)
    return 0


def summarize(model: str, entry: dict) -> None:
    for contract, cell in entry["contracts"].items():
        timed = cell["timed"]
        print(f"\n== {model}, {contract}: warm-up process {cell['warm_up']['process_s']:.0f} s; "
              f"this process's phases {timed['phases']}")
        seen = [s for s in timed["specializations"]]
        first_timed = len(seen) - sum(len(r["compiled"]["specializations"]) for r in timed["worker_reported"])
        earlier = seen[:first_timed]
        for judged, reported in zip(timed["runs"], timed["worker_reported"]):
            compiled = reported["compiled"]
            print(f"{cell['tokens'] / judged['wall_s']:9,.0f} tok/s  graphs {compiled['graphs']}  "
                  f"triton {len(compiled['triton_kernels'])}  mallocs {compiled['cuda_mallocs']}  "
                  f"specializations {len(compiled['specializations'])}")
            for description in compiled["specializations"]:
                print("      ", what_differs(description, earlier))
                earlier.append(description)


if __name__ == "__main__":
    sys.exit(main())
