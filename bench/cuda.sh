#!/bin/bash
# cuda.sh — `make bench-cuda` (on a GPU machine): scanprop's training step on the GPU
# next to PyTorch's (bench/cuda_peer.py) in the same run, same models and batch sizes,
# full FP32 on both sides. scanprop's time is the app's median step_ms (--device cuda;
# each step ends by reading the loss back, so it includes the synchronisation), PyTorch's
# the median of synchronised steps. Writes bench/results/cuda-<stamp>.md and prints it.
#   BUILD=dir (default build-cuda)   STEPS=n (default 50)   PY=python (default python3)
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
BUILD=${BUILD:-build-cuda}
STEPS=${STEPS:-50}
PY=${PY:-python3}
die() { echo "bench-cuda: $*" >&2; exit 2; }
for app in lenet vgg11 rnn gru; do [ -x "$BUILD/$app" ] || die "$BUILD/$app not built (make CUDA=1 BUILD=$BUILD)"; done
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || die "no GPU (nvidia-smi -L fails)"
"$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || die "$PY: torch without CUDA"
mkdir -p bench/results
OUT=bench/results/cuda-$(date +%Y%m%d-%H%M%S).md
key() { sed -n "s/.*\"$1\": \\([0-9.eE+-]*\\).*/\\1/p"; }
{
    echo "# scanprop vs PyTorch on the GPU — $(date -Is)"
    echo
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); CPU: $(lscpu | sed -n 's/^Model name: *//p')"
    echo "command: make bench-cuda (BUILD=$BUILD STEPS=$STEPS)"
    echo
    echo "| model | batch | scanprop ms/step | PyTorch ms/step | scanprop / PyTorch |"
    echo "|---|---|---|---|---|"
} > "$OUT"
run() {   # model app-args batch
    local model=$1 args=$2 batch=$3
    local s p
    s=$("$BUILD/$model" $args --batch "$batch" --steps "$STEPS" --device cuda --quiet | tail -1 | key step_ms)
    p=$("$PY" bench/cuda_peer.py "$model" "$batch" "$STEPS" | tail -1 | key step_ms)
    [ -n "$s" ] && [ -n "$p" ] || die "$model batch $batch: no timing (scanprop '$s', PyTorch '$p')"
    echo "| $model | $batch | $s | $p | $(awk "BEGIN{printf \"%.2f\", $s/$p}") |" >> "$OUT"
}
run lenet "" 64
run lenet "" 256
run vgg11 "" 32
run vgg11 "" 128
run rnn "--seq-len 1000" 16
run gru "--shape L" 16
cat "$OUT"
