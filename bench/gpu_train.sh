#!/usr/bin/env bash
# bench/gpu_train.sh: one GPU call for training throughput (issue 28) and the profiler's fixtures (issue 27), in
# under 9 minutes on one H200. Parts, most important first, each under its own `timeout` and all under a deadline
# (GPU_TRAIN_BUDGET_S, default 570 s), so the packing at the end always runs:
#   1. explore   bench/train_throughput_gpu.py at B=16, T=1024: nanolm as `nanolm train` runs it, one row per
#                change (VARIANTS), nanoGPT; each model's device time by kernel class (--kernels)
#   2. traces    bench/gpu_traces.sh: the recorded GPU scenarios still missing (SCENARIOS), as test fixtures
#   3. scaling   the throughput bench at B=32 and at T=2048 (nanolm, nanoGPT, and SCALE_VARIANTS if set)
#   4. train     `nanolm train` of gpt2-124m, bf16, compiled, 60 steps: its last line (steady against wall-clock
#                tokens/s) and its manifest
# Results come back as at most 8 files under $OUT: throughput.tar.gz, train.tar.gz, traces/*.tar.gz, session.log.
#
#   NANOGPT=bench/.nanogpt bash bench/gpu_train.sh     # on the GPU machine (bench/.nanogpt: model.py, train.py,
#                                                      # configurator.py, config/, data/shakespeare_char/*.bin)
#   bash bench/gpu_train.sh --cpu                      # the plumbing on a CPU, tiny model, no nanoGPT training
# Python: $GPU_CHECK_PYTHON, else python3 (on --cpu: the project's .venv); nanolm runs from src/ via PYTHONPATH.

set -u
CPU=0
for arg in "$@"; do
    case "$arg" in
        -h|--help) sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --cpu) CPU=1 ;;
        *) echo "gpu_train: error: unknown argument '$arg' (see bash bench/gpu_train.sh --help)" >&2; exit 2 ;;
    esac
done
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
OUT="${OUT:-./gpu_train_out}"
mkdir -p "$OUT" || { echo "gpu_train: error: cannot write to '$OUT'" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"
W="$(mktemp -d)"
PY="${GPU_CHECK_PYTHON:-python3}"
[ "$CPU" = 1 ] && [ -z "${GPU_CHECK_PYTHON:-}" ] && [ -x "$ROOT/.venv/bin/python" ] && PY="$ROOT/.venv/bin/python"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 COLUMNS=200
NANOGPT="${NANOGPT:-$ROOT/bench/.nanogpt}"
if [ -f "$NANOGPT/model.py" ]; then NANOGPT="$(cd "$NANOGPT" && pwd)"; else NANOGPT=""; fi
VARIANTS="${VARIANTS:-untied,learned,copt,graphs}"  # the next candidates: docs/performance.md
SCALE_VARIANTS="${SCALE_VARIANTS:-}"
# the fixtures still to record (tests/fixtures/gpu/README.md): gpt2_compiled is recorded, with the untied preset
SCENARIOS="${SCENARIOS:-nanogpt_eager,seed_example}"
START=$(date +%s)
BUDGET="${GPU_TRAIN_BUDGET_S:-570}"
LOG="$OUT/session.log"
: >"$LOG"
say() { echo "gpu_train: [$(( $(date +%s) - START )) s] $*" | tee -a "$LOG"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
part() {  # part LIMIT_S LOG CMD...: bounded by its limit and by what is left of the budget (less 20 s to pack)
    local limit="$1" log="$2"; shift 2
    local room=$(( $(left) - 20 ))
    [ "$room" -lt "$limit" ] && limit="$room"
    if [ "$limit" -lt 20 ]; then say "$(basename "$log" .log): skipped (${limit} s left)"; RC=125; return; fi
    RC=0
    timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1 || RC=$?
    say "$(basename "$log" .log): exit $RC (limit $limit s)"
}

if [ "$CPU" = 1 ]; then
    BENCH=(--device cpu --preset tiny --rounds 1 --steps 1 --no-compile)
    SHAPE=(--shapes 2x32); SCALE=(--shapes 4x32,2x64)
    TRAIN_SETS=(--set preset=tiny --set steps=12 --set device=cpu)
else
    BENCH=(--rounds 3 --steps 10)
    SHAPE=(--shapes 16x1024); SCALE=(--shapes 32x1024,16x2048)
    TRAIN_SETS=(--set preset=gpt2-124m --set autocast=bf16 --set compile=true --set device=cuda --set batch_size=16
                --set steps=60)
fi
NG=(); [ -n "$NANOGPT" ] && NG=(--nanogpt "$NANOGPT")
named() {  # the rows of VARIANTS (no HF): the bench names a variant by its changes in sorted order
    local out="nanolm,nanoGPT" item
    for item in ${1//,/ }; do out+=",nanolm+$(echo "$item" | tr '+' '\n' | sort | paste -sd+)"; done
    echo "$out"
}
say "python $PY; nanoGPT ${NANOGPT:-none}; budget $BUDGET s"
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' >>"$LOG" 2>&1

# ---- 1. explore ---------------------------------------------------------------------------------------------
mkdir -p "$W/throughput"
part 230 "$W/throughput/explore.log" "$PY" bench/train_throughput_gpu.py "${BENCH[@]}" "${SHAPE[@]}" "${NG[@]}" \
    --variants "$VARIANTS" --only "$(named "$VARIANTS")" --kernels "$W/throughput/kernels.json"
grep '^{' "$W/throughput/explore.log" >"$W/throughput/explore.jsonl" 2>/dev/null
grep -h '"model"' "$W/throughput/explore.jsonl" | "$PY" -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print("  {:<22} {:8.2f} ms {:>9,} tok/s  vs nanoGPT {}".format(r["model"], r["step_ms"], r["tokens_per_s"],
                                                                  r.get("vs_nanoGPT", "-")))' \
    | tee -a "$LOG"

# ---- 2. traces ----------------------------------------------------------------------------------------------
mkdir -p "$OUT/traces"
TRACE_ARGS=(); [ "$CPU" = 1 ] && TRACE_ARGS=(--cpu)
OUT_TRACES="$OUT/traces"
part 200 "$W/traces.log" env OUT="$OUT_TRACES" NANOGPT="$NANOGPT" GPU_CHECK_PYTHON="$PY" SCENARIOS="$SCENARIOS" \
    bash bench/gpu_traces.sh "${TRACE_ARGS[@]}"
grep '^gpu_traces:' "$W/traces.log" >>"$LOG"
if [ ! -s "$OUT_TRACES/fixtures.tar.gz" ] && [ -d "$OUT_TRACES/fixtures" ]; then  # cut short: keep what it made
    tar czf "$OUT_TRACES/fixtures.tar.gz" -C "$OUT_TRACES/fixtures" .
fi
find "$OUT_TRACES" -mindepth 1 ! -name '*.tar.gz' -exec rm -rf {} + 2>/dev/null

# ---- 3. scaling ---------------------------------------------------------------------------------------------
say "scaling: nanolm${SCALE_VARIANTS:+, variants $SCALE_VARIANTS}, nanoGPT"
part 110 "$W/throughput/scaling.log" "$PY" bench/train_throughput_gpu.py "${BENCH[@]}" "${SCALE[@]}" "${NG[@]}" \
    --variants "$SCALE_VARIANTS" --only "$(named "$SCALE_VARIANTS")"
grep '^{' "$W/throughput/scaling.log" >"$W/throughput/scaling.jsonl" 2>/dev/null

# ---- 4. train -----------------------------------------------------------------------------------------------
mkdir -p "$W/train"
part 60 "$W/train/train.log" "$PY" -m nanolm train "${TRAIN_SETS[@]}" --set eval_every=1000 --set eval_batches=2 \
    --set ckpt_every=100000 --set log_every=10 --set runs_dir="$W/train/runs" --set name=gpu124
tail -2 "$W/train/train.log" | tee -a "$LOG"
for m in "$W"/train/runs/*/manifest.json; do [ -f "$m" ] && cp "$m" "$W/train/manifest.json"; done

# ---- pack ---------------------------------------------------------------------------------------------------
tar czf "$OUT/throughput.tar.gz" -C "$W/throughput" .
tar czf "$OUT/train.tar.gz" -C "$W/train" --exclude=runs .
say "done: $(ls "$OUT" "$OUT/traces" | tr '\n' ' ')"
rm -rf "$W"
