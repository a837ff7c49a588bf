"""Wall time of `nanolm seeds` with 4 seeds at --jobs 1 against --jobs 2 on this machine.

Each job gets cores/jobs threads (so two jobs on two cores do not fight over them). Three timings:
--jobs 1 (one process using every core through intra-op threads: what a user gets without --jobs),
--jobs 2 (one thread each), and --jobs 1 held to one thread, which isolates the process-level
parallelism from the threads' own speed-up.

    python bench/seeds_scaling.py [--n 4] [--steps 150]
"""

from __future__ import annotations

import argparse
import os
import tempfile

from nanolm.repro.seeds import run_seeds


def time_seeds(n: int, steps: int, jobs: int, threads: int | None) -> float:
    """Seconds for n seeds of the tiny preset; threads=None leaves the executor's cores/jobs rule."""
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(threads)  # the local executor passes it on to each job
    try:
        with tempfile.TemporaryDirectory() as tmp:
            overrides = [f"steps={steps}", f"eval_every={steps}", f"ckpt_every={steps}", "corpus_lines=5000",
                         f"runs_dir={tmp}"]
            return run_seeds(overrides, n, f"jobs{jobs}", jobs=jobs).seconds
    finally:
        os.environ.pop("OMP_NUM_THREADS", None)  # main() refuses to start with it set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    if "OMP_NUM_THREADS" in os.environ:
        parser.error("unset OMP_NUM_THREADS: the bench sets each job's threads itself")
    runs = {"jobs1": (1, None), "jobs2": (2, None), "jobs1_one_thread": (1, 1)}
    times = {}
    for key, (jobs, threads) in runs.items():
        times[key] = time_seeds(args.n, args.steps, jobs, threads)
        each = f"{threads if threads else max(1, cores // jobs)} thread(s) each"
        print(f"--jobs {jobs}, {each}: {args.n} seeds of the tiny preset x {args.steps} steps in {times[key]:.1f} s")
    print(f"speed-up of --jobs 2 over --jobs 1 on {cores} cores: {times['jobs1'] / times['jobs2']:.2f}x")
    print(f"process-level speed-up (both at one thread per job): {times['jobs1_one_thread'] / times['jobs2']:.2f}x")


if __name__ == "__main__":
    main()
