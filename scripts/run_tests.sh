#!/usr/bin/env bash
# Runs every test binary given, even after a failure, and prints one line per suite and a
# closing line "suites: N passed, N failed". A suite's own output (Criterion's report,
# warnings) goes to $BUILD/test-logs/<suite>.log and is shown only when the suite fails
# (VERBOSE=1 shows it always). Exit status 1 if any suite failed.
# A suite that runs past SUITE_TIMEOUT seconds (default 600) is killed and counts as
# failed: a hang must never hold CI until its own limit.
# SUITE_FILTER="suite=pattern ..." runs only the tests of that suite matching the Criterion
# glob (make test-asan uses it to leave out multi-scheme sweeps that make test runs anyway).
# TEST_JOBS=N runs up to N suites at once (default: the CPUs online, at most 2): most
# suites keep one core busy, so on two cores the suites take about half the wall time.
# Lines come in the order the suites end; the closing line counts them all.
# Each suite keeps its temporary files under $BUILD/tmp/<suite> (SCANPROP_TEST_TMP,
# tests/testutil.c), removed after it, whatever it left there.
set -u
limit=${SUITE_TIMEOUT:-600}
build=${BUILD:-build}
logs="$build/test-logs"
jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "${TEST_JOBS:-}" ] || [ "$jobs" -le 2 ] || jobs=2
case $jobs in ''|*[!0-9]*|0) echo "run_tests.sh: TEST_JOBS=$jobs (expected a positive count)" >&2; exit 2 ;; esac
mkdir -p "$logs"

# One suite: its log, then a one-line result file (rc seconds) that the main loop reports.
run_one() {
  local t=$1 name log filter=() start rc tmp
  name=$(basename "$t")
  log="$logs/$name.log"
  for f in ${SUITE_FILTER:-}; do
    [ "${f%%=*}" = "$name" ] && filter=(--filter="${f#*=}")
  done
  tmp="$build/tmp/$name"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  start=$(date +%s)
  SCANPROP_TEST_TMP=$tmp timeout --kill-after=10 "$limit" "$t" --jobs=1 "${filter[@]}" >"$log" 2>&1
  rc=$?
  rm -rf "$tmp"
  echo "$rc $(( $(date +%s) - start ))" > "$logs/$name.result.tmp"
  mv "$logs/$name.result.tmp" "$logs/$name.result"
}

pass=0; fail=0; failed=(); pending=()
report() {   # the suites that ended since the last call, one line each
  local keep=() t name log rc secs summary
  for t in "${pending[@]}"; do
    name=$(basename "$t")
    log="$logs/$name.log"
    if [ ! -f "$logs/$name.result" ]; then keep+=("$t"); continue; fi
    read -r rc secs < "$logs/$name.result"
    rm -f "$logs/$name.result"
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
  pending=("${keep[@]+"${keep[@]}"}")
}

running=0
for t in "$@"; do
  rm -f "$logs/$(basename "$t").result"
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running-1))
    report
  fi
  run_one "$t" &
  running=$((running+1))
  pending+=("$t")
done
wait
report
[ "$fail" -gt 0 ] && echo "failed suites: ${failed[*]}"
echo "suites: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
