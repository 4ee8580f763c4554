#!/usr/bin/env bash
# gpu_check.sh — what a lent GPU should measure, in one call (docs/CUDA.md "On a lent GPU").
#
#   scripts/gpu_check.sh [DIR]        everything into DIR (default: $OUT, else gpu-check)
#
# From binaries built beforehand (BUILD, default build-cuda; built here with
# `make CUDA=1 BUILD=$BUILD all cuda-tests` when they are missing), in order, each step's
# output in DIR and one line per step on stdout:
#   env.txt       GPU, driver, CUDA, cuDNN, PyTorch versions, the commit
#   suites.log    the CUDA suites (the CUDA emulator's counts of a steady-state step among them)
#   counts.md     what one steady-state step issues, per app and engine (the JSON's
#                 device_launches, device_library_calls, device_syncs, device_allocs, device_copies)
#   profile-*     one VGG-11 b128 step and one rnn T=1000 B=16 step: nsys's kernel summary
#                 when nsys is installed, else scanprop's own trace (--trace, ooo engine)
#   bench.md      make bench-cuda's tables (bench/cuda.sh, STEPS steps a run, default 10)
# A step that fails is reported and the next one runs; the exit status is 1 if any failed.
#
# Under the CUDA emulator (BUILD=build-emu, built with make CUDA=1 CUDA_EMU=1): the same
# steps at tiny sizes (LeNet in place of VGG-11 and ResNet-20, whose emulated steps take
# minutes), without PyTorch and without the bench — a check of this script
# end to end on the CPU machine (make test-cuda-emu runs it), so a GPU's minutes go to
# measuring. The data: random IDX files written into DIR/data (a GPU machine may lack
# Debian's Fashion-MNIST).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-cuda}
DIR=${1:-${OUT:-gpu-check}}
STEPS=${STEPS:-10}
PY=${PY:-python3}
emu=false
[ -f "$BUILD/libcudaemu.a" ] && emu=true
mkdir -p "$DIR" || { echo "gpu_check: cannot create $DIR" >&2; exit 2; }
failed=0
step() { echo "gpu_check: $*"; }
fail() { echo "gpu_check: FAILED: $*"; failed=1; }

if [ ! -x "$BUILD/vgg11" ] || [ ! -x "$BUILD/tests/test_ops_cuda" ]; then
    $emu && { echo "gpu_check: $BUILD is not built (make CUDA=1 CUDA_EMU=1 BUILD=$BUILD all cuda-tests)" >&2; exit 2; }
    step "building $BUILD"
    make -j"$(nproc)" CUDA=1 BUILD="$BUILD" all cuda-tests >"$DIR/build.log" 2>&1 || {
        echo "gpu_check: the build failed ($DIR/build.log)" >&2; exit 2; }
fi

# ---- env.txt
{
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "build: $BUILD$($emu && echo ' (CUDA emulator)')"
    if ! $emu; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
        (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | tail -n 1 | sed 's/^/cuda: /'
        "$PY" -c 'import torch; print("torch:", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1
    fi
    echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')"
} >"$DIR/env.txt"
step "env: $(head -c 300 "$DIR/env.txt" | tr '\n' ';')"

# ---- data: random IDX images in the Fashion-MNIST file names
mkdata() {   # dir ntrain ntest
    "$PY" - "$@" <<'EOF'
import os, random, struct, sys
d, ntr, nte = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d, exist_ok=True)
rng = random.Random(1)
for prefix, n in (("train", ntr), ("t10k", nte)):
    with open(os.path.join(d, prefix + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(rng.randrange(256) for _ in range(n * 784)))
    with open(os.path.join(d, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(rng.randrange(10) for _ in range(n)))
EOF
}
if $emu; then ntrain=32 ntest=16 small=8 big=8 steps=3; else ntrain=1024 ntest=256 small=64 big=128 steps=$STEPS; fi
mkdata "$DIR/data" "$ntrain" "$ntest" || fail "writing $DIR/data"
data=(--data "$DIR/data" --data-format idx)
json() { tail -n 1; }
key() { sed -n "s/.*\"$1\": \\([0-9.eE+-]*\\).*/\\1/p"; }

# ---- suites.log
step "CUDA suites"
suites=("$BUILD"/tests/test_*_cuda)
if $emu; then   # the counts and one bitwise case per suite: the script's check, not the emulator's run
    BUILD="$BUILD" "$BUILD/tests/test_ooo_cuda" --filter='ooo_cuda/steady_state_step_counts' >"$DIR/suites.log" 2>&1 ||
        fail "CUDA suites ($DIR/suites.log)"
else
    BUILD="$BUILD" ./scripts/run_tests.sh "${suites[@]}" >"$DIR/suites.log" 2>&1 || fail "CUDA suites ($DIR/suites.log)"
fi
tail -n 3 "$DIR/suites.log" | sed 's/^/    /'

# ---- counts.md
step "what a steady-state step issues"
{
    echo "| run | launches | library calls | host waits | allocations | copies | step ms |"
    echo "|---|---|---|---|---|---|---|"
} >"$DIR/counts.md"
count_row() {   # label app args...
    local label=$1 out
    shift
    out=$("$@" --steps "$steps" --device cuda --quiet 2>>"$DIR/counts.log" | json) || { fail "$label"; return; }
    echo "| $label | $(key device_launches <<<"$out") | $(key device_library_calls <<<"$out") | $(key device_syncs <<<"$out") | $(key device_allocs <<<"$out") | $(key device_copies <<<"$out") | $(key step_ms <<<"$out") |" >>"$DIR/counts.md"
}
for b in linear ooo; do
    count_row "lenet b$small $b" "$BUILD/lenet" "${data[@]}" --batch "$small" --backward "$b"
    $emu && continue   # an emulated VGG-11 or ResNet-20 step takes minutes
    count_row "vgg11 b$big $b" "$BUILD/vgg11" "${data[@]}" --batch "$big" --backward "$b"
    count_row "resnet b$big $b" "$BUILD/resnet" "${data[@]}" --batch "$big" --backward "$b"
done
$emu && T=20 || T=1000
count_row "rnn T=$T B=16 linear" "$BUILD/rnn" --seq-len "$T" --hidden 20 --batch 16 --samples 64 --backward linear
count_row "rnn T=$T B=16 bppsa" "$BUILD/rnn" --seq-len "$T" --hidden 20 --batch 16 --samples 64 --backward bppsa
cat "$DIR/counts.md" | sed 's/^/    /'

# ---- profile-*
step "profiles"
profile() {   # name app args...
    local name=$1
    shift
    if ! $emu && command -v nsys >/dev/null 2>&1; then
        nsys profile --force-overwrite true -o "$DIR/profile-$name" "$@" --device cuda --steps 3 --quiet \
            >"$DIR/profile-$name.log" 2>&1 &&
        nsys stats --report cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum --format csv \
            --output "$DIR/profile-$name" "$DIR/profile-$name.nsys-rep" >>"$DIR/profile-$name.log" 2>&1 ||
            fail "nsys on $name ($DIR/profile-$name.log)"
    else   # scanprop's own event trace: every task's device time on its stream
        "$@" --device cuda --steps 3 --quiet --backward ooo --trace "$DIR/profile-$name.trace.json" \
            >"$DIR/profile-$name.log" 2>&1 || fail "trace of $name ($DIR/profile-$name.log)"
    fi
}
if $emu; then profile "lenet-b$small" "$BUILD/lenet" "${data[@]}" --batch "$small"
else profile "vgg11-b$big" "$BUILD/vgg11" "${data[@]}" --batch "$big"; fi
profile "rnn-T$T-B16" "$BUILD/rnn" --seq-len "$T" --hidden 20 --batch 16 --samples 64
ls "$DIR" | grep '^profile-' | sed 's/^/    /'

# ---- bench.md
if $emu; then
    step "bench: skipped under the emulator"
else
    step "bench (make bench-cuda's tables, STEPS=$STEPS)"
    if BUILD="$BUILD" STEPS="$STEPS" PY="$PY" ./bench/cuda.sh >"$DIR/bench.md" 2>"$DIR/bench.log"; then
        tail -n 12 "$DIR/bench.md" | sed 's/^/    /'
    else
        fail "bench ($DIR/bench.log)"
    fi
fi

step "done: $DIR ($([ "$failed" -eq 0 ] && echo 'every step passed' || echo 'a step failed'))"
exit "$failed"
