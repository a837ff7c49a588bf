"""How long `nanolm report RUN` takes, and how large the page is, for a run with every kind of artifact.

Trains a small run (the interpretability tests' model, fewer steps), runs every tool on it with quick
settings and saves what each writes where the report reads it (lens, tuned lens, probe with intervention,
SAE + eval + sweep, steering sweep, sycophancy, feedback pairs / labels / reward model / best-of-n, two
profiles with their traces, and a seed group of two more runs), then times `nanolm report RUN` as a
fresh process (what a user waits for: interpreter, torch and matplotlib imports included) and the
report alone in a warm process. The issue's limits: under 5 s and under 5 MB. The side-by-side number
is the page against the artifacts it summarises (figures are downsampled, traces linked, not embedded).

    python bench/report_size.py [--keep DIR] [--repeat 3]     (--keep DIR again: times the run made there before)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIMIT_S, LIMIT_BYTES = 5.0, 5_000_000
MODEL = ["n_layer=2", "n_head=4", "d_model=64", "block_size=32", "batch_size=16", "corpus_lines=8000", "eval_batches=2",
         "warmup_steps=20", "lr=3e-3", "eval_every=50", "ckpt_every=2000"]
TINY_PROFILE = ["n_layer=2", "n_head=2", "d_model=32", "block_size=16", "batch_size=8", "corpus_lines=2000"]


def invoke(*args: str) -> str:
    from click.testing import CliRunner

    from nanolm.cli import app

    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(f"nanolm {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def save(run: Path, rel: str, text: str) -> None:
    path = run / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def make_run(root: Path, steps: int) -> Path:
    """A run of seed group `bench` (with a second seed beside it) and every tool's artifact in it."""
    runs = root / "runs"
    sets = [a for kv in [*MODEL, f"steps={steps}", f"runs_dir={runs}"] for a in ("--set", kv)]
    invoke("seeds", *sets, "--n", "2", "--name", "bench", "--executor", "debug")
    run = sorted(runs.glob("*-bench-seed*"))[0]
    r = str(run)
    save(run, "lens/show.json", invoke("lens", r, "--prompt", "the cat sat on the", "--json"))
    invoke("lens", "train", r, "--steps", "20", "--batch", "8")
    save(run, "lens/eval.json", invoke("lens", "eval", r, "--batches", "2", "--json"))
    save(run, "probes/tense.json", invoke("probe", r, "--feature", "tense", "--n", "200", "--intervene", "--json"))
    save(run, "probes/sentiment.json", invoke("probe", r, "--feature", "sentiment", "--n", "200", "--json"))
    invoke("sae", "train", r, "--layer", "1", "--tokens", "8192", "--batch-size", "256")
    sae = next(p for p in (run / "sae").iterdir() if p.is_dir())
    save(sae, "eval.json", invoke("sae", "eval", str(sae), "--texts", "100", "--json"))
    save(run, "sae/sweep-L1-resid_post-relu.json", invoke("sae", "sweep", r, "--layer", "1", "--l1", "0.01,0.03,0.1",
                                                         "--seeds", "2", "--tokens", "4096", "--batch-size", "256",
                                                         "--eval-texts", "50", "--json"))
    save(run, "steering/sentiment.json", invoke("steer", "sweep", r, "--direction", "sentiment", "--n", "60",
                                                "--alphas", "0,0.5,1,2,4", "--seeds", "2", "--prompts", "8",
                                                "--max-new-tokens", "8", "--json"))
    invoke("sycophancy", r, "--n", "100")
    invoke("feedback", "pairs", r, "--n", "60")
    pairs = next((run / "feedback").glob("pairs-*.jsonl"))
    invoke("feedback", "label", str(pairs), "--judge", "rule")
    labels = next((run / "feedback").glob("*-labels.jsonl"))
    invoke("feedback", "reward-model", str(labels), "--base", r, "--steps", "60")
    rm = next((run / "reward_models").iterdir())
    invoke("feedback", "best-of-n", r, "--reward", str(rm), "--n", "1,2,4,8", "--prompts", "20", "--seeds", "0,1")
    sets = [a for kv in TINY_PROFILE for a in ("--set", kv)]
    (run / "profiles").mkdir()
    for name, batch in (("before", 8), ("after", 16)):
        invoke("profile", *sets, "--set", f"batch_size={batch}", "--repeat", "2", "--active", "2",
               "--json", str(run / "profiles" / f"{name}.json"), "--trace", str(run / "profiles" / f"{name}-trace.json"))
        time.sleep(1.1)  # distinct modification times: the newest is the last profile
    return run


def timed_process(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one run of cmd."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def folder_bytes(run: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in run.glob(pattern) if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", type=Path, help="Make the run here and keep it (default: a temporary folder).")
    ap.add_argument("--steps", type=int, default=300, help="Training steps of the run.")
    ap.add_argument("--repeat", type=int, default=3, help="Timed runs of the command.")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="nanolm-report-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        made = sorted((root / "runs").glob("*-bench-seed*"))
        if made and (made[0] / "profiles" / "after.json").is_file():  # --keep DIR of an earlier run: timed again
            run = made[0]
            print(f"the run with every artifact, made before: {run}")
        else:
            t0 = time.perf_counter()
            run = make_run(root, args.steps)
            print(f"made the run with every artifact in {time.perf_counter() - t0:.0f} s: {run}")
        page = run / "report.html"
        cmd = [sys.executable, "-m", "nanolm", "report", str(run), "-o", str(page)]
        cold = [timed_process(cmd) for _ in range(args.repeat)]
        from nanolm.report import build_report, write_html

        write_html(build_report(run), page)  # warm the imports
        warm = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            report = write_html(build_report(run), page)
            warm.append(time.perf_counter() - t)
        data = json.loads(invoke("report", str(run), "--json"))
        size = report.stat().st_size
        figures = folder_bytes(run, "**/*.png")
        artifacts = figures + sum(folder_bytes(run, p) for p in ("**/*.json", "**/*.jsonl")) - folder_bytes(run, "**/*trace.json")
        wall = statistics.median(w for w, _ in cold)
        cpu = statistics.median(c for _, c in cold)
        print(f"sections: {', '.join(s['key'] for s in data['sections'])}; unreadable: {len(data['problems'])}")
        print(f"figures on the page: {sum(len(s['figures']) for s in data['sections'])}, tables: "
              f"{sum(len(s['tables']) for s in data['sections'])}")
        print(f"nanolm report RUN, a fresh process (median of {args.repeat}): {wall:.2f} s wall, {cpu:.2f} s CPU "
              f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        print(f"  the report alone, imports done: {statistics.median(warm):.2f} s")
        print(f"  ratio to the 5 s limit: wall {wall / LIMIT_S:.2f}, CPU {cpu / LIMIT_S:.2f}")
        print(f"page: {size / 1e6:.2f} MB; ratio to the 5 MB limit {size / LIMIT_BYTES:.2f}")
        print(f"  the artifacts it summarises (figures {figures / 1e6:.2f} MB, JSON and JSONL without traces): "
              f"{artifacts / 1e6:.2f} MB; page / artifacts {size / artifacts:.2f}")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
