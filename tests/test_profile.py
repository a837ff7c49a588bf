"""nanolm profile: the window excludes warm-up, phases add up to the step, self time is never
counted twice, the planted bottlenecks of examples/ are named with evidence, and bad input is refused."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.profiler import record_function

from nanolm.profiling.compare import compare_reports, load_report
from nanolm.profiling.judge.host import DeviceFacts
from nanolm.profiling.record.session import ProfileSession, Window
from nanolm.profiling.record.training import profile_training

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TINY_PROFILE = ["n_layer=2", "n_head=2", "d_model=64", "block_size=32", "batch_size=8", "corpus_lines=2000"]
# What the profiler library prints by itself (kineto's C++ lines on fd 2, torch's warning): never the user's to see.
LIBRARY_NOISE = (
    "USDT:",
    "SyncActivityProfilerHandler",
    "profiler_start",
    "profiler_stop",
    "Profiler clears events",
    "acc_events",
)


def assert_no_library_noise(stderr: str) -> None:
    noisy = [line for line in stderr.splitlines() if any(n in line for n in LIBRARY_NOISE)]
    assert not noisy, noisy


def nanolm(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    # One intra-op thread: on a loaded 2-core machine, two OpenMP threads make even a 16x32 matmul wait
    # milliseconds for a descheduled peer, which would blur the planted bottlenecks into matmul time.
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "nanolm", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def nanolm_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("profile")
    return profile_training(TINY_PROFILE, Window(wait=1, warmup=1, active=2, repeat=3), trace=tmp / "trace.json"), tmp


def test_window_never_measures_the_first_steps():
    w = Window(wait=0, warmup=1, active=2, repeat=2)  # one recording: two windows back to back
    assert [w.is_active(s) for s in range(1, 7)] == [False, True, True, True, True, False]
    assert w.first_active_step == 2 and w.total_steps == 5 and w.max_steps == 10
    w = Window(wait=0, warmup=1, active=2, repeat=2, separate=True)  # a warm-up before each window
    assert [w.is_active(s) for s in range(1, 7)] == [False, True, True, False, True, True]
    assert w.first_active_step == 2 and w.total_steps == 6
    # A slow first step (allocator, compilation) stays out of the numbers.
    session = ProfileSession(Window(wait=1, warmup=1, active=2, repeat=2), cuda=False).start()
    try:
        for step in range(8):
            with record_function("forward"):
                time.sleep(0.5 if step == 0 else 0.01)
            session.step()
    finally:
        session.stop()
    assert len(session.windows) == 2 and all(w.steps == 2 for w in session.windows)
    assert max(w.step_ms for w in session.windows) < 200


def test_sync_watch_sees_user_syncs_but_not_torchs_own():
    from nanolm.profiling.record.syncs import SyncWatch

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), foreach=False)  # reads its CPU step counters with .item()
    watch = SyncWatch().install()
    try:
        watch.recording = True
        for _ in range(3):
            loss = model(torch.randn(2, 4)).sum()
            loss.backward()
            opt.step()
            loss.item()  # the user's own sync
    finally:
        watch.uninstall()
    sites = watch.sites(steps=3)
    assert [s.kind for s in sites] == [".item()"] and sites[0].per_step == 1.0 and "loss.item()" in sites[0].code


def test_phases_add_up_to_the_step_and_self_time_is_counted_once(nanolm_report):
    report, tmp = nanolm_report
    # 3 windows of 2 steps, or up to 6 when the first 3 disagree (a busy machine)
    assert report.first_measured_step == 3 and report.window["windows"] in range(3, 7)
    assert report.steps_measured == 2 * report.window["windows"]
    named = sum(p.ms.median for p in report.phases if p.phase != "unaccounted")
    assert named == pytest.approx(report.step_ms.median, rel=0.05)
    assert {"data", "forward", "backward", "optimizer"} <= {p.phase for p in report.phases}
    assert sum(c.share for c in report.categories) == pytest.approx(1.0)
    # Self times of all events on the one host thread tile the step's wall time: no microsecond twice.
    total_self = sum(c.self_ms for c in report.categories)
    assert total_self == pytest.approx(report.step_ms.median, rel=0.10)
    assert report.mfu is not None and 0 < report.mfu.mfu < 1.5
    assert report.mfu.mfu_with_attention > report.mfu.mfu
    assert report.verdict is not None and report.verdict.bottleneck in ("compute-bound", "memory-bound", "launch/overhead-bound")
    assert report.scope.startswith("CPU only")
    trace = json.loads(Path(report.trace_path).read_text())
    assert any(e.get("name") == "forward" for e in trace["traceEvents"])
    # The report as written reads back through the reader `profile compare` uses.
    (tmp / "r.json").write_text(json.dumps(report.to_dict()))
    assert load_report(tmp / "r.json").problems() == []


def test_compare_says_whether_a_change_is_beyond_the_spread(nanolm_report, tmp_path):
    report, _ = nanolm_report
    before = report.to_dict()
    before["step_ms"] = {"median": 100.0, "min": 98.0, "max": 103.0}
    after = json.loads(json.dumps(before))
    after["step_ms"] = {"median": 50.0, "min": 49.0, "max": 52.0}
    (tmp_path / "a.json").write_text(json.dumps(before))
    (tmp_path / "b.json").write_text(json.dumps(after))
    comparison = compare_reports(tmp_path / "a.json", tmp_path / "b.json", "halved the step")
    step = comparison.rows[0]
    assert step.metric.startswith("step time") and step.change == pytest.approx(-0.5)
    assert step.beyond_spread and step.better
    same = compare_reports(tmp_path / "a.json", tmp_path / "a.json")
    assert same.rows[0].change == 0 and not same.rows[0].beyond_spread


def test_compare_keeps_a_before_after_why_table(nanolm_report, tmp_path):
    report, _ = nanolm_report
    before = report.to_dict()
    before["step_ms"] = {"median": 100.0, "min": 98.0, "max": 103.0}
    after = json.loads(json.dumps(before))
    after["step_ms"] = {"median": 99.0, "min": 97.0, "max": 102.0}
    (tmp_path / "a.json").write_text(json.dumps(before))
    (tmp_path / "b.json").write_text(json.dumps(after))
    out = nanolm("profile", "compare", "a.json", "b.json", "--why", "num_workers 0 | 2", "--log", "changes.md", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    out = nanolm("profile", "compare", "b.json", "a.json", "--why", "undo it", "--log", "changes.md", cwd=tmp_path)
    lines = (tmp_path / "changes.md").read_text().splitlines()
    assert lines[0].startswith("| why") and lines[1].startswith("|---") and len(lines) == 4
    assert lines[2].startswith("| num_workers 0 \\| 2 | 100.00 (98.00–103.00) | 99.00 (97.00–102.00) | -1.0% | within noise")
    assert lines[3].startswith("| undo it | 99.00")
    # A file that is not such a table is refused, and left as it was.
    (tmp_path / "notes.md").write_text("my notes\n")
    out = nanolm("profile", "compare", "a.json", "b.json", "--log", "notes.md", cwd=tmp_path)
    assert out.returncode == 2 and "not a before / after / why table" in out.stderr
    assert (tmp_path / "notes.md").read_text() == "my notes\n"


def test_verdict_rules_on_hand_made_numbers():
    from nanolm.profiling.judge.host import decide
    from nanolm.profiling.report import StepParts, SyncSite

    loading = StepParts(100.0, data_ms=60.0, matmul_ms=40.0)
    v = decide(loading, [], {"num_workers": 0})
    assert v.bottleneck == "input-bound" and "num_workers" in v.fixes[0]
    v = decide(loading, [], {"num_workers": 4})
    assert not any("num_workers" in f for f in v.fixes)  # already in place
    sync = SyncSite(".item()", "train.py:12", "main", "print(loss.item())", 10, 1.0)
    on_gpu = StepParts(100.0, sync_ms=50.0, matmul_ms=40.0, elementwise_ms=10.0, on_gpu=True)
    v = decide(on_gpu, [sync], {})
    assert v.bottleneck == "host-sync-bound" and "train.py:12" in v.evidence[0] and v.fixes[0].startswith("remove")
    # The same sync on a CPU costs nothing: a hazard with its line, never the headline.
    on_cpu = StepParts(100.0, sync_ms=0.01, matmul_ms=80.0, elementwise_ms=20.0)
    v = decide(on_cpu, [sync], {})
    assert v.bottleneck == "compute-bound" and [h.bottleneck for h in v.hazards] == ["host-sync-bound"]
    assert "train.py:12" in v.hazards[0].evidence[0] and "on a GPU" in v.hazards[0].what
    assert all(f.bottleneck != "host-sync-bound" for f in v.findings)
    v = decide(StepParts(100.0, matmul_ms=80.0, elementwise_ms=20.0), [], {"autocast": "bfloat16", "compile": True})
    assert v.bottleneck == "compute-bound" and v.fixes == [next(f for f in v.fixes if "batch" in f)]


def test_the_reference_example_as_numbers():
    """100 ms = 50 waiting for data + 30 idle on loss.item() + 20 computing (the reference document)."""
    from nanolm.profiling.judge.host import amdahl, decide
    from nanolm.profiling.report import StepParts, SyncSite

    sync = SyncSite(".item()", "train.py:40", "main", "print(loss.item())", 30, 1.0)
    parts = StepParts(100.0, data_ms=50.0, sync_ms=30.0, matmul_ms=20.0, on_gpu=True)
    v = decide(parts, [sync], {"num_workers": 0})
    assert [(f.bottleneck.value, f.ms) for f in v.findings] == [
        ("input-bound", 50.0),
        ("host-sync-bound", 30.0),
        ("compute-bound", 20.0),
    ]
    assert [f.projected_step_ms for f in v.findings[:2]] == [50.0, 70.0]
    assert v.findings[0].speedup == pytest.approx(2.0)
    assert v.together_ms == pytest.approx(20.0) and 100.0 / v.together_ms == pytest.approx(5.0)  # "five times faster"
    assert amdahl(100.0, [(20.0, 2.0)]) == pytest.approx(90.0)  # 2x faster matmuls: "a 10% gain"
    # With the FLOPs known: matmuls at the peak can buy at most their own time.
    parts.ideal_matmul_ms = 5.0
    compute = next(f for f in decide(parts, [sync], {}).findings if f.bottleneck == "compute-bound")
    assert compute.projected_step_ms == pytest.approx(85.0)


def test_projections_never_promise_more_than_the_removed_time():
    import random

    from nanolm.profiling.judge.host import decide
    from nanolm.profiling.report import StepParts

    rng = random.Random(0)
    facts = DeviceFacts("cpu", 4, bf16_faster=True)
    for _ in range(200):
        shares = [rng.random() for _ in range(7)]
        total = sum(shares)
        step = rng.uniform(1, 500)
        ms = [step * x / total for x in shares]
        parts = StepParts(
            step, *ms[:6], ideal_matmul_ms=rng.uniform(0, ms[5] * 2), on_gpu=rng.random() < 0.5, floor_ms=rng.uniform(0, step)
        )
        v = decide(parts, [], {}, facts)
        for f in v.findings:
            assert f.projected_step_ms is None or step - f.ms - 1e-9 <= f.projected_step_ms <= step
        assert v.together_ms is None or v.together_ms >= step - sum(f.ms for f in v.findings) - 1e-9
        times = [f.ms for f in v.findings]
        assert all(a >= b - 0.05 * step for a, b in zip(times, times[1:]))  # largest first, up to equals


def test_equal_times_put_the_cheapest_fix_first():
    from nanolm.profiling.judge.host import decide
    from nanolm.profiling.report import StepParts

    facts = DeviceFacts("cpu", 4, bf16_faster=True)
    # Overhead and matmuls take about the same time: torch.compile (cheaper) before bf16 / a larger batch.
    v = decide(StepParts(100.0, overhead_ms=40.0, matmul_ms=41.0), [], {}, facts)
    assert [f.bottleneck.value for f in v.findings[:2]] == ["launch/overhead-bound", "compute-bound"]
    v = decide(StepParts(100.0, overhead_ms=20.0, matmul_ms=60.0), [], {}, facts)
    assert v.findings[0].bottleneck == "compute-bound"  # not equal: the larger time first


# ---- someone else's scripts: the planted bottlenecks ----------------------------------------------


def profile_example(name: str, tmp_path: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    (tmp_path / "t.json").write_text("an earlier trace\n")
    out = nanolm(
        "profile",
        "--json",
        str(tmp_path / "r.json"),
        "--trace",
        str(tmp_path / "t.json"),
        *extra,
        "--",
        "python",
        str(EXAMPLES / name),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert_no_library_noise(out.stderr)  # a real subprocess: kineto's lines and torch's warning stay in the log
    assert "replaced " + str(tmp_path / "t.json") in " ".join(out.stdout.split())
    assert load_report(tmp_path / "r.json").problems() == []  # every report written reads back in `compare`
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging file left behind
    return json.loads((tmp_path / "r.json").read_text()), out


def test_slow_dataset_is_input_bound(tmp_path):
    report, out = profile_example("slow_dataset.py", tmp_path)
    assert report["verdict"]["bottleneck"] == "input-bound"
    data = next(p for p in report["phases"] if p["phase"] == "data")
    assert data["share"] >= 0.5
    assert "num_workers" in report["verdict"]["fixes"][0]
    assert "input-bound" in out.stdout


def test_item_every_step_on_a_cpu_is_compute_bound_with_the_sync_as_a_gpu_hazard(tmp_path):
    report, out = profile_example("item_every_step.py", tmp_path)
    # On a CPU the sync costs nothing: the matmuls take the time; the sync is a GPU hazard, with its line.
    assert report["verdict"]["bottleneck"] == "compute-bound"
    hazard = report["verdict"]["hazards"][0]
    assert hazard["bottleneck"] == "host-sync-bound" and "item_every_step.py:" in hazard["evidence"][0]
    assert "GPU hazard" in out.stdout
    site = report["syncs"][0]
    assert site["kind"] == ".item()" and site["location"].endswith(".py:" + site["location"].split(":")[-1])
    assert "item_every_step.py" in site["location"] and site["per_step"] == pytest.approx(1.0)
    assert any("would be a host-device sync on a GPU" in n for n in report["notes"])


def test_many_tiny_ops_is_launch_bound(tmp_path):
    report, _ = profile_example("many_tiny_ops.py", tmp_path)
    assert report["verdict"]["bottleneck"] == "launch/overhead-bound"
    assert report["ops_per_step"] >= 300


def test_healthy_script_is_compute_bound_with_flop_counted_mfu(tmp_path):
    report, _ = profile_example("healthy.py", tmp_path)
    assert report["verdict"]["bottleneck"] == "compute-bound"
    assert report["syncs"] == []
    assert report["mfu"]["method"].startswith("FlopCounterMode") and 0 < report["mfu"]["mfu"] < 1.5


def test_a_script_crashing_inside_the_window_still_gets_a_report(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(
        "import torch\nm = torch.nn.Linear(8, 8)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for step in range(100):\n    m(torch.randn(4, 8)).sum().backward()\n    opt.step()\n    opt.zero_grad()\n"
        "    if step == 5:\n        raise RuntimeError('planted failure')\n"
    )
    out = nanolm(
        "profile",
        "--json",
        str(tmp_path / "r.json"),
        "--trace",
        str(tmp_path / "t.json"),
        "--wait",
        "0",
        "--warmup",
        "1",
        "--active",
        "2",
        "--repeat",
        "3",
        "--",
        "python",
        str(script),
        cwd=tmp_path,
    )
    # The report is made, and the command fails as the script did (an uncaught error: exit status 1).
    assert out.returncode == 1, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert "planted failure" in report["script_error"] and report["script_exit_code"] == 1
    assert "error raised by your script" in out.stderr and "RuntimeError: planted failure" in out.stderr


def test_a_script_without_optimizer_steps_runs_once_and_keeps_its_exit_code(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(
        "import sys, torch\nopen('side_effect.txt', 'a').write('ran\\n')\n"
        "m = torch.nn.Linear(64, 64)\nfor _ in range(200):\n    m(torch.randn(32, 64))\nsys.exit(3)\n"
    )
    out = nanolm("profile", "--json", str(tmp_path / "r.json"), "--", "python", str(script), cwd=tmp_path)
    assert (tmp_path / "side_effect.txt").read_text() == "ran\n"  # run once, not once to look and once to profile
    # With no --trace, the trace and the profiler's log go under runs/profiles/, not into the working folder.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["infer.py", "r.json", "runs", "side_effect.txt"]
    assert len(list((tmp_path / "runs" / "profiles").glob("*-trace.json*"))) == 1
    assert out.returncode == 3, out.stderr  # the report is made, and the script's failure is the command's
    assert_no_library_noise(out.stderr)
    report = json.loads((tmp_path / "r.json").read_text())
    assert any("wall-clock window" in n for n in report["notes"])
    assert report["script_exit_code"] == 3 and "the script exited with code 3" in report["notes"]
    assert load_report(tmp_path / "r.json").problems() == []


def test_a_profiled_script_imports_as_it_would_unprofiled(tmp_path):
    # nanolm's source goes on the child's PYTHONPATH, never nanolm's package folder: its modules (tokenizers.py,
    # config.py, data.py, ...) would shadow the script's own `import tokenizers` (a move of the recorder into
    # profiling/record/ once put src/nanolm/ there).
    script = tmp_path / "paths.py"
    script.write_text(
        "import os, sys, torch, nanolm\n"
        "package = os.path.dirname(os.path.realpath(nanolm.__file__))\n"
        "shadowing = [p for p in sys.path if os.path.isdir(p) and os.path.samefile(p, package)]\n"
        "open('shadowing.txt', 'w').write(repr(shadowing))\n"
        "m = torch.nn.Linear(8, 8)\nfor _ in range(20):\n    m(torch.randn(4, 8))\n"
    )
    out = nanolm("profile", "--json", str(tmp_path / "r.json"), "--", "python", str(script), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "shadowing.txt").read_text() == "[]"


def test_a_script_that_exits_before_any_step_leaves_the_old_trace_alone(tmp_path):
    (tmp_path / "exit3.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "t.json").write_text("the trace of an earlier profile\n")
    out = nanolm("profile", "--trace", str(tmp_path / "t.json"), "--", "python", "exit3.py", cwd=tmp_path)
    one_line_error(out, "exit3.py", "nothing to profile", "exited with code 3")
    assert (tmp_path / "t.json").read_text() == "the trace of an earlier profile\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exit3.py", "t.json"]  # no log, no staging files


def test_a_script_that_never_steps_and_never_ends_shows_progress_and_reports_on_ctrl_c(tmp_path):
    import signal
    import threading

    (tmp_path / "serve.py").write_text(
        "import time, torch\nm = torch.nn.Linear(16, 16)\nprint('serving', flush=True)\n"
        "while True:\n    m(torch.randn(4, 16))\n    time.sleep(0.005)\n"
    )
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nanolm",
            "profile",
            "--json",
            "r.json",
            "--trace",
            "t.json",
            "--wall-seconds",
            "1",
            "--",
            "python",
            "serve.py",
        ],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        # SIGINT as in a terminal, even when the suite runs in the background (it is then
        # inherited ignored, and Python never raises KeyboardInterrupt)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any("no optimizer step in the first 1 s" in line for line in lines) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert any("Ctrl-C" in line for line in lines), lines  # it says what it is doing and how to end it
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    try:
        proc.wait(timeout=120)  # bounded: a hang fails the test instead of stalling the suite (stdout is tiny)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    stdout = proc.stdout.read()
    assert proc.returncode == 0
    reader.join(10)
    assert_no_library_noise("".join(lines))
    report = json.loads((tmp_path / "r.json").read_text())
    assert "the script was stopped with Ctrl-C" in report["notes"] and report["script_exit_code"] is None
    assert any("wall-clock window" in n for n in report["notes"]) and report["steps_measured"] == 1
    assert "serving" in stdout


# ---- bad input ------------------------------------------------------------------------------------


def one_line_error(out: subprocess.CompletedProcess, *names: str) -> str:
    assert out.returncode == 2, out.stderr
    ours = [line for line in out.stderr.splitlines() if line.startswith("nanolm: error:")]
    assert len(ours) == 1, out.stderr
    for name in names:
        assert name in ours[0], (name, ours[0])
    return ours[0]


def test_bad_input(tmp_path, cli):
    # refused before anything is launched: in this process (the command's own subprocess is tried below)
    one_line_error(cli("profile", "--", "python", "nope.py", cwd=tmp_path), "nope.py", "does not exist")
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nimport no_such_module_here\n")
    out = nanolm("profile", "--trace", str(tmp_path / "t.json"), "--", "python", str(broken), cwd=tmp_path)
    one_line_error(out, "broken.py", "before its first step", "no_such_module_here")
    assert "error raised by your script" in out.stderr  # its own traceback, labelled
    short = tmp_path / "short.py"
    short.write_text(
        "import torch\nm = torch.nn.Linear(4, 4)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(2):\n    m(torch.randn(2, 4)).sum().backward()\n    opt.step()\n"
    )
    one_line_error(
        nanolm("profile", "--trace", str(tmp_path / "t.json"), "--", "python", str(short), cwd=tmp_path),
        "window is longer than the run",
        "2 steps",
    )
    idle = tmp_path / "idle.py"
    idle.write_text("print('nothing to train')\n")
    one_line_error(
        nanolm("profile", "--trace", str(tmp_path / "t.json"), "--", "python", str(idle), cwd=tmp_path), "no steps taken"
    )
    one_line_error(cli("mfu", "--params", "1e8", "--tokens-per-s", "1e5", "--device", "tpu9", cwd=tmp_path), "tpu9", "h100")
    one_line_error(cli("profile", "--trace", "/no/such/dir/t.json", "--", "python", str(short), cwd=tmp_path), "/no/such/dir")


def test_mfu_reference_example(tmp_path, cli):
    out = cli("mfu", "--params", "1.24e8", "--tokens-per-s", "2e5", "--device", "h100", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["mfu"] == pytest.approx(0.150, abs=0.0005)
    text = cli("mfu", "--params", "1.24e8", "--tokens-per-s", "2e5", "--device", "h100", cwd=tmp_path).stdout
    assert "15.0%" in text


def test_peak_command_measures_each_dtype(tmp_path, cli):
    out = cli("peak", "--device", "cpu", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    peaks = json.loads(out.stdout)
    assert "float32" in [p["dtype"] for p in peaks] and all(p["flops_per_s"] > 1e8 for p in peaks)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none on this machine")
def test_cuda_profile_records_device_time(tmp_path):
    report = profile_training([*TINY_PROFILE, "device=cuda"], Window(1, 1, 2, 2), tmp_path / "t.json")
    assert report.scope == "CPU and CUDA" and report.device_busy is not None and 0 < report.device_busy <= 1


# ---- the time between steps, and what was expected ----------------------------------------------------

GET_BATCH_SCRIPT = """
import time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data, labels = torch.randn(4096, 64), torch.randint(0, 4, (4096,))

def get_batch():  # nanoGPT-style loading: no DataLoader, just a function the loop calls
    start = time.perf_counter()
    time.sleep(0.030)
    slept = time.perf_counter() - start  # what the sleep really took: a busy machine oversleeps
    ix = torch.randint(0, 4096, (32,))
    batch = data[ix], labels[ix]
    loaded = time.perf_counter() - start  # the whole call, the batch made
    with open("slept.txt", "a") as f:
        f.write(f"{slept * 1000} {loaded * 1000}\\n")
    return batch

x, y = get_batch()
for step in range(30):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    x, y = get_batch()
"""


def test_loading_without_a_dataloader_is_the_between_steps_phase(tmp_path):
    (tmp_path / "get_batch.py").write_text(GET_BATCH_SCRIPT)
    out = nanolm(
        "profile",
        "--json",
        str(tmp_path / "r.json"),
        "--wait",
        "0",
        "--warmup",
        "1",
        "--active",
        "3",
        "--repeat",
        "2",
        "--",
        "python",
        "get_batch.py",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    calls = [line.split() for line in (tmp_path / "slept.txt").read_text().splitlines()]
    slept = statistics.median(float(s) for s, _ in calls)
    loaded = statistics.median(float(t) for _, t in calls)
    assert slept >= 30.0
    # The phase holds the whole call (the sleep at least) and little else: bounds a busy machine cannot break, since
    # both ends are the script's own clock around the same call.
    between = next(p for p in report["phases"] if p["phase"] == "between")
    for ms in (between["ms"]["median"], report["step_parts"]["between_ms"]):
        assert 0.95 * slept <= ms <= 1.5 * loaded
    top = report["verdict"]["findings"][0]
    assert report["verdict"]["bottleneck"] == "input-bound" and "between steps" in top["what"]
    assert top["projected_step_ms"] == pytest.approx(report["step_ms"]["median"] - top["ms"], rel=1e-6)
    assert "between steps" in out.stdout


def test_expectation_says_how_far_off_and_where_the_time_goes(nanolm_report):
    from nanolm.errors import UserError
    from nanolm.profiling.judge.expect import Expected, expectation

    report, _ = nanolm_report
    # The measured step is the unprofiled one (the step clock's reference steps), as MFU and tokens/s are.
    assert report.unprofiled_step_ms is not None
    step, tokens, m = report.unprofiled_step_ms.median, report.tokens_per_step, report.mfu
    assert report.tokens_per_s.median == pytest.approx(tokens / (step / 1000))
    # Expect k x the measured throughput: the step should be 1/k of it, so "k x slower than expected". k is 3, or
    # less where 3 x would pass the device's peak (the peak is measured on this machine, busy or not: the MFU varies)
    k = min(3.0, 0.5 / m.mfu)
    e = expectation(report, Expected(tokens_per_s=k * tokens / (step / 1000)))
    assert e.expected_step_ms == pytest.approx(step / k) and e.slower == pytest.approx(k)
    assert e.missing_ms == pytest.approx(step * (1 - 1 / k))
    assert e.expected_mfu == pytest.approx(k * m.mfu)  # the implied MFU: 6N x tokens/s / peak
    assert sum(ms for _, ms in e.explained) + e.unexplained_ms == pytest.approx(e.missing_ms)
    gains = {
        f"{f.bottleneck.value}: {f.what}": report.step_ms.median - f.projected_step_ms
        for f in report.verdict.findings
        if f.projected_step_ms is not None
    }
    assert all(ms <= gains[what] + 1e-9 for what, ms in e.explained)  # never more than a fix would buy
    # --expect-mfu: expected tokens/s = peak x MFU / 6N, by hand.
    e = expectation(report, Expected(mfu=0.5))
    assert e.expected_tokens_per_s == pytest.approx(m.peak_flops_per_s * 0.5 / (6 * m.n_params), rel=1e-6)
    assert e.slower == pytest.approx(0.5 / m.mfu, rel=1e-6)
    # An expectation above the device's peak is refused with the reason.
    with pytest.raises(UserError, match="more than the hardware can do"):
        expectation(report, Expected(tokens_per_s=1.01 * m.peak_flops_per_s / (6 * m.n_params)))
