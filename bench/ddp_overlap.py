#!/usr/bin/env python3
"""ddp_overlap.py TRACE... — how much gradient communication hid behind computation.

Reads Chrome traces written by `--parallel ddp --trace FILE` (thread 0: compute jobs,
thread 1: gradient buckets from their start until the rank saw them finish) and prints,
per trace, summed over ranks and over the traced steps but the first: the buckets' total
time in flight, the part of it during which the same rank was computing (hidden), the
rest (exposed), and the time the ranks sat blocked (thread 2) waiting for a bucket and
in the step's closing loss allreduce — what communication and the peers' skew cost."""
import json
import sys


def merge(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def overlap(a, b, comp):
    return sum(max(0.0, min(b, d) - max(a, c)) for c, d in comp)


for path in sys.argv[1:]:
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    total = hidden = blocked = loss = 0.0
    for pid in sorted({e["pid"] for e in ev}):
        comp = merge([(e["ts"], e["ts"] + e["dur"]) for e in ev if e["pid"] == pid and e["tid"] == 0])
        for e in ev:
            if e["pid"] == pid and e["tid"] == 1 and e["args"]["step"] >= 1:
                total += e["dur"]
                hidden += overlap(e["ts"], e["ts"] + e["dur"], comp)
            if e["pid"] == pid and e["tid"] == 2 and e["args"]["step"] >= 1:
                if e["name"] == "loss allreduce":
                    loss += e["dur"]
                else:
                    blocked += e["dur"]
    pct = 100.0 * hidden / total if total else 0.0
    print(f"{path}: communication in flight {total / 1e3:.2f} ms, hidden behind compute {hidden / 1e3:.2f} ms "
          f"({pct:.0f}%), exposed {(total - hidden) / 1e3:.2f} ms, blocked on buckets {blocked / 1e3:.2f} ms, "
          f"in the loss allreduce {loss / 1e3:.2f} ms")
