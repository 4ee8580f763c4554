#!/usr/bin/env bash
# Runs each libFuzzer target for N seconds on a scratch copy of its seed corpus.
# Usage: scripts/fuzz.sh BIN_DIR SECONDS TARGET...   (make fuzz FUZZ_SECONDS=N)
# New inputs go to build-fuzz/corpus/<target> (kept between runs, never into the repo);
# a crash is written to build-fuzz/crashes/<target>-crash-<sha1> and fails the run.
# One line per target: executions, corpus size, and whether it found something.
set -u
bin=$1; secs=$2; shift 2
root=$(dirname "$bin")
mkdir -p "$root/crashes"
fail=0
# Readers return an error status and free what they allocated: leaks are findings too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
# The library's ceiling on one allocation a file decides (core/error.h), 16 MiB: well
# under libFuzzer's -malloc_limit_mb (the 16 GiB default would let a 10-byte GIF ask
# stb_image for 1.2 GB), and it bounds the work per input (a 2 x 4194306 BMP is 25 MB
# of pixels to decode and resize: seconds under the sanitizers, not a hang).
export SCANPROP_MAX_FILE_ALLOC=${SCANPROP_MAX_FILE_ALLOC:-16777216}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in "$@"; do
  work="$root/corpus/$t"
  mkdir -p "$work"
  log="$root/fuzz-$t.log"
  "$bin/fuzz_$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$root/crashes/$t-" \
      "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz $t: ${execs:-?} executions in ${secs}s, $cov, corpus $(ls "$work" | wc -l) files: ok"
  else
    fail=1
    echo "fuzz $t: FAILED after ${execs:-?} executions (exit $rc); see $log:"
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5
  fi
done
exit $fail
