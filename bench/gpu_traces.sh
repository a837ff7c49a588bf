#!/usr/bin/env bash
# bench/gpu_traces.sh: record the three GPU scenarios of the profiler's design (§6) as test fixtures, in one
# prepared call of under 9 minutes on one GPU (issue #27):
#   (b) seed_example  bench/gpu/seed_example.py: host-made batches, .item() every step (truth: input-bound, then
#                     host-sync-bound); unprofiled steps of the variants (log every 1|20) × (prefetch 0|2)
#   (c) gpt2_compiled nanolm gpt2-124m, bf16 autocast + torch.compile (truth: compute-bound)
#   (a) nanogpt_eager karpathy/nanoGPT's train.py, shakespeare_char, --compile=False (truth: launch-bound), and its
#                     --compile=True unprofiled step; only when NANOGPT names a clone with its data prepared
# plus the measured bf16 peak. Each scenario's trace is trimmed to its median group of 3 steps and written with
# a truth file by bench/gpu/make_fixture.py, all packed into $OUT/fixtures.tar.gz (unpack it into
# tests/fixtures/gpu/); the raw
# logs, reports and traces (those under 12 MB) of each scenario go into $OUT/<scenario>.tar.gz (at most 8 files
# come back).
#
#   bash bench/gpu_traces.sh                  # on a machine with a CUDA GPU
#   NANOGPT=/path/to/nanoGPT bash bench/gpu_traces.sh
#   bash bench/gpu_traces.sh --cpu            # no GPU: the plumbing of (b) on the CPU, a few steps
#   SCENARIOS=nanogpt_eager,seed_example bash bench/gpu_traces.sh    # only those (default: all three)
#
# Python: $GPU_CHECK_PYTHON, else python3; nanolm runs from this checkout's src/ through PYTHONPATH.
# Exits 0 when every scenario that ran wrote its fixture, 1 otherwise, 2 on bad arguments.

set -u
CPU=0
for arg in "$@"; do
    case "$arg" in
        -h|--help) sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --cpu) CPU=1 ;;
        *) echo "gpu_traces: error: unknown argument '$arg' (see bash bench/gpu_traces.sh --help)" >&2; exit 2 ;;
    esac
done
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
OUT="${OUT:-./gpu_traces_out}"
mkdir -p "$OUT/fixtures" "$OUT/work" || { echo "gpu_traces: error: cannot write to '$OUT'" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"
PY="${GPU_CHECK_PYTHON:-python3}"
[ "$CPU" = 1 ] && [ -z "${GPU_CHECK_PYTHON:-}" ] && [ -x "$ROOT/.venv/bin/python" ] && PY="$ROOT/.venv/bin/python"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 COLUMNS=200
CORES="$(nproc)"
FAILED=0
say() { echo "gpu_traces: $*"; }
run() {  # run LIMIT_S LOG CMD...: one bounded part; its exit code is kept in RC
    local limit="$1" log="$2"; shift 2
    RC=0
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1 || RC=$?
    say "$(basename "$log" .log): exit $RC"
}
SCENARIOS="${SCENARIOS:-seed_example,gpt2_compiled,nanogpt_eager}"
for scenario in ${SCENARIOS//,/ }; do
    case "$scenario" in
        seed_example|gpt2_compiled|nanogpt_eager) ;;
        *) echo "gpu_traces: error: SCENARIOS names '$scenario'; known: seed_example, gpt2_compiled, nanogpt_eager" >&2
           exit 2 ;;
    esac
done
wanted() { [[ ",$SCENARIOS," == *",$1,"* ]]; }
trace_of() { ls "$1"/trace.json.gz "$1"/trace.json 2>/dev/null | head -1; }
pack() {  # pack DIR NAME: DIR's files under 12 MB into $OUT/NAME.tar.gz (a device call brings back files of 16 MiB
          # at most; a compiled gpt2-124m's raw trace is larger, and its trimmed fixture is what the tests read)
    (cd "$1" && find . -type f -size -12M ! -path './out/*' -print0 | tar czf "$OUT/$2.tar.gz" --null -T -) 2>/dev/null
}

# ---- the peak -------------------------------------------------------------------------------------------
DEVICE=cuda; [ "$CPU" = 1 ] && DEVICE=cpu
run 60 "$OUT/work/peak.log" "$PY" -m nanolm peak --device "$DEVICE" --json
PEAK_TFLOPS="$("$PY" -c '
import json, sys
rows = json.load(open(sys.argv[1]))
print(next(r["flops_per_s"] / 1e12 for r in rows if r["dtype"] == "bfloat16"))' "$OUT/work/peak.log" 2>/dev/null || echo "")"
say "bf16 peak: ${PEAK_TFLOPS:-unknown} TFLOP/s"
PEAK_ARGS=(); [ -n "$PEAK_TFLOPS" ] && PEAK_ARGS=(--peak-tflops "$PEAK_TFLOPS")

# ---- (b) the reference example ----------------------------------------------------------------------------
if wanted seed_example; then
W="$OUT/work/seed_example"; mkdir -p "$W"
STEPS=40; UNPROF=30; [ "$CPU" = 1 ] && STEPS=12 && UNPROF=10
run 150 "$W/profile.log" "$PY" -m nanolm profile --wait 2 --warmup 1 --active 3 --repeat 3 --trace "$W/trace.json" \
    --json "$W/report.json" -- bench/gpu/seed_example.py "$STEPS"
for variant in "1 0" "20 0" "1 2" "20 2"; do
    set -- $variant
    run 60 "$W/unprofiled_log$1_prefetch$2.log" "$PY" bench/gpu/seed_example.py "$UNPROF" --log-every "$1" --prefetch "$2"
done
if [ -n "$(trace_of "$W")" ]; then
    run 60 "$W/fixture.log" "$PY" bench/gpu/make_fixture.py "$(trace_of "$W")" "$OUT/fixtures" seed_example \
        --log "$W/unprofiled_log1_prefetch0.log" --fixed "no_sync=$W/unprofiled_log20_prefetch0.log" \
        --fixed "prefetch=$W/unprofiled_log1_prefetch2.log" --fixed "both=$W/unprofiled_log20_prefetch2.log" \
        --cores "$CORES" --settings '{"autocast": "bfloat16"}' "${PEAK_ARGS[@]}"
    [ "$RC" = 0 ] || FAILED=1
else
    say "seed_example: no trace recorded (see $W/profile.log)"; FAILED=1
fi
pack "$W" seed_example
fi

# ---- (c) gpt2-124m, compiled ---------------------------------------------------------------------------------
if [ "$CPU" = 0 ] && wanted gpt2_compiled; then
    W="$OUT/work/gpt2_compiled"; mkdir -p "$W"
    run 200 "$W/profile.log" "$PY" -m nanolm profile --set preset=gpt2-124m --set autocast=bf16 --set compile=true \
        --set device=cuda --wait 3 --warmup 2 --active 3 --repeat 3 --trace "$W/trace.json" --json "$W/report.json"
    if [ -n "$(trace_of "$W")" ] && [ -s "$W/report.json" ]; then
        # FLOPs of one step (6N + the attention term, per token) and the unprofiled step from the report's clock: the
        # rate is of the unprofiled step when there is one, so the FLOPs are the rate times that step
        read -r FLOPS UNPROF_MS < <("$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
m = r["mfu"]
u = (r.get("unprofiled_step_ms") or r["step_ms"])["median"]
print((m["flops_per_s_with_attention"] or m["flops_per_s"]) * u / 1000, u)' "$W/report.json")
        run 60 "$W/fixture.log" "$PY" bench/gpu/make_fixture.py "$(trace_of "$W")" "$OUT/fixtures" gpt2_compiled \
            --unprofiled-ms "$UNPROF_MS" --matmul-flops "$FLOPS" --cores "$CORES" \
            --settings '{"autocast": "bfloat16", "compile": true}' "${PEAK_ARGS[@]}"
        [ "$RC" = 0 ] || FAILED=1
    else
        say "gpt2_compiled: no trace or report (see $W/profile.log)"; FAILED=1
    fi
    pack "$W" gpt2_compiled
fi

# ---- (a) nanoGPT, eager ------------------------------------------------------------------------------------
if ! wanted nanogpt_eager; then
    :
elif [ "$CPU" = 0 ] && [ -n "${NANOGPT:-}" ] && [ -f "${NANOGPT}/train.py" ]; then
    W="$OUT/work/nanogpt_eager"; mkdir -p "$W"
    NG=(config/train_shakespeare_char.py --log_interval=1 --eval_interval=100000 --eval_iters=1 --always_save_checkpoint=False
        --out_dir="$W/out")
    (cd "$NANOGPT" && run 150 "$W/profile.log" "$PY" -m nanolm profile --wait 3 --warmup 1 --active 3 --repeat 3 \
        --trace "$W/trace.json" --json "$W/report.json" -- train.py "${NG[@]}" --compile=False --max_iters=60)
    (cd "$NANOGPT" && run 90 "$W/unprofiled_eager.log" "$PY" train.py "${NG[@]}" --compile=False --max_iters=40)
    (cd "$NANOGPT" && run 150 "$W/unprofiled_compiled.log" "$PY" train.py "${NG[@]}" --compile=True --max_iters=40)
    if [ -n "$(trace_of "$W")" ]; then
        run 60 "$W/fixture.log" "$PY" bench/gpu/make_fixture.py "$(trace_of "$W")" "$OUT/fixtures" nanogpt_eager \
            --log "$W/unprofiled_eager.log" --log-regex 'iter [0-9]+: .*time ([0-9.]+)ms' \
            --fixed "compile=$W/unprofiled_compiled.log" --cores "$CORES" --settings '{"autocast": "bfloat16"}' \
            "${PEAK_ARGS[@]}"
        [ "$RC" = 0 ] || FAILED=1
    else
        say "nanogpt_eager: no trace recorded (see $W/profile.log)"; FAILED=1
    fi
    pack "$W" nanogpt_eager
elif [ "$CPU" = 0 ]; then
    say "nanogpt_eager: skipped (NANOGPT does not name a nanoGPT clone with train.py)"
fi

tar czf "$OUT/fixtures.tar.gz" -C "$OUT/fixtures" . && rm -rf "$OUT/work" "$OUT/fixtures"
say "fixtures in $OUT/fixtures.tar.gz (unpack into tests/fixtures/gpu/)"
exit "$FAILED"
