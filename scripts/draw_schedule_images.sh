#!/usr/bin/env bash
# draw_schedule_images.sh — docs/img/schedule-*.svg, the diagrams of docs/SCHEDULES.md,
# each drawn by the command the page gives for it, so that the images say what
# build/schedule draws today (job names, legend, units). Each drawing's latency is
# checked against the figure the page quotes (- where it quotes none); a mismatch fails
# the script (exit 1).
#   BUILD=build scripts/draw_schedule_images.sh
set -euo pipefail
cd "$(dirname "$0")/.."
S=${BUILD:-build}/schedule
[ -x "$S" ] || { echo "draw_schedule_images: $S not built (make)" >&2; exit 2; }
img=docs/img
U="--fwd-cost 1 --delta-cost 1 --grad-cost 1"
H="--fwd-cost .5 --delta-cost .5 --grad-cost .5"
F="--stages 8 --microbatches 1 --workers 2 $U --no-input-grad"
fail=0
draw() {   # file latency args...
    local file=$1 want=$2 got
    shift 2
    "$S" "$@" --svg "$img/$file" --no-diagram >/dev/null
    got=$(sed -n 's/.*class="l">latency \([0-9.e+-]*\) .*/\1/p' "$img/$file" | head -n 1)
    if [ "$want" != - ] && [ "$got" != "$want" ]; then
        echo "draw_schedule_images: $file: latency $got, the page says $want" >&2
        fail=1
    else
        echo "   $file: latency $got"
    fi
}
draw schedule-ddp.svg 8 --scheme ddp --stages 4 --microbatches 8
draw schedule-gpipe.svg 22 --scheme gpipe --stages 4 --microbatches 8
draw schedule-1f1b.svg 22 --scheme 1f1b --stages 4 --microbatches 8
draw schedule-lpp-fit.svg 22 --scheme lpp --stages 8 --microbatches 8 --groups 2 --per-group 4
draw schedule-lpp-crowded.svg 38 --scheme lpp --stages 8 --microbatches 16 --groups 2 --per-group 4
draw schedule-fslpp.svg 10 --scheme fslpp --stages 4 --microbatches 8 --groups 4 --per-group 4
draw schedule-ooo-conventional.svg 23 --scheme gpipe $F
draw schedule-ooo-ff.svg 19 --scheme ooo-ff $F
draw schedule-ooo-modulo.svg 16 --scheme ooo-modulo $F
draw schedule-vgg11-gpipe.svg 1.018e+05 --scheme gpipe --model vgg11 --workers 4 \
    --title "GPipe on VGG-11 (op costs, batch 32 per micro-batch, 1 TFLOP/s workers)"
draw schedule-vgg11-ooo-modulo.svg - --scheme ooo-modulo --model vgg11 --workers 4 \
    --title "ooo modulo allocation on VGG-11 (same costs)"
draw schedule-1f1b-strict.svg 33 --scheme 1f1b-strict --stages 4 --microbatches 8 $U
draw schedule-zb-h1.svg 27 --scheme zb-h1 --stages 4 --microbatches 8 $U
draw schedule-zb-h2.svg 27 --scheme zb-h2 --stages 4 --microbatches 8 $U
draw schedule-interleaved-1f1b.svg 28.5 --scheme interleaved-1f1b --stages 8 --workers 4 --microbatches 8 $H
draw schedule-looped-bfs.svg 16.5 --scheme looped-bfs --stages 8 --workers 4 --microbatches 4 $H
draw schedule-interleaved-zb.svg 25.5 --scheme interleaved-zb --stages 8 --workers 4 --microbatches 8 $H
draw schedule-zbv.svg 51 --scheme zbv --stages 8 --workers 4 --microbatches 8 $U
draw schedule-1f1b-v.svg 60 --scheme 1f1b-v --stages 8 --workers 4 --microbatches 8 $U
draw schedule-v-half.svg 53 --scheme v-half --stages 8 --workers 4 --microbatches 8 $U
draw schedule-v-min.svg 59 --scheme v-min --stages 8 --workers 4 --microbatches 8 $U
draw schedule-dualpipev.svg 51 --scheme dualpipev --stages 8 --workers 4 --microbatches 8 $U
draw schedule-dualpipe.svg 25 --scheme dualpipe --stages 4 --microbatches 8 $U
draw schedule-zb-auto.svg 33 --scheme zb-auto --stages 4 --microbatches 8 $U --mem-limit 3
draw schedule-lenet-1f1b-memory.svg 391.7 --scheme 1f1b --model lenet --workers 4 --microbatches 8
exit "$fail"
