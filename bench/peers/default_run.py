"""default_run.py — the PyTorch side of the memory table's default runs: what a user's
`build/lenet --steps N`, `build/vgg11 --steps N` or `build/resnet --steps N` does, in
PyTorch. Train --steps steps on Fashion-MNIST (Debian's dataset-fashion-mnist), then
evaluate the whole test set at the training batch in eval mode under torch.no_grad(),
and report the process's peak resident set. bench/bench.py runs it as a child process,
as it runs the app, and takes both sides' peak from the child's rusage (os.wait4).

As the apps: the training and test images held as bytes and converted per batch (as
torchvision's dataset does and as scanprop holds them), zero-padded from 28x28 to 32x32
for VGG-11 and ResNet-20, one input channel; each app's default batch and optimizer
(LeNet-5 b64 and VGG-11 b32: SGD lr 0.01 momentum 0.9; ResNet-20 b64: SGD lr 0.02
momentum 0.9 weight decay 1e-4), shuffled training batches.
JSON: test_loss, test_acc, rss_steady_mib (VmRSS after the last training step),
rss_peak_mib (ru_maxrss of this process: the training and the evaluation), params.
"""
import resource
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import common
import lenet
import memory
import resnet
import vgg11

DEFAULTS = {"lenet": (64, 0.01, 0.0), "vgg11": (32, 0.01, 0.0), "resnet20": (64, 0.02, 1e-4)}


def model(workload):
    if workload == "lenet":
        return lenet.lenet5()
    if workload == "vgg11":
        m = vgg11.vgg11()
        m[0] = nn.Conv2d(1, 64, 3, padding=1)   # one input channel, as the app on Fashion-MNIST
        return m
    return resnet.scanprop_torch.zoo("resnet20", in_channels=1)


def images(data_dir, name):
    x8 = lenet.idx(f"{data_dir}/{name}-images-idx3-ubyte.gz")
    y = torch.from_numpy(lenet.idx(f"{data_dir}/{name}-labels-idx1-ubyte.gz").astype(np.int64))
    with warnings.catch_warnings():   # a read-only array (the file's bytes): only ever read here
        warnings.simplefilter("ignore")
        return torch.from_numpy(x8).unsqueeze(1), y   # [N, 1, 28, 28] uint8, no copy


def as_input(x8, pad):
    x = x8.float().div_(255)
    return F.pad(x, (2, 2, 2, 2)) if pad else x


def main():
    ap = common.parser(__doc__)
    ap.add_argument("--workload", required=True, choices=sorted(DEFAULTS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=0, help="0: the app's default")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    info = common.setup(a)
    torch.manual_seed(0)
    batch, lr, wd = DEFAULTS[a.workload]
    batch = a.batch or batch
    pad = a.workload != "lenet"
    m = model(a.workload)
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, weight_decay=wd)
    x8, y = images(a.data_dir, "train")
    order, at = torch.randperm(x8.shape[0]), 0
    m.train()
    for _ in range(a.steps):
        if at + batch > x8.shape[0]:
            at = 0
        sel = order[at:at + batch]
        at += batch
        opt.zero_grad()
        F.cross_entropy(m(as_input(x8[sel], pad)), y[sel]).backward()
        opt.step()
    steady = memory.rss_mib()
    tx8, ty = images(a.data_dir, "t10k")
    m.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, tx8.shape[0], batch):
            z = m(as_input(tx8[i:i + batch], pad))
            loss += F.cross_entropy(z, ty[i:i + batch], reduction="sum").item()
            correct += int((z.argmax(1) == ty[i:i + batch]).sum())
    n = tx8.shape[0]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    common.emit({"app": "torch-default-run", **info, "workload": a.workload, "batch": batch, "steps": a.steps,
                 "params": sum(p.numel() for p in m.parameters()), "test_loss": loss / n, "test_acc": correct / n,
                 "rss_steady_mib": steady, "rss_peak_mib": peak})


if __name__ == "__main__":
    main()
