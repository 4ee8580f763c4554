"""resnet.py — PyTorch's ResNet-20 training step next to build/resnet (layers/zoo.c).

The model is python/scanprop_torch.py's zoo("resnet20"): the same architecture and
parameter names as sp_zoo_resnet20 (3x3 conv 16, three stages of three basic blocks with
16/32/64 channels and option-B shortcuts, batch norm, global average pooling, fc), on
3x32x32 inputs as the app's CIFAR-format data; cross-entropy, SGD lr 0.02 momentum 0.9
weight decay 1e-4 (build/resnet's defaults), on a fixed random batch, batch norm in
training mode. Per --batches entry: fwd_nograd, fwd_grad, step and bwd_derived in ms.
"""
import os
import sys

import torch
import torch.nn.functional as F

import common

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import scanprop_torch  # noqa: E402  (the repository's python/, not an installed package)

CHANNELS = 3


def resnet20():
    return scanprop_torch.zoo("resnet20", in_channels=CHANNELS)


def optimizer(m):
    return torch.optim.SGD(m.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)


def main():
    ap = common.parser(__doc__)
    ap.add_argument("--batches", default="64,128")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=10.0, help="at most this long per timed phase")
    a = ap.parse_args()
    out = {"app": "torch-resnet20", **common.setup(a), "runs": []}
    for b in [int(v) for v in a.batches.split(",") if v]:
        torch.manual_seed(0)
        m = resnet20()
        out["params"] = sum(p.numel() for p in m.parameters())
        opt = optimizer(m)
        x, y = torch.randn(b, CHANNELS, 32, 32), torch.randint(0, 10, (b,))
        rec = common.timed_phases({"batch": b}, common.step_phases(lambda: F.cross_entropy(m(x), y), opt),
                                  warmup=a.warmup, reps=a.reps, budget_s=a.budget_s)
        out["runs"].append(rec)
    common.emit(out)


if __name__ == "__main__":
    main()
