"""What profiling costs: step time inside the profiler's active window against the same training
unprofiled (stacks off and on), and the time nanolm takes to analyse a window against its trace size.

    python bench/profile_overhead.py [--preset tiny] [--steps 12] [--big-active 40]

Targets (issue 3): overhead <= 10% with shapes and stacks off, <= 30% with stacks on; a 100 MB
trace analysed in under 10 s (reported as MB of trace analysed per second)."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from nanolm.config import make_config
from nanolm.profiling.measure.host import analyze_window
from nanolm.profiling.record.session import ProfileSession, Window
from nanolm.train import train


def step_times(overrides: list[str], steps: int, mode: str) -> list[float]:
    """Wall time of each measured step (ms) for mode "off", "profiled" or "stacks"."""
    window = Window(wait=1, warmup=1, active=steps - 2, repeat=1)
    cfg = make_config(overrides=[*overrides, f"steps={steps}", "eval_every=100000", "log_every=100000",
                                 "ckpt_every=100000"])
    session = ProfileSession(window, cuda=False, with_stack=(mode == "stacks")) if mode != "off" else None
    marks: list[float] = []

    def on_step(step: int) -> None:
        marks.append(time.perf_counter())
        if session is not None:
            session.step()

    with tempfile.TemporaryDirectory() as tmp:
        cfg.runs_dir = tmp
        if session is not None:
            session.start()
        try:
            train(cfg, progress=False, on_step=on_step)
        finally:
            if session is not None:
                session.stop()
    return [(b - a) * 1000 for a, b in zip(marks[2:-1], marks[3:])]  # the active steps, after warm-up


def analysis_speed(overrides: list[str], active: int) -> tuple[float, float, float]:
    """(trace MB, seconds to analyse the window's events, seconds torch takes to export the trace)."""
    cfg = make_config(overrides=[*overrides, f"steps={active + 2}", "eval_every=100000", "log_every=100000",
                                 "ckpt_every=100000"])
    timings = {}

    def ready(prof) -> None:
        events = list(prof.events())
        start = time.perf_counter()
        analyze_window(events)
        timings["analyse"] = time.perf_counter() - start
        path = os.path.join(tmp, "trace.json")
        start = time.perf_counter()
        prof.export_chrome_trace(path)
        timings["export"] = time.perf_counter() - start
        timings["mb"] = os.path.getsize(path) / 2**20

    with tempfile.TemporaryDirectory() as tmp:
        cfg.runs_dir = tmp
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=active),
                     on_trace_ready=ready) as prof:
            train(cfg, progress=False, on_step=lambda s: prof.step())
    return timings["mb"], timings["analyse"], timings["export"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--big-active", type=int, default=40, help="active steps for the analysis-speed window")
    args = parser.parse_args()
    overrides = [f"preset={args.preset}", "corpus_lines=5000"]
    results: dict[str, list[float]] = {"off": [], "profiled": [], "stacks": []}
    for _ in range(args.rounds):  # alternate, so that machine noise hits all three alike
        for mode in results:
            results[mode] += step_times(overrides, args.steps, mode)
    off = statistics.median(results["off"])
    print(f"preset {args.preset}, {torch.get_num_threads()} threads, {args.rounds} rounds x {args.steps - 3} measured steps")
    for mode, label in (("off", "unprofiled"), ("profiled", "profiled, stacks off"), ("stacks", "profiled, stacks on")):
        med = statistics.median(results[mode])
        print(f"  {label:22s} {med:8.2f} ms/step  overhead {med / off - 1:+.1%}")
    mb, analyse, export = analysis_speed(overrides, args.big_active)
    print(f"analysis: a window whose trace is {mb:.1f} MB analysed in {analyse:.2f} s ({mb / analyse:.0f} MB/s; "
          f"a 100 MB trace would take ~{100 / (mb / analyse):.1f} s); torch's own export took {export:.2f} s")


if __name__ == "__main__":
    main()
