#!/usr/bin/env python3
"""make_fixtures.py — action lists in the raw forms PyTorch's torch.distributed.pipelining
writes (test fixtures for test_actions' torch_* tests; run from the repository root after
`make`, then commit what it writes here).

For each schedule: NAME.csv, scanprop's own list (build/schedule --actions-out, the
computation only; ScheduleInterleavedZeroBubble, which scanprop has no scheme for, by
PyTorch's rule, interleaved_zb below), and two PyTorch forms of the same order, written by the rules of
PyTorch's schedules.py (its pipeline_order and the runtime's lowering, re-implemented here
from their descriptions):
  NAME_compute.csv  pipeline_order on a grid of unit time steps: an empty cell where the
                    rank idles; Schedule1F1B (a single-stage schedule) with its
                    REDUCE_GRAD after each stage's last backward and no empty cells;
                    DualPipeV's overlapped F and B as (aFm;bBn)OVERLAP_F_B.
  NAME_comms.csv    what _PipelineScheduleRuntime._dump_csv writes by default: the
                    computation with UNSHARD/RESHARD (three stages active at most),
                    REDUCE_GRAD, and a SEND_F/SEND_B after each computation whose
                    consumer is on another rank, its RECV_F/RECV_B on that rank.
Lines end in CRLF, as Python's csv.writer writes them.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
P, M = 4, 8
SCHEDULES = [  # PyTorch's class, scanprop's scheme, extra flags, stages (chunks)
    ("Schedule1F1B", "1f1b-strict", [], P),
    ("ScheduleInterleaved1F1B", "interleaved-1f1b", ["--chunks", "2"], 2 * P),
    ("ScheduleLoopedBFS", "looped-bfs", ["--chunks", "2"], 2 * P),
    ("ScheduleZBVZeroBubble", "zbv", [], 2 * P),
    ("ScheduleDualPipeV", "dualpipev", [], 2 * P),
    ("ScheduleInterleavedZeroBubble", None, [], 2 * P),   # no scanprop scheme: PyTorch's rule below
]


def interleaved_zb(p, v, m):
    """ScheduleInterleavedZeroBubble's pipeline_order (ZB1P on v stages per rank), by the
    rules of its _calculate_single_rank_operations and _add_bubbles_to_actions: rank r
    waits r steps, runs its warm-up forwards (stage by stage in rounds of m/rounds
    micro-batches), waits p - r - 1 steps, then pairs F with I, each I followed by the W
    of the backward r pairs earlier, and ends with the I's and W's left."""
    rounds = max(1, m // p)
    per = m // rounds
    orders = []
    for r in range(p):
        warm = min((v - 1) * per + (p - 1 - r), m * v)
        total = v * m + warm
        fstage = lambda k: ((k // per) % v) * p + r
        bstage = lambda k: (v - 1 - ((k - warm) // per) % v) * p + r
        nf, nb, nw = {}, {}, {}
        ops, bids, wc = [None] * r, [], 0

        def take(d, st):
            d[st] = d.get(st, 0) + 1
            return d[st] - 1

        for k in range(total):
            if k < warm:
                st = fstage(k)
                ops.append((st, "F", take(nf, st)))
                if k == warm - 1:
                    ops += [None] * (p - r - 1)
                continue
            if k < v * m:
                st = fstage(k)
                ops.append((st, "F", take(nf, st)))
            st = bstage(k)
            ops.append((st, "I", take(nb, st)))
            bids.append(k)
            if k - warm >= r:
                st = bstage(bids[wc])
                ops.append((st, "W", take(nw, st)))
                wc += 1
        while wc < len(bids):
            st = bstage(bids[wc])
            ops.append((st, "W", take(nw, st)))
            wc += 1
        orders.append(ops)
    # idle steps where a forward's input (or a full backward's gradient) is not there yet
    seen, out, head = set(), [[] for _ in range(p)], [0] * p
    while any(head[r] < len(orders[r]) for r in range(p)):
        now = set()
        for r in range(p):
            if head[r] >= len(orders[r]):
                continue
            a = orders[r][head[r]]
            if a is None:
                head[r] += 1
                out[r].append(None)
                continue
            c, t, b = a
            if t == "F" and c != 0 and (c - 1, "F", b) not in seen:
                out[r].append(None)
                continue
            out[r].append(a)
            now.add(a)
            head[r] += 1
        seen |= now
    return out


def parse(cell):
    i = 0
    while cell[i].isdigit():
        i += 1
    return (int(cell[:i]), cell[i], int(cell[i + 1:]))


def s(a):
    return "%d%s%d" % a


def grid(rows, stages):
    """Unit steps: each rank runs its next action when its predecessors ran in earlier steps."""
    rank_of = {}
    for r, row in enumerate(rows):
        for c, _, _ in row:
            rank_of[c] = r
    done, out, head = set(), [[] for _ in rows], [0] * len(rows)
    while any(head[r] < len(rows[r]) for r in range(len(rows))):
        now = []
        for r, row in enumerate(rows):
            if head[r] >= len(row):
                continue
            c, t, b = row[head[r]]
            if t == "F":
                deps = [(c - 1, "F", b)] if c > 0 else []
            elif t == "W":
                deps = [(c, "I", b)]
            else:
                deps = [(c, "F", b)]
                if c + 1 < stages:
                    deps.append((c + 1, "I", b) if (c + 1, "I", b) in done else (c + 1, "B", b))
            if all(d in done for d in deps):
                out[r].append(row[head[r]])
                now.append(row[head[r]])
                head[r] += 1
            else:
                out[r].append(None)
        done.update(now)
    return out


def cell_str(a):
    if a is None:
        return ""
    if isinstance(a, list):
        return "(" + ";".join(s(x) for x in a) + ")OVERLAP_F_B"
    return a if isinstance(a, str) else s(a)


def leaves(a):
    return a if isinstance(a, list) else [a]


def overlap(row):
    """DualPipeV: an F followed by a B of another chunk runs as one overlapped pair."""
    out, i = [], 0
    while i < len(row):
        a = row[i]
        if a is not None and i + 1 < len(row) and row[i + 1] is not None and a[1] == "F" and row[i + 1][1] == "B" \
                and row[i + 1][0] != a[0]:
            out.append([a, row[i + 1]])
            i += 2
        else:
            out.append(a)
            i += 1
    return out


def reduce_grad(row):
    cnt, out = {}, []
    for a in row:
        if a is None:
            continue
        out.append(a)
        for x in leaves(a):
            if isinstance(x, tuple) and x[1] in "WB":
                cnt[x[0]] = cnt.get(x[0], 0) + 1
                if cnt[x[0]] == M:
                    out.append("%dREDUCE_GRAD" % x[0])
    return out


def unshard(row, most=3):
    active, out = [], []
    compute = [a for a in row if a is not None]
    for i, a in enumerate(compute):
        nxt = []
        for b in compute[i:]:
            for x in leaves(b):
                if x[0] not in nxt:
                    nxt.append(x[0])
            if len(nxt) >= most:
                break
        nxt = nxt[:most]
        for st in [st for st in active if st not in nxt]:
            active.remove(st)
            out.append("%dRESHARD" % st)
        for st in [st for st in nxt if st not in active]:
            active.append(st)
            out.append("%dUNSHARD" % st)
        out.append(a)
    for st in list(active):
        out.append("%dRESHARD" % st)
    return out


def send_recv(rows, stages, rank_of):
    rows = [list(r) for r in rows]
    out = [[] for _ in rows]
    prev = [set() for _ in rows]

    def comm(x):
        c, t, b = x
        if t == "F" and c + 1 < stages and rank_of[c + 1] != rank_of[c]:
            return ("%dSEND_F%d" % (c, b), "%dRECV_F%d" % (c + 1, b), rank_of[c + 1])
        if t in "IB" and c > 0 and rank_of[c - 1] != rank_of[c]:
            return ("%dSEND_B%d" % (c, b), "%dRECV_B%d" % (c - 1, b), rank_of[c - 1])
        return None

    def ready(x, seen):
        if not isinstance(x, tuple):
            return True
        c, t, b = x
        if t == "F" and c > 0:
            return "%dRECV_F%d" % (c, b) in seen or (c - 1, "F", b) in seen
        if t in "IB" and c + 1 < stages:
            return "%dRECV_B%d" % (c, b) in seen or (c + 1, "I", b) in seen or (c + 1, "B", b) in seen
        return True

    while any(rows):
        progress = False
        for r in range(len(rows)):
            if not rows[r]:
                continue
            a = rows[r][0]
            if not all(ready(x, prev[r]) for x in leaves(a)):
                continue
            out[r].append(a)
            for x in leaves(a):
                prev[r].add(x)
                if isinstance(x, tuple) and comm(x):
                    send, recv, to = comm(x)
                    out[r].append(send)
                    prev[r].add(send)
                    out[to].append(recv)
                    prev[to].add(recv)
            rows[r].pop(0)
            progress = True
        if not progress:
            sys.exit("malformed schedule")
    return out


def write(path, rows):
    with open(path, "w", newline="") as f:
        for row in rows:
            f.write(",".join(cell_str(a) for a in row) + "\r\n")


def main():
    for name, scheme, extra, stages in SCHEDULES:
        clean = os.path.join(HERE, name + ".csv")
        if scheme:
            subprocess.run(["build/schedule", "--scheme", scheme, "--stages", str(stages), "--microbatches", str(M),
                            "--workers", str(P), "--no-diagram", "--actions-out", clean] + extra,
                           check=True, stdout=subprocess.DEVNULL)
            rows = [[parse(c) for c in line.strip().split(",") if c] for line in open(clean)]
            steps = grid(rows, stages)
        else:
            steps = interleaved_zb(P, stages // P, M)
            rows = [[a for a in row if a is not None] for row in steps]
            with open(clean, "w") as f:
                for row in rows:
                    f.write(",".join(s(a) for a in row) + "\n")
        rank_of = {c: r for r, row in enumerate(rows) for c, _, _ in row}
        if name == "ScheduleDualPipeV":
            steps = [overlap([a for a in row if a is not None]) for row in steps]
        compute = [reduce_grad(r) for r in steps] if name == "Schedule1F1B" else steps
        write(os.path.join(HERE, name + "_compute.csv"), compute)
        lowered = [reduce_grad(unshard(r)) for r in steps]
        write(os.path.join(HERE, name + "_comms.csv"), send_recv(lowered, stages, rank_of))


if __name__ == "__main__":
    main()
