#!/usr/bin/env bash
# golden.sh — outputs of short runs, for a change that must not change behaviour
# (a move, a split, a new seam). Records the last JSON line of each app run minus its
# timings, the sha256 of the checkpoint it saved, and the stdout of build/schedule and
# build/jacobian, one file per command, then compares two recordings.
#   scripts/golden.sh record DIR        run everything from $BUILD (default build) into DIR
#   scripts/golden.sh check DIR         record into a temporary folder, diff against DIR
# Exit 0 when check finds every output byte-identical, 1 when one differs.
set -euo pipefail
BUILD=${BUILD:-build}
mode=${1:-}; dir=${2:-}
[ -n "$mode" ] && [ -n "$dir" ] || { echo "usage: golden.sh record|check DIR" >&2; exit 2; }
strip() {   # the last JSON line without the keys that are timings
    tail -n 1 | sed -E 's/, "(images_per_s|seconds|forward_ms|backward_ms|step_ms|critical_path_ms|peak_bytes)": [^,}]*//g'
}
record() {
    local out=$1 tmp
    mkdir -p "$out"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    local apps=(
        "lenet --steps 3"
        "vgg11 --steps 2 --batch 8"
        "resnet --steps 2 --batch 8"
        "rnn --steps 3 --samples 256"
        "gru --steps 3 --samples 256"
        "demo --steps 5"
    )
    local a eng name
    for a in "${apps[@]}"; do
        for eng in linear bppsa ooo; do
            # bppsa on the CNNs holds every Jt of the chain: tens of GB, so the small ones only
            case "$a $eng" in vgg11*bppsa|resnet*bppsa) continue ;; esac
            name=$(echo "$a $eng" | tr ' ' '_' | tr -d '-')
            # demo takes no --backward other than its own flag set: skip what it refuses
            if ! "$BUILD"/$a --backward $eng --quiet --threads 1 --save "$tmp/$name.st" \
                    >"$tmp/$name.out" 2>"$tmp/$name.err"; then
                echo "refused: $(tail -n 1 "$tmp/$name.err")" >"$out/$name.json"
                continue
            fi
            strip <"$tmp/$name.out" >"$out/$name.json"
            sha256sum <"$tmp/$name.st" | cut -d' ' -f1 >"$out/$name.sha256"
        done
    done
    "$BUILD"/schedule --scheme gpipe --stages 4 --microbatches 8 >"$out/schedule_gpipe.txt"
    "$BUILD"/schedule --scheme 1f1b --split --stages 4 --microbatches 8 >"$out/schedule_1f1b.txt"
    "$BUILD"/schedule --scheme lpp --workers 4 --groups 2 --microbatches 8 >"$out/schedule_lpp.txt"
    "$BUILD"/schedule --scheme ooo-modulo --model lenet --microbatches 4 --no-diagram >"$out/schedule_ooo.txt"
    "$BUILD"/schedule --list >"$out/schedule_list.txt"
    # the table without its timing columns; the JSON line without its timing keys
    "$BUILD"/jacobian --model lenet --columns 16 | sed -E 's/, "(analytic|columnwise)_ms": [^,}]*//g' \
        | awk '/^[a-z_0-9]+ +[a-z_0-9]+ +[0-9]+ +[0-9]+/ { NF = 10 } { print }' >"$out/jacobian_lenet.txt"
    "$BUILD"/lenet --backward bppsa --plan >"$out/lenet_plan.txt" 2>&1
    "$BUILD"/demo --backward bppsa --plan >"$out/demo_plan.txt" 2>&1 || true
}
case $mode in
    record) record "$dir" ;;
    check)
        new=$(mktemp -d)
        record "$new"
        if diff -r "$dir" "$new"; then echo "golden: identical ($(ls "$dir" | wc -l) files)"; rm -rf "$new"
        else echo "golden: outputs differ (new ones in $new)"; exit 1; fi ;;
    *) echo "usage: golden.sh record|check DIR" >&2; exit 2 ;;
esac
