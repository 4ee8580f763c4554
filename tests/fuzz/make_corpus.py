#!/usr/bin/env python3
"""Writes the fuzzers' seed corpus, tests/fuzz/corpus/<target>/: small valid files and
hand-broken ones (the kinds of damage a real file gets: truncation, a wrong count, a bad
magic, trailing bytes, overlapping offsets, absurd sizes). Deterministic; run from the
repository root: python3 tests/fuzz/make_corpus.py. The JPEG seed comes from
stb_image_write (Debian libstb-dev) through a throwaway C program, if cc is there."""
import gzip, json, os, struct, subprocess, tempfile, zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors ----------------------------------------------------------------------
def st(tensors, meta=None, pad=True):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, off, buf = {}, 0, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        buf += data
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + buf


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def i64(*v):
    return struct.pack("<%dq" % len(v), *v)


valid = st([("a", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6)), ("b", "I64", [2], i64(7, -8)),
            ("c", "F16", [2], struct.pack("<2H", 0x3C00, 0xFC00)), ("d", "BF16", [1], struct.pack("<H", 0x3F80)),
            ("e", "U8", [3], bytes([0, 1, 255])), ("f", "BOOL", [1], b"\x01"), ("g", "F64", [], struct.pack("<d", 2.5)),
            ("h", "I32", [1, 1], struct.pack("<i", -3)), ("i", "I16", [1], struct.pack("<h", 9)),
            ("j", "I8", [2], struct.pack("<2b", -1, 1)), ("k", "F32", [0, 4], b"")],
           meta={"format": "pt", "scanprop_model": "x"})
put("safetensors", "valid.safetensors", valid)
put("safetensors", "empty.safetensors", st([]))
put("safetensors", "escapes.safetensors", st([("n\\u00e9\"\\\\/\\t", "F32", [1], f32(0))]))
put("safetensors", "truncated.safetensors", valid[:-5])
put("safetensors", "trailing.safetensors", valid + b"\0" * 16)
put("safetensors", "header-too-long.safetensors", struct.pack("<Q", 1 << 62) + valid[8:])
put("safetensors", "header-past-end.safetensors", struct.pack("<Q", len(valid)) + valid[8:])
put("safetensors", "bad-json.safetensors", struct.pack("<Q", 16) + b'{"a":{"dtype":,}')
put("safetensors", "overlap.safetensors",
    st([("a", "F32", [2], f32(1, 2)), ("b", "F32", [2], f32(3, 4))]).replace(b"[8,16]", b"[4,12]"))
put("safetensors", "shape-mismatch.safetensors", st([("a", "F32", [3], f32(1, 2))]))
put("safetensors", "shape-overflow.safetensors",
    st([("a", "F32", [1], f32(1))]).replace(b"[1]", b"[1099511627776,1099511627776,1099511627776]"))
put("safetensors", "unknown-dtype.safetensors", st([("a", "F8", [1], b"\0")]))
put("safetensors", "metadata-not-string.safetensors", st([("a", "F32", [1], f32(1))], meta={"k": 1}))
put("safetensors", "duplicate.safetensors",
    struct.pack("<Q", 96) + b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
    b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}  ' + b"\0")

# ---- IDX: [u32 length of the images file][images][labels] (tests/fuzz/targets.c) ---------
def idx_images(n, r, c, pixels=None):
    return struct.pack(">IIII", 2051, n, r, c) + (pixels if pixels is not None else bytes(range(n * r * c)))


def idx_labels(labels):
    return struct.pack(">II", 2049, len(labels)) + bytes(labels)


def idx(images, labels):
    return struct.pack("<I", len(images)) + images + labels


def gz(b):
    return gzip.compress(b, mtime=0)


img, lab = idx_images(2, 4, 4), idx_labels([3, 9])
put("idx", "valid", idx(img, lab))
put("idx", "valid-gz", idx(gz(img), gz(lab)))
put("idx", "valid-gz-images-raw-labels", idx(gz(img), lab))
put("idx", "label-out-of-range", idx(img, idx_labels([3, 10])))
put("idx", "count-mismatch", idx(img, idx_labels([1, 2, 3])))
put("idx", "truncated-pixels", idx(img[:-3], lab))
put("idx", "trailing-bytes", idx(img + b"\0\0", lab))
put("idx", "swapped-files", idx(lab, img))
put("idx", "huge-dims", idx(struct.pack(">IIII", 2051, 1 << 30, 4096, 4096), lab))
put("idx", "zero-rows", idx(idx_images(2, 0, 4, b""), lab))
g = bytearray(gz(img))
g[len(g) // 2] ^= 0xFF
put("idx", "corrupt-gz", idx(bytes(g), lab))
put("idx", "truncated-gz", idx(gz(img)[:-6], lab))
put("idx", "gz-then-garbage", idx(gz(img) + b"garbage!", lab))

# ---- CIFAR-10 binary ---------------------------------------------------------------------
rec = bytes([7]) + bytes(i % 256 for i in range(3072))
put("cifar", "valid-1", rec)
put("cifar", "valid-2", rec + bytes([0]) + bytes(3072))
put("cifar", "label-10", bytes([10]) + rec[1:])
put("cifar", "short", rec[:-1])
put("cifar", "one-and-a-bit", rec + b"\x01\x02")

# ---- sequence sets: x [N, T, C] float, y [N] integer ------------------------------------
x = f32(*[0.5 * i for i in range(12)])
put("seqset", "valid.safetensors", st([("x", "F32", [2, 3, 2], x), ("y", "I64", [2], i64(0, 1))]))
put("seqset", "nclasses.safetensors",
    st([("x", "F32", [2, 3, 2], x), ("y", "I32", [2], struct.pack("<2i", 0, 4))], meta={"nclasses": "5"}))
put("seqset", "x-f64.safetensors",
    st([("x", "F64", [1, 2, 1], struct.pack("<2d", 1, 2)), ("y", "U8", [1], b"\x02")]))
put("seqset", "x-2d.safetensors", st([("x", "F32", [2, 6], x), ("y", "I64", [2], i64(0, 1))]))
put("seqset", "no-y.safetensors", st([("x", "F32", [2, 3, 2], x)]))
put("seqset", "negative-label.safetensors", st([("x", "F32", [2, 3, 2], x), ("y", "I64", [2], i64(0, -1))]))
put("seqset", "label-too-big.safetensors",
    st([("x", "F32", [2, 3, 2], x), ("y", "I64", [2], i64(0, 1 << 40))]))
put("seqset", "y-count.safetensors", st([("x", "F32", [2, 3, 2], x), ("y", "I64", [3], i64(0, 1, 2))]))
put("seqset", "nclasses-bad.safetensors",
    st([("x", "F32", [2, 3, 2], x), ("y", "I64", [2], i64(0, 1))], meta={"nclasses": "-3"}))


# ---- costs/profile CSV (--costs, --profile, --layerpipe) ---------------------------------
put("costs", "valid", b"layer,fwd,bwd_grad,bwd_delta\nconv1,1.20e6,2.16e6,4.01e7\nfc1,3,4,5\n")
put("costs", "valid-every-column", b"# a profile\nname,fp,bp_g,bp_delta,movable,act_bytes,param_bytes\n"
    b"l1,1,2,3,1,100,200\n\nl2,0.5,0.5,0.5,0,1,1\n")
put("costs", "valid-crlf", b"FWD,BWD_GRAD,BWD_DELTA\r\n1,2,3\r\n")
put("costs", "empty", b"")
put("costs", "no-stages", b"layer,fwd,bwd_grad,bwd_delta\n")
put("costs", "unknown-column", b"layer,fwd,bwd_grad,bwd_delta,speed\nl,1,2,3,4\n")
put("costs", "column-twice", b"fwd,fwd,bwd_grad,bwd_delta\n1,1,2,3\n")
put("costs", "missing-column", b"layer,fwd,bwd_grad\nl1,1,2\n")
put("costs", "short-row", b"fwd,bwd_grad,bwd_delta\n1,2,3\n1,2\n")
put("costs", "not-a-number", b"fwd,bwd_grad,bwd_delta\n1,2,three\n")
put("costs", "negative", b"fwd,bwd_grad,bwd_delta\n1,-2,3\n")
put("costs", "nan", b"fwd,bwd_grad,bwd_delta\nnan,2,3\n")
put("costs", "inf-total", b"fwd,bwd_grad,bwd_delta\n1e308,1e308,1e308\n1e308,1e308,1e308\n")
put("costs", "movable-2", b"fwd,bwd_grad,bwd_delta,movable\n1,2,3,2\n")
put("costs", "long-line", b"fwd,bwd_grad,bwd_delta\n" + b"1" * 5000 + b",2,3\n")
put("costs", "65-columns", b",".join(b"c%d" % i for i in range(65)) + b"\n")

# ---- resumable state (--resume): tests/fuzz/targets.c fz_state's MLP 4 -> 3 -> 2 ------------
def f64(*v):
    return struct.pack("<%dd" % len(v), *v)


def state(optim="sgd", run_optim=None, seed="1", step=2, epoch=0, nan=False, fc1_shape=(3, 4), drop=None):
    shapes = [("fc1.weight", list(fc1_shape)), ("fc1.bias", [3]), ("fc2.weight", [2, 3]), ("fc2.bias", [2])]
    ts = []
    for i, (name, shape) in enumerate(shapes):
        n = 1
        for d in shape:
            n *= d
        ts.append((name, "F32", shape, f32(*[0.1 * (i + 1) - 0.05 * k for k in range(n)])))
    for name, shape in shapes:
        n = 1
        for d in shape:
            n *= d
        ts.append(("state/optim/%s/step" % name, "I64", [], i64(2)))
        bufs = ["momentum_buffer"] if optim == "sgd" else ["exp_avg", "exp_avg_sq"]
        for b in bufs:
            v = [0.01 * (k + 1) for k in range(n)]
            if nan and b == bufs[0] and name == "fc1.weight":
                v[0] = float("nan")
            ts.append(("state/optim/%s/%s" % (name, b), "F32", shape, f32(*v)))
    ts += [("state/train/step", "I64", [], i64(step)), ("state/train/epoch", "I64", [], i64(epoch)),
           ("state/train/batch", "I64", [], i64(2)), ("state/train/epoch_loss", "F64", [], f64(4.5)),
           ("state/train/lr", "F64", [], f64(1e-3))]
    ts = [t for t in ts if t[0] != drop]
    meta = {"format": "pt", "scanprop_version": "0.1", "scanprop_model": "mlp",
            "run.optim": run_optim or optim, "run.seed": seed}
    return st(ts, meta)


put("state", "valid-sgd", state())
put("state", "valid-adam", state("adam"))
put("state", "other-seed", state(seed="2"))
put("state", "other-optimizer", state(run_optim="adam"))
put("state", "step-2-to-the-62", state(step=1 << 62))
put("state", "negative-epoch", state(epoch=-1))
put("state", "nan-momentum", state(nan=True))
put("state", "transposed-weight", state(fc1_shape=(4, 3)))
put("state", "no-train-step", state(drop="state/train/step"))
put("state", "no-optimizer-step", state(drop="state/optim/fc2.bias/step"))
put("state", "truncated", state()[:700])
put("state", "header-length-2-to-the-40", struct.pack("<Q", 1 << 40) + state()[8:])

# ---- images (stb_image decodes by content) ---------------------------------------------
def png(w, h, color_type, rows, bitdepth=8, extra=b""):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    raw = b"".join(b"\0" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bitdepth, color_type, 0, 0, 0))
            + extra + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


rgb = png(3, 2, 2, [bytes([255, 0, 0, 0, 255, 0, 0, 0, 255]), bytes([9, 9, 9, 200, 100, 50, 1, 2, 3])])
put("image", "rgb.png", rgb)
put("image", "grey-alpha.png", png(2, 2, 4, [bytes([10, 255, 20, 128]), bytes([30, 0, 40, 64])]))
plte = struct.pack(">I", 6) + b"PLTE" + bytes([0, 0, 0, 255, 255, 255])
plte += struct.pack(">I", zlib.crc32(b"PLTE" + bytes([0, 0, 0, 255, 255, 255])) & 0xFFFFFFFF)
put("image", "palette.png", png(2, 1, 3, [bytes([0, 1])], extra=plte))
put("image", "grey16.png", png(1, 1, 0, [bytes([0x12, 0x34])], bitdepth=16))
put("image", "truncated.png", rgb[:-20])
bad = bytearray(rgb)
bad[30] ^= 0x55
put("image", "bad-crc.png", bytes(bad))
put("image", "huge.png", png(1, 1, 2, [bytes(3)]).replace(struct.pack(">II", 1, 1), struct.pack(">II", 100000, 100000), 1))
bmp_px = bytes([0, 0, 255, 0, 255, 0, 0, 0]) + bytes([255, 0, 0, 9, 9, 9, 0, 0])   # 2x2, rows padded to 8
put("image", "rgb.bmp", b"BM" + struct.pack("<IHHI", 54 + len(bmp_px), 0, 0, 54)
    + struct.pack("<IiiHHIIiiII", 40, 2, 2, 1, 24, 0, len(bmp_px), 2835, 2835, 0, 0) + bmp_px)
put("image", "rgb.tga", struct.pack("<BBBHHBHHHHBB", 0, 0, 2, 0, 0, 0, 0, 0, 2, 2, 24, 0) + bytes(range(12)))
put("image", "rgb.ppm", b"P6\n2 2\n255\n" + bytes(range(12)))
put("image", "grey.pgm", b"P5\n2 1\n255\n\x00\xff")
put("image", "zero-size.ppm", b"P6\n0 0\n255\n")
put("image", "gif-header.gif", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")

# JPEG through stb_image_write (a baseline encoder), 8x8 and 17x9 (partial MCUs)
src = r'''
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
int main(int c, char **v) {
    unsigned char px[17 * 9 * 3];
    for (int i = 0; i < 17 * 9 * 3; i++) px[i] = (unsigned char)(i * 37);
    return !(stbi_write_jpg(v[1], 8, 8, 3, px, 90) && stbi_write_jpg(v[2], 17, 9, 1, px, 50));
}'''
with tempfile.TemporaryDirectory() as t:
    with open(os.path.join(t, "w.c"), "w") as f:
        f.write(src)
    try:
        subprocess.run(["cc", "-w", "-o", os.path.join(t, "w"), os.path.join(t, "w.c"), "-lm"], check=True)
        subprocess.run([os.path.join(t, "w"), os.path.join(t, "a.jpg"), os.path.join(t, "b.jpg")], check=True)
        for n in ("a.jpg", "b.jpg"):
            with open(os.path.join(t, n), "rb") as f:
                data = f.read()
            put("image", "stbw-" + n, data)
        put("image", "truncated.jpg", data[: len(data) // 2])
    except (OSError, subprocess.CalledProcessError) as e:
        print("no JPEG seeds:", e)
# ---- action lists (--scheme custom --actions; PyTorch's forms) ---------------------------
torch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref", "torch_csv")
for n in ("Schedule1F1B_compute", "ScheduleZBVZeroBubble", "ScheduleDualPipeV_comms", "ScheduleInterleaved1F1B_compute"):
    with open(os.path.join(torch, n + ".csv"), "rb") as f:
        put("actions", n, f.read())
put("actions", "zb-split", b"0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n")
put("actions", "blanks-crlf", b" 0F0 ,, 0B0\r\n1F0,1B0,\r\n\r\n")
put("actions", "overlap", b"0F0,(0F1;0B0)OVERLAP_F_B,0B1,0REDUCE_GRAD\n")
put("actions", "missing", b"0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1W0,1I1,1W1\n")
put("actions", "cycle", b"0F0,0I0,0W0,0F1,0I1,0W1\n1F1,1F0,1I0,1W0,1I1,1W1\n")
put("actions", "typo", b"0F0,0F1,0B0,0B1\n1F2,1F1,1B0,1B1\n")
put("actions", "blank-first", b"\n0F0,0B0\n")
put("actions", "nul", b"0F0,0B0\0,0F1,0B1\n")
put("actions", "huge-index", b"0F0,0B0,999999F999999\n")
put("actions", "comm-elsewhere", b"0F0,0B0,1RECV_F0\n1F0,1B0\n")
print("corpus written to", ROOT)
