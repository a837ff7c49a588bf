"""The scripts outside the package: scripts/profile_train.py (the reference document's entry point, which
is `nanolm profile` for nanolm's training under another name) and bench/gpu_check.sh (the prepared GPU
check, whose plumbing runs here on the CPU)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nanolm.profiling.compare import load_report
from nanolm.profiling.report import ProfileReport

ROOT = Path(__file__).resolve().parents[1]
PROFILE_TRAIN = ROOT / "scripts" / "profile_train.py"
GPU_CHECK = ROOT / "bench" / "gpu_check.sh"
TINY = [
    "--set",
    "n_layer=2",
    "--set",
    "n_head=2",
    "--set",
    "d_model=64",
    "--set",
    "block_size=32",
    "--set",
    "batch_size=8",
    "--set",
    "corpus_lines=2000",
]
ONE_WINDOW = ["--wait", "0", "--warmup", "1", "--active", "1", "--repeat", "1"]
# One intra-op thread: two on a loaded 2-core machine make a tiny step wait for a descheduled peer.
ENV = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}


def run_script(*args: str, cwd: Path, python: list[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*(python or [sys.executable]), str(PROFILE_TRAIN), *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=ENV
    )


def one_line_error(out: subprocess.CompletedProcess, prefix: str, *names: str) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), out.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def script_main():
    """scripts/profile_train.py's main(), loaded as a module: the quick checks run in this process."""
    spec = importlib.util.spec_from_file_location("profile_train", PROFILE_TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def call(main, capsys, *args: str) -> subprocess.CompletedProcess:
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)


# ---- scripts/profile_train.py ------------------------------------------------------------------------


def test_profile_train_gives_the_report_of_nanolm_profile(tmp_path):
    out = run_script(*TINY, *ONE_WINDOW, "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    # The same report as `nanolm profile`: every field of a ProfileReport, and it reads back in `profile compare`.
    assert set(report) == {f.name for f in dataclasses.fields(ProfileReport)}
    assert load_report(tmp_path / "r.json").problems() == []
    assert report["target"] == "nanolm (preset tiny)" and report["steps_measured"] == 1
    assert {"forward", "backward", "optimizer"} <= {p["phase"] for p in report["phases"]}
    assert report["top_ops"] and report["categories"] and report["mfu"]["mfu"] > 0
    assert report["verdict"]["bottleneck"] in ("compute-bound", "memory-bound", "launch/overhead-bound")
    assert report["scope"].startswith("CPU only")  # on a CPU it says so explicitly
    text = " ".join(out.stdout.split())
    assert "Profiled CPU only" in text and f"Verdict: {report['verdict']['bottleneck']}" in text
    assert "report written to" in text
    # The trace goes under runs/profiles/, as with `nanolm profile`: nothing else lands in the working folder.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "runs"]


def test_profile_train_help_says_what_it_is(script_main, capsys):
    out = call(script_main, capsys, "--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert text.startswith("Usage: scripts/profile_train.py [OPTIONS] ")  # no COMMAND: it takes none
    assert "nanolm's own training" in text and "nanolm profile -- python other.py" in text
    for option in ("--set", "--wait", "--warmup", "--active", "--repeat", "--json", "--trace", "--measure-peak"):
        assert option in text, option
    assert "--wall-seconds" not in text and "--run-to-end" not in text  # they act only on someone else's script


def test_profile_train_bad_input(script_main, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prefix = "scripts/profile_train.py: error:"
    # Someone else's script is `nanolm profile -- ...`'s job: the line says so, and names what it refused.
    one_line_error(
        call(script_main, capsys, "--", "python", "other.py"),
        prefix,
        "own training only",
        "`-- python other.py` is for `nanolm profile -- python other.py",
    )
    one_line_error(call(script_main, capsys, "--"), prefix, "own training only", "`--` is for `nanolm profile --")
    one_line_error(call(script_main, capsys, "python", "other.py"), prefix, "only options", "python other.py")
    one_line_error(call(script_main, capsys, "compare", "a.json", "b.json"), prefix, "nanolm profile compare")
    one_line_error(call(script_main, capsys, "--bogus"), prefix, "--bogus", "--help")
    one_line_error(call(script_main, capsys, "--set", "no_such_key=1"), prefix, "no_such_key")
    one_line_error(call(script_main, capsys, "--active", "many"), prefix, "--active")
    one_line_error(call(script_main, capsys, *TINY, "--json", "/no/such/dir/r.json"), prefix, "/no/such/dir")
    # Refused before any file was written (`nanolm profile` makes its default trace folder, runs/profiles/,
    # before the work, as it does for itself).
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_profile_train_without_nanolm_says_so_in_one_line(tmp_path):
    # As a Python without nanolm installed: the import of nanolm fails, and the script says what to do.
    hide = (
        f"import sys, runpy; sys.modules['nanolm'] = None; sys.argv = [{str(PROFILE_TRAIN)!r}]; "
        f"runpy.run_path({str(PROFILE_TRAIN)!r}, run_name='__main__')"
    )
    out = subprocess.run([sys.executable, "-c", hide], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=ENV)
    one_line_error(out, "scripts/profile_train.py: error:", "nanolm is not importable", "pip install -e .")


# ---- bench/gpu_check.sh ----------------------------------------------------------------------------------


def gpu_check(*args: str, out: Path, **env: str) -> subprocess.CompletedProcess:
    # This interpreter: the plumbing runs with the suite's own torch, and never makes a venv. The script
    # works in the repository root wherever it is started; the output folder is the test's.
    full_env = {**ENV, "OUT": str(out), "GPU_CHECK_PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(GPU_CHECK), *args], cwd=ROOT, capture_output=True, text=True, timeout=600, env=full_env)


def test_gpu_check_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(GPU_CHECK)], capture_output=True, text=True).returncode == 0
    if shutil.which("shellcheck"):
        lint = subprocess.run(["shellcheck", str(GPU_CHECK)], capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer of a machine without CUDA")
def test_gpu_check_without_cuda_says_so_and_exits_0(tmp_path):
    out = gpu_check(out=tmp_path / "out")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("no CUDA device:") and len(out.stdout.strip().splitlines()) == 1, out.stdout
    assert not (tmp_path / "out" / "summary.json").exists()


def test_gpu_check_bad_input(tmp_path):
    one_line_error(gpu_check("--bogus", out=tmp_path / "out"), "gpu_check: error:", "--bogus", "--help")
    one_line_error(gpu_check(out=tmp_path / "out", GPU_CHECK_ALLOW_CPU="yes"), "gpu_check: error:", "GPU_CHECK_ALLOW_CPU")
    one_line_error(gpu_check(out=tmp_path / "out", GPU_CHECK_PROFILE_S="4m"), "gpu_check: error:", "GPU_CHECK_PROFILE_S")
    (tmp_path / "file").write_text("")
    one_line_error(gpu_check(out=tmp_path / "file" / "out"), "gpu_check: error:", "output folder")


@pytest.mark.slow  # over 10 s: make test-slow (CI runs both)
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU plumbing; on a GPU the script checks the GPU")
def test_gpu_check_plumbing_on_the_cpu(tmp_path):
    out = gpu_check("--cpu", out=tmp_path / "out")
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["ok"] is True and summary["mode"] == "cpu-plumbing"
    assert summary["device"] == "cpu" and summary["torch"] == torch.__version__ and summary["total_seconds"] > 0
    parts = summary["parts"]
    assert list(parts) == ["setup", "cuda_tests", "profile"]
    for part in parts.values():
        assert part["ok"] and part["exit_code"] == 0 and part["seconds"] > 0 and part["problems"] == []
        assert (tmp_path / "out" / part["log"]).is_file()
    tests = parts["cuda_tests"]  # found and run, and here each skips for want of a GPU
    assert tests["selected"] >= 3 and tests["skipped"] == tests["selected"] and tests["passed"] == tests["failed"] == 0
    profile = parts["profile"]
    for key in ("step_ms", "tokens_per_s", "mfu", "peak_source", "device_busy", "verdict", "sync_warnings"):
        assert key in profile, key
    assert profile["step_ms"]["median"] > 0 and profile["tokens_per_s"]["median"] > 0 and 0 < profile["mfu"] <= 1
    assert profile["verdict"] and profile["scope"].startswith("CPU only") and profile["peak_source"].startswith("measured")
    report = json.loads((tmp_path / "out" / "profile.json").read_text())
    assert report["step_ms"] == profile["step_ms"] and report["verdict"]["bottleneck"] == profile["verdict"]
    assert "gpu_check: profile: ok" in out.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU plumbing; on a GPU the script checks the GPU")
def test_gpu_check_records_a_failing_part_and_goes_on(tmp_path):
    out = gpu_check("--cpu", out=tmp_path / "out", GPU_CHECK_PROFILE_S="1")  # the profile cannot finish in 1 s
    assert out.returncode == 1, out.stdout + out.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["ok"] is False
    parts = summary["parts"]
    assert parts["setup"]["ok"] and parts["cuda_tests"]["ok"] and parts["cuda_tests"]["selected"] >= 3
    assert not parts["profile"]["ok"] and parts["profile"]["exit_code"] == 124
    assert "timed out after 1 s" in parts["profile"]["problems"][0]
    assert "gpu_check: profile: FAILED: timed out after 1 s" in out.stdout


GPU_BENCH = ROOT / "bench" / "train_throughput_gpu.py"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--device", "cuda"], "--device cuda, but torch sees no CUDA device here"),
        (["--device", "cpu", "--nanogpt", "nowhere"], "--nanogpt nowhere: there is no nowhere/model.py"),
        (["--device", "cpu", "--nanogpt", "MODEL_PY"], "has no GPT or GPTConfig; pass nanoGPT's model.py"),
        (["--device", "cpu", "--variants", "fast"], "unknown change 'fast'; known: cdt, copt, cudnn"),
        (["--device", "cpu", "--variants", "tied+untied"], "tied or untied, not both"),
        (["--device", "cpu", "--shapes", "16by1024"], "--shapes takes BxT pairs"),
        (["--device", "cpu", "--shapes", "0x1024"], "--shapes takes BxT pairs of positive whole numbers"),
        (["--device", "cpu", "--rounds", "0"], "--rounds and --steps must be at least 1"),
        (["--device", "cpu", "--variants", "learned", "--only", "nanolm+tied"], "--only nanolm+tied: not a model of this run"),
    ],
)
def test_the_gpu_bench_says_bad_input_in_one_line(tmp_path, args, words):
    if args[1] == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    (tmp_path / "model.py").write_text("x = 1\n")  # a model.py that is not nanoGPT's
    args = [str(tmp_path / "model.py") if a == "MODEL_PY" else a for a in args]
    out = subprocess.run([sys.executable, str(GPU_BENCH), *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and words in lines[0], out.stderr
    assert out.stdout == ""


@pytest.mark.slow
def test_the_gpu_throughput_bench_runs_its_plumbing_on_a_cpu(tmp_path):
    """bench/train_throughput_gpu.py on a CPU with a tiny model: one JSON line per model and shape with the ratios,
    a row per variant, and each model's time by kernel class (the GPU numbers come from a GPU session)."""
    out = subprocess.run(
        [
            sys.executable,
            str(GPU_BENCH),
            "--device",
            "cpu",
            "--preset",
            "tiny",
            "--rounds",
            "1",
            "--steps",
            "1",
            "--no-compile",
            "--shapes",
            "2x32,1x16",
            "--variants",
            "untied,learned",
            "--kernels",
            "kernels.json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert rows[0]["device"] == "cpu" and rows[0]["measured_peak_tflops"] > 0
    per_shape = (len(rows) - 1) // 2
    assert [(r["batch"], r["seq"]) for r in rows[1:]] == [(2, 32)] * per_shape + [(1, 16)] * per_shape
    models = {r["model"]: r for r in rows[1:] if r["batch"] == 2}
    assert {"nanolm", "nanolm+untied", "nanolm+learned"} <= set(models)
    # tiny ties nothing by default; "untied" is then the same model, "learned" adds a position table of T x d_model
    assert models["nanolm+untied"]["params"] == models["nanolm"]["params"]
    assert models["nanolm+learned"]["params"] == models["nanolm"]["params"] + 32 * 128  # block_size: T
    kernels = json.loads((tmp_path / "kernels.json").read_text())
    assert len(kernels) == len(rows) - 1
    for k in kernels:  # on a CPU, the aten operators' self time: the classes add up to the whole
        assert k["device_ms_per_step"] > 0
        assert sum(k["by_class_ms"].values()) == pytest.approx(k["device_ms_per_step"], abs=0.01)
    ours = models["nanolm"]
    assert ours["tokens_per_s"] == pytest.approx(2 * 32 / (ours["step_ms"] / 1e3), rel=1e-3)
    if "HF-GPT2" in models:
        assert ours["vs_HF-GPT2"] == pytest.approx(ours["tokens_per_s"] / models["HF-GPT2"]["tokens_per_s"], rel=1e-2)
