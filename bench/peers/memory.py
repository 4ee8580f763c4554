"""memory.py — the PyTorch side of `make bench`'s memory table: one workload, one
configuration, a plain training loop of --steps steps, then the process's own resident
set. bench/bench.py runs it as a child process, as it runs the scanprop app with
--mem-report, and takes both sides' peak from the child's rusage (os.wait4).

Workloads (each as its timing peer, same model, optimizer and batch shapes):
  lenet    LeNet-5 on Fashion-MNIST; the training set held as bytes and converted per
           batch (as torchvision's dataset does, and as scanprop holds it)
  vgg11    VGG-11 on one fixed random 3x32x32 batch
  resnet20 ResNet-20 (python/scanprop_torch.py's zoo model) on one fixed random batch
  rnn      nn.RNN (hidden 20) on one bitstream batch of T steps
  gru      nn.GRU (12 -> 20) on one N(0, 1) batch of T steps
JSON: rss_steady_mib (VmRSS of /proc/self/status after the last step: after warm-up, as
scanprop's rss_steady_mib), rss_peak_mib (ru_maxrss of this process), params.
"""
import resource
import warnings

import numpy as np
import torch
import torch.nn.functional as F

import common
import gru
import lenet
import resnet
import rnn
import vgg11


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return None


def workload(a):
    """(model, optimizer, next_batch() -> (x, y)) of a workload."""
    torch.manual_seed(0)
    if a.workload == "lenet":
        x8 = lenet.idx(f"{a.data_dir}/train-images-idx3-ubyte.gz")
        y = torch.from_numpy(lenet.idx(f"{a.data_dir}/train-labels-idx1-ubyte.gz").astype(np.int64))
        with warnings.catch_warnings():   # a read-only array (the file's bytes): only ever read here
            warnings.simplefilter("ignore")
            x8 = torch.from_numpy(x8).unsqueeze(1)   # [N, 1, 28, 28] uint8, no copy
        m = lenet.lenet5()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        order, at = torch.randperm(x8.shape[0]), [0]

        def batch():
            if at[0] + a.batch > x8.shape[0]:
                at[0] = 0
            sel = order[at[0]:at[0] + a.batch]
            at[0] += a.batch
            return x8[sel].float().div_(255), y[sel]
        return m, opt, batch
    if a.workload in ("vgg11", "resnet20"):
        m = vgg11.vgg11() if a.workload == "vgg11" else resnet.resnet20()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) if a.workload == "vgg11" else resnet.optimizer(m)
        xy = torch.randn(a.batch, 3, 32, 32), torch.randint(0, 10, (a.batch,))
        return m, opt, lambda: xy
    if a.workload == "rnn":
        m = rnn.Fused()
        opt = torch.optim.Adam(m.parameters(), lr=1e-5)
        xy = rnn.bitstream(a.T, a.batch, torch.Generator().manual_seed(0))
        return m, opt, lambda: xy
    if a.workload == "gru":
        m = gru.Net(12, 20, 10)
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        xy = torch.randn(a.T, a.batch, 12), torch.randint(0, 10, (a.batch,))
        return m, opt, lambda: xy
    raise SystemExit(f"memory.py: unknown workload {a.workload}")


def main():
    ap = common.parser(__doc__)
    ap.add_argument("--workload", required=True, choices=["lenet", "vgg11", "resnet20", "rnn", "gru"])
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--T", type=int, default=1000, help="sequence length (rnn, gru)")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    info = common.setup(a)
    m, opt, batch = workload(a)
    for _ in range(a.steps):
        x, y = batch()
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()
        opt.step()
    steady = rss_mib()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    common.emit({"app": "torch-memory", **info, "workload": a.workload, "batch": a.batch, "steps": a.steps,
                 "params": sum(p.numel() for p in m.parameters()), "rss_steady_mib": steady, "rss_peak_mib": peak})


if __name__ == "__main__":
    main()
