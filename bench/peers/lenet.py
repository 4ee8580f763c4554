"""lenet.py — PyTorch's LeNet-5 training throughput on Fashion-MNIST, next to build/lenet.

LeNet-5 as in layers/zoo.c: conv 1->6 5x5 padding 2, ReLU, max-pool 2, conv 6->16 5x5,
ReLU, max-pool 2, linear 400->120->84->10 with ReLUs; cross-entropy, SGD lr 0.01
momentum 0.9; pixels scaled to [0, 1]. For each --tput-batches entry: images/s of
--tput-reps windows of --tput-steps steps after --tput-warmup steps, each step taking
its batch from a shuffled training set (gather + zero_grad + forward + backward + SGD).
--epochs N > 0 also trains N seeded epochs at --batch and reports test accuracy.
"""
import gzip
import os
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import common


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def split(root, name):
    x = idx(os.path.join(root, f"{name}-images-idx3-ubyte.gz"))
    y = idx(os.path.join(root, f"{name}-labels-idx1-ubyte.gz"))
    return torch.from_numpy(x.astype(np.float32) / 255).unsqueeze(1).contiguous(), torch.from_numpy(y.astype(np.int64))


def lenet5():
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                         nn.Linear(84, 10))


def step(m, opt, x, y):
    opt.zero_grad()
    F.cross_entropy(m(x), y).backward()
    opt.step()


def throughput(x, y, batch, steps, reps, warmup):
    torch.manual_seed(123)
    m = lenet5()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    order, at = torch.randperm(x.shape[0]), 0
    rates = []
    for w in range(-1, reps):
        t = time.perf_counter()
        for _ in range(warmup if w < 0 else steps):
            if at + batch > x.shape[0]:
                at = 0
            sel = order[at:at + batch]
            at += batch
            step(m, opt, x[sel], y[sel])
        if w >= 0:
            rates.append(steps * batch / (time.perf_counter() - t))
    return {"batch": batch, "steps_per_window": steps, "windows": reps, "warmup_steps": warmup,
            "images_per_s_median": statistics.median(rates), "images_per_s_min": min(rates),
            "images_per_s_max": max(rates)}


def epochs(x, y, xt, yt, batch, n, seed):
    torch.manual_seed(seed)
    m = lenet5()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        order = torch.randperm(x.shape[0])
        for i in range(0, x.shape[0], batch):
            sel = order[i:i + batch]
            step(m, opt, x[sel], y[sel])
        secs = time.perf_counter() - t
        with torch.no_grad():
            acc = (m(xt).argmax(1) == yt).float().mean().item()
        out.append({"seconds": secs, "test_accuracy": acc})
    return out


def main():
    ap = common.parser(__doc__)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--tput-batches", default="64,256")
    ap.add_argument("--tput-steps", type=int, default=50)
    ap.add_argument("--tput-reps", type=int, default=4)
    ap.add_argument("--tput-warmup", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    out = {"app": "torch-lenet-fmnist", **common.setup(a)}
    x, y = split(a.data_dir, "train")
    out["throughput"] = [throughput(x, y, int(b), a.tput_steps, a.tput_reps, a.tput_warmup)
                         for b in a.tput_batches.split(",") if b]
    if a.epochs > 0:
        xt, yt = split(a.data_dir, "t10k")
        out["epochs"] = epochs(x, y, xt, yt, a.batch, a.epochs, a.seed)
    common.emit(out)


if __name__ == "__main__":
    main()
