#!/usr/bin/python3
"""cnn.py — the PyTorch side of the LeNet / VGG-11 parity tests (tests/test_parity.c).

Builds the model with PyTorch's default init, or with --init kaiming Kaiming-normal
weights (He et al. 2015, fan_in, ReLU gain: with the default init VGG-11's gradients
vanish, so 3 SGD steps hardly move its first layers and the check could not see them),
seeded, and writes OUT/init.safetensors under the apps' names. Then, for the K-th
--run OPTIM:LR:MOMENTUM:WEIGHT_DECAY, trains STEPS steps of torch.optim from that init
on the first STEPS·BATCH Fashion-MNIST training images in file order (what the apps do
with --no-shuffle) and writes OUT/expected-K.safetensors with metadata "last_loss" (the
last step's loss) and, with --f64, "f32_vs_f64": the worst per-tensor
max|w32 − w64| / max|w64| between this run and the same run in float64. A ReLU input or
two max-pool candidates within rounding of each other route a gradient one way or the
other, and momentum carries the difference on; the test requires this number to be far
below its tolerance (see rnn.py for Adam's version of the problem).
Pixels are bytes / 255, no normalisation; VGG-11 zero-pads 28×28 to 32×32, 2 pixels on
each side. With --subset N the training images used and the first N test images are
also written, as raw IDX files, to OUT/data (so the app's end-of-run evaluation stays
cheap for VGG-11).

  /usr/bin/python3 tests/parity/cnn.py lenet /tmp/out --steps 20 --batch 64 \\
      --run sgd:0.01:0.9:0 --run sgd:0.01:0.9:5e-4
"""
import argparse
import gzip
import os
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:   # exit 77: tests/test_parity.c reports the test as skipped
    print(f"cnn.py: {e} (the parity tests need Debian's python3-torch)", file=sys.stderr)
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
import st  # noqa: E402
import scanprop_torch as sp  # noqa: E402


def LeNet():
    """layers/zoo.c sp_zoo_lenet(1, 28), as the project's python module defines it."""
    return sp.zoo("lenet", in_channels=1)


def VGG11():
    """layers/zoo.c sp_zoo_vgg11(1, 10): config A, no batch norm, 32×32 inputs."""
    return sp.zoo("vgg11", in_channels=1)


def idx_path(data, prefix, kind):
    for name in (f"{prefix}-{kind}-ubyte.gz", f"{prefix}-{kind}-ubyte"):
        if os.path.exists(os.path.join(data, name)):
            return os.path.join(data, name)
    sys.exit(f"cnn.py: no {prefix}-{kind}-ubyte[.gz] in {data}")


def read_idx(path, count):
    """The first `count` items of an IDX file (raw or gzip) as uint8 [count, ...]."""
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        (magic,) = struct.unpack(">I", f.read(4))
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        per = int(np.prod(dims[1:], dtype=np.int64))
        if count > dims[0]:
            sys.exit(f"cnn.py: {path} has {dims[0]} items, {count} needed")
        buf = f.read(count * per)
    return np.frombuffer(buf, dtype=np.uint8).reshape((count,) + tuple(dims[1:]))


def write_idx(path, arr):
    magic = 0x0800 | arr.ndim
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + struct.pack(">" + "I" * arr.ndim, *arr.shape))
        f.write(np.ascontiguousarray(arr, dtype=np.uint8).tobytes())


def write_subset(data, out, ntrain, ntest):
    os.makedirs(out, exist_ok=True)
    for prefix, n in (("train", ntrain), ("t10k", ntest)):
        for kind in ("images-idx3", "labels-idx1"):
            write_idx(os.path.join(out, f"{prefix}-{kind}-ubyte"), read_idx(idx_path(data, prefix, kind), n))


def params(model):
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def train(name, init, run, x, y, batch, steps, dtype):
    """`steps` steps of `run` from `init` in `dtype`: (weights as numpy, last loss)."""
    model = (LeNet() if name == "lenet" else VGG11()).to(dtype)
    model.load_state_dict({k: torch.from_numpy(v).to(dtype) for k, v in init.items()})
    opt = optimizer(run, model.parameters())
    x = x.to(dtype)
    for s in range(steps):
        xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    return params(model), loss.item()


def optimizer(run, params):
    """torch.optim from OPTIM:LR:MOMENTUM:WEIGHT_DECAY (the app's --optim, --lr, --momentum,
    --weight-decay; Adam's betas and eps are the defaults on both sides)."""
    name, lr, momentum, wd = run.split(":")
    lr, momentum, wd = float(lr), float(momentum), float(wd)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=wd)
    if name in ("adam", "adamw"):
        return (torch.optim.Adam if name == "adam" else torch.optim.AdamW)(params, lr=lr, weight_decay=wd)
    sys.exit(f"cnn.py: --run {run}: unknown optimizer {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=("lenet", "vgg11"))
    ap.add_argument("out")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--run", action="append", required=True, help="OPTIM:LR:MOMENTUM:WEIGHT_DECAY")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--init", choices=("default", "kaiming"), default="default")
    ap.add_argument("--f64", action="store_true", help="also train in float64: metadata f32_vs_f64")
    ap.add_argument("--subset", type=int, default=0, help="also write OUT/data with N test images")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)

    n = a.steps * a.batch
    images = read_idx(idx_path(a.data, "train", "images-idx3"), n)
    labels = read_idx(idx_path(a.data, "train", "labels-idx1"), n)
    if a.subset:
        write_subset(a.data, os.path.join(a.out, "data"), n, a.subset)
    x = torch.from_numpy(images.copy()).float().div(255.0).unsqueeze(1)   # as ToTensor
    if a.model == "vgg11":
        x = F.pad(x, (2, 2, 2, 2))
    y = torch.from_numpy(labels.astype(np.int64))

    torch.manual_seed(a.seed)
    model = LeNet() if a.model == "lenet" else VGG11()
    if a.init == "kaiming":
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    init = params(model)
    st.write(os.path.join(a.out, "init.safetensors"), init, {"format": "pt"})
    for k, run in enumerate(a.run):
        w32, loss = train(a.model, init, run, x, y, a.batch, a.steps, torch.float32)
        meta = {"format": "pt", "last_loss": f"{loss:.9g}", "run": run}
        if a.f64:
            w64, _ = train(a.model, init, run, x, y, a.batch, a.steps, torch.float64)
            cond = max(np.abs(w32[t].astype(np.float64) - w64[t]).max() / np.abs(w64[t]).max() for t in w64)
            meta["f32_vs_f64"] = f"{cond:.3e}"
        st.write(os.path.join(a.out, f"expected-{k}.safetensors"), w32, meta)


if __name__ == "__main__":
    main()
