"""common.py — what every PyTorch reference script of `make bench` shares.

The scripts time PyTorch CPU doing the same work as scanprop's apps, in its *tuned*
configuration: `--threads` intra-op threads and OpenBLAS's own thread pool held at
`--blas-threads` (default 1), and subnormal floats flushed to zero (`--flush-denormal 1`,
as scanprop's own threads compute: core/threads.h). Debian's torch 1.13 does not pass set_num_threads on to
OpenBLAS, so without the second setting torch's OpenMP team and OpenBLAS's pool would
both try to fill the cores. Run them with /usr/bin/python3 (Debian's python3-torch).
Each script prints one JSON line last; bench/bench.py reads it.
"""
import argparse
import ctypes
import json
import statistics
import time

import torch


def _openblas():
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
    except OSError:
        return None
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return lib


def parser(doc):
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--blas-threads", type=int, default=1, help="OpenBLAS's own thread pool")
    ap.add_argument("--flush-denormal", type=int, choices=(0, 1), default=1,
                    help="torch.set_flush_denormal: 1 (default) computes as scanprop does, subnormals as 0")
    return ap


def setup(a):
    """Applies the thread settings; returns the environment facts for the JSON line."""
    torch.set_num_threads(a.threads)
    flushed = torch.set_flush_denormal(bool(a.flush_denormal))
    blas = _openblas()
    if blas:
        blas.openblas_set_num_threads(a.blas_threads)
    info = {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "mkldnn_enabled": torch.backends.mkldnn.enabled, "flush_denormal": bool(a.flush_denormal) and flushed}
    if blas:
        info["openblas_threads"] = blas.openblas_get_num_threads()
        info["openblas_core"] = blas.openblas_get_corename().decode()
    return info


def measure(fn, warmup, reps, min_rep_s=0.0, budget_s=None):
    """Per-call wall time of fn in ms: median, min and max over `reps` repetitions,
    after `warmup` calls. A repetition repeats fn until it lasts min_rep_s; the number
    of repetitions shrinks (not below 3) when they would take over budget_s."""
    for _ in range(warmup):
        fn()
    t = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t, 1e-9)
    inner = max(1, int(min_rep_s / once))
    if budget_s is not None:
        reps = max(3, min(reps, int(budget_s / (once * inner))))
    ms = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        ms.append((time.perf_counter() - t) / inner * 1e3)
    return {"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms), "reps": reps, "inner": inner}


def timed_phases(rec, phases, **kw):
    """Times each (name, fn) of a training step into rec as name_ms, name_minmax_ms;
    bwd_derived_ms = step - fwd_grad (backward, optimizer and zero_grad)."""
    for name, fn in phases:
        t = measure(fn, **kw)
        rec[name + "_ms"] = t["median_ms"]
        rec[name + "_minmax_ms"] = [t["min_ms"], t["max_ms"]]
        rec[name + "_reps_x_inner"] = [t["reps"], t["inner"]]
    rec["bwd_derived_ms"] = rec["step_ms"] - rec["fwd_grad_ms"]
    return rec


def step_phases(model_loss, opt):
    """The three timed pieces of a step, given model_loss() -> loss tensor."""
    def fwd_nograd():
        with torch.no_grad():
            model_loss()

    def fwd_grad():
        model_loss()

    def step():
        opt.zero_grad()
        model_loss().backward()
        opt.step()

    return [("fwd_nograd", fwd_nograd), ("fwd_grad", fwd_grad), ("step", step)]


def emit(obj):
    print(json.dumps(obj), flush=True)
