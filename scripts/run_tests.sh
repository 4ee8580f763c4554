#!/usr/bin/env bash
# Runs every test binary given, even after a failure, and prints one closing line
# "N passed, N failed" counting suites. Exit status 1 if any suite failed.
# A suite that runs past SUITE_TIMEOUT seconds (default 600) is killed and counts as
# failed: a hang must never hold CI until its own limit.
set -u
limit=${SUITE_TIMEOUT:-600}
pass=0; fail=0; failed=()
for t in "$@"; do
  echo "== $(basename "$t")"
  start=$(date +%s)
  timeout --kill-after=10 "$limit" "$t" --jobs=1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ "$rc" -eq 0 ]; then
    pass=$((pass+1)); echo "   ($(basename "$t"): ${secs}s)"
  else
    fail=$((fail+1)); failed+=("$(basename "$t")")
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "   $(basename "$t"): killed after ${limit}s (hung?)"
  fi
done
[ "$fail" -gt 0 ] && echo "failed suites: ${failed[*]}"
echo "suites: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
