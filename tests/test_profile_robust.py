"""nanolm profile's own output can be trusted: every report it writes reads back, compare says "within
noise" when a change is inside the run-to-run spread, one definition of a host-device sync, advice that
follows the device, no library noise, and no file replaced before there is a result. Hand-made numbers
and small planted loops (no subprocess): these run in a few seconds."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time

import pytest
import torch
from rich.console import Console
from torch.profiler import record_function

from nanolm.errors import UserError
from nanolm.profiling.assemble import profile_report
from nanolm.profiling.compare import compare_reports, load_report
from nanolm.profiling.judge.host import DeviceFacts, decide
from nanolm.profiling.measure import mfu as mfu_module
from nanolm.profiling.measure.host import WindowStats, disagreements, summarize_windows
from nanolm.profiling.record import peak as peak_module
from nanolm.profiling.record.session import ProfileSession, Window, commit_trace, measured_from_session
from nanolm.profiling.report import Change, PhaseRow, ProfileReport, Stat, StepParts
from nanolm.profiling.show.terminal import print_comparison
from nanolm.profiling.trace.classify import SYNC
from nanolm.profiling.trace.load import load_trace


def window(step_ms: float, **phase_ms: float) -> WindowStats:
    return WindowStats(
        steps=3,
        step_ms=step_ms,
        phase_ms=phase_ms,
        category_ms={"matmul/GEMM": step_ms},
        category_calls={"matmul/GEMM": 4.0},
        ops={("aten::mm", "matmul/GEMM"): (4.0, step_ms)},
    )


def report_with(step: Stat, phases: list[PhaseRow], mfu: float | None = None, unstable: list[str] | None = None) -> dict:
    from nanolm.profiling.report import MFU

    r = ProfileReport(
        target="t",
        device="cpu",
        scope="CPU only",
        window={"wait": 1, "warmup": 1, "active": 3, "repeat": 3},
        first_measured_step=3,
        steps_measured=9,
        step_ms=step,
        phases=phases,
        categories=[],
        top_ops=[],
        ops_per_step=10,
        syncs=[],
        device_busy=None,
        settings={},
        tokens_per_step=None,
        tokens_per_s=None,
        mfu=None if mfu is None else MFU(1e3, None, 1.0, None, 1.0, "given", mfu, None, "6N"),
        unstable=unstable or [],
    )
    return json.loads(json.dumps(r.to_dict()))


# ---- 1. the reports it writes read back ------------------------------------------------------------


def test_negative_unaccounted_time_is_clamped_noted_and_reads_back(tmp_path):
    # Window 2's phases add up to 2.35 ms more than its step (clock skew between the step marker and the ranges).
    windows = [window(10.0, data=2.0, forward=7.54), window(9.9, data=2.0, forward=10.25), window(10.2, data=2.0, forward=7.66)]
    s = summarize_windows(windows)
    rest = next(p for p in s.phases if p.phase == "unaccounted")
    assert (rest.ms.min, rest.ms.median, rest.ms.max) == pytest.approx((0.0, 0.46, 0.54))
    assert len(s.notes) == 1 and "2.35 ms" in s.notes[0] and "shown as 0" in s.notes[0]
    # 0.05 ms over a 10 ms step (0.5%) is not material: clamped without a note.
    assert summarize_windows([window(10.0, forward=10.05), window(10.0, forward=9.0)]).notes == []
    report = report_with(s.step_ms, s.phases)
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert load_report(tmp_path / "r.json").problems() == []


def test_a_report_written_before_the_clamp_still_compares(tmp_path):
    old = report_with(
        Stat(10, 9, 11), [PhaseRow("forward", Stat(9, 8, 10), 0.9), PhaseRow("unaccounted", Stat(0.46, -2.35, 0.54), 0.05)]
    )
    (tmp_path / "old.json").write_text(json.dumps(old))
    comparison = compare_reports(tmp_path / "old.json", tmp_path / "old.json")
    assert any("-2.35 ms" in w and "read as 0" in w for w in comparison.warnings)
    broken = report_with(Stat(10, 9, 11), [PhaseRow("forward", Stat(-9, 8, 10), 0.9)])
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(UserError, match="phase forward"):  # any other negative number is still not a report
        load_report(tmp_path / "broken.json")


# ---- 2. noise ----------------------------------------------------------------------------------------


def test_compare_calls_changes_inside_the_spread_noise_and_never_divides_rounded_zeros(tmp_path):
    before = report_with(
        Stat(100, 95, 105),
        [
            PhaseRow("data", Stat(50, 48, 52), 0.5),  # overlaps after: noise
            PhaseRow("forward", Stat(10, 5, 10.5), 0.1),  # disjoint from after's 10.6-11, but the 1 ms change < 5.5 ms spread
            PhaseRow("backward", Stat(10, 9.5, 30), 0.1),  # one slow window: -90.6% is inside the spread
            PhaseRow("optimizer", Stat(20, 19.8, 20.2), 0.2),
        ],
        mfu=0.0002,
        unstable=["backward 9.50–30.00 ms (median 10.00)"],
    )
    after = report_with(
        Stat(50, 49, 52),
        [
            PhaseRow("data", Stat(51, 49, 53), 1.0),
            PhaseRow("forward", Stat(11, 10.6, 11), 0.2),
            PhaseRow("backward", Stat(0.94, 0.9, 1.0), 0.02),
            PhaseRow("optimizer", Stat(10, 9.9, 10.1), 0.2),
        ],
        mfu=0.000479,
    )
    (tmp_path / "a.json").write_text(json.dumps(before))
    (tmp_path / "b.json").write_text(json.dumps(after))
    c = compare_reports(tmp_path / "a.json", tmp_path / "b.json", "num_workers=4")
    rows = {r.metric.strip(): r for r in c.rows}
    assert rows["step time (ms)"].status is Change.BETTER and rows["step time (ms)"].change == pytest.approx(-0.5)
    assert rows["data (ms)"].status is Change.NOISE and rows["data (ms)"].better is None
    assert rows["forward (ms)"].status is Change.NOISE
    assert rows["backward (ms)"].status is Change.NOISE and rows["backward (ms)"].change == pytest.approx(-0.906)
    assert rows["optimizer (ms)"].status is Change.BETTER
    assert rows["MFU"].status is Change.TOO_SMALL and rows["MFU"].change is None  # 0.0% -> 0.0%: no +139.6%
    assert any("a.json" in w and "disagreed" in w for w in c.warnings)
    console = Console(record=True, width=200)
    print_comparison(c, console)
    text = console.export_text()
    assert "+139.6%" not in text and "too small to compare" in text and "within noise" in text
    assert "-90.6%" in text and "yes, better" not in text.split("backward")[1].splitlines()[0]


def test_the_stability_rule_on_hand_made_windows():
    # data takes >= 10% of the step in some window, and its spread (30 ms) is more than half its median (12 ms).
    assert disagreements([window(50, data=10), window(50, data=40), window(50, data=12)]) == [
        "data 10.00–40.00 ms (median 12.00)"
    ]
    assert disagreements([window(50, data=10), window(50, data=11), window(50, data=12)]) == []
    # A phase under 10% of the step may vary as it likes: 0.1 vs 2 ms of a 50 ms step.
    assert disagreements([window(50, sync=0.1), window(50, sync=2.0), window(50, sync=0.5)]) == []
    # From 5 windows on, one odd window (the highest, the lowest) is left out.
    assert (
        disagreements([window(50, data=10), window(50, data=11), window(50, data=12), window(50, data=10.5), window(50, data=45)])
        == []
    )
    assert disagreements([window(50, data=10)]) == []  # one window has nothing to disagree with


def planted_loop(session: ProfileSession, data_ms, steps: int) -> None:
    """A training-like loop whose data phase sleeps data_ms(step) ms (1-based steps)."""
    for step in range(1, steps + 1):
        with record_function("data"):
            time.sleep(data_ms(step) / 1000)
        with record_function("forward"):
            torch.mm(torch.ones(8, 8), torch.ones(8, 8))
        session.step()


def test_windows_that_disagree_get_more_windows_and_a_warning(monkeypatch):
    monkeypatch.setattr(peak_module, "bf16_vs_float32", lambda device_type: (False, "planted"))
    w = Window(wait=0, warmup=1, active=1, repeat=3)
    assert w.max_repeat == 6 and Window(repeat=1).max_repeat == 1 and Window(repeat=20).max_repeat == 25
    session = ProfileSession(w, cuda=False).start()
    try:
        planted_loop(session, lambda i: 5 if i % 2 else 80, steps=14)
    finally:
        session.stop()
    assert len(session.windows) == 6 and session.finished
    report = profile_report(measured_from_session(session, "planted", "cpu", {}, None, []), None, None, "cpu")
    # the data phase's spread (5 ms vs 80 ms windows) is named; its exact minimum is the machine's sleep(5 ms)
    assert report.window["windows"] == 6 and any(u.startswith("data ") for u in report.unstable)
    assert any("windows disagreed" in n and "up to 6" in n for n in report.notes)
    steady = ProfileSession(w, cuda=False).start()
    try:
        planted_loop(steady, lambda i: 60, steps=14)
    finally:
        steady.stop()
    # finished after 3 windows (one recording: a warm-up step and 3 one-step windows): stopped profiling
    assert len(steady.windows) == 3 and steady.steps_done == w.total_steps == 4


def test_window_sizes_are_capped():
    with pytest.raises(UserError, match=r"--wait 5000 is too many steps \(at most 1000\)"):
        Window(wait=5000)
    with pytest.raises(UserError, match="--repeat"):
        Window(repeat=1000)
    assert Window(wait=1000).wait == 1000


# ---- 3. one definition of a host-device sync ------------------------------------------------------


@pytest.mark.parametrize("user_syncs", [0, 2])
def test_the_sync_category_and_the_sync_list_count_the_same_calls(user_syncs, monkeypatch):
    monkeypatch.setattr(peak_module, "bf16_vs_float32", lambda device_type: (False, "planted"))
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    opt = torch.optim.AdamW(model.parameters(), foreach=False)  # reads its CPU step counters with .item(): torch's own
    session = ProfileSession(Window(wait=0, warmup=1, active=2, repeat=2), cuda=False).start()
    try:
        for _ in range(6):
            with record_function("forward"):
                loss = model(torch.randn(4, 8)).sum()
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad()
            for _ in range(user_syncs):
                loss.item()  # the user's own
            session.step()
    finally:
        session.stop()
    report = profile_report(measured_from_session(session, "planted", "cpu", {}, None, []), None, None, "cpu")
    listed = sum(s.per_step for s in report.syncs)
    in_table = next((c.calls_per_step for c in report.categories if c.category == SYNC), 0.0)
    assert listed == pytest.approx(user_syncs) and in_table == pytest.approx(user_syncs)


# ---- 4. advice follows the device -------------------------------------------------------------------


def _compute_bound(facts: DeviceFacts, settings: dict | None = None):
    return decide(StepParts(100.0, matmul_ms=80.0, elementwise_ms=20.0), [], settings or {}, facts)


def _input_bound(facts: DeviceFacts, settings: dict | None = None):
    parts = StepParts(100.0, data_ms=60.0, matmul_ms=40.0, on_gpu=facts.gpu, floor_ms=40.0 if facts.gpu else 0.0)
    return decide(parts, [], settings or {"num_workers": 0}, facts)


def test_no_bf16_advice_where_bf16_is_slower():
    slow = _compute_bound(DeviceFacts("cpu", 2, bf16_faster=False, bf16_evidence="bfloat16 1.0 GFLOP/s, float32 64.0"))
    assert slow.bottleneck == "compute-bound" and not any("bfloat16" in f for f in slow.fixes)
    assert slow.left_out == ["bf16 autocast: it would be slower here (bfloat16 1.0 GFLOP/s, float32 64.0)"]
    fast = _compute_bound(DeviceFacts("cpu", 2, bf16_faster=True))
    assert "bfloat16" in fast.fixes[0] and fast.left_out == []


def test_data_loader_advice_follows_the_cores_and_the_gpu():
    two = _input_bound(DeviceFacts("cpu", 2, bf16_faster=False))
    assert "num_workers=1;" in two.fixes[0] and "2 CPU cores here" in two.fixes[0] and "pin_memory" not in two.fixes[0]
    many = _input_bound(DeviceFacts("cpu", 64, bf16_faster=False))
    assert "num_workers=2..8;" in many.fixes[0]
    gpu = _input_bound(DeviceFacts("cuda", 16, bf16_faster=True))
    assert "num_workers=2..8" in gpu.fixes[0] and "pin_memory=True" in gpu.fixes[0]


def test_the_bf16_check_uses_the_measured_peaks_once_per_process(monkeypatch):
    calls = []

    def planted(device, dtype):  # a CPU whose bf16 matmul is 64x slower than float32
        calls.append(dtype)
        return mfu_module.Peak("cpu (planted)", 1e9 if dtype == "bfloat16" else 64e9, dtype, "measured")

    monkeypatch.setattr(peak_module, "measure_peak", planted)
    peak_module.cached_peak.cache_clear()
    try:
        first = peak_module.live_facts("cpu")  # a live run's facts: bf16 timed on this device when first asked
        assert first.cores >= 1 and first.bf16_helps() is False
        assert "bfloat16 1.0 GFLOP/s" in first.bf16_evidence and "float32 64.0 GFLOP/s" in first.bf16_evidence
        assert peak_module.live_facts("cpu").bf16_helps() is False
        assert sorted(calls) == ["bfloat16", "float32"]  # measured once each, then cached
        assert not any("bfloat16" in f for f in _compute_bound(peak_module.live_facts("cpu")).fixes)
        unmeasured = DeviceFacts.here("cpu")  # a recorded trace's: nothing to time bf16 on, so it is not judged
        assert unmeasured.bf16_helps() is False and unmeasured.bf16_evidence.startswith("not judged")
        assert sorted(calls) == ["bfloat16", "float32"]
    finally:
        peak_module.cached_peak.cache_clear()  # planted peaks must not outlive this test


# ---- 5. the profiler library's noise ------------------------------------------------------------------


def test_the_profiler_library_prints_nothing_to_the_terminal(capfd, tmp_path):
    from nanolm.profiling.record.session import QuietProfiler

    quiet = QuietProfiler(tmp_path / "profiler.log")
    session = ProfileSession(Window(wait=0, warmup=1, active=1, repeat=2), cuda=False, quiet=quiet).start()
    try:
        planted_loop(session, lambda i: 1, steps=4)
    finally:
        session.stop()
        quiet.close()
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "USDT" not in err and "acc_events" not in err, err
    assert "profiler_start" in (tmp_path / "profiler.log").read_text()  # kept, beside the trace


# ---- 6. and 7. traces: gzipped on both paths, nothing replaced before a result -------------------------


def test_the_wall_clock_trace_is_gzipped_when_large(tmp_path, monkeypatch):
    from nanolm.profiling.record import script as runner
    from nanolm.profiling.record import session

    monkeypatch.setattr(session, "GZIP_ABOVE_BYTES", 0)
    monkeypatch.setattr(peak_module, "bf16_vs_float32", lambda device_type: (False, "planted"))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    script = tmp_path / "infer.py"
    script.write_text("import torch\nm = torch.nn.Linear(16, 16)\nfor _ in range(50):\n    m(torch.randn(4, 16))\n")
    args = argparse.Namespace(
        wait=1,
        warmup=1,
        active=3,
        repeat=3,
        trace=str(tmp_path / "staged.json"),
        log=None,
        run_to_end=False,
        tokens_per_step=None,
        measure_peak=False,
        with_stack=False,
        isolate=False,
        wall_seconds=30.0,
        command=[str(script)],
    )
    report = ProfileReport.from_dict(runner.profile_here(args)["report"])
    assert any("wall-clock window" in n for n in report.notes)
    assert report.trace_path == str(tmp_path / "staged.json.gz") and not (tmp_path / "staged.json").exists()
    with gzip.open(report.trace_path, "rt") as f:
        assert "traceEvents" in json.load(f)


def test_committing_a_gzipped_trace_replaces_the_plain_one_and_says_so(tmp_path):
    final = tmp_path / "t.json"
    final.write_text("old")
    staged = tmp_path / ".t.json.1.partial.gz"
    staged.write_bytes(gzip.compress(b"{}"))
    path, replaced = commit_trace(staged, final)
    assert path == str(tmp_path / "t.json.gz") and replaced == [str(final)]
    assert not final.exists() and not staged.exists()
    assert commit_trace(None, final) == (None, [])


def test_devices_that_cannot_compute_are_refused():
    for device in ("meta", "xla"):
        with pytest.raises(UserError, match="use --device cpu"):
            peak_module.measure_peaks(device)
    assert peak_module._resolve_device("auto").type in ("cpu", "cuda", "mps")


def test_results_over_the_peak_and_overflowing_inputs_are_refused():
    # 6 · 1.24e8 · 2e7 = 1.488e16 FLOP/s over an H100's 9.89e14: 1505%, impossible.
    with pytest.raises(UserError, match=r"MFU 1505% \(6N·tokens/s\) is over 100%.*peak is wrong"):
        mfu_module.compute_mfu(1.24e8, 2e7, mfu_module.lookup_peak("h100"))
    with pytest.raises(UserError, match=r"--tokens-per-s 1e\+300 is out of range"):
        mfu_module.compute_mfu(1.24e8, 1e300, mfu_module.lookup_peak("h100"))
    with pytest.raises(UserError, match=r"--params 1e\+304 is out of range"):  # 6 · 1e304 · 2e5 overflows
        mfu_module.compute_mfu(1e304, 2e5, mfu_module.lookup_peak("h100"))
    # Just under the peak is fine: 6 · 1e8 · 1.6e6 = 9.6e14 < 9.89e14.
    assert mfu_module.compute_mfu(1e8, 1.6e6, mfu_module.lookup_peak("h100")).mfu == pytest.approx(9.6e14 / 9.89e14)


def test_a_profile_that_fails_after_its_windows_leaves_the_old_trace_alone(tmp_path, monkeypatch):
    from nanolm.profiling.record import training as profile

    def planted(*args, **kwargs):  # the windows (and their staged trace) are done; then something fails
        assert any(p.name.startswith(".t.json.") for p in tmp_path.iterdir())
        raise UserError("planted failure after the windows")

    monkeypatch.setattr(profile, "_training_report", planted)
    (tmp_path / "t.json").write_text("earlier")
    tiny = ["n_layer=1", "n_head=1", "d_model=16", "block_size=8", "batch_size=2", "corpus_lines=200"]
    with pytest.raises(UserError, match="planted"):
        profile.profile_training(tiny, Window(0, 1, 1, 1), trace=tmp_path / "t.json")
    assert (tmp_path / "t.json").read_text() == "earlier" and sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_peak_and_mfu_commands_name_the_fix(tmp_path, cli):
    out = cli("peak", "--device", "meta", cwd=tmp_path)
    assert out.returncode == 2 and "meta" in out.stderr and "--device cpu" in out.stderr, out
    if not torch.cuda.is_available():
        out = cli("peak", "--device", "cuda", cwd=tmp_path)
        assert out.returncode == 2 and "--device cpu" in out.stderr and "--set" not in out.stderr, out.stderr
    out = cli("mfu", "--params", "1.24e8", "--tokens-per-s", "1e300", "--device", "h100", cwd=tmp_path)
    assert out.returncode == 2 and "--tokens-per-s 1e+300 is out of range" in out.stderr, out.stderr
    out = cli("mfu", "--params", "1.24e8", "--tokens-per-s", "2e7", "--device", "h100", cwd=tmp_path)
    assert out.returncode == 2 and "over 100%" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_profile_with_nothing_after_the_dashes_is_refused(tmp_path, cli):
    out = cli("profile", "--trace", str(tmp_path / "t.json"), "--", cwd=tmp_path)
    assert out.returncode == 2 and "nothing after --" in out.stderr, out.stderr
    assert list(tmp_path.iterdir()) == []
    out = cli("profile", "--wait", "5000", "--", "python", "x.py", cwd=tmp_path)
    assert out.returncode == 2 and "--wait 5000" in out.stderr


def test_one_recording_holds_every_window_and_separate_windows_each_their_own(tmp_path):
    """The default records the windows back to back (one profiler start and stop, one trace holding them all);
    --windows separate starts and stops the profiler around each window (one trace each, the median kept)."""
    one, separate = (
        Window(wait=0, warmup=1, active=2, repeat=3, extend=False),
        Window(wait=0, warmup=1, active=2, repeat=3, extend=False, separate=True),
    )
    for w, steps, recordings in ((one, 7, 1), (separate, 9, 3)):
        session = ProfileSession(w, cuda=False, trace_path=tmp_path / f"{w.separate}.json").start()
        try:
            planted_loop(session, lambda i: 2, steps=steps)
        finally:
            session.stop()
        assert session.finished and len(session.window_traces) == recordings
        assert len(session.windows) == 3 and all(win.steps == 2 for win in session.windows)
        session.keep_median_trace()
        kept = load_trace(session.median_trace)
        assert len(kept.steps) == (6 if not w.separate else 2)  # the whole recording holding the median window
        first, count = session.median_group
        assert count == 2 and first in ((0, 2, 4) if not w.separate else (0,))
