#!/bin/bash
# run.sh — `make bench`: scanprop next to PyTorch CPU in one run on one machine.
#
#   make bench                        both CPU settings (below), about 15 min on 2 cores
#   BENCH_QUICK=1 make bench          a ~5 min subset (one round, three for LeNet-5 and ResNet-20;
#                                     fewer sizes; both settings)
#   BENCH_SECTIONS=mem,resnet make bench   only some of: gemm lenet vgg resnet mem memrun rnn gru ooo
#                                     (memrun: the apps' default runs, training + evaluation)
#   BENCH_CPU=native make bench       only one CPU setting: native | avx2 | native,avx2 (default)
#   BENCH_AVX2_QUICK=0 make bench     the avx2 pass in full too (default: its quick subset)
#   BENCH_PERF=1 make bench           also perf-record lenet and vgg11 (top symbols)
#   BUILD=dir make bench              use the apps in dir (default build)
#
# The PyTorch reference scripts are bench/peers/*.py (SCANPROP_PEERS=dir runs others
# with the same command lines); they need Debian's python3-torch at /usr/bin/python3
# and the Fashion-MNIST files of dataset-fashion-mnist (scripts/deps.sh installs both).
# Writes bench/results/bench-<stamp>.md (machine, commands, ratio tables), .jsonl (one
# record per run) and .log (every run's output); bench/results/latest.md links the .md.
#
# CPU settings (bench/bench.py --cpu), each a pass over the sections, both sides alike:
#   native  OPENBLAS_CORETYPE, DNNL_MAX_CPU_ISA, ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY
#           removed from the environment: every library picks its own kernels
#   avx2    an AVX2-only machine emulated: OPENBLAS_CORETYPE=Haswell, DNNL_MAX_CPU_ISA=AVX2
#           and ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN here and in torch, scanprop's small kernel),
#           ATEN_CPU_CAPABILITY=avx2 (torch's own kernels)
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
BUILD=${BUILD:-build}
PY=/usr/bin/python3
PEERS=${SCANPROP_PEERS:-$REPO/bench/peers}
QUICK=${BENCH_QUICK:-0}
SECTIONS=${BENCH_SECTIONS:-gemm,lenet,vgg,resnet,mem,memrun,rnn,gru,ooo}
CPUS=${BENCH_CPU:-native,avx2}
AVX2_QUICK=${BENCH_AVX2_QUICK:-1}

die() { echo "bench: $*" >&2; exit 2; }

[ -f "$PEERS/common.py" ] || die "PyTorch reference scripts not found in $PEERS (bench/peers, or SCANPROP_PEERS=dir)"
[ -x "$PY" ] || die "$PY not found (the peers need Debian's python3-torch: scripts/deps.sh)"
TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) ||
    die "$PY cannot import torch (apt-get install python3-torch)"
for cpu in ${CPUS//,/ }; do
    case $cpu in native|avx2) ;; *) die "BENCH_CPU: unknown setting $cpu (expected native, avx2 or native,avx2)" ;; esac
done
for app in lenet vgg11 resnet rnn gru; do
    [ -x "$BUILD/$app" ] || die "$BUILD/$app not built (run make, or make BUILD=$BUILD)"
done

# The SGEMM probe links the same OpenBLAS as the apps.
mkdir -p bench/results
cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra $(pkg-config --cflags openblas 2>/dev/null ||
    echo -I/usr/include/x86_64-linux-gnu/openblas-pthread) -fopenmp bench/gemm.c \
    $(pkg-config --libs openblas 2>/dev/null || echo -lopenblas) -ldnnl -o bench/results/bench_gemm ||
    die "cannot compile bench/gemm.c against OpenBLAS and oneDNN"

STAMP=$(date +%Y%m%d-%H%M%S)
BASE=bench/results/bench-$STAMP
MD=$BASE.md
JSONL=$BASE.jsonl
LOG=$BASE.log
: > "$JSONL"
: > "$LOG"

header() {
    echo "# scanprop vs PyTorch CPU — bench $STAMP"
    echo
    echo '```'
    echo "command:            ${BENCH_CMD:-make bench} (BENCH_QUICK=$QUICK BENCH_CPU=$CPUS BENCH_AVX2_QUICK=$AVX2_QUICK BENCH_SECTIONS=$SECTIONS BUILD=$BUILD)"
    echo "date:               $(date -Is)"
    echo "host:               $(uname -srm)"
    echo "cpu:                $(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p')); $(grep -o -m1 -w 'avx512f' /proc/cpuinfo >/dev/null && echo AVX-512 || echo 'no AVX-512')"
    echo "cores:              $(nproc) online; $(lscpu | sed -n 's/^Thread(s) per core: *//p') thread(s)/core; $(lscpu | sed -n 's/^Hypervisor vendor: *//p' | sed 's/^./hypervisor &/')"
    echo "memory:             $(free -g | awk '/Mem:/{print $2" GiB"}')"
    echo "load average:       $(cut -d' ' -f1-3 /proc/loadavg) (at start; uptime: $(uptime | sed 's/.*load/load/'))"
    echo "CPU settings:       $CPUS (native: OPENBLAS_CORETYPE and ISA caps unset; avx2: OPENBLAS_CORETYPE=Haswell DNNL_MAX_CPU_ISA=ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2)"
    for ct in "" Haswell; do
        echo "OpenBLAS (${ct:-native}):  $(env -u OPENBLAS_CORETYPE ${ct:+OPENBLAS_CORETYPE=$ct} "$PY" -c 'import ctypes; l=ctypes.CDLL("libopenblas.so.0"); l.openblas_get_config.restype=ctypes.c_char_p; l.openblas_get_corename.restype=ctypes.c_char_p; print(l.openblas_get_config().decode(), "| core", l.openblas_get_corename().decode())' 2>/dev/null)"
    done
    echo "oneDNN:             $(dpkg-query -W -f='${Package} ${Version}\n' 'libdnnl*' 2>/dev/null | head -1)"
    echo "torch:              $TORCH_VERSION ($(dpkg-query -W -f='${Package} ${Version}' python3-torch 2>/dev/null)), peers: torch 2 threads, OpenBLAS pool 1 thread"
    echo "scanprop:           $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes'), apps in $BUILD, --threads 2"
    echo "threading env:      $(env | grep -E '^(OMP_|OPENBLAS_|MKL_|GOMP_)' | tr '\n' ' ')"
    echo '```'
    echo
}

header | tee "$MD"
T0=$(date +%s)
STATUS=0
for cpu in ${CPUS//,/ }; do
    Q=()
    if [ "$QUICK" = 1 ] || { [ "$cpu" = avx2 ] && [ "$AVX2_QUICK" = 1 ] && [ "$CPUS" != avx2 ]; }; then Q=(--quick); fi
    echo "bench: pass $cpu${Q:+ (quick)}, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    "$PY" bench/bench.py --build "$BUILD" --peers "$PEERS" --out "$JSONL" --log "$LOG" --cpu "$cpu" \
        --gemm bench/results/bench_gemm --data-dir bench/results/data --sections "$SECTIONS" "${Q[@]}" || STATUS=$?
done

{
    echo "Wall time $(( $(date +%s) - T0 )) s; load average at end: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Raw records: \`$JSONL\`; every run's output: \`$LOG\`."
    echo
    "$PY" bench/compare.py "$JSONL"
} | tee -a "$MD"

if [ "${BENCH_PERF:-0}" = 1 ] && command -v perf >/dev/null; then
    {
        for run in "lenet --data bench/results/data/fmnist --steps 200 --batch 64" \
                   "vgg11 --data bench/results/data/cifar --data-format cifar10 --steps 6 --batch 32"; do
            echo "## perf: $BUILD/$run --threads 2 --quiet (top symbols, self time)"
            echo
            echo '```'
            # shellcheck disable=SC2086
            perf record -q -o "$BASE.perf.data" -- "$BUILD"/$run --threads 2 --quiet >/dev/null 2>&1
            perf report -i "$BASE.perf.data" --no-children --sort dso,symbol --stdio 2>/dev/null |
                grep -E '^ +[0-9.]+%' | head -25
            echo '```'
            echo
        done
        rm -f "$BASE.perf.data" "$BASE.perf.data.old"
    } | tee -a "$MD"
fi

ln -sf "$(basename "$MD")" bench/results/latest.md
echo "bench: results in $MD"
[ $STATUS = 0 ] || echo "bench: some runs failed (see the Failed runs section and $LOG)" >&2
exit $STATUS
