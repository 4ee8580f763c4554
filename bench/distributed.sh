#!/usr/bin/env bash
# Measured vs predicted step time of every --parallel scheme (docs/DISTRIBUTED.md).
# For each scheme and W: run `mpirun -np W build/<app> --parallel S ...` for a few steps
# (median step time from its JSON line), then ask the simulator for the latency of the
# SAME schedule from the SAME stage costs the run measured (--costs-out → build/schedule
# --profile). The simulator counts compute only (no communication, no optimizer step).
# Usage: bench/distributed.sh [app] [steps]       (default lenet 30)
#        bench/distributed.sh overlap [runs]       DDP's waiting: updates at the step's end
#            or in the next forward, conventional or ooo order (docs/DISTRIBUTED.md §2);
#            the variants interleaved, `runs` times (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ "${1:-}" = overlap ]; then
  F="--layers 8 --width 512 --steps 20 --batch 256 --threads 1 --quiet --parallel ddp --microbatches 2 --bucket-mb 1"
  for run in $(seq "${2:-5}"); do
    for sw in 1 0; do
      for order in linear ooo; do
        c=$(SCANPROP_EXEC_STEPWISE=$sw mpirun --oversubscribe --bind-to none -np 2 build/demo $F --backward $order \
            --trace "$tmp/t.json" | tail -1 | python3 -c "import json,sys; print(json.load(sys.stdin)['comm_ms'])")
        echo "run $run, stepwise=$sw, order $order: comm_ms $c; $(bench/ddp_overlap.py "$tmp/t.json" | sed 's/^[^:]*: //')"
      done
    done
  done
  exit 0
fi
app=${1:-lenet}; steps=${2:-30}
json() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d$1)"; }
base=$(build/$app --steps "$steps" --batch 64 --threads 1 --quiet --eval-every 1000000 2>/dev/null | json '["step_ms"]' 2>/dev/null || echo nan)
echo "single process, batch 64: step_ms $base"
printf '| scheme | W | B | measured step (ms) | predicted compute (ms) | measured / predicted | comm wait (ms, mean rank) |\n'
printf '| --- | --- | --- | --- | --- | --- | --- |\n'
for W in 2 4; do
  for s in ddp fsdp gpipe 1f1b lpp fslpp; do
    B=$W; extra=""; sflags=""
    case $s in
      gpipe|1f1b) B=$((2 * W));;
      lpp|fslpp) B=$((2 * W)); extra="--groups 2"; sflags="--groups 2 --per-group $((W / 2))";;
    esac
    out=$(mpirun --oversubscribe --bind-to none -np "$W" build/$app --steps "$steps" --batch 64 --threads 1 --quiet \
          --eval-every 1000000 --parallel "$s" --microbatches "$B" $extra --costs-out "$tmp/costs.csv" 2>/dev/null | tail -1)
    meas=$(echo "$out" | json '["step_ms"]'); comm=$(echo "$out" | json '["comm_ms"]')
    pred=$(build/schedule --profile "$tmp/costs.csv" --scheme "$s" --microbatches "$B" --workers "$W" $sflags \
           --no-input-grad --no-diagram | json '["latency"]/1000')
    printf '| %s | %d | %d | %.1f | %.1f | %.2f | %.1f |\n' "$s" "$W" "$B" "$meas" "$pred" \
      "$(python3 -c "print($meas/$pred)")" "$comm"
  done
done
