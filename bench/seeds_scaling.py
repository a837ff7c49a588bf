"""Wall time of `nanolm seeds` with 4 seeds at --jobs 1 against --jobs 2 on this machine.

Each job gets cores/jobs threads (so two jobs on two cores do not fight over them); the speed-up
is the ratio of the two wall times.

    python bench/seeds_scaling.py [--n 4] [--steps 150]
"""

from __future__ import annotations

import argparse
import os
import tempfile

from nanolm.repro.seeds import run_seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    times = {}
    for jobs in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            overrides = [f"steps={args.steps}", f"eval_every={args.steps}", f"ckpt_every={args.steps}",
                         "corpus_lines=5000", f"runs_dir={tmp}"]
            times[jobs] = run_seeds(overrides, args.n, f"jobs{jobs}", jobs=jobs).seconds
            print(f"--jobs {jobs}: {args.n} seeds of the tiny preset x {args.steps} steps in {times[jobs]:.1f} s")
    print(f"speed-up of --jobs 2 over --jobs 1 on {os.cpu_count()} cores: {times[1] / times[2]:.2f}x")


if __name__ == "__main__":
    main()
