#!/bin/sh
# ooo.sh — the ooo engine's benchmark (docs/OOO.md, docs/PERFORMANCE.md): training-step
# time of the linear engine and every ooo order, LeNet and VGG-11 at small batch on two
# threads, one process per model, the engines' steps interleaved (bench/ooo_bench.c).
# Run from the repository root.
#   BUILD=build ROUNDS=5 STEPS=10 TRACE_DIR=dir bench/ooo.sh
set -e
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-10}
make -s BUILD="$BUILD" "$BUILD/ooo_bench"
"$BUILD/ooo_bench" lenet 16 "$ROUNDS" "$STEPS" $TRACE_DIR
echo
"$BUILD/ooo_bench" vgg11 4 "$ROUNDS" "$STEPS" $TRACE_DIR
