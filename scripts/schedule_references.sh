#!/usr/bin/env bash
# docs/SCHEDULES.md's table against the reference schedulers: for every case of
# docs/schedule-references.csv (the figures of the zero-bubble papers' own schedulers, the
# file says how they were taken), the reference's makespan and peak beside those of the
# scanprop scheme held to it, as build/schedule prints them (the latency with transfers
# when the case has a transfer cost; peak_activations_max). Exits 1 if a scheme is longer
# than its reference or peaks higher.
# Usage: BUILD=build scripts/schedule_references.sh            the table on stdout
#        BUILD=build scripts/schedule_references.sh --write    replace it in docs/SCHEDULES.md
#                                                              (between its reference-table markers)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
exec /usr/bin/python3 - "$BUILD" "${1:-}" <<'PY'
import csv, json, re, subprocess, sys

build, mode = sys.argv[1], sys.argv[2]
V = {"zbv", "v-half", "v-min"}


def ours(row):
    p, m = int(row["p"]), int(row["m"])
    cmd = [f"{build}/schedule", "--scheme", row["scheme"], "--stages", str(2 * p if row["scheme"] in V else p),
           "--workers", str(p), "--microbatches", str(m), "--fwd-cost", row["f"], "--delta-cost", row["i"],
           "--grad-cost", row["w"], "--no-diagram"]
    if float(row["transfer"]) > 0:
        cmd += ["--transfer-cost", row["transfer"]]
    if float(row["mem_limit"]) > 0:
        cmd += ["--mem-limit", row["mem_limit"]]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    j = json.loads(next(l for l in out.splitlines() if l.startswith("{")))
    lat = j["latency"]
    if float(row["transfer"]) > 0:
        lat = float(re.search(r"with transfers \([^)]*\): latency ([0-9.e+-]+)", out).group(1))
    return lat, j["peak_activations_max"]


with open("docs/schedule-references.csv") as f:
    rows = list(csv.DictReader(l for l in f if not l.startswith("#")))
cols = [("zb.py, max_mem p", "zb-h1 · zb-auto"), ("zb.py, max_mem 2p", "zb-h2 · zb-auto"), ("zbv.py", "zbv"),
        ("zbv_greedy.py half", "v-half"), ("zbv_greedy.py min", "v-min")]
cases, worse = {}, []
for r in rows:
    ref = r["reference"] + (", max_mem p" if r["reference_setting"] == f"max_mem={r['p']}" else
                            ", max_mem 2p" if r["reference"] == "zb.py" else
                            " " + r["reference_setting"].split("=")[1] if r["reference"] == "zbv_greedy.py" else "")
    key = (int(r["p"]), int(r["m"]), r["f"], r["i"], r["w"], r["transfer"])
    lat, pk = ours(r)
    if lat > float(r["ref_makespan"]) + 1e-9 or pk > float(r["ref_peak"]) + 1e-9:
        worse.append(f"{r['scheme']} {key}: {lat:g} ({pk:g}) against {r['ref_makespan']} ({r['ref_peak']})")
    cell = cases.setdefault(key, {}).setdefault(ref, [f"{float(r['ref_makespan']):g} ({r['ref_peak']})"])
    cell.append(f"{lat:g} ({pk:g})")
lines = ["| p | m | F / I / W | transfer | " + " | ".join(f"{a} → {b}" for a, b in cols) + " |",
         "| ---: | ---: | --- | ---: | " + " | ".join("---" for _ in cols) + " |"]
for key in sorted(cases, key=lambda k: (k[0], k[1], float(k[3]) != 1, float(k[5]))):
    p, m, fc, ic, wc, tc = key
    cells = [" → ".join([cases[key][a][0], " · ".join(cases[key][a][1:])]) if a in cases[key] else "—" for a, _ in cols]
    lines.append(f"| {p} | {m} | {fc} / {ic} / {wc} | {tc} | " + " | ".join(cells) + " |")
table = "\n".join(lines) + "\n"
if mode == "--write":
    path = "docs/SCHEDULES.md"
    doc = open(path).read()
    a, b = "<!-- reference-table:begin -->\n", "<!-- reference-table:end -->"
    i, j = doc.index(a) + len(a), doc.index(b)
    open(path, "w").write(doc[:i] + table + doc[j:])
else:
    sys.stdout.write(table)
if worse:
    sys.stderr.write("longer or higher than the reference:\n" + "\n".join(worse) + "\n")
    sys.exit(1)
PY
