"""gru.py — PyTorch's nn.GRU training step next to build/gru --shape L.

nn.GRU(12 inputs, 20 hidden), h0 = 0, a 20 -> 10 linear layer on the last hidden state,
cross-entropy, Adam lr 1e-3, one fixed N(0, 1) batch of T=1034 steps x B=16.
Prints fwd_nograd, fwd_grad, step and bwd_derived in ms.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Net(nn.Module):
    def __init__(self, inputs, hidden, classes):
        super().__init__()
        self.gru = nn.GRU(inputs, hidden)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc(self.gru(x)[1][0])


def main():
    ap = common.parser(__doc__)
    ap.add_argument("--T", type=int, default=1034)
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--budget-s", type=float, default=5.0)
    a = ap.parse_args()
    info = common.setup(a)
    torch.manual_seed(0)
    m = Net(12, 20, 10)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    x, y = torch.randn(a.T, a.B, 12), torch.randint(0, 10, (a.B,))
    rec = {"app": "torch-gru", **info, "T": a.T, "B": a.B}
    common.timed_phases(rec, common.step_phases(lambda: F.cross_entropy(m(x), y), opt), warmup=3, reps=a.reps,
                        min_rep_s=0.05, budget_s=a.budget_s)
    common.emit(rec)


if __name__ == "__main__":
    main()
