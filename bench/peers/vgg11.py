"""vgg11.py — PyTorch's VGG-11 training step next to build/vgg11 (layers/zoo.c).

VGG-11 (configuration A) for 3x32x32 inputs without batch norm or dropout: 3x3 convs
(padding 1) + ReLU with 2x2 max-pools after conv 1, 2, 4, 6 and 8, then one 512 -> 10
linear layer; cross-entropy, SGD lr 0.01 momentum 0.9, on a fixed random batch.
Per --batches entry: fwd_nograd, fwd_grad, step and bwd_derived in ms.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

WIDTHS = [64, "pool", 128, "pool", 256, 256, "pool", 512, 512, "pool", 512, 512, "pool"]


def vgg11(classes=10):
    layers, cin = [], 3
    for w in WIDTHS:
        if w == "pool":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, w, 3, padding=1), nn.ReLU(inplace=True)]
            cin = w
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512, classes))


def gflop_per_image():
    flop, cin, side = 2 * 512 * 10, 3, 32
    for w in WIDTHS:
        if w == "pool":
            side //= 2
        else:
            flop += 2 * cin * w * 9 * side * side
            cin = w
    return flop / 1e9


def main():
    ap = common.parser(__doc__)
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=10.0, help="at most this long per timed phase")
    a = ap.parse_args()
    out = {"app": "torch-vgg11", **common.setup(a), "fwd_gflop_per_image": gflop_per_image(), "runs": []}
    for b in [int(v) for v in a.batches.split(",") if v]:
        torch.manual_seed(0)
        m = vgg11()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        x, y = torch.randn(b, 3, 32, 32), torch.randint(0, 10, (b,))
        rec = common.timed_phases({"batch": b}, common.step_phases(lambda: F.cross_entropy(m(x), y), opt),
                                  warmup=a.warmup, reps=a.reps, budget_s=a.budget_s)
        rec["fwd_gflops_per_s"] = gflop_per_image() * b / (rec["fwd_nograd_ms"] / 1e3)
        out["runs"].append(rec)
    common.emit(out)


if __name__ == "__main__":
    main()
