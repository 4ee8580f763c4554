#!/usr/bin/python3
"""prune.py — the PyTorch side of tests/test_prune.c's parity check: pruned checkpoints
move between scanprop and torch.nn.utils.prune.

  prune.py OUT            LeNet (cnn.py's), seeded init, prune.global_unstructured with
                          L1Unstructured, amount 0.9, over every conv/linear weight;
                          writes OUT/pruned.safetensors (its state_dict: conv1.weight_orig,
                          conv1.weight_mask, conv1.bias, ...), OUT/data.safetensors (x
                          [8,1,28,28], y [8]), then trains STEPS=5 SGD steps (lr 0.05,
                          momentum 0.9) on that batch and writes the effective weights
                          (weight_orig * weight_mask) under plain names to
                          OUT/expected.safetensors.
  prune.py OUT --check F  loads scanprop's checkpoint F into a LeNet (prune.identity on the
                          modules F has masks for, then load_state_dict, strict) and writes
                          its logits for x to OUT/logits.safetensors.
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torch.nn.utils.prune as prune
except ImportError as e:   # exit 77: the C side reports the test as skipped
    print(f"prune.py: {e} (needs Debian's python3-torch)", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from cnn import LeNet  # noqa: E402

STEPS, LR, MOMENTUM, AMOUNT = 5, 0.05, 0.9, 0.9


def modules(m):
    return {"conv1": m.conv1, "conv2": m.conv2, "fc1": m.fc1, "fc2": m.fc2, "fc3": m.fc3}


def main():
    out = sys.argv[1]
    torch.manual_seed(7)
    if len(sys.argv) == 4 and sys.argv[2] == "--check":
        t = st.read(sys.argv[3])[0]
        m = LeNet()
        for name, mod in modules(m).items():
            if f"{name}.weight_mask" in t:
                prune.identity(mod, "weight")
        m.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in t.items()}, strict=True)
        d = st.read(os.path.join(out, "data.safetensors"))[0]
        with torch.no_grad():
            z = m(torch.from_numpy(np.array(d["x"])))
        st.write(os.path.join(out, "logits.safetensors"), {"logits": z.numpy()})
        return
    m = LeNet()
    prune.global_unstructured([(mod, "weight") for mod in modules(m).values()],
                              pruning_method=prune.L1Unstructured, amount=AMOUNT)
    st.write(os.path.join(out, "pruned.safetensors"), {k: v.numpy() for k, v in m.state_dict().items()})
    g = torch.Generator().manual_seed(11)
    x = torch.rand(8, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (8,), generator=g, dtype=torch.int32)
    st.write(os.path.join(out, "data.safetensors"), {"x": x.numpy(), "y": y.numpy()})
    opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM)
    for _ in range(STEPS):
        opt.zero_grad()
        F.cross_entropy(m(x), y.long()).backward()
        opt.step()
    eff = {}
    for name, mod in modules(m).items():
        # module.weight is recomputed only by the next forward's pre-hook: form it here
        eff[f"{name}.weight"] = (mod.weight_orig * mod.weight_mask).detach().numpy()
        eff[f"{name}.bias"] = mod.bias.detach().numpy()
    st.write(os.path.join(out, "expected.safetensors"), eff)


if __name__ == "__main__":
    main()
