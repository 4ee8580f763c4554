#!/usr/bin/env bash
# The teaching page's model data (make site): for each preset, the ooo task graph and its
# orders (build/ooo_export) and the bppsa scan plan at every --scan-levels (the app's own
# --plan=full, its step table and JSON line kept as they are printed).
# Usage: BUILD=build scripts/site_data.sh OUTDIR
set -euo pipefail
B=${BUILD:-build}
out=$1
mkdir -p "$out"
for m in lenet vgg11 rnn; do
  "$B/ooo_export" "$m" 8 >"$out/ooo-$m.json.tmp" && mv "$out/ooo-$m.json.tmp" "$out/ooo-$m.json"
done
# bppsa: one text file per model and depth; the page shows the table and the JSON figures.
# lenet-pruned: LeNet with 90 % of its conv/linear weights pruned (sparser Jt patterns).
for src in lenet rnn lenet-pruned; do
  app=${src%-pruned}
  extra=()
  [ "$src" = lenet-pruned ] && extra=(--prune 0.9)
  full=$("$B/$app" --backward bppsa --plan --batch 8 --quiet "${extra[@]}" | tail -1 | sed 's/.*"full_levels": \([0-9]*\).*/\1/')
  for k in $(seq 0 "$full"); do
    "$B/$app" --backward bppsa --plan=full --scan-levels "$k" --batch 8 --quiet "${extra[@]}" >"$out/bppsa-$src-$k.txt"
  done
  echo "$full" >"$out/bppsa-$src-full.txt"
done
echo "site data: $(ls "$out" | wc -l) files in $out"
