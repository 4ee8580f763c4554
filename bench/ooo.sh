#!/bin/sh
# ooo.sh — the ooo engine's benchmark (docs/OOO.md, docs/PERFORMANCE.md): training-step
# time of the linear engine and every ooo order, LeNet and VGG-11 at small batch on two
# threads, one process per model. Run from the repository root after `make`.
#   BUILD=build ROUNDS=5 STEPS=10 TRACE_DIR=dir bench/ooo.sh
set -e
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-10}
BLAS_CFLAGS=$(pkg-config --cflags openblas 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu/openblas-pthread)
BLAS_LIBS=$(pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
cc -O2 -std=c11 -D_GNU_SOURCE -pthread -I. $BLAS_CFLAGS bench/ooo_bench.c "$BUILD/libscanprop.a" \
   $BLAS_LIBS -ldnnl -lgomp -lz -lm -lpthread -o "$BUILD/ooo_bench"
"$BUILD/ooo_bench" lenet 16 "$ROUNDS" "$STEPS" $TRACE_DIR
echo
"$BUILD/ooo_bench" vgg11 4 "$ROUNDS" "$STEPS" $TRACE_DIR
