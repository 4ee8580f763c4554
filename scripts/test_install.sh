#!/bin/sh
# test_install.sh — make test's out-of-tree check: make install into a temporary prefix,
# then, with nothing but `pkg-config --cflags --libs scanprop` and the installed files:
#   - tests/install/residual.c (C): trains a residual model with every engine, checks
#     the loss falls and a checkpoint round trip;
#   - tests/install/cxx.cc (C++): the public headers compile as C++ and link with C
#     linkage (extern "C"), trains with every engine, builds a zoo model;
#   - tests/install/runner.c (C): the apps' runner sp_run on a zoo model for a few steps
#     with every engine (its JSON line, --save, a refused flag);
#   - tests/install/parallel.c (C): a residual model with batch norm through sp_run, under
#     `mpirun -np 2` with --parallel ddp and --parallel 1f1b (with MPI and mpirun): both
#     exit 0 with a finite loss, and the 1f1b run's checkpoint is byte for byte the one
#     of the program's own one-process run with --microbatches 4 (1f1b's M on 2 ranks);
#   - tests/install/zoo.c (C): a built-in model (sp_zoo_resnet20, layers/zoo.h) links
#     and trains from the installed library and saves a checkpoint;
#   - the installed python/scanprop_torch.py (pkg-config's pythondir) imports with
#     /usr/bin/python3 ($PYTHON) and, where torch is there, loads that checkpoint into
#     its own ResNet-20 with strict names and shapes.
# Every check runs; quiet unless one fails, then each failure with its log.
set -u
build=${BUILD:-build}
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d /tmp/scanprop-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log
failed=0
fail() { echo "test_install: $1" >&2; cat "$log" >&2; failed=1; }
make --no-print-directory -s install PREFIX="$tmp/prefix" BUILD="$build" SAN="${SAN:-0}" >"$log" 2>&1 ||
    { fail "make install failed"; exit 1; }
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs scanprop 2>>"$log") || { fail "pkg-config does not know scanprop"; exit 1; }
done_list=""

: >"$log"
if ! ${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$tmp/residual" tests/install/residual.c $flags >>"$log" 2>&1; then
    fail "the out-of-tree program does not compile with: cc residual.c $flags"
elif ! (cd "$tmp" && ./residual "$tmp/ck.safetensors") >>"$log" 2>&1; then
    fail "the out-of-tree program failed"
else
    done_list="C program trained (linear, bppsa, ooo)"
fi

: >"$log"
runner_ok=1
if ! ${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$tmp/runner" tests/install/runner.c $flags >>"$log" 2>&1; then
    fail "the out-of-tree runner does not compile with: cc runner.c $flags"
    runner_ok=0
else
    for engine in linear bppsa ooo; do
        out=$("$tmp/runner" --steps 3 --quiet --threads 1 --backward "$engine" --save "$tmp/runner.safetensors" 2>>"$log")
        rc=$?
        echo "$out" >>"$log"
        if [ $rc -ne 0 ]; then
            fail "the out-of-tree runner failed with --backward $engine"; runner_ok=0
        else
            case $(echo "$out" | tail -n 1) in
                *'"app": "runner"'*'"backward": "'"$engine"'"'*'"steps": 3,'*) ;;
                *) fail "the out-of-tree runner's last line is not its JSON summary (--backward $engine)"; runner_ok=0 ;;
            esac
            [ -s "$tmp/runner.safetensors" ] || { fail "the out-of-tree runner did not --save (--backward $engine)"; runner_ok=0; }
        fi
        rm -f "$tmp/runner.safetensors"
    done
    "$tmp/runner" --order ooo >>"$log" 2>&1
    [ $? -eq 2 ] || { fail "the out-of-tree runner took --order without --backward ooo (expected exit 2)"; runner_ok=0; }
fi
[ $runner_ok = 1 ] && done_list="$done_list; sp_run on a zoo model (linear, bppsa, ooo)"

: >"$log"
if ! ${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$tmp/parallel" tests/install/parallel.c $flags >>"$log" 2>&1; then
    fail "the out-of-tree parallel program does not compile with: cc parallel.c $flags"
elif ! case " $flags " in *" -lmpi "*) command -v mpirun >/dev/null 2>&1 ;; *) false ;; esac; then
    done_list="$done_list; no MPI or no mpirun: the mpirun check skipped"
else
    par_ok=1
    common="--steps 6 --threads 1 --quiet"
    # shellcheck disable=SC2086
    (cd "$tmp" && ./parallel $common --microbatches 4 --save one.safetensors) >>"$log" 2>&1 ||
        { fail "the out-of-tree parallel program failed on one process (--microbatches 4)"; par_ok=0; }
    for scheme in ddp 1f1b; do
        # shellcheck disable=SC2086
        # (an ASan build: no leak check in the ranks, as the MPI suites run them — Open MPI
        # keeps what MPI_Init allocates; tests/testutil.h TU_MPI_FAST_ENV)
        out=$(cd "$tmp" && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 \
            mpirun --oversubscribe --bind-to none -np 2 ./parallel $common --parallel $scheme \
            --save "$scheme.safetensors" 2>>"$log")
        rc=$?
        echo "$out" >>"$log"
        if [ $rc -ne 0 ]; then
            fail "the out-of-tree parallel program failed under mpirun -np 2 --parallel $scheme"; par_ok=0
            continue
        fi
        case $scheme in ddp) bn=per-rank ;; *) bn=per-micro-batch ;; esac
        case $(echo "$out" | tail -n 1) in
            *'"parallel": "'$scheme'", "workers": 2,'*'"batch_norm": "'$bn'"'*) ;;
            *) fail "the out-of-tree parallel program's JSON line under --parallel $scheme does not say $bn batch norm on 2 workers"; par_ok=0 ;;
        esac
    done
    if [ $par_ok = 1 ] && ! cmp -s "$tmp/1f1b.safetensors" "$tmp/one.safetensors"; then
        fail "the out-of-tree parallel program's 1f1b checkpoint differs from its one-process --microbatches 4 run"
        par_ok=0
    fi
    [ $par_ok = 1 ] && done_list="$done_list; a residual model with batch norm under mpirun -np 2 (ddp; 1f1b = --microbatches 4, bitwise)"
fi

: >"$log"
cxx=${CXX:-c++}
if ! command -v "$cxx" >/dev/null 2>&1; then
    done_list="$done_list; no C++ compiler ($cxx): C++ check skipped"
elif ! "$cxx" -std=c++17 -Wall -Wextra -Werror -o "$tmp/cxx" tests/install/cxx.cc $flags >>"$log" 2>&1; then
    fail "a C++ program does not compile or link with: $cxx cxx.cc $flags (extern \"C\" guards?)"
elif ! (cd "$tmp" && ./cxx "$tmp/cxx.safetensors") >>"$log" 2>&1; then
    fail "the C++ program failed"
else
    done_list="$done_list; C++ program linked and trained"
fi

: >"$log"
if ! ${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$tmp/zoo" tests/install/zoo.c $flags >>"$log" 2>&1; then
    fail "a program using the built-in models does not compile or link with: cc zoo.c $flags"
elif ! (cd "$tmp" && ./zoo "$tmp/resnet20.safetensors") >>"$log" 2>&1; then
    fail "the zoo program failed"
else
    done_list="$done_list; sp_zoo_resnet20 linked and trained"
fi

: >"$log"
pydir=$(pkg-config --variable=pythondir scanprop)
if [ ! -f "$pydir/scanprop_torch.py" ]; then
    fail "make install did not install scanprop_torch.py into pkg-config's pythondir ($pydir)"
elif [ ! -x "$python" ] || ! "$python" -c 'import numpy' >/dev/null 2>&1; then
    done_list="$done_list; no $python with numpy: python check skipped"
else
    # from the temporary folder, so that only the installed copy can be imported
    if ! (cd "$tmp" && PYTHONPATH="$pydir" "$python" - "$pydir" "$tmp/resnet20.safetensors") >>"$log" 2>&1 <<'PY'
import os, sys
import scanprop_torch as sp
pydir, ckpt = sys.argv[1], sys.argv[2]
assert os.path.dirname(os.path.abspath(sp.__file__)) == os.path.abspath(pydir), sp.__file__
tensors, meta = sp.read_safetensors(ckpt)
assert meta.get("scanprop_model") == "resnet20", meta
assert tensors["conv1.weight"].shape == (16, 1, 3, 3), tensors["conv1.weight"].shape
try:
    import torch  # noqa: F401
except ImportError:
    print("python: scanprop_torch imported from", pydir, "(no torch: model check skipped)")
    sys.exit(0)
model = sp.load(sp.zoo("resnet20"), ckpt, strict=True)
assert torch.equal(model.conv1.weight.detach(), torch.from_numpy(tensors["conv1.weight"]))
print("python: the installed library's resnet20 checkpoint loads into scanprop_torch.zoo('resnet20')")
PY
    then
        fail "the installed scanprop_torch.py does not import or does not read the zoo's checkpoint with $python"
    else
        done_list="$done_list; $(tail -n 1 "$log")"
    fi
fi

[ $failed = 0 ] || exit 1
echo "[====] install: out-of-tree programs built with pkg-config: $done_list"
