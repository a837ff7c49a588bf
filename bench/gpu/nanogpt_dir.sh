#!/usr/bin/env bash
# bench/gpu/nanogpt_dir.sh NANOGPT_CLONE: make bench/.nanogpt (git-ignored), what the GPU benches carry to the
# device machine (`run`'s carry: ["bench/.nanogpt"]): karpathy/nanoGPT's model.py, train.py, configurator.py and
# config/train_shakespeare_char.py from a clone (or a bare mirror), and data/shakespeare_char/{train,val}.bin made
# by its prepare.py from 1.1 MB of nanolm's embedded corpus in place of tiny-shakespeare (no network: the GPU
# machine has none, and the scenarios time steps, not what is learned). Nothing of nanoGPT is committed here.
set -eu
[ $# -eq 1 ] || { echo "nanogpt_dir: error: give a nanoGPT clone (or its .git mirror): bash $0 PATH" >&2; exit 2; }
SRC="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
GIT_DIR_OF="$SRC"; [ -d "$SRC/.git" ] && GIT_DIR_OF="$SRC/.git"
git --git-dir="$GIT_DIR_OF" cat-file -e HEAD:model.py 2>/dev/null \
    || { echo "nanogpt_dir: error: $SRC is not a nanoGPT git clone (no model.py at HEAD)" >&2; exit 2; }
D="$ROOT/bench/.nanogpt"
rm -rf "$D.tmp" && mkdir -p "$D.tmp"
git --git-dir="$GIT_DIR_OF" archive HEAD model.py train.py configurator.py config/train_shakespeare_char.py \
    data/shakespeare_char/prepare.py | tar x -C "$D.tmp"
PYTHONPATH="$ROOT/src" "$PY" -c '
import sys
from nanolm.corpus import generate_corpus
open(sys.argv[1], "w").write("\n".join(generate_corpus(30000, seed=0).lines)[:1_115_000])' \
    "$D.tmp/data/shakespeare_char/input.txt"
(cd "$D.tmp/data/shakespeare_char" && "$PY" prepare.py >/dev/null)
rm -rf "$D" && mv "$D.tmp" "$D"
echo "nanogpt_dir: $D ($(du -sh "$D" | cut -f1)); carry it: bench/.nanogpt"
