#!/usr/bin/env python3
"""cuda_peer.py — PyTorch on the GPU for `make bench-cuda` (bench/cuda.sh): the median
time of one training step (forward, cross-entropy, backward, optimizer step, synchronised)
of the models scanprop's apps train, at the same sizes, with cuDNN, full FP32 (no TF32).

  cuda_peer.py MODEL BATCH [STEPS] [T|SHAPE]   MODEL: lenet | vgg11 | resnet20 | rnn | gru
  (rnn: T, the sequence length, default 1000; gru: S, M or L, default L)
Prints one JSON line: {"model", "batch", "step_ms", "forward_ms", "backward_ms",
"peak_bytes" (torch.cuda.max_memory_allocated over the run), "torch", "cudnn", "gpu"}: step_ms a whole step; forward_ms a forward-only step (forward and loss, no
backward, no update); backward_ms = step_ms - forward_ms, the BPPSA paper's definition of
the backward time ("normal - forward-only")."""
import json
import os
import sys
import time

import torch
import torch.nn as nn


def lenet():
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                         nn.Linear(84, 10))


def vgg11():   # 1 input channel: the vgg11 app's default data (Fashion-MNIST padded to 32x32)
    layers, cin = [], 1
    for w, pool in zip([64, 128, 256, 256, 512, 512, 512, 512], [1, 1, 0, 1, 0, 1, 0, 1]):
        layers += [nn.Conv2d(cin, w, 3, padding=1), nn.ReLU()] + ([nn.MaxPool2d(2)] if pool else [])
        cin = w
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512, 10))


class Seq(nn.Module):
    def __init__(self, cell, inp, hidden, classes):
        super().__init__()
        self.rec = cell(inp, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.rec(x)
        return self.fc(out[:, -1])


def main():
    model, batch = sys.argv[1], int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    if model == "lenet":
        net, x, classes, opt = lenet(), torch.randn(batch, 1, 28, 28), 10, "sgd"
    elif model == "vgg11":
        net, x, classes, opt = vgg11(), torch.randn(batch, 1, 32, 32), 10, "sgd"
    elif model == "resnet20":   # the project's own PyTorch twin of the zoo model (python/scanprop_torch.py)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        import scanprop_torch
        net, x, classes, opt = scanprop_torch.zoo("resnet20"), torch.randn(batch, 1, 32, 32), 10, "sgd"
    elif model == "rnn":   # the bitstream task: T (default 1000), H = 20
        T = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
        net, x, classes, opt = Seq(nn.RNN, 1, 20, 2), torch.randn(batch, T, 1), 2, "adam"
    elif model == "gru":   # the gru app's shapes (apps/gru.c): frames x features
        frames, feats = {"S": (259, 38), "M": (517, 24), "L": (1034, 12)}[sys.argv[4] if len(sys.argv) > 4 else "L"]
        net, x, classes, opt = Seq(nn.GRU, feats, 20, 10), torch.randn(batch, frames, feats), 10, "adam"
    else:
        sys.exit("cuda_peer.py: model %s (expected lenet, vgg11, resnet20, rnn or gru)" % model)
    net, x = net.to(dev), x.to(dev)
    y = torch.randint(0, classes, (batch,), device=dev)
    o = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9) if opt == "sgd" else \
        torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    def median_ms(forward_only):
        times = []
        for i in range(steps + 10):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            o.zero_grad()
            loss = loss_fn(net(x), y)
            if not forward_only:
                loss.backward()
                o.step()
            loss.item()
            torch.cuda.synchronize()
            if i >= 10:
                times.append(time.perf_counter() - t0)
        times.sort()
        return 1e3 * times[len(times) // 2]

    torch.cuda.reset_peak_memory_stats()
    step, fwd = median_ms(False), median_ms(True)
    print(json.dumps({"model": model, "batch": batch, "step_ms": step, "forward_ms": fwd, "backward_ms": step - fwd,
                      "peak_bytes": torch.cuda.max_memory_allocated(),
                      "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                      "gpu": torch.cuda.get_device_name(0)}))


if __name__ == "__main__":
    main()
