#!/bin/sh
# test_install.sh — make test's out-of-tree check: make install into a temporary prefix,
# compile tests/install/residual.c and tests/install/runner.c with nothing but
# `pkg-config --cflags --libs scanprop`, and run them: residual trains a residual model
# with every engine (the loss falls, a checkpoint round trip); runner calls the apps'
# runner sp_run on a zoo model for a few steps with every engine (its JSON line, --save,
# a refused flag). Quiet unless it fails.
set -u
build=${BUILD:-build}
tmp=$(mktemp -d /tmp/scanprop-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log
fail() { echo "test_install: $1" >&2; cat "$log" >&2; exit 1; }
make --no-print-directory -s install PREFIX="$tmp/prefix" BUILD="$build" SAN="${SAN:-0}" >"$log" 2>&1 || fail "make install failed"
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs scanprop 2>>"$log") || fail "pkg-config does not know scanprop"
${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$tmp/residual" tests/install/residual.c $flags >>"$log" 2>&1 ||
    fail "the out-of-tree program does not compile with: cc residual.c $flags"
(cd "$tmp" && ./residual "$tmp/ck.safetensors") >>"$log" 2>&1 || fail "the out-of-tree program failed"
${CC:-cc} -std=c11 -Wall -Wextra -Werror -o "$tmp/runner" tests/install/runner.c $flags >>"$log" 2>&1 ||
    fail "the out-of-tree runner does not compile with: cc runner.c $flags"
for engine in linear bppsa ooo; do
    out=$("$tmp/runner" --steps 3 --quiet --threads 1 --backward "$engine" --save "$tmp/runner.safetensors" 2>>"$log") ||
        fail "the out-of-tree runner failed with --backward $engine"
    echo "$out" >>"$log"
    case $(echo "$out" | tail -n 1) in
        *'"app": "runner"'*'"backward": "'"$engine"'"'*'"steps": 3,'*) ;;
        *) fail "the out-of-tree runner's last line is not its JSON summary (--backward $engine)" ;;
    esac
    [ -s "$tmp/runner.safetensors" ] || fail "the out-of-tree runner did not --save (--backward $engine)"
    rm -f "$tmp/runner.safetensors"
done
"$tmp/runner" --order ooo >>"$log" 2>&1
[ $? -eq 2 ] || fail "the out-of-tree runner took --order without --backward ooo (expected exit 2)"
echo "[====] install: out-of-tree programs built with pkg-config: a model trained (linear, bppsa, ooo), and sp_run on a zoo model"
