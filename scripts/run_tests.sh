#!/usr/bin/env bash
# Runs every test binary given, even after a failure, and prints one closing line
# "N passed, N failed" counting suites. Exit status 1 if any suite failed.
set -u
pass=0; fail=0; failed=()
for t in "$@"; do
  echo "== $(basename "$t")"
  if "$t" --jobs=1; then pass=$((pass+1)); else fail=$((fail+1)); failed+=("$(basename "$t")"); fi
done
[ "$fail" -gt 0 ] && echo "failed suites: ${failed[*]}"
echo "suites: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
