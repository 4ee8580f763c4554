#!/bin/bash
# cuda.sh — `make bench-cuda` (on a GPU machine): scanprop on the GPU next to PyTorch
# (bench/cuda_peer.py, cuDNN, full FP32 on both sides) in one run on one GPU:
#   1. rnn T in {100, 1000, 10000} x B in {1, 16, 64} and gru S/M/L (B 16): linear and bppsa
#      on the device vs nn.RNN / nn.GRU, end to end and the backward time as the BPPSA
#      paper defines it (a step minus a forward-only step);
#   2. lenet (b64, b256), vgg11 (b32, b128) and resnet20 (b64, b128): linear, ooo with
#      each --order, ooo --cuda-graph, vs PyTorch; what scanprop's linear step issues
#      (device_launches, device_syncs of its JSON).
# scanprop's step time is the app's median step_ms (--device cuda; each step ends by
# reading the loss back, so it includes the synchronisation). scanprop's backward time is
# the same run's backward_ms: on the device, the median device time between CUDA events
# recorded before and after the engine's backward (train/train_step.c), read after the
# step's loss; PyTorch's is its step minus its forward-only step. Writes bench/results/cuda-<stamp>.md and prints it.
#   BUILD=dir (default build-cuda)   STEPS=n (default 30)   PY=python (default python3)
#   cuda.sh --check    only the GPU check (make bench-cuda runs it before building)
# Without a GPU: one line, exit 2.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
BUILD=${BUILD:-build-cuda}
STEPS=${STEPS:-30}
PY=${PY:-python3}
die() { echo "bench-cuda: $*" >&2; exit 2; }
SMI=${NVIDIA_SMI:-nvidia-smi}   # tests point it elsewhere to check the no-GPU line on any machine
command -v "$SMI" >/dev/null 2>&1 || die "no GPU: $SMI not found (make bench-cuda needs an NVIDIA GPU)"
"$SMI" -L >/dev/null 2>&1 || die "no GPU: $SMI -L fails (make bench-cuda needs an NVIDIA GPU)"
[ "${1:-}" = "--check" ] && exit 0
for app in lenet vgg11 resnet rnn gru; do [ -x "$BUILD/$app" ] || die "$BUILD/$app not built (make CUDA=1 BUILD=$BUILD)"; done
"$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || die "$PY: torch without CUDA"
mkdir -p bench/results
OUT=bench/results/cuda-$(date +%Y%m%d-%H%M%S).md
key() { sed -n "s/.*\"$1\": \\([0-9.eE+-]*\\).*/\\1/p"; }
ratio() { awk "BEGIN{ if ($2 > 0) printf \"%.2f\", $1/$2; else print \"-\" }"; }
app() {   # model args...: the JSON line of a run on the device
    local model=$1
    shift
    "$BUILD/$model" "$@" --steps "$STEPS" --device cuda --quiet | tail -1
}
{
    echo "# scanprop vs PyTorch on the GPU — $(date -Is)"
    echo
    echo "GPU: $("$SMI" --query-gpu=name,driver_version --format=csv,noheader); CPU: $(lscpu | sed -n 's/^Model name: *//p')"
    echo "command: make bench-cuda (BUILD=$BUILD STEPS=$STEPS)"
    echo
    echo "## BPPSA: rnn and gru (scanprop's backward: CUDA events around it; PyTorch's: step − forward-only step)"
    echo
    echo "| model | B | linear ms/step | bppsa ms/step | PyTorch ms/step | linear bwd ms | bppsa bwd ms | PyTorch bwd ms | bppsa bwd speed-up vs PyTorch | bppsa end-to-end vs PyTorch |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
} > "$OUT"
seqrow() {   # label peer-model peer-arg app args...
    local label=$1 pm=$2 pa=$3 batch=$4
    shift 4
    local lin bp p ls bs pb lbw bbw
    lin=$(app "$@" --batch "$batch" --backward linear)
    bp=$(app "$@" --batch "$batch" --backward bppsa)
    p=$("$PY" bench/cuda_peer.py "$pm" "$batch" "$STEPS" "$pa" | tail -1)
    ls=$(key step_ms <<<"$lin"); bs=$(key step_ms <<<"$bp"); ps=$(key step_ms <<<"$p"); pb=$(key backward_ms <<<"$p")
    lbw=$(key backward_ms <<<"$lin"); bbw=$(key backward_ms <<<"$bp")
    [ -n "$ls" ] && [ -n "$bs" ] && [ -n "$ps" ] || die "$label B $batch: no timing (linear '$ls', bppsa '$bs', PyTorch '$ps')"
    echo "| $label | $batch | $ls | $bs | $ps | $lbw | $bbw | $pb | $(ratio "$pb" "$bbw") | $(ratio "$ps" "$bs") |" >> "$OUT"
}
for T in 100 1000 10000; do
    for B in 1 16 64; do seqrow "rnn T=$T" rnn "$T" "$B" rnn --seq-len "$T"; done
done
for S in S M L; do seqrow "gru $S" gru "$S" 16 gru --shape "$S"; done
{
    echo
    echo "## ooo: lenet and vgg11 (two prioritised streams; ratios: linear ms / this ms)"
    echo
    echo "| model | B | PyTorch | linear | ooo conventional | ooo ooo | ooo reverse-first-k | ooo list | ooo + graph | best ooo vs linear | launches/syncs a linear step |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
} >> "$OUT"
convrow() {   # app batch [peer model]
    local model=$1 batch=$2 peer=${3:-$1} p lin lj row best
    p=$(key step_ms <<<"$("$PY" bench/cuda_peer.py "$peer" "$batch" "$STEPS" | tail -1)")
    lj=$(app "$model" --batch "$batch")
    lin=$(key step_ms <<<"$lj")
    [ -n "$p" ] && [ -n "$lin" ] || die "$model b$batch: no timing (PyTorch '$p', linear '$lin')"
    row="| $model | $batch | $p | $lin"
    best=1e30
    for o in conventional ooo reverse-first-k list graph; do
        local args="--backward ooo --order $o" t
        [ "$o" = graph ] && args="--backward ooo --cuda-graph"
        t=$(key step_ms <<<"$(app "$model" --batch "$batch" $args)")
        [ -n "$t" ] || die "$model b$batch $args: no timing"
        row="$row | $t ($(ratio "$lin" "$t")×)"
        best=$(awk "BEGIN{print ($t < $best) ? $t : $best}")
    done
    echo "$row | $(ratio "$lin" "$best")× | $(key device_launches <<<"$lj")/$(key device_syncs <<<"$lj") |" >> "$OUT"
}
convrow lenet 64
convrow lenet 256
convrow vgg11 32
convrow vgg11 128
convrow resnet 64 resnet20
convrow resnet 128 resnet20
cat "$OUT"
