#!/bin/sh
# test_install.sh — make test's out-of-tree check: make install into a temporary prefix,
# compile tests/install/residual.c with nothing but `pkg-config --cflags --libs
# scanprop`, and run it (trains a residual model with every engine, checks the loss
# falls and a checkpoint round trip). Quiet unless it fails.
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
echo "[====] install: out-of-tree program built with pkg-config and trained (linear, bppsa, ooo)"
