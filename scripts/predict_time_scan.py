#!/usr/bin/python3
"""A PREDICTION, from a cost model: the backward time of BPPSA across W ranks over an
RNN's T time steps (--parallel scan, schedulers/exec/exec_bppsa.c and exec_bppsa_blelloch.c)
against linear BPTT in one process, for T = 10^3 … 10^5, H = 20 … 256, W = 1 … 64.

    scripts/predict_time_scan.py [--profile docs/comm-profile.csv] [--gflops 10] [--batch 16]

Prints a markdown table of BPTT / scan (> 1: the scan is faster; "B": Blelloch's levels
are the faster of the two there) and, per (T, H), the smallest W from which the scan wins.

The model (per backward pass, a batch of n samples, input width C = 1, every product at
F FLOP/s on every rank, messages from the α–β fits of the profile, which
schedulers/sim/comm_cost.h describes; a collective at P ranks scaled as its ring
algorithm from the 2-rank fit, as sp_comm_time does):
  BPTT      T·(2nH² + 2nH² + 2nHC)/F   (the ∇h chain, dW_hh, dW_ih of every step)
  scan      L = T/W steps a rank; mv = 2nH²/F
            first:  max((L−1)·2nH³/F  [the elements P_r, ranks 2 … W−2; W ≥ 4],
                        L·mv          [the last rank's sweep from ∇h_T])
            levels: Hillis–Steele: Σ_k p2p(4nH²·min(2^k, W−3)) + (W−2)·mv
                    Blelloch:      D·(p2p(4nH²) + 2nH³/F) + D·(p2p(4nH) + mv), D = ⌈log₂(W−1)⌉
            tail:   2L·mv + p2p(4nH)  [rank 1's sweep, the hand-off, rank 0's sweep]
                    + L·(2nH² + 2nHC)/F  [the rank's own weight gradients]
                    + allreduce(4·(H² + HC + 2H) bytes, W)
The forward (whole on every rank) is not part of either figure."""
import argparse
import math


def load_fits(path):
    fits = {}
    with open(path) as f:
        for line in f:
            if line.startswith("fit,"):
                _, op, _ranks, frm, alpha, beta, _ = line.strip().split(",")
                fits.setdefault(op, []).append((float(frm), float(alpha), float(beta)))
    return fits


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="docs/comm-profile.csv")
    ap.add_argument("--gflops", type=float, default=10.0)
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args()
    fits = load_fits(a.profile)
    F, n, C = a.gflops * 1e3, a.batch, 1   # FLOP per µs

    def seg(op, b):
        s = [x for x in fits[op] if b >= x[0]][-1]
        return s[1], s[2]

    def p2p(b):
        al, be = seg("p2p", b)
        return al + b / be

    def allreduce(b, P):
        if P < 2:
            return 0.0
        al, be = seg("allreduce", b)   # at 2 ranks the ring is 2α' + b/β' = α + b/β
        return (P - 1) * al + 2 * (P - 1) / P * b / be

    def bptt(T, H):
        return T * (4 * n * H * H + 2 * n * H * C) / F

    def scan(T, H, W, algo):
        if W == 1:
            return bptt(T, H)
        L, mv = T / W, 2 * n * H * H / F
        first = max((L - 1) * 2 * n * H ** 3 / F if W >= 4 else 0.0, L * mv)
        tail = 2 * L * mv + p2p(4 * n * H) + L * (2 * n * H * H + 2 * n * H * C) / F
        tail += allreduce(4 * (H * H + H * C + 2 * H), W)
        if W == 2:
            return L * mv + tail
        if algo == "hs":
            lv = math.ceil(math.log2(W))
            levels = sum(p2p(4 * n * H * H * min(2 ** k, max(W - 3, 1))) for k in range(lv)) + (W - 2) * mv
        else:
            D = math.ceil(math.log2(W - 1))
            levels = D * (p2p(4 * n * H * H) + 2 * n * H ** 3 / F) + D * (p2p(4 * n * H) + mv)
        return first + levels + tail

    Ws = [1, 2, 4, 8, 16, 32, 64]
    print("| T | H | BPTT (ms) | " + " | ".join(f"W = {w}" for w in Ws) + " | scan wins from |")
    print("|---|---|---|" + "---|" * (len(Ws) + 1))
    for T in (1000, 10000, 100000):
        for H in (20, 64, 256):
            b = bptt(T, H)
            cells = []
            for W in Ws:
                hs = scan(T, H, W, "hs")
                bl = scan(T, H, W, "bl") if W > 2 else hs
                cells.append(f"{b / min(hs, bl):.2f}" + ("" if hs <= bl else " B"))
            wins = next((W for W in range(4, T + 1) if min(scan(T, H, W, "hs"), scan(T, H, W, "bl")) < b), None)
            print(f"| 10^{round(math.log10(T))} | {H} | {b / 1e3:.3g} | " + " | ".join(cells) +
                  f" | {'W = %d' % wins if wins else 'never (W <= T)'} |")


if __name__ == "__main__":
    main()
