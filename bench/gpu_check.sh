#!/usr/bin/env bash
# bench/gpu_check.sh: the prepared GPU check, to run whenever a CUDA GPU is lent (issue #14, part 8).
#
# Three parts, each under its own `timeout`, so the whole ends in under 8 minutes on one GPU (H200:
# torch.compile of gpt2-124m takes about a minute):
#   1. setup       find a Python whose torch sees CUDA, and check that nanolm imports with it
#   2. cuda_tests  the CUDA-only tests (those skipped without a GPU: `-k cuda` in the test files that
#                  skip on "needs a CUDA GPU"); on a GPU, a skip is a failure (torch does not see it)
#   3. profile     `nanolm profile` of the gpt2-124m preset, bf16 autocast, torch.compile: MFU against
#                  the datasheet peak, the GPU's busy share, and host-device syncs (the profiler turns on
#                  torch.cuda.set_sync_debug_mode("warn") in the measured steps and counts its warnings)
# then writes ${OUT:-./gpu_check_out}/summary.json (device, torch, each part's exit code, seconds and
# numbers) beside each part's log. A failing part is recorded and the next one still runs; the script
# exits 1 if any part failed, 0 if all passed, 2 on bad arguments.
#
# Run it from anywhere (it works in the repository root):
#   bash bench/gpu_check.sh                      # on a machine with a CUDA GPU
#   OUT=/tmp/check bash bench/gpu_check.sh       # the summary and logs elsewhere
#   bash bench/gpu_check.sh --cpu                # no GPU: the same plumbing on the CPU, tiny model
#                                                # (GPU_CHECK_ALLOW_CPU=1 does the same)
# Without a CUDA device (and without --cpu) it prints one line, "no CUDA device: ...", and exits 0.
#   bash bench/gpu_check.sh --traces             # instead: record the profiler's three GPU scenarios as test
#                                                # fixtures (bench/gpu_traces.sh; one call of under 9 minutes)
#
# Which Python: $GPU_CHECK_PYTHON if set; else .venv/bin/python or python3, the first whose torch sees
# a GPU (a machine image with a CUDA torch needs nothing installed: nanolm runs from src/ through
# PYTHONPATH, with the packages the image has); else the project's venv, made as `make` makes it:
#   TORCH_SPEC="torch==2.13.0" bash bench/gpu_check.sh
# which assumes a CUDA build of torch is installable from the package registry there (PyPI's Linux
# x86-64 torch wheels are CUDA builds). That install is not part of the 8 minutes.
# Part time limits (seconds): GPU_CHECK_SETUP_S (60), GPU_CHECK_TESTS_S (150), GPU_CHECK_PROFILE_S
# (240), GPU_CHECK_INSTALL_S (900, only when the venv has to be made).

set -u

usage() { sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

ALLOW_CPU="${GPU_CHECK_ALLOW_CPU:-0}"
for arg in "$@"; do
    case "$arg" in
        -h|--help) usage; exit 0 ;;
        --cpu) ALLOW_CPU=1 ;;
        --traces) exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu_traces.sh" ;;
        *) echo "gpu_check: error: unknown argument '$arg' (see bash bench/gpu_check.sh --help)" >&2; exit 2 ;;
    esac
done
case "$ALLOW_CPU" in
    0|1) ;;
    *) echo "gpu_check: error: GPU_CHECK_ALLOW_CPU must be 0 or 1, got '$ALLOW_CPU'" >&2; exit 2 ;;
esac
for var in GPU_CHECK_SETUP_S GPU_CHECK_TESTS_S GPU_CHECK_PROFILE_S GPU_CHECK_INSTALL_S; do
    value="${!var:-1}"
    if ! [[ "$value" =~ ^[1-9][0-9]*$ ]]; then
        echo "gpu_check: error: $var must be a whole number of seconds, got '$value'" >&2; exit 2
    fi
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
OUT="${OUT:-./gpu_check_out}"
if ! mkdir -p "$OUT" 2>/dev/null || [ ! -w "$OUT" ]; then
    echo "gpu_check: error: cannot write to the output folder '$OUT' (set OUT to a writable folder)" >&2; exit 2
fi
OUT="$(cd "$OUT" && pwd)"
rm -f "$OUT"/summary.json "$OUT"/setup.log "$OUT"/cuda_tests.log "$OUT"/cuda_tests.xml "$OUT"/profile.log \
      "$OUT"/profile.json  # a stale file from an earlier run would pass for this run's result

# nanolm from this checkout's src/, whether or not the Python has it installed (the image's python3 has not).
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 COLUMNS=200

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
sees_cuda() {  # bounded: a wedged driver must not stall the search for a Python
    timeout --kill-after=10 60 "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
        >/dev/null 2>&1
}

START="$(now)"

# ---- 1. setup: a Python whose torch sees the GPU, and nanolm importable with it ------------------------
SETUP_START="$(now)"
SETUP_RC=0
PY=""
{
    if [ -n "${GPU_CHECK_PYTHON:-}" ]; then
        PY="$GPU_CHECK_PYTHON"
    else
        for candidate in "$ROOT/.venv/bin/python" python3; do
            if command -v "$candidate" >/dev/null 2>&1 && sees_cuda "$candidate"; then PY="$candidate"; break; fi
        done
        if [ -z "$PY" ] && [ "$ALLOW_CPU" = 1 ] && [ -x "$ROOT/.venv/bin/python" ]; then
            PY="$ROOT/.venv/bin/python"  # the CPU plumbing run needs no CUDA build
        fi
        if [ -z "$PY" ]; then
            echo "no Python here has a torch that sees CUDA: making the project's venv (make .venv/.installed-stamp)"
            timeout --kill-after=10 "${GPU_CHECK_INSTALL_S:-900}" make -C "$ROOT" .venv/.installed-stamp
            PY="$ROOT/.venv/bin/python"
        fi
    fi
    echo "python: $PY"
} >"$OUT/setup.log" 2>&1
# One start of that Python for every fact the check needs (each start imports torch: seconds on a small
# machine): torch's version, whether it sees CUDA, the device, and that nanolm imports with it.
FACTS="$(timeout --kill-after=10 "${GPU_CHECK_SETUP_S:-60}" "$PY" -c '
import json, torch, nanolm.cli, nanolm.profiling.record.training
cuda = torch.cuda.is_available()
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": cuda,
                  "device": torch.cuda.get_device_name(0) if cuda else "cpu"}))' 2>>"$OUT/setup.log")" || SETUP_RC=$?
echo "facts: $FACTS" >>"$OUT/setup.log"
SETUP_S="$(since "$SETUP_START")"
if [ "$SETUP_RC" != 0 ]; then  # no torch or no nanolm: nothing else can run, so record that and stop
    echo "gpu_check: setup FAILED (exit $SETUP_RC): $PY cannot import torch and nanolm (see $OUT/setup.log)" >&2
    printf '{"ok": false, "mode": null, "parts": {"setup": {"ok": false, "exit_code": %s, "seconds": %s, "python": "%s", "log": "setup.log"}}}\n' \
        "$SETUP_RC" "$SETUP_S" "$PY" >"$OUT/summary.json"
    exit 1
fi
case "$FACTS" in
    *'"cuda_available": true'*) MODE=cuda ;;
    *) MODE=cpu-plumbing ;;
esac
if [ "$MODE" != cuda ] && [ "$ALLOW_CPU" != 1 ]; then
    version="unknown"
    [[ "$FACTS" =~ \"torch\":\ \"([^\"]*)\" ]] && version="${BASH_REMATCH[1]}"
    echo "no CUDA device: torch $version at $PY sees no GPU, so there is nothing to check" \
         "(--cpu runs the same plumbing on the CPU)"
    exit 0
fi
echo "gpu_check: $MODE mode, python $PY; setup in ${SETUP_S} s"

# ---- 2. the CUDA-only tests ----------------------------------------------------------------------------
TESTS_START="$(now)"
TESTS_RC=0
mapfile -t TEST_FILES < <(grep -l "needs a CUDA GPU" tests/test_*.py)
if [ "${#TEST_FILES[@]}" -eq 0 ]; then
    echo "no test file skips on 'needs a CUDA GPU'" >"$OUT/cuda_tests.log"
    TESTS_RC=5  # pytest's own code for "no tests ran"
else
    timeout --kill-after=10 "${GPU_CHECK_TESTS_S:-150}" "$PY" -m pytest -q -p no:cacheprovider -k cuda \
        --junitxml="$OUT/cuda_tests.xml" "${TEST_FILES[@]}" >"$OUT/cuda_tests.log" 2>&1 || TESTS_RC=$?
fi
TESTS_S="$(since "$TESTS_START")"
echo "gpu_check: CUDA tests exit $TESTS_RC in ${TESTS_S} s"

# ---- 3. the profile -------------------------------------------------------------------------------------
if [ "$MODE" = cuda ]; then
    # The window: the first steps compile (wait and warm-up are never measured), then 3 windows of 5 steps.
    PROFILE_ARGS=(--set preset=gpt2-124m --set autocast=bf16 --set compile=true --set device=cuda
                  --wait 1 --warmup 2 --active 5 --repeat 3)
else
    # The plumbing only: a model small enough to profile in seconds on a CPU, without compiling.
    PROFILE_ARGS=(--set preset=tiny --set n_layer=2 --set n_head=2 --set d_model=64 --set block_size=32
                  --set batch_size=8 --set corpus_lines=2000 --set device=cpu
                  --wait 0 --warmup 1 --active 1 --repeat 1)
fi
PROFILE_START="$(now)"
PROFILE_RC=0
# The trace goes to runs/profiles/ (the default): a gpt2-124m trace is too large to bring back with $OUT.
timeout --kill-after=10 "${GPU_CHECK_PROFILE_S:-240}" "$PY" -m nanolm profile "${PROFILE_ARGS[@]}" \
    --json "$OUT/profile.json" >"$OUT/profile.log" 2>&1 || PROFILE_RC=$?
PROFILE_S="$(since "$PROFILE_START")"
echo "gpu_check: profile exit $PROFILE_RC in ${PROFILE_S} s"

# ---- summary --------------------------------------------------------------------------------------------
export OUT MODE PY FACTS SETUP_RC SETUP_S TESTS_RC TESTS_S PROFILE_RC PROFILE_S
TOTAL_S="$(since "$START")"
PROFILE_COMMAND="nanolm profile ${PROFILE_ARGS[*]} --json $OUT/profile.json"
export TOTAL_S PROFILE_COMMAND
export GPU_CHECK_TESTS_S="${GPU_CHECK_TESTS_S:-150}" GPU_CHECK_PROFILE_S="${GPU_CHECK_PROFILE_S:-240}"
"$PY" - <<'PY'
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

out = Path(os.environ["OUT"])
cuda = os.environ["MODE"] == "cuda"


def part(name, rc_var, s_var, limit_var=None):
    rc = int(os.environ[rc_var])
    problems = []
    if rc in (124, 137) and limit_var:  # timeout's codes: the limit, or the kill after it
        problems.append(f"timed out after {os.environ[limit_var]} s")
    elif rc:
        problems.append(f"exit code {rc} (see {name}.log)")
    return {"ok": rc == 0, "exit_code": rc, "seconds": float(os.environ[s_var]), "log": f"{name}.log", "problems": problems}


facts = json.loads(os.environ["FACTS"])  # from the setup part: no second import of torch here
device = facts["device"]

setup = part("setup", "SETUP_RC", "SETUP_S")
setup["python"] = os.environ["PY"]

tests = part("cuda_tests", "TESTS_RC", "TESTS_S", "GPU_CHECK_TESTS_S")
counts = {"selected": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
try:
    root = ET.parse(out / "cuda_tests.xml").getroot()
    for suite in root.iter("testsuite"):
        total, failed, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        counts["selected"] += total
        counts["failed"] += failed
        counts["errors"] += errors
        counts["skipped"] += skipped
        counts["passed"] += total - failed - errors - skipped
except (OSError, ET.ParseError) as e:
    tests["problems"].append(f"no test results: {e}")
tests.update(counts)
if cuda and counts["skipped"]:  # on a GPU nothing may skip for want of one
    tests["problems"].append(f"{counts['skipped']} CUDA test(s) skipped on a CUDA machine")
if not counts["selected"]:
    tests["problems"].append("no CUDA tests were selected")

profile = part("profile", "PROFILE_RC", "PROFILE_S", "GPU_CHECK_PROFILE_S")
profile["command"] = os.environ["PROFILE_COMMAND"]
try:
    report = json.loads((out / "profile.json").read_text())
except (OSError, ValueError) as e:
    report = None
    profile["problems"].append(f"no report: {e}")
if report is not None:
    mfu = report.get("mfu") or {}
    verdict = report.get("verdict") or {}
    warned = [n for n in report.get("notes", []) if "sync debug mode reported" in n]
    profile.update({
        "report": "profile.json",
        "target": report.get("target"),
        "scope": report.get("scope"),
        "step_ms": report["step_ms"],
        "tokens_per_s": report.get("tokens_per_s"),
        "mfu": mfu.get("mfu"),
        "mfu_with_attention": mfu.get("mfu_with_attention"),
        "peak_source": mfu.get("peak_source"),
        "device_busy": report.get("device_busy"),
        "gate": (report.get("gpu") or {}).get("gate"),
        "gate_sentence": (report.get("gpu") or {}).get("gate_sentence"),
        "unprofiled_step_ms": report.get("unprofiled_step_ms"),
        "profiled_over_unprofiled": report.get("profiled_over_unprofiled"),
        "verdict": verdict.get("bottleneck"),
        "verdict_headline": verdict.get("headline"),
        # The count of torch.cuda sync debug mode's warnings in the measured steps (the report notes it only
        # when there were any, so on CUDA no note means 0); None on a CPU, where that mode does not exist.
        "sync_warnings": int(re.search(r"reported (\d+)", warned[0]).group(1)) if warned else (0 if cuda else None),
        "syncs_listed": [f"{s['kind']} at {s['location']}" for s in report.get("syncs", [])],
        "unstable": report.get("unstable", []),
    })
    if cuda:
        if report.get("scope") != "CPU and CUDA":
            profile["problems"].append(f"the profiler did not see the GPU (scope: {report.get('scope')})")
        if report.get("device_busy") is None:
            profile["problems"].append("no device busy share")
        if not report.get("gpu"):
            profile["problems"].append("no GPU answer (the device timeline of the median window's trace)")
        if not str(mfu.get("peak_source", "")).startswith("datasheet"):
            profile["problems"].append(f"MFU is not against a datasheet peak ({mfu.get('peak_source')})")
    elif not str(report.get("scope", "")).startswith("CPU only"):
        profile["problems"].append(f"a CPU run's scope is {report.get('scope')!r}")
    if not (mfu.get("mfu") and 0 < mfu["mfu"] <= 1):
        profile["problems"].append(f"MFU {mfu.get('mfu')} is not in (0, 1]")

parts = {"setup": setup, "cuda_tests": tests, "profile": profile}
for p in parts.values():
    p["ok"] = not p["problems"]
summary = {"ok": all(p["ok"] for p in parts.values()), "mode": os.environ["MODE"], "device": device,
           "torch": facts["torch"], "cuda": facts["cuda"],
           "total_seconds": float(os.environ["TOTAL_S"]), "parts": parts}
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
for name, p in parts.items():
    print(f"gpu_check: {name}: {'ok' if p['ok'] else 'FAILED: ' + '; '.join(p['problems'])}")
if report is not None:
    print(f"gpu_check: {device}: step {profile['step_ms']['median']:.1f} ms, MFU {profile['mfu'] or 0:.1%} "
          f"({profile['peak_source']}), busy {profile['device_busy']}, gate {profile['gate']}, verdict {profile['verdict']}, "
          f"sync warnings {profile['sync_warnings']}")
print(f"gpu_check: summary in {out / 'summary.json'}")
sys.exit(0 if summary["ok"] else 1)
PY
SUMMARY_RC=$?
if [ ! -s "$OUT/summary.json" ]; then  # the summary itself broke: still leave a record of the parts
    printf '{"ok": false, "mode": "%s", "summary_error": "the summary step exited %s", "exit_codes": {"setup": %s, "cuda_tests": %s, "profile": %s}}\n' \
        "$MODE" "$SUMMARY_RC" "$SETUP_RC" "$TESTS_RC" "$PROFILE_RC" >"$OUT/summary.json"
    SUMMARY_RC=1
fi
exit "$SUMMARY_RC"
