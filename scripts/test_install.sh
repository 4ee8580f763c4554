#!/bin/sh
# test_install.sh — make test's out-of-tree check: make install into a temporary prefix,
# then, with nothing but `pkg-config --cflags --libs scanprop` and the installed files:
#   - tests/install/residual.c (C): trains a residual model with every engine, checks
#     the loss falls and a checkpoint round trip;
#   - tests/install/cxx.cc (C++): the public headers compile as C++ and link with C
#     linkage (extern "C"), trains with every engine, builds a zoo model;
# Every check runs; quiet unless one fails, then each failure with its log.
set -u
build=${BUILD:-build}
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

[ $failed = 0 ] || exit 1
echo "[====] install: out-of-tree programs built with pkg-config: $done_list"
