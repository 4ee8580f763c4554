#!/usr/bin/python3
"""rnn.py — the PyTorch side of the RNN / GRU parity tests (tests/test_parity.c).

Writes OUT/data.safetensors, a sequence set as the rnn and gru apps read it with
--dataset (x [N, T, C] float32, y [N] int64, metadata "nclasses"): for `rnn` the BPPSA
bitstream task (paper Eq. 8: class c, bits ~ Bernoulli(0.05 + 0.1·c)), for `gru`
class-shifted Gaussian features. Then builds the apps' model, nn.RNN (tanh) or nn.GRU
(batch_first=True) followed by fc = nn.Linear(H, classes) on the last hidden state, with
PyTorch's default init (seeded), writes OUT/init.safetensors and, for the K-th
--run OPTIM:LR:MOMENTUM:WEIGHT_DECAY, trains STEPS steps on consecutive batches from
sample 0 (the apps' --no-shuffle order) with cross-entropy loss and writes
OUT/expected-K.safetensors with metadata "last_loss" (the last step's loss) and
"f32_vs_f64": the worst per-tensor relative error max|w32 − w64| / max|w64| between this
float32 run and the same run in float64. Adam's first steps divide by |g| + 1e-8, so a
gradient element within a few eps of zero makes the result depend on float rounding;
the test requires this number to be far below its tolerance, so that it compares
scanprop with PyTorch and not two roundings of an ill-conditioned problem.

  /usr/bin/python3 tests/parity/rnn.py rnn /tmp/out --samples 64 --seq-len 50 --input 1 \\
      --run adam:0.001:0:0
"""
import argparse
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:   # exit 77: tests/test_parity.c reports the test as skipped
    print(f"rnn.py: {e} (the parity tests need Debian's python3-torch)", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from cnn import optimizer  # noqa: E402


class SeqClassifier(nn.Module):
    """layers/zoo.c sp_zoo_rnn / sp_zoo_gru: the cell's last hidden state → fc."""

    def __init__(self, cell, name, input, hidden, classes):
        super().__init__()
        self.name = name
        setattr(self, name, cell(input, hidden, batch_first=True))
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        _, h_n = getattr(self, self.name)(x)
        return self.fc(h_n[0])


def dataset(kind, n, T, C, classes, rng):
    y = rng.integers(0, classes, size=n)
    if kind == "rnn":
        p = 0.05 + 0.1 * y[:, None, None]
        x = (rng.random((n, T, C)) < p).astype(np.float32)
    else:
        x = (rng.standard_normal((n, T, C)) + 0.3 * (y[:, None, None] - classes / 2)).astype(np.float32)
    return x, y.astype(np.int64)


def train(a, cell, init, run, x, y, dtype):
    """STEPS steps of `run` from `init` in `dtype`: (weights as numpy, last loss)."""
    model = SeqClassifier(cell, a.model, a.input, a.hidden, a.classes).to(dtype)
    model.load_state_dict({k: torch.from_numpy(v).to(dtype) for k, v in init.items()})
    opt = optimizer(run, model.parameters())
    xt, yt = torch.from_numpy(x).to(dtype), torch.from_numpy(y)
    for s in range(a.steps):
        xb, yb = xt[s * a.batch:(s + 1) * a.batch], yt[s * a.batch:(s + 1) * a.batch]
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}, loss.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=("rnn", "gru"))
    ap.add_argument("out")
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=50)
    ap.add_argument("--input", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=20)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--run", action="append", required=True, help="OPTIM:LR:MOMENTUM:WEIGHT_DECAY")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.steps * a.batch > a.samples:
        sys.exit("rnn.py: --steps × --batch exceeds --samples (the parity run stays in one epoch)")
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)

    x, y = dataset(a.model, a.samples, a.seq_len, a.input, a.classes, np.random.default_rng(a.seed))
    st.write(os.path.join(a.out, "data.safetensors"), {"x": x, "y": y}, {"nclasses": str(a.classes)})

    torch.manual_seed(a.seed)
    cell = nn.RNN if a.model == "rnn" else nn.GRU
    model = SeqClassifier(cell, a.model, a.input, a.hidden, a.classes)
    init = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    st.write(os.path.join(a.out, "init.safetensors"), init, {"format": "pt"})
    for k, run in enumerate(a.run):
        w32, loss = train(a, cell, init, run, x, y, torch.float32)
        w64, _ = train(a, cell, init, run, x, y, torch.float64)
        cond = max(np.abs(w32[t].astype(np.float64) - w64[t]).max() / np.abs(w64[t]).max() for t in w64)
        st.write(os.path.join(a.out, f"expected-{k}.safetensors"), w32,
                 {"format": "pt", "last_loss": f"{loss:.9g}", "f32_vs_f64": f"{cond:.3e}", "run": run})


if __name__ == "__main__":
    main()
