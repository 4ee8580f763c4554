#!/usr/bin/env python3
"""Draw an executor trace (build/<app> --parallel S --trace FILE) as SVG: one band per
rank, compute jobs on top (forward light, backward dark, colour = micro-batch), gradient
collectives below. Usage: bench/trace_svg.py trace.json out.svg [title] [step or first-last]"""
import json, sys

src, out = sys.argv[1], sys.argv[2]
title = sys.argv[3] if len(sys.argv) > 3 else src
step = sys.argv[4] if len(sys.argv) > 4 else "1"   # a step, or a range "1-2"
lo, hi = (int(v) for v in (step.split("-") if "-" in step else (step, step)))
ev = [e for e in json.load(open(src))["traceEvents"] if e.get("ph") == "X" and lo <= e["args"]["step"] <= hi]
ranks = sorted({e["pid"] for e in ev})
t0 = min(e["ts"] for e in ev); t1 = max(e["ts"] + e["dur"] for e in ev)
W, left, band, lane = 1000.0, 70, 44, 20
scale = (W - left - 10) / max(t1 - t0, 1e-9)
pal = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"]
h = 40 + band * len(ranks) + 44
o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W:.0f}" height="{h}" font-family="sans-serif" font-size="11">',
     f'<text x="{left}" y="16" font-size="13">{title} (step {step}, {t1 - t0:.0f} us)</text>']
for i, r in enumerate(ranks):
    y = 30 + band * i
    o.append(f'<text x="4" y="{y + 14}">rank {r}</text><text x="4" y="{y + 34}" fill="#666">comm</text>')
    for e in sorted(ev, key=lambda e: e["tid"]):   # the blocked marks on top
        if e["pid"] != r:
            continue
        x, w = left + (e["ts"] - t0) * scale, max(e["dur"] * scale, 0.8)
        name = e["name"]
        if e["tid"] == 0:
            micro = ord(name[-1]) - ord("a") if name[-1].isalpha() else 0
            fill = pal[micro % len(pal)]
            op = "0.45" if name[0] == "f" else "1"
            o.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{lane - 2}" fill="{fill}" fill-opacity="{op}">'
                     f'<title>{name} {e["dur"]:.0f} us</title></rect>')
        else:
            fill, dy = ("#999", 0) if e["tid"] == 1 else ("#d62728", lane - 12)   # tid 2: the rank blocked
            o.append(f'<rect x="{x:.1f}" y="{y + lane + dy}" width="{w:.1f}" height="{lane - 6 - dy}" fill="{fill}">'
                     f'<title>{name} {e["dur"]:.0f} us</title></rect>')
o.append(f'<text x="{left}" y="{h - 22}" fill="#666">forward light, backward dark, colour = micro-batch; '
         f'grey = gradient allreduce/reduce from its start to when the rank saw it finish;</text>'
         f'<text x="{left}" y="{h - 8}" fill="#666">red = the rank blocked (on a gradient bucket, or in the '
         f'step\'s loss allreduce)</text></svg>')
open(out, "w").write("\n".join(o) + "\n")
