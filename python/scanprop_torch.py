"""scanprop_torch.py — PyTorch round trips for scanprop (docs/PYTORCH.md).

Needs only numpy and, for the models, torch (Debian: python3-numpy, python3-torch).

    import scanprop_torch as sp
    model = sp.zoo("resnet20")                  # a torch.nn.Module with scanprop's names
    sp.load(model, "run.safetensors")           # weights (and batch-norm buffers) from build/resnet --save
    x = sp.preprocess(images_u8, "resnet20")    # [N, 28, 28] bytes -> [N, 1, 32, 32] floats
    sp.save(model, "init.safetensors")          # for build/resnet --load

Conventions (what the apps do): pixels are bytes / 255, no normalisation; 28x28 images
are zero-padded to 32x32 for vgg11 and resnet20 (2 pixels on each side, top/left first
when odd); parameter names and layouts are PyTorch's (conv OIHW, linear [out, in],
nn.RNN / nn.GRU names, gate order r, z, n); batch norm's num_batches_tracked is a float32
tensor of shape [1] in scanprop files (an int64 scalar in PyTorch; load/save convert).
"""
import json
import struct

import numpy as np

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
           "U8": "u1", "BOOL": "?"}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


# ---- safetensors (numpy) -------------------------------------------------------------

def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: numpy array} (C order, little-endian); metadata: {str: str}."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dt = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
        if np.dtype(dt) not in _NAMES:
            raise ValueError(f"{name}: dtype {arr.dtype} has no safetensors name")
        data = arr.astype(dt, copy=False).tobytes()
        header[name] = {"dtype": _NAMES[np.dtype(dt)], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    base, out = 8 + n, {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        arr = np.frombuffer(raw[base + b:base + e], dtype=_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).copy()
    return out, meta


# ---- preprocessing -------------------------------------------------------------------

PAD_TO = {"lenet": None, "mlp": None, "vgg11": 32, "resnet20": 32}


def preprocess(images, model):
    """uint8 images [N, H, W] or [N, C, H, W] -> float32 [N, C, H', W'] as the app feeds
    `model`: bytes / 255, zero-padded to 32x32 for vgg11 and resnet20."""
    x = np.asarray(images, dtype=np.float32) / 255.0
    if x.ndim == 3:
        x = x[:, None]
    size = PAD_TO.get(model)
    if size and x.shape[2] < size:
        top, left = (size - x.shape[2]) // 2, (size - x.shape[3]) // 2
        out = np.zeros(x.shape[:2] + (size, size), np.float32)
        out[:, :, top:top + x.shape[2], left:left + x.shape[3]] = x
        x = out
    return x


# ---- models (torch) ------------------------------------------------------------------

def _torch():
    import torch  # noqa: F401  (imported lazily: the safetensors half needs numpy only)
    return torch


def zoo(name, in_channels=None, classes=10):
    """The scanprop zoo model `name` as a torch.nn.Module with the same parameter names."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    class LeNet(nn.Module):          # layers/zoo.c sp_zoo_lenet(1, 28)
        def __init__(self, cin):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, 6, 5, padding=2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, classes)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = torch.flatten(F.max_pool2d(F.relu(self.conv2(x)), 2), 1)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    class VGG11(nn.Module):          # sp_zoo_vgg11: config A, no batch norm
        WIDTHS = (64, 128, 256, 256, 512, 512, 512, 512)
        POOL = (1, 1, 0, 1, 0, 1, 0, 1)

        def __init__(self, cin):
            super().__init__()
            for i, w in enumerate(self.WIDTHS):
                setattr(self, f"conv{i + 1}", nn.Conv2d(cin, w, 3, padding=1))
                cin = w
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            for i, p in enumerate(self.POOL):
                x = F.relu(getattr(self, f"conv{i + 1}")(x))
                x = F.max_pool2d(x, 2) if p else x
            return self.fc(torch.flatten(x, 1))

    class Seq(nn.Module):            # sp_zoo_rnn / sp_zoo_gru: last hidden state -> fc
        def __init__(self, cell, attr, cin, hidden=20):
            super().__init__()
            self.attr = attr
            setattr(self, attr, cell(cin, hidden, batch_first=True))
            self.fc = nn.Linear(hidden, classes)

        def forward(self, x):
            _, h = getattr(self, self.attr)(x)
            return self.fc(h[0])

    class MLP(nn.Module):            # sp_zoo_mlp: flatten, 784-128-10
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(784, 128), nn.Linear(128, classes)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))

    class Block(nn.Module):          # basic block, option-B shortcut when the shape changes
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            f = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
            return F.relu(f + self.shortcut(x))

    class ResNet20(nn.Module):       # sp_zoo_resnet20
        def __init__(self, cin):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, 16, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            c = 16
            for s, w in enumerate((16, 32, 64)):
                blocks = []
                for b in range(3):
                    blocks.append(Block(c, w, 2 if s > 0 and b == 0 else 1))
                    c = w
                setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
            self.fc = nn.Linear(64, classes)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            x = self.layer3(self.layer2(self.layer1(x)))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    if name == "lenet":
        return LeNet(in_channels or 1)
    if name == "vgg11":
        return VGG11(in_channels or 1)
    if name == "rnn":
        return Seq(nn.RNN, "rnn", in_channels or 1)
    if name == "gru":
        return Seq(nn.GRU, "gru", in_channels or 12)
    if name == "mlp":
        return MLP()
    if name == "resnet20":
        return ResNet20(in_channels or 1)
    raise ValueError(f"unknown model {name!r} (expected lenet, vgg11, rnn, gru, mlp or resnet20)")


# ---- checkpoints ---------------------------------------------------------------------

def state_to_numpy(model):
    """A module's state_dict as scanprop stores it: float32, num_batches_tracked as [1]."""
    out = {}
    for name, t in model.state_dict().items():
        a = t.detach().cpu().numpy()
        out[name] = a.astype(np.float32).reshape(1) if name.endswith("num_batches_tracked") else a.astype(np.float32)
    return out


def save(model, path, model_name=None):
    """Writes model's weights and buffers for `build/<app> --load`."""
    meta = {"scanprop_model": model_name} if model_name else None
    write_safetensors(path, state_to_numpy(model), meta)


def load(model, path, strict=True):
    """Loads a scanprop checkpoint (build/<app> --save) into model; the optimizer state
    some apps save (names starting with "state/") is skipped."""
    torch = _torch()
    tensors, _ = read_safetensors(path)
    own = model.state_dict()
    state = {}
    for name, a in tensors.items():
        if name.startswith("state/"):
            continue
        if name.endswith("num_batches_tracked") and name in own:
            state[name] = torch.tensor(int(round(float(a.reshape(-1)[0]))), dtype=own[name].dtype)
        else:
            state[name] = torch.from_numpy(np.ascontiguousarray(a)).to(own[name].dtype if name in own else None)
    model.load_state_dict(state, strict=strict)
    return model
