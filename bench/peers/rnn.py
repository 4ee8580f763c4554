"""rnn.py — PyTorch's tanh RNN on the bitstream task, next to build/rnn.

A sample of class c in 0..9 is T bits, each 1 with probability 0.05 + 0.1 c; the model
is a tanh RNN with 20 hidden units (h0 = 0) and a 20 -> 10 linear layer on the last
hidden state; cross-entropy, Adam lr 1e-5. Two implementations: "rnn" (nn.RNN, ATen's
fused loop) and "cell" (a Python loop over nn.RNNCell: the per-op overhead a framework
pays without a fused kernel). Per (impl, T, B): fwd_nograd, fwd_grad, step, bwd_derived.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

HIDDEN, CLASSES = 20, 10


class Fused(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(1, HIDDEN)
        self.fc = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        return self.fc(self.rnn(x)[1][0])


class Loop(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.RNNCell(1, HIDDEN)
        self.fc = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        h = x.new_zeros(x.shape[1], HIDDEN)
        for t in range(x.shape[0]):
            h = self.cell(x[t], h)
        return self.fc(h)


def bitstream(T, B, gen):
    c = torch.randint(0, CLASSES, (B,), generator=gen)
    p = (0.05 + 0.1 * c.float()).view(1, B, 1).expand(T, B, 1)
    return torch.bernoulli(p, generator=gen).contiguous(), c


def main():
    ap = common.parser(__doc__)
    ap.add_argument("--T", default="100,1000")
    ap.add_argument("--B", default="16")
    ap.add_argument("--impls", default="rnn,cell")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=3.0)
    a = ap.parse_args()
    out = {"app": "torch-rnn-bitstream", **common.setup(a), "hidden": HIDDEN, "runs": []}
    gen = torch.Generator().manual_seed(0)
    for impl in a.impls.split(","):
        for T in [int(v) for v in a.T.split(",")]:
            for B in [int(v) for v in a.B.split(",")]:
                torch.manual_seed(0)
                m = Fused() if impl == "rnn" else Loop()
                opt = torch.optim.Adam(m.parameters(), lr=1e-5)
                x, y = bitstream(T, B, gen)
                rec = common.timed_phases({"impl": impl, "T": T, "B": B},
                                          common.step_phases(lambda: F.cross_entropy(m(x), y), opt),
                                          warmup=1 if T >= 10000 else 3, reps=a.reps, min_rep_s=0.05,
                                          budget_s=a.budget_s)
                out["runs"].append(rec)
    common.emit(out)


if __name__ == "__main__":
    main()
