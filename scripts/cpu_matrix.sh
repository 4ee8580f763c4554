#!/usr/bin/env bash
# cpu_matrix.sh — the numerically and allocation-sensitive suites under every kernel
# family this CPU can execute, so that a result that holds only for the kernels of the
# developer's own machine cannot pass CI (issue 24: on AVX-512 CPUs OpenBLAS picks its
# SkylakeX or Cooperlake kernels, which allocated per call and summed in other orders).
# Rows: OpenBLAS forced to each core type whose instructions /proc/cpuinfo lists
# (OPENBLAS_CORETYPE = Prescott: SSE3; Haswell: AVX2 + FMA; SkylakeX: AVX-512
# F/BW/VL/DQ; Cooperlake: also AVX512_BF16), with SCANPROP_CONV=gemm so that OpenBLAS does
# every product, convolutions included; then oneDNN held to AVX2 (DNNL_MAX_CPU_ISA=AVX2,
# the default oneDNN convolutions, all direct there); and on AVX-512 oneDNN's direct
# convolutions where the default takes Winograd (SCANPROP_CONV_ALGO=direct). `make test` has already run everything with the
# machine's own choice. A row whose core OpenBLAS does not take is reported and skipped.
# Prints one line per (row, suite); a failing suite's output follows its line (the whole
# log: $BUILD/test-logs/matrix/<row>/<suite>.log). Exit status 1 if any suite failed.
# Usage: BUILD=build scripts/cpu_matrix.sh   (the suites must be built: make tests)
set -u
build=${BUILD:-build}
limit=${SUITE_TIMEOUT:-900}
cd "$(dirname "$0")/.."

# suite binary, then its --filter ("" = the whole suite). In brackets the seconds of one
# row on this project's 2-core machine, shared (load ~6): ~75 s a row, 6.1 min for the
# five rows of an AVX-512 CPU.
suites=(
    "test_alloc|"                      # [2] steady-state steps and GEMM shapes never malloc
    "test_parity|@(parity/resnet20|parity/rnn|parity/gru|parity/vgg11)"   # [31] vs PyTorch
    "test_soak|!(soak/lenet)"          # [7] heap and RSS flat over many steps (lenet: 13 s)
    "test_ooo|"                        # [10] ooo orders and lanes bitwise linear BP
    "test_train|@(train/same_seed*|train/lenet_deterministic*|train/ooo_*|train/eval_only*)"   # [6]
    "test_resume|"                     # [8] stop + resume bitwise an uninterrupted run
    "test_bppsa|"                      # [6] BPPSA against linear BP
    "test_dag|engines/*"               # [2] every engine against linear BP on DAGs
    "test_conv|conv_paths/*"           # [4] each convolution path (direct kernel on AVX2) vs loops
)

flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { local f; for f; do [[ "$flags" == *" $f "* ]] || return 1; done; }
rows=()
has pni && rows+=("OPENBLAS_CORETYPE=Prescott SCANPROP_CONV=gemm")
has avx2 fma && rows+=("OPENBLAS_CORETYPE=Haswell SCANPROP_CONV=gemm")
has avx512f avx512bw avx512vl avx512dq && rows+=("OPENBLAS_CORETYPE=SkylakeX SCANPROP_CONV=gemm")
has avx512f avx512bw avx512vl avx512dq avx512_bf16 && rows+=("OPENBLAS_CORETYPE=Cooperlake SCANPROP_CONV=gemm")
has avx2 && rows+=("DNNL_MAX_CPU_ISA=AVX2")
# oneDNN's direct convolutions where the default would take Winograd (AVX-512 only)
has avx512f avx512bw avx512vl avx512dq && rows+=("SCANPROP_CONV_ALGO=direct")

# The core OpenBLAS runs under a row's environment, asked of the library the suites load.
blas=$(ldd "$build/tests/test_alloc" 2>/dev/null | awk '/libopenblas/ { print $3; exit }')
corename() {
    [ -n "$blas" ] || return 0
    env "$@" python3 -c 'import ctypes, sys
l = ctypes.CDLL(sys.argv[1]); l.openblas_get_corename.restype = ctypes.c_char_p
print(l.openblas_get_corename().decode())' "$blas" 2>/dev/null
}

echo "cpu matrix: ${#rows[@]} rows × ${#suites[@]} suites (OpenBLAS picks $(corename) here)"
pass=0; fail=0; failed=()
for row in "${rows[@]}"; do
    read -r -a envs <<<"$row"
    want=$(sed -n 's/.*OPENBLAS_CORETYPE=\([A-Za-z0-9]*\).*/\1/p' <<<"$row")
    if [ -n "$want" ] && [ -n "$blas" ]; then
        got=$(corename "${envs[@]}")
        if [ "$got" != "$want" ]; then
            echo "   [$row] skipped: OpenBLAS runs $got, not $want (no DYNAMIC_ARCH build?)"
            continue
        fi
    fi
    tag=$(tr ' =' '_-' <<<"$row")
    logs="$build/test-logs/matrix/$tag"
    mkdir -p "$logs"
    for s in "${suites[@]}"; do
        name=${s%%|*}; filter=${s#*|}
        args=(--jobs=1)
        [ -n "$filter" ] && args+=("--filter=$filter")
        log="$logs/$name.log"
        start=$(date +%s)
        env "${envs[@]}" BUILD="$build" timeout --kill-after=10 "$limit" "$build/tests/$name" "${args[@]}" >"$log" 2>&1
        rc=$?
        secs=$(($(date +%s) - start))
        rm -rf "$build"/tmp/scanprop-test-*
        summary=$(grep -a 'Synthesis' "$log" | tail -n 1 | sed 's/.*Synthesis: //; s/\x1b\[[0-9;]*m//g')
        if [ "$rc" -eq 0 ]; then
            pass=$((pass + 1)); echo "   [$row] $name: ${summary:-ok} (${secs}s)"
        else
            fail=$((fail + 1)); failed+=("[$row] $name")
            echo "== [$row] $name FAILED (exit $rc, ${secs}s); its output ($log):"
            tail -n 200 "$log"
        fi
    done
done
[ "$fail" -gt 0 ] && printf 'failed: %s\n' "${failed[@]}"
echo "cpu matrix: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
