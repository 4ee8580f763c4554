#!/usr/bin/env bash
# Runs every test binary given, even after a failure, and prints one line per suite and a
# closing line "suites: N passed, N failed". A suite's own output (Criterion's report,
# warnings) goes to $BUILD/test-logs/<suite>.log and is shown only when the suite fails
# (VERBOSE=1 shows it always). Exit status 1 if any suite failed.
# A suite that runs past SUITE_TIMEOUT seconds (default 600) is killed and counts as
# failed: a hang must never hold CI until its own limit.
# SUITE_FILTER="suite=pattern ..." runs only the tests of that suite matching the Criterion
# glob (make test-asan uses it to leave out multi-scheme sweeps that make test runs anyway).
# The suites keep their temporary files under $BUILD/tmp (tests/testutil.c); what a
# crashed suite left there is removed after it.
set -u
limit=${SUITE_TIMEOUT:-600}
build=${BUILD:-build}
logs="$build/test-logs"
mkdir -p "$logs"
pass=0; fail=0; failed=()
for t in "$@"; do
  name=$(basename "$t")
  log="$logs/$name.log"
  filter=()
  for f in ${SUITE_FILTER:-}; do
    [ "${f%%=*}" = "$name" ] && filter=(--filter="${f#*=}")
  done
  start=$(date +%s)
  timeout --kill-after=10 "$limit" "$t" --jobs=1 "${filter[@]}" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  rm -rf "$build"/tmp/scanprop-test-*
  summary=$(grep -a 'Synthesis' "$log" | tail -n 1 | sed 's/.*Synthesis: //; s/\x1b\[[0-9;]*m//g')
  if [ "$rc" -eq 0 ]; then
    pass=$((pass+1)); echo "   $name: ${summary:-ok} (${secs}s)"
    [ "${VERBOSE:-0}" = 1 ] && cat "$log"
  else
    fail=$((fail+1)); failed+=("$name")
    echo "== $name FAILED (exit $rc, ${secs}s); its output ($log):"
    tail -n 300 "$log"
    { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && echo "   $name: killed after ${limit}s (hung?)"
  fi
done
[ "$fail" -gt 0 ] && echo "failed suites: ${failed[*]}"
echo "suites: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
