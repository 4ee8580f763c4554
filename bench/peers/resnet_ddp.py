#!/usr/bin/python3
"""resnet_ddp.py — PyTorch DDP (gloo) training ResNet-20 next to `mpirun -np W build/resnet --parallel ddp`.

The model is python/scanprop_torch.py's zoo("resnet20") (1-channel 32x32 input: the
app's default Fashion-MNIST, zero-padded). OUT/data gets the first (--warmup + --steps) ·
--batch training images and --test test images in file order (IDX files, what
`build/resnet --data OUT/data --no-shuffle` reads); OUT/init.safetensors the initial
weights and batch-norm buffers (seeded, Kaiming-normal conv/linear weights, as
tests/parity/resnet.py; --bn-affine-std X draws batch norm's weight and bias too), unless --init gives them. Then --ranks processes (spawned here,
gloo on 127.0.0.1) train under DistributedDataParallel(broadcast_buffers=True): at step s
the global batch is images [s·B, (s+1)·B) and rank r takes its r-th contiguous slice of
B/W (scanprop's ddp: micro-batch r of the batch on rank r); cross-entropy (each rank's
mean; DDP averages the gradients over the ranks: the global batch's mean), SGD with
--lr, --momentum, --weight-decay (build/resnet's defaults). Rank 0's weights and buffers
after the last step go to OUT/torch.safetensors (its running statistics are its own:
DDP broadcasts rank 0's buffers before each forward, as scanprop's per-rank batch norm).

Threads: each rank runs --threads torch threads with OpenBLAS's pool at 1 and subnormals
flushed (bench/peers/common.py); give it cores ÷ ranks, as `build/resnet --threads`.
Timing: every rank times each step (zero_grad, forward, backward with DDP's allreduce,
SGD); the --warmup steps first are left out. The JSON line (last) gives, as
build/resnet's: step_median_ms (each rank's median, mean over the ranks), step_mean_ms
(the same with the mean) and images_per_s (global batch over the mean step).
--dtype float64 trains in double (gloo reduces doubles): the reference without float32
rounding.
"""
import os
import socket
import statistics
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "parity"))

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:   # exit 77: reported as skipped
    print(f"resnet_ddp.py: {e} (needs Debian's python3-torch: /usr/bin/python3)", file=sys.stderr)
    sys.exit(77)

import common  # noqa: E402
import scanprop_torch as sp  # noqa: E402
from cnn import idx_path, read_idx, write_subset  # noqa: E402  (tests/parity: the IDX subset)


def rank_main(rank, a, port, x, y, init, q):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    env = common.setup(a)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    model = sp.zoo("resnet20").to(dtype)
    model.load_state_dict({k: torch.from_numpy(v).to(model.state_dict()[k].dtype) for k, v in init.items()})
    model.train()
    ddp = DDP(model, broadcast_buffers=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    B, per = a.batch, a.batch // a.ranks
    x = x.to(dtype)
    ms, losses = [], []
    for s in range(a.warmup + a.steps):
        lo = s * B + rank * per
        xb, yb = x[lo:lo + per], y[lo:lo + per]
        t = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(ddp(xb), yb)
        loss.backward()
        opt.step()
        ms.append((time.perf_counter() - t) * 1e3)
        losses.append(loss.item())
    dist.barrier()
    if rank == 0 and a.out:
        sp.save(model, os.path.join(a.out, "torch.safetensors"), "resnet20")
    steady = ms[a.warmup:] or ms
    q.put((rank, statistics.median(steady), statistics.mean(steady), losses, env))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = common.parser(__doc__.split("\n")[0])
    ap.set_defaults(threads=1)
    ap.add_argument("out", help="folder for data/, init.safetensors and torch.safetensors")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--init", help="initial weights (default: seeded Kaiming-normal, written to OUT/init.safetensors)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="steps after the warm-up (timed)")
    ap.add_argument("--warmup", type=int, default=0, help="steps first, not timed")
    ap.add_argument("--batch", type=int, default=32, help="the global batch (split over the ranks)")
    ap.add_argument("--test", type=int, default=8, help="test images written to OUT/data")
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--bn-affine-std", type=float, default=0.0,
                    help="batch norm's weight ~ N(1, X), bias ~ N(0, X) in the init (0: ones and zeros)")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    a = ap.parse_args()
    if a.batch % a.ranks:
        sys.exit(f"resnet_ddp.py: --batch {a.batch} does not split over {a.ranks} ranks")
    os.makedirs(a.out, exist_ok=True)
    n = (a.warmup + a.steps) * a.batch
    write_subset(a.data, os.path.join(a.out, "data"), n, a.test)
    x = torch.from_numpy(sp.preprocess(read_idx(idx_path(a.data, "train", "images-idx3"), n), "resnet20"))
    y = torch.from_numpy(read_idx(idx_path(a.data, "train", "labels-idx1"), n).astype(np.int64))
    if a.init:
        model = sp.load(sp.zoo("resnet20"), a.init)
    else:
        torch.manual_seed(a.seed)
        model = sp.zoo("resnet20")
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if isinstance(m, nn.BatchNorm2d) and a.bn_affine_std > 0:
                nn.init.normal_(m.weight, 1.0, a.bn_affine_std)
                nn.init.normal_(m.bias, 0.0, a.bn_affine_std)
        sp.save(model, os.path.join(a.out, "init.safetensors"), "resnet20")
    init = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.spawn(rank_main, args=(a, free_port(), x, y, init, q), nprocs=a.ranks, join=True)
    res = sorted(q.get() for _ in range(a.ranks))
    med = statistics.mean(r[1] for r in res)
    mean = statistics.mean(r[2] for r in res)
    common.emit({"app": "torch-resnet20-ddp", "backend": "gloo", "ranks": a.ranks, **res[0][4], "dtype": a.dtype,
                 "batch": a.batch, "steps": a.steps, "warmup": a.warmup, "lr": a.lr, "momentum": a.momentum,
                 "weight_decay": a.weight_decay, "step_median_ms": med, "step_mean_ms": mean,
                 "rank_step_median_ms": [r[1] for r in res], "images_per_s": a.batch / (mean / 1e3),
                 "last_loss": statistics.mean(r[3][-1] for r in res), "losses_rank0": res[0][3]})


if __name__ == "__main__":
    main()
