#!/bin/sh
# test_install.sh — make test's out-of-tree check: make install into a temporary prefix,
# then, with nothing but `pkg-config --cflags --libs scanprop` and the installed files:
#   - tests/install/residual.c (C): trains a residual model with every engine, checks
#     the loss falls and a checkpoint round trip;
#   - tests/install/cxx.cc (C++): the public headers compile as C++ and link with C
#     linkage (extern "C"), trains with every engine, builds a zoo model;
#   - tests/install/runner.c (C): the apps' runner sp_run on a zoo model for a few steps
#     with every engine (its JSON line, --save, a refused flag);
#   - docs/WRITING_MODELS.md's my_model.c (C), taken from the page: a residual model with
#     batch norm through sp_run; compiled warning-free, then the ```sh block printed
#     under it is run line by line as printed, in a scratch folder (the engines, --save,
#     --eval-only, --save-every/--resume, --microbatches and, with MPI and mpirun,
#     `mpirun -np 2` with --parallel ddp and --parallel 1f1b, whose checkpoint `cmp`
#     finds byte for byte the one-process --microbatches 4 run's); the mpirun lines'
#     JSON must say 2 workers and their batch-norm semantics;
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
# docs/WRITING_MODELS.md's whole program, and the commands printed under it, as printed:
# the page is the test (nothing is copied here).
doc=docs/WRITING_MODELS.md
doc_block() {   # the fenced block of $doc whose first line starts with $1
    awk -v want="$1" '
        /^```/ { if (inb) { if (index(buf, want) == 1) { printf "%s", buf; found = 1; exit }
                            inb = 0; next }
                 inb = 1; buf = ""; next }
        inb { buf = buf $0 "\n" }
        END { exit !found }' "$doc"
}
mkdir -p "$tmp/doc"
have_mpi=0
case " $flags " in *" -lmpi "*) command -v mpirun >/dev/null 2>&1 && have_mpi=1 ;; esac
if ! doc_block "/* my_model.c" >"$tmp/doc/my_model.c" || ! doc_block "cc -std=c11 -O2 my_model.c" >"$tmp/doc/run.sh"; then
    fail "$doc has no my_model.c block followed by the commands that build and run it"
elif ! ${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$tmp/doc/warnings" "$tmp/doc/my_model.c" $flags >>"$log" 2>&1; then
    fail "$doc's my_model.c does not compile without warnings (-Wall -Wextra -Werror) with: $flags"
else
    doc_ok=1
    ran=0
    while IFS= read -r line; do
        case $line in ''|'#'*) continue ;; esac
        case $line in *mpirun*|*1f1b.safetensors*) [ $have_mpi = 1 ] || continue ;; esac
        # (an ASan build: no leak check in the ranks, as the MPI suites run them — Open MPI
        # keeps what MPI_Init allocates; tests/testutil.h TU_MPI_FAST_ENV)
        out=$(cd "$tmp/doc" && ASAN_OPTIONS=detect_leaks=0 sh -c "$line" </dev/null 2>>"$log")
        rc=$?
        printf '$ %s\n%s\n' "$line" "$out" >>"$log"
        ran=$((ran + 1))
        if [ $rc -ne 0 ]; then
            fail "$doc: \`$line\` exited $rc"; doc_ok=0; break
        fi
        case $line in
            *"--parallel ddp"*) bn=per-rank ;;
            *"--parallel 1f1b"*) bn=per-micro-batch ;;
            *) bn= ;;
        esac
        if [ -n "$bn" ]; then
            scheme=${line#*--parallel }; scheme=${scheme%% *}
            case $(echo "$out" | tail -n 1) in
                *'"parallel": "'$scheme'", "workers": 2,'*'"batch_norm": "'$bn'"'*) ;;
                *) fail "$doc: \`$line\`: its JSON line does not say $bn batch norm on 2 workers"; doc_ok=0 ;;
            esac
        fi
    done <"$tmp/doc/run.sh"
    # (every line ran: none of them read the rest of the list as its input)
    want=$(grep -c '^[^#]' "$tmp/doc/run.sh")
    [ $have_mpi = 1 ] || want=$(grep '^[^#]' "$tmp/doc/run.sh" | grep -vc 'mpirun\|1f1b\.safetensors')
    if [ $doc_ok = 1 ] && [ "$ran" -ne "$want" ]; then
        fail "$doc: $ran of its $want commands ran"; doc_ok=0
    fi
    if [ $doc_ok = 1 ]; then
        done_list="$done_list; WRITING_MODELS.md's my_model.c built and run as printed ($ran commands"
        [ $have_mpi = 1 ] && done_list="$done_list, mpirun ddp and 1f1b = --microbatches 4 bitwise)" ||
            done_list="$done_list; no MPI or no mpirun: its mpirun lines skipped)"
    fi
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
