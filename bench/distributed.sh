#!/usr/bin/env bash
# Measured vs predicted step time of every --parallel scheme that has a schedule
# (docs/DISTRIBUTED.md §5). For each scheme and W: run `mpirun -np W build/<app>
# --parallel S ...` for a few steps (the median step after the first 5, "step_median_ms"
# of its JSON line, the mean step after the first, "step_mean_ms", and the mean wait on
# communication in it, "comm_mean_ms") beside the run's
# own prediction for the same schedule from the stage costs it measured
# (the JSON's predicted_step_ms: the simulator with communication and the optimizer step)
# and the whole memory per rank, measured against predicted.
# Usage: bench/distributed.sh [app] [steps]       (default lenet 30; steps >= 7)
#        WORKERS="2" COMM_PROFILE=FILE bench/distributed.sh vgg11 10   (rank counts; a calibration)
#        SCHEMES="ddp 1f1b" bench/distributed.sh ...   those schemes only (default: every one)
#        bench/distributed.sh resnet [steps]       ResNet-20 (batch norm, a DAG of 13 stages):
#            default 10 steps, and a row for ddp --sync-bn after ddp's (its allgathers in
#            the prediction); each run ends with the app's test-set evaluation (~0.5 min)
#        LPP_GROUPS=G bench/distributed.sh ...     lpp/fslpp with G groups (default W/2,
#            so R = 2: a looped pipeline; R < 2 would be data parallelism and is refused)
#        bench/distributed.sh overlap [runs]       DDP's waiting: updates at the step's end
#            or in the next forward, ddp or ddp-ooo (docs/DISTRIBUTED.md §2);
#            the variants interleaved, `runs` times (default 5)
#        bench/distributed.sh stepsync [runs]      --clip-grad-norm's global norm: --step-sync
#            plain or post-validate, with a clip that never triggers and one that always
#            does, ddp and gpipe at 2 ranks, interleaved, `runs` times (default 3)
#        bench/distributed.sh torch [steps] [runs]  ResNet-20 DDP on 2 ranks × 1 thread, batch 64,
#            against PyTorch DDP (gloo; bench/peers/resnet_ddp.py) from the same weights and
#            data: images/s after 5 warm-up steps (default 30 steps), the two interleaved
#            `runs` times (default 2), and the ratio
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
json() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d$1)"; }
if [ "${1:-}" = overlap ]; then
  F="--layers 8 --width 512 --steps 20 --batch 256 --threads 1 --quiet --microbatches 2 --bucket-mb 1"
  for run in $(seq "${2:-5}"); do
    for sw in 1 0; do
      for scheme in ddp ddp-ooo; do   # the conventional order, ooo's reverse first-k
        c=$(SCANPROP_EXEC_STEPWISE=$sw mpirun --oversubscribe --bind-to none -np 2 build/demo $F --parallel $scheme \
            --trace "$tmp/t.json" | tail -1 | python3 -c "import json,sys; print(json.load(sys.stdin)['comm_ms'])")
        echo "run $run, stepwise=$sw, $scheme: comm_ms $c; $(bench/ddp_overlap.py "$tmp/t.json" | sed 's/^[^:]*: //')"
      done
    done
  done
  exit 0
fi
if [ "${1:-}" = stepsync ]; then
  F="--layers 8 --width 512 --steps 20 --batch 256 --threads 1 --quiet --microbatches 4"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  for run in $(seq "${2:-3}"); do
    for scheme in ddp gpipe; do
      for clip in 1e9 1e-3; do
        for sync in plain post-validate; do
          mpirun --oversubscribe --bind-to none -np 2 build/demo $F --parallel $scheme --clip-grad-norm $clip \
              --step-sync $sync | tail -1 | python3 -c "import json,sys; d=json.load(sys.stdin); print('run $run, \
$scheme, clip $clip, $sync: step_mean_ms %.3f, clip_wait_ms %.3f, rollbacks %d' % (d['step_mean_ms'], \
d['clip_wait_ms'], d['clip_rollbacks']))"
        done
      done
    done
  done
  exit 0
fi
if [ "${1:-}" = torch ]; then
  steps=${2:-30}; W=5; B=64; PY=/usr/bin/python3
  "$PY" -c 'import torch' 2>/dev/null || { echo "bench/distributed.sh torch: $PY cannot import torch (python3-torch)" >&2; exit 2; }
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: bench/distributed.sh torch $steps ${3:-2}; commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' + changes')"
  echo "ResNet-20 DDP, 2 ranks x 1 thread, global batch $B, SGD lr 0.02 momentum 0.9 wd 1e-4, $W warm-up + $steps timed steps"
  # The peer writes the data (the first (W + steps)·B Fashion-MNIST images) and the initial
  # weights; scanprop trains from both in file order. Each side's per-step figure is the
  # median over its timed steps (each rank's, mean over the ranks) and the mean: scanprop's
  # step_median_ms leaves out the first 5 steps, step_mean_ms only the first.
  printf '| run | side | median step (ms) | mean step (ms) | images/s (median) |\n| --- | --- | --- | --- | --- |\n'
  sp_sum=0; pt_sum=0
  for run in $(seq "${3:-2}"); do
    pt=$("$PY" -B bench/peers/resnet_ddp.py "$tmp" --ranks 2 --threads 1 --batch $B --warmup $W --steps "$steps" | tail -1)
    ptmed=$(echo "$pt" | json '["step_median_ms"]'); ptmean=$(echo "$pt" | json '["step_mean_ms"]')
    sp=$(mpirun --oversubscribe --bind-to none -np 2 build/resnet --parallel ddp --threads 1 --batch $B --steps $((W + steps)) \
         --no-shuffle --quiet --data "$tmp/data" --load "$tmp/init.safetensors" 2>/dev/null | tail -1)
    spmed=$(echo "$sp" | json '["step_median_ms"]'); spmean=$(echo "$sp" | json '["step_mean_ms"]')
    printf '| %d | PyTorch DDP (gloo) | %.1f | %.1f | %.1f |\n' "$run" "$ptmed" "$ptmean" "$(python3 -c "print($B * 1e3 / $ptmed)")"
    printf '| %d | scanprop --parallel ddp | %.1f | %.1f | %.1f |\n' "$run" "$spmed" "$spmean" "$(python3 -c "print($B * 1e3 / $spmed)")"
    sp_sum=$(python3 -c "print($sp_sum + $spmed)"); pt_sum=$(python3 -c "print($pt_sum + $ptmed)")
  done
  echo "images/s ratio scanprop / PyTorch (mean of the runs' median steps): $(python3 -c "print('%.2f' % ($pt_sum / $sp_sum))") (target >= 1.5)"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi
app=${1:-lenet}; steps=${2:-30}
[ "$app" = resnet ] && steps=${2:-10}
[ "$steps" -ge 7 ] || { echo "bench/distributed.sh: $steps steps: expected >= 7 (the median leaves out the first 5)" >&2; exit 2; }
# The schemes: every schedule build/schedule simulates, under the names --parallel takes
# (one set, tests/test_apps.c schemes/one_set_of_names_for_schedule_and_parallel); scan,
# the one --parallel scheme without a schedule, has no prediction to compare with.
schemes=${SCHEMES:-$(build/schedule --list | json '["schemes"]' | tr -d "[]',")}
# batch norm: ddp with synchronized statistics too, as a scheme of its own ("ddp+sync-bn")
if [ "$app" = resnet ]; then
  schemes=$(for s in $schemes; do echo "$s"; if [ "$s" = ddp ]; then echo ddp+sync-bn; fi; done)
fi
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: bench/distributed.sh $app $steps"
base=$(build/$app --steps "$steps" --batch 64 --threads 1 --quiet --eval-every 1000000 2>/dev/null | json '["step_ms"]' 2>/dev/null || echo nan)
echo "single process, batch 64: median step_ms $base"
# Each run's JSON carries its own prediction, "predicted_step_ms" (the simulator with
# communication, sim_comm.c, from this run's mean job costs over the steps after the
# first, its measured per-job executor time and its communication model). It is set
# beside "step_median_ms", the median step after the first 5 (each rank's, mean over the
# ranks: cold starts and rare stalls left out), the figure the ±15% is judged on, and
# "step_mean_ms", the mean over the steps after the first (the statistic of the job costs).
# COMM_PROFILE=FILE gives every run that calibration (--comm-profile) instead of the
# short probe each run takes at its start. Memory: the range over the ranks of the
# measured "peak_memory_bytes" over "predicted_peak_memory_bytes".
cp_flag=""; [ -n "${COMM_PROFILE:-}" ] && cp_flag="--comm-profile $COMM_PROFILE"
echo "communication model: ${COMM_PROFILE:-the short probe of each run}"
printf '| scheme | W | G × R | B | median step (ms) | mean step (ms) | predicted (ms) | median / predicted | comm wait (ms) | peak memory measured / predicted |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n'
for W in ${WORKERS:-2 4}; do
  for s in $schemes; do
    [ "$s" = custom ] && continue   # a list from a file: the schemes above export theirs
    B=$W; extra=""; gr="—"; run=$s
    case $s in
      ddp|fsdp|ddp-ooo) ;;
      ddp+sync-bn) run=ddp; extra="--sync-bn";;
      lpp|fslpp)
        B=$((2 * W)); G=${LPP_GROUPS:-$((W / 2))}; R=$((W / G))
        if [ $((G * R)) -ne "$W" ] || [ "$R" -lt 2 ]; then
          echo "bench/distributed.sh: $s at W = $W with G = $G groups: R = W/G = $R; a looped pipeline needs W = G·R with R >= 2 (R = 1 is data parallelism)" >&2
          exit 2
        fi
        gr="$G × $R"; extra="--groups $G";;
      *) B=$((2 * W));;
    esac
    out=$(mpirun --oversubscribe --bind-to none -np "$W" build/$app --steps "$steps" --batch 64 --threads 1 --quiet \
          --eval-every 1000000 --parallel "$run" --microbatches "$B" $extra $cp_flag 2>/dev/null | tail -1) || true
    if [ -z "$out" ] || [ "$(echo "$out" | json '["parallel"]' 2>/dev/null)" != "$run" ]; then
      printf '| %s | %d | %s | %d | refused or failed | | | | | |\n' "$s" "$W" "$gr" "$B"; continue
    fi
    meas=$(echo "$out" | json '["step_mean_ms"]'); comm=$(echo "$out" | json '["comm_mean_ms"]')
    med=$(echo "$out" | json '["step_median_ms"]')
    pred=$(echo "$out" | json '["predicted_step_ms"]')
    mem=$(echo "$out" | json '.get("peak_memory_bytes")' 2>/dev/null)
    pmem=$(echo "$out" | json '.get("predicted_peak_memory_bytes")' 2>/dev/null)
    mr=$(python3 -c "m=$mem; p=$pmem; r=[a / b for a, b in zip(m, p)]; print('%.3f–%.3f' % (min(r), max(r)))" 2>/dev/null || echo "—")
    printf '| %s | %d | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n' "$s" "$W" "$gr" "$B" "$med" "$meas" "$pred" \
      "$(python3 -c "print($med/$pred)")" "$comm" "$mr"
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
