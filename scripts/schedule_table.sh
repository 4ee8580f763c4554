#!/usr/bin/env bash
# docs/SCHEDULES.md's comparison table: every scheme of `build/schedule --list` at p = 4
# workers, m = 8 micro-batches, with unit costs (8 stages, F = δ = G = 1 each) and with
# VGG-11's measured costs (docs/vgg11-costs-measured.csv: `build/vgg11 --costs-out`, the
# mean compute of each layer's F, δ and G at 32 samples a micro-batch, real activation
# sizes; its first lines say how it was taken): latency, bubble
# fraction (1 − utilisation), peak activations per rank and messages received per rank
# (activations + gradients + fetched weights, the text table's act_recv + grad_recv +
# wgt_recv). Every figure is build/schedule's own output.
# Usage: BUILD=build scripts/schedule_table.sh            the table on stdout
#        BUILD=build scripts/schedule_table.sh --write    replace it in docs/SCHEDULES.md
#                                                         (between its schedule-table markers)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
exec /usr/bin/python3 - "$BUILD" "${1:-}" <<'PY'
import json, subprocess, sys

build, mode = sys.argv[1], sys.argv[2]
P, M = 4, 8


def args(scheme):
    """The flags that put a scheme on P workers (beyond --workers P): lpp's groups, zb-auto's
    limit (1F1B's peak on rank 0: P chunk micro-batches)."""
    if scheme in ("lpp", "fslpp"):
        return ["--groups", "1", "--per-group", str(P)]
    if scheme == "zb-auto":
        return ["--mem-limit", str(P)]
    return []


def run(scheme, costs):
    argv = [build + "/schedule", "--scheme", scheme, "--workers", str(P), "--microbatches", str(M)] + args(scheme) + costs
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()
    j = json.loads(out[-1])
    head = next(i for i, l in enumerate(out) if l.startswith("worker "))
    cols = out[head].split()
    msgs = []
    for line in out[head + 1:head + 1 + j["workers"]]:
        v = dict(zip(cols, line.split()))
        msgs.append(int(v["act_recv"]) + int(v["grad_recv"]) + int(v["wgt_recv"]))
    return j, msgs


schemes = [s for s in json.loads(subprocess.run([build + "/schedule", "--list"], capture_output=True, text=True,
                                                check=True).stdout.splitlines()[-1])["schemes"] if s != "custom"]
unit = ["--stages", "8", "--fwd-cost", "1", "--delta-cost", "1", "--grad-cost", "1", "--no-diagram"]
vgg = ["--profile", "docs/vgg11-costs-measured.csv", "--no-diagram"]
rows = ["| scheme | unit: latency | bubble | peak act. per rank (stages) | messages per rank "
        "| VGG-11: latency (µs) | bubble | peak act. per rank (MB) | messages per rank |",
        "| --- | ---: | ---: | --- | --- | ---: | ---: | --- | --- |"]
for s in schemes:
    u, um = run(s, unit)
    v, vm = run(s, vgg)
    rows.append("| `%s` | %g | %.3f | %s | %s | %.0f | %.3f | %s | %s |" % (
        s, u["latency"], 1 - u["utilization"], " ".join("%g" % x for x in u["peak_activations"]),
        " ".join(map(str, um)), v["latency"], 1 - v["utilization"],
        " ".join("%.0f" % (x / 1e6) for x in v["peak_activation_bytes"]), " ".join(map(str, vm))))
table = "\n".join(rows) + "\n"
if mode != "--write":
    sys.stdout.write(table)
    sys.exit(0)
path = "docs/SCHEDULES.md"
text = open(path, encoding="utf-8").read()
begin, end = "<!-- schedule-table: begin (scripts/schedule_table.sh --write) -->\n", "<!-- schedule-table: end -->"
if begin not in text or end not in text:
    sys.exit("scanprop: %s has no schedule-table markers" % path)
a, b = text.index(begin) + len(begin), text.index(end)
open(path + ".tmp", "w", encoding="utf-8").write(text[:a] + table + text[b:])
import os
os.replace(path + ".tmp", path)
print("schedule_table: %d schemes written to %s" % (len(schemes), path))
PY
