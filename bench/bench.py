#!/usr/bin/python3
"""bench.py — runs the scanprop apps and the PyTorch CPU peer scripts in one session,
interleaved round by round, and appends one JSON record per run to a .jsonl file that
bench/compare.py turns into ratio tables. Called by bench/run.sh (`make bench`).

Why interleaved rounds: the machine has 2 cores shared with other work, so load drifts
over minutes. Running ours and PyTorch alternately (ABBA order across rounds) and taking
the median over rounds of each side's per-run median makes the *ratio* robust even when
the absolute times are not.

Record: {"section", "who": "ours"|"torch"|"gemm", "cfg": {...}, "round", "cpu": "native"|"avx2",
         "cmd", "rc", "wall_s", "maxrss_kib": <the child's peak RSS>, "load1",
         "json": <last JSON line of stdout or null>, "plan": {...}?, "error"?}
--cpu picks the environment of every run: "native" removes OPENBLAS_CORETYPE and the ISA
caps (the libraries choose), "avx2" caps oneDNN, ATen and OpenBLAS at AVX2 (CPU_SETTINGS).
Stdlib only; run with /usr/bin/python3 (the peers need Debian's torch anyway).
"""
import argparse
import gzip
import json
import os
import random
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

PY = "/usr/bin/python3"
FMNIST = "/usr/share/datasets/fashion-mnist"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Runner:
    def __init__(self, a):
        self.a = a
        self.build = a.build
        self.peers = a.peers
        self.out = open(a.out, "a")
        self.logf = open(a.log, "a") if a.log else None
        self.failures = 0
        self.env = cpu_env(a.cpu)

    def run(self, section, who, cfg, rnd, cmd, env=None, timeout=600, want_plan=False, allow_rc=()):
        """Runs cmd as a child process, records it, returns the parsed JSON (or None). The
        record holds the child's own peak resident set (ru_maxrss from os.wait4 on that
        child alone: RUSAGE_CHILDREN would be the largest of all children so far). For our
        apps it also records every step's wall time from --log (the JSON has medians only),
        so that compare.py can take best-of windows as the peers do."""
        rec = {"section": section, "who": who, "cfg": cfg, "round": rnd, "cpu": self.a.cpu,
               "cmd": " ".join(shlex.quote(c) for c in cmd)}
        steplog = None
        if who == "ours":
            steplog = os.path.join(os.path.dirname(os.path.abspath(self.a.out)), "steps.tmp.csv")
            cmd = cmd + ["--log", steplog]
        env = self.env if env is None else env
        rec["load1"] = loadavg()
        t0 = time.perf_counter()
        rc, out, err, maxrss = child(cmd, env, timeout)
        rec["rc"] = rc
        rec["wall_s"] = round(time.perf_counter() - t0, 3)
        rec["maxrss_kib"] = maxrss
        js = None
        for line in reversed(out.splitlines()):
            if line.startswith("{"):
                try:
                    js = json.loads(line)
                except ValueError:
                    pass
                break
        rec["json"] = js
        if steplog:
            rec["step_s"] = read_steplog(steplog)
        if want_plan:   # --plan prints the plan and exits: a run of its own, after the timed one
            try:
                pp = subprocess.run([c for c in cmd if c != "--plan"] + ["--plan"], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True, timeout=timeout, env=env)
                rec["plan"] = parse_plan(pp.stdout)
            except subprocess.TimeoutExpired:
                rec["plan"] = {}
        if rc != 0 or js is None:
            tail = (err.strip().splitlines() or ["(no stderr)"])[-1]
            rec["error"] = tail
            if rc not in allow_rc:
                self.failures += 1
                log(f"  !! {section}/{who} {cfg} failed (rc {rc}): {tail}")
        if self.logf:
            self.logf.write(f"### [{self.a.cpu}] {rec['cmd']}\n# rc {rc}, {rec['wall_s']} s, maxrss {maxrss} KiB\n")
            self.logf.write("\n".join(l for l in out.splitlines() if not re.match(r"\s+\d+ (up|down|identity) ", l)))
            self.logf.write("\n" + err[-4000:] + "\n")
            self.logf.flush()
        self.out.write(json.dumps(rec) + "\n")
        self.out.flush()
        return js, rec

    # ---- the command lines ---------------------------------------------------------
    def ours(self, app, *args):
        return [os.path.join(self.build, app), "--threads", "2", "--quiet", *map(str, args)]

    def torch(self, script, *args):
        # The peers' tuned defaults: torch 2 threads, OpenBLAS pool 1 thread (bench/peers/common.py).
        return [PY, os.path.join(self.peers, script), "--threads", "2", "--blas-threads", "1", *map(str, args)]


def child(cmd, env, timeout):
    """Runs cmd; returns (exit code, stdout, stderr, peak RSS in KiB of that child). The
    child is reaped with os.wait4, which gives its own rusage; Popen.wait would reap it
    without. Output goes through temporary files (no pipe to fill while we wait)."""
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        try:
            p = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True, env=env)
        except OSError as e:
            return 127, "", str(e), None
        deadline = time.monotonic() + timeout
        timed_out = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                timed_out = True
                break
            time.sleep(0.01)
        p.returncode = os.waitstatus_to_exitcode(status)   # reaped here: Popen must not wait again
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    if timed_out:
        return 124, out, err + f"\ntimed out after {timeout} s", ru.ru_maxrss
    return p.returncode, out, err, ru.ru_maxrss


# The two CPU settings of a run (--cpu): the libraries' own choices, and an AVX2-only
# machine emulated on both sides (oneDNN here and in torch, scanprop's small kernel,
# torch's ATen kernels and OpenBLAS capped at AVX2 + FMA).
ISA_VARS = ("OPENBLAS_CORETYPE", "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
CPU_SETTINGS = {
    "native": {},
    "avx2": {"OPENBLAS_CORETYPE": "Haswell", "DNNL_MAX_CPU_ISA": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "ATEN_CPU_CAPABILITY": "avx2"},
}


def cpu_env(name):
    env = {k: v for k, v in os.environ.items() if k not in ISA_VARS}
    env.update(CPU_SETTINGS[name])
    return env


def loadavg():
    """1-minute load average before a run: how busy the 2 cores were (others' work)."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError):
        return None


def read_steplog(path):
    """Per-step wall seconds from an app's --log CSV (step,epoch,loss,lr,seconds, the
    last column cumulative from the start of the loop; loader time included)."""
    try:
        with open(path) as f:
            rows = [line.split(",") for line in f.read().splitlines()[1:]]
        os.remove(path)
    except OSError:
        return []
    t = [float(r[4]) for r in rows if len(r) >= 5 and r[2] != ""]   # training rows (evaluations: loss empty)
    return [round(b - a, 6) for a, b in zip([0.0] + t, t)]


def parse_plan(out):
    """The two summary lines of the bppsa --plan output (schedulers/backward/bppsa.c)."""
    plan = {}
    m = re.search(r"sequential levels: bppsa (\d+) vs linear BP (\d+) \(longest product chain (\d+)\)", out)
    if m:   # the levels count only levels that multiply (docs/BPPSA.md, "Counting levels")
        plan.update(bppsa_levels=int(m[1]), linear_steps=int(m[2]), multiply_levels=int(m[1]), chain_depth=int(m[3]))
    m = re.search(r"FLOP per sample: bppsa total (\d+), critical path (\d+); linear BP (\d+)", out)
    if m:
        plan.update(bppsa_flop=int(m[1]), critical_flop=int(m[2]), linear_flop=int(m[3]))
    return plan


# ---- small datasets, so that the apps' end-of-run evaluation costs nothing -------------

def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return raw[:4], dims, raw[4 + 4 * ndim:]


def write_idx_head(path, magic, dims, body, n):
    per = 1
    for d in dims[1:]:
        per *= d
    with open(path, "wb") as f:
        f.write(magic)
        f.write(n.to_bytes(4, "big"))
        for d in dims[1:]:
            f.write(d.to_bytes(4, "big"))
        f.write(body[:n * per])


def prepare_data(root):
    """fmnist/: the real training set (links) + the first 256 test images, because the
    apps evaluate the whole test set after a --steps run (10000 images cost LeNet ~1 s
    and VGG-11 over a minute). cifar/: CIFAR-10-format files of seeded random pixels for
    VGG-11, 3x32x32 like the PyTorch peer's random inputs (timing does not depend on the
    values)."""
    fm = os.path.join(root, "fmnist")
    os.makedirs(fm, exist_ok=True)
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        src = os.path.join(FMNIST, f"train-{kind}.gz")
        if not os.path.exists(src):
            sys.exit(f"bench: {src} missing (apt-get install dataset-fashion-mnist)")
        dst = os.path.join(fm, f"train-{kind}.gz")
        if not os.path.lexists(dst):
            os.symlink(src, dst)
        test = os.path.join(fm, f"t10k-{kind}")
        if not os.path.exists(test):
            magic, dims, body = read_idx(os.path.join(FMNIST, f"t10k-{kind}.gz"))
            write_idx_head(test + ".tmp", magic, dims, body, 256)
            os.replace(test + ".tmp", test)
    cf = os.path.join(root, "cifar")
    os.makedirs(cf, exist_ok=True)
    rng = random.Random(7)
    for name, n in [(f"data_batch_{i}.bin", 512) for i in range(1, 6)] + [("test_batch.bin", 32)]:
        path = os.path.join(cf, name)
        if os.path.exists(path) and os.path.getsize(path) == n * 3073:
            continue
        buf = bytearray()
        for r in range(n):
            buf.append(r % 10)
            buf += rng.randbytes(3072)
        with open(path + ".tmp", "wb") as f:
            f.write(buf)
        os.replace(path + ".tmp", path)
    return fm, cf


# ---- the sections -----------------------------------------------------------------------

# The quick subset's rounds for LeNet-5 and ResNet-20 (one for the other sections): their
# speed targets are judged per pass, and on a shared machine one round is one draw of its
# minutes (a round of PyTorch in a fast minute against one of ours in a slow one, or the
# reverse); three cost under a minute more.
QUICK_ROUNDS = 3


def abba(rnd, jobs):
    """Alternate the order each round so neither side always runs first."""
    return jobs if rnd % 2 == 0 else list(reversed(jobs))


def sec_gemm(R, q):
    exe = R.a.gemm
    if not exe or not os.path.exists(exe):
        log("  gemm: bench_gemm not built, skipped")
        return
    # oneDNN's SGEMM (what scanprop's products and convolutions run on, capped as the
    # pass caps it) is the machine's peak the "% of SGEMM peak" target refers to;
    # OpenBLAS under each core type is context.
    settings = ["oneDNN", "unset", "Haswell"]
    for rnd in range(3 if q else 5):   # ~0.5 s a run; GEMM rate swings most under load
        for s in abba(rnd, settings):
            env = dict(R.env)
            env.pop("OPENBLAS_CORETYPE", None)
            if s == "oneDNN" and "OPENBLAS_CORETYPE" in R.env:
                env["OPENBLAS_CORETYPE"] = R.env["OPENBLAS_CORETYPE"]
            if s not in ("unset", "oneDNN"):
                env["OPENBLAS_CORETYPE"] = s
            lib = "dnnl" if s == "oneDNN" else "openblas"
            js, _ = R.run("gemm", "gemm", {"coretype": s, "n": 2048, "threads": 2}, rnd,
                          [exe, "2048", "2", "5", lib], env=env)
            if js:
                log(f"  [gemm r{rnd}] OPENBLAS_CORETYPE={s}: core {js['core']}, {js['gflops_median']:.1f} GFLOP/s")


def sec_lenet(R, q, data):
    # Both sides: 10 warm-up steps, then windows of `tsteps` steps; compare.py takes the
    # median and the best window of each (the peer's own method).
    steps = {64: 130, 256: 90} if q else {64: 310, 256: 160}
    tsteps, treps = (40, 3) if q else (50, 4)
    for rnd in range(QUICK_ROUNDS if q else 4):
        jobs = [("ours", b) for b in (64, 256)] + [("torch", None)]
        for who, b in abba(rnd, jobs):
            if who == "ours":
                js, _ = R.run("lenet", "ours", {"batch": b, "window": tsteps}, rnd,
                              R.ours("lenet", "--data", data, "--steps", steps[b], "--batch", b))
                if js:
                    log(f"  [lenet r{rnd}] ours b{b}: {js['images_per_s']:.0f} img/s")
            else:
                js, _ = R.run("lenet", "torch", {"batches": [64, 256]}, rnd,
                              R.torch("lenet.py", "--epochs", 0, "--tput-batches", "64,256",
                                      "--tput-steps", tsteps, "--tput-reps", treps, "--tput-warmup", 10))
                if js:
                    log(f"  [lenet r{rnd}] torch: " + ", ".join(
                        f"b{t['batch']} {t['images_per_s_median']:.0f} img/s" for t in js["throughput"]))


def sec_vgg(R, q, data):
    batches = [32] if q else [32, 128]
    steps = {32: 6 if q else 12, 128: 5}
    for rnd in range(1 if q else 3):
        jobs = [("ours", b) for b in batches] + [("torch", None)]
        for who, b in abba(rnd, jobs):
            if who == "ours":
                js, _ = R.run("vgg", "ours", {"batch": b}, rnd,
                              R.ours("vgg11", "--data", data, "--data-format", "cifar10", "--steps", steps[b],
                                     "--batch", b))
                if js:
                    log(f"  [vgg r{rnd}] ours b{b}: step {js['step_ms']:.1f} ms, fwd {js['forward_ms']:.1f} ms")
            else:
                args = ["--batches", ",".join(map(str, batches))]
                args += ["--reps", 3, "--warmup", 1, "--budget-s", 4] if q else ["--reps", 5, "--warmup", 2,
                                                                                  "--budget-s", 6]
                js, _ = R.run("vgg", "torch", {"batches": batches}, rnd, R.torch("vgg11.py", *args))
                if js:
                    log(f"  [vgg r{rnd}] torch: " + ", ".join(
                        f"b{r['batch']} step {r['step_ms']:.1f} ms" for r in js["runs"]))


def sec_resnet(R, q, data):
    batches = [64] if q else [64, 128]
    steps = {64: 6 if q else 10, 128: 6}
    for rnd in range(QUICK_ROUNDS if q else 3):
        jobs = [("ours", b) for b in batches] + [("torch", None)]
        for who, b in abba(rnd, jobs):
            if who == "ours":
                js, _ = R.run("resnet", "ours", {"batch": b}, rnd,
                              R.ours("resnet", "--data", data, "--data-format", "cifar10", "--steps", steps[b],
                                     "--batch", b))
                if js:
                    log(f"  [resnet r{rnd}] ours b{b}: step {js['step_ms']:.1f} ms, fwd {js['forward_ms']:.1f} ms")
            else:
                args = ["--batches", ",".join(map(str, batches))]
                args += ["--reps", 3, "--warmup", 1, "--budget-s", 4] if q else ["--reps", 5, "--warmup", 2,
                                                                                  "--budget-s", 6]
                js, _ = R.run("resnet", "torch", {"batches": batches}, rnd, R.torch("resnet.py", *args))
                if js:
                    log(f"  [resnet r{rnd}] torch: " + ", ".join(
                        f"b{r['batch']} step {r['step_ms']:.1f} ms" for r in js["runs"]))


# The memory table's workloads: (name, batch, steps, our app's arguments, memory.py's).
# Both sides run the same number of training steps as a child process of their own.
def mem_workloads(fm, cf):
    return [
        ("lenet", 64, 100, ["lenet", "--data", fm], ["--workload", "lenet", "--data-dir", FMNIST]),
        ("vgg11", 32, 6, ["vgg11", "--data", cf, "--data-format", "cifar10"], ["--workload", "vgg11"]),
        ("resnet20", 64, 6, ["resnet", "--data", cf, "--data-format", "cifar10"], ["--workload", "resnet20"]),
        ("rnn", 16, 10, ["rnn", "--paper-defaults", "--seq-len", 1000, "--samples", 160],
         ["--workload", "rnn", "--T", 1000]),
        ("gru", 16, 6, ["gru", "--shape", "L", "--samples", 96], ["--workload", "gru", "--T", 1034]),
    ]


def sec_mem(R, q, fm, cf):
    """Peak and steady-state RSS of each workload, one child process per side and run:
    peak = the child's ru_maxrss (os.wait4), steady = VmRSS the process read itself after
    its last training step (scanprop: --mem-report; PyTorch: bench/peers/memory.py)."""
    for rnd in range(1 if q else 2):
        for name, b, n, app, peer in mem_workloads(fm, cf):
            for who in abba(rnd, ["ours", "torch"]):
                cfg = {"workload": name, "batch": b, "steps": n}
                if who == "ours":
                    js, rec = R.run("mem", "ours", cfg, rnd, R.ours(*app, "--steps", n, "--batch", b, "--mem-report"))
                else:
                    js, rec = R.run("mem", "torch", cfg, rnd, R.torch("memory.py", *peer, "--batch", b, "--steps", n))
                if js:
                    log(f"  [mem {name} r{rnd}] {who}: peak {rec['maxrss_kib'] / 1024:.0f} MiB, "
                        f"steady {js.get('rss_steady_mib') or 0:.0f} MiB")


# The default runs: each image app as a user first runs it (its default batch and data,
# Debian's Fashion-MNIST with the whole 10 000-image test set, the end-of-run evaluation
# at its default --eval-batch), next to bench/peers/default_run.py doing the same in
# PyTorch. (name, the app's default batch, steps, quick steps.)
MEMRUN_WORKLOADS = [("lenet", "lenet", 64, 100, 50), ("vgg11", "vgg11", 32, 6, 3), ("resnet20", "resnet", 64, 6, 3)]


def sec_memrun(R, q):
    """Peak RSS of a default run, training and evaluation: the child's ru_maxrss on both
    sides; steady = VmRSS after the last training step, before the evaluation."""
    for rnd in range(1 if q else 2):
        for name, app, b, n, nq in MEMRUN_WORKLOADS:
            steps = nq if q else n
            for who in abba(rnd, ["ours", "torch"]):
                cfg = {"workload": name, "batch": b, "steps": steps}
                if who == "ours":
                    js, rec = R.run("memrun", "ours", cfg, rnd, R.ours(app, "--steps", steps, "--mem-report"))
                else:
                    js, rec = R.run("memrun", "torch", cfg, rnd,
                                    R.torch("default_run.py", "--workload", name, "--steps", steps, "--data-dir",
                                            FMNIST))
                if js:
                    log(f"  [memrun {name} r{rnd}] {who}: peak {rec['maxrss_kib'] / 1024:.0f} MiB, "
                        f"steady {js.get('rss_steady_mib') or 0:.0f} MiB, test_acc {js.get('test_acc')}")


def rnn_steps(T, engine, q):
    if T <= 100:
        s = 50
    elif T <= 1000:
        s = 20 if engine == "linear" else 8
    else:
        s = 8 if engine == "linear" else 3   # bppsa at T=10000: ~2 s a step on 2 cores
    return max(2, s // 2) if q else s


def sec_rnn(R, q):
    Ts = [100, 1000] if q else [100, 1000, 10000]
    Bs = [1, 16]
    for T in Ts:
        rounds = 1 if (q or T >= 10000) else 2
        for rnd in range(rounds):
            jobs = [("ours", e, B) for e in ("linear", "bppsa") for B in Bs] + [("torch", None, None)]
            for who, e, B in abba(rnd, jobs):
                if who == "ours":
                    n = rnn_steps(T, e, q)
                    want = e == "bppsa" and B == Bs[-1] and rnd == 0
                    js, _ = R.run("rnn", "ours", {"T": T, "B": B, "engine": e, "steps": n}, rnd,
                                  R.ours("rnn", "--paper-defaults", "--steps", n, "--seq-len", T, "--batch", B,
                                         "--samples", n * B, "--backward", e), want_plan=want)
                    if js:
                        log(f"  [rnn T{T} B{B} r{rnd}] ours {e}: bwd {js['backward_ms']:.2f} ms, "
                            f"step {js['step_ms']:.2f} ms")
                else:
                    budget = 1 if q else (4 if T >= 10000 else 2)
                    js, _ = R.run("rnn", "torch", {"T": T, "B": Bs}, rnd,
                                  R.torch("rnn.py", "--T", T, "--B", ",".join(map(str, Bs)),
                                          "--impls", "rnn,cell", "--reps", 3 if q else 5, "--budget-s", budget))
                    if js:
                        log(f"  [rnn T{T} r{rnd}] torch: " + ", ".join(
                            f"{r['impl']} B{r['B']} step {r['step_ms']:.2f} ms" for r in js["runs"]))


def sec_gru(R, q):
    steps = {"linear": 5 if q else 10, "bppsa": 2 if q else 3}
    for rnd in range(1 if q else 3):
        jobs = [("ours", "linear"), ("ours", "bppsa"), ("torch", None)]
        for who, e in abba(rnd, jobs):
            if who == "ours":
                n = steps[e]
                want = e == "bppsa" and rnd == 0
                js, _ = R.run("gru", "ours", {"engine": e, "steps": n}, rnd,
                              R.ours("gru", "--shape", "L", "--steps", n, "--batch", 16, "--samples", n * 16,
                                     "--backward", e), want_plan=want)
                if js:
                    log(f"  [gru r{rnd}] ours {e}: step {js['step_ms']:.1f} ms, bwd {js['backward_ms']:.1f} ms")
            else:
                js, _ = R.run("gru", "torch", {}, rnd,
                              R.torch("gru.py", "--reps", 3 if q else 7, "--budget-s", 2 if q else 5))
                if js:
                    log(f"  [gru r{rnd}] torch: step {js['step_ms']:.1f} ms")


OOO_POLICIES = ["conventional", "ooo", "reverse-first-k", "list"]


def sec_ooo(R, q, fm, cf):
    probe = R.ours("lenet", "--data", fm, "--steps", 1, "--batch", 8, "--backward", "ooo")
    p = subprocess.run(probe, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=R.env)
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or [""])[-1]
        status = "not built" if "unknown engine" in why else f"failed: {why}"
        R.out.write(json.dumps({"section": "ooo", "who": "status", "status": status, "cmd": " ".join(probe)}) + "\n")
        R.out.flush()
        log(f"  ooo: {status}")
        return
    # Enough steps that the lane tuner's probe window (eight steps, half of them on the
    # mode it does not pick: ooo_exec.c) does not decide the median.
    cases = [("lenet", 64, 30 if q else 100), ("lenet", 16, 50 if q else 100)] + ([] if q else [("lenet", 8, 100)]) + \
        [("vgg11", 8, 24 if q else 30)]
    for rnd in range(1 if q else 3):
        for app, b, n in cases:
            data = ["--data", fm] if app == "lenet" else ["--data", cf, "--data-format", "cifar10"]
            engines = [("linear", None)] + [("ooo", o) for o in OOO_POLICIES]
            for e, order in abba(rnd, engines):
                extra = ["--order", order] if order else []
                js, _ = R.run("ooo", "ours", {"app": app, "batch": b, "engine": e, "order": order}, rnd,
                              R.ours(app, *data, "--steps", n, "--batch", b, "--backward", e, *extra))
                if js:
                    log(f"  [ooo {app} b{b} r{rnd}] {order or e}: step {js['step_ms']:.2f} ms")
    # The same comparison paired: every engine in one process (build/ooo_bench), two steps
    # each in turn, so a shared machine's speed changes hit all alike; the steps as the
    # apps run them (bench/ooo_bench.c).
    for app, b, rounds in [("lenet", 64, 50 if q else 100), ("vgg11", 8, 20 if q else 40)]:
        js, _ = R.run("ooo", "paired", {"app": app, "batch": b}, 0,
                      [os.path.join(R.build, "ooo_bench"), app, str(b), str(rounds), "2"])
        if js:
            lin = statistics.median(js["step_s"]["linear"]) * 1e3
            log(f"  [ooo paired {app} b{b}] linear {lin:.2f} ms; " + ", ".join(
                f"{o} {lin / (statistics.median(v) * 1e3):.2f}×" for o, v in js["step_s"].items() if o != "linear"))


# The order they run in: the load-independent memory figures and the newest workload early.
SECTIONS = ["gemm", "mem", "memrun", "resnet", "lenet", "vgg", "rnn", "gru", "ooo"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--peers", required=True)
    ap.add_argument("--out", required=True, help="JSON lines file (appended)")
    ap.add_argument("--log", help="full stdout/stderr of every run")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--gemm", help="the compiled bench/gemm.c")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--cpu", choices=sorted(CPU_SETTINGS), default="native",
                    help="native: the libraries' own choices; avx2: every library capped at AVX2 (ISA_VARS)")
    a = ap.parse_args()
    want = [s for s in a.sections.split(",") if s]
    bad = [s for s in want if s not in SECTIONS]
    if bad:
        sys.exit(f"bench: unknown section(s) {','.join(bad)} (expected some of {','.join(SECTIONS)})")
    R = Runner(a)
    fm, cf = prepare_data(a.data_dir)
    q = a.quick
    for s in SECTIONS:
        if s not in want:
            continue
        t0 = time.perf_counter()
        log(f"== {s} ({a.cpu})")
        {"gemm": lambda: sec_gemm(R, q), "lenet": lambda: sec_lenet(R, q, fm), "vgg": lambda: sec_vgg(R, q, cf),
         "resnet": lambda: sec_resnet(R, q, cf), "mem": lambda: sec_mem(R, q, fm, cf),
         "memrun": lambda: sec_memrun(R, q),
         "rnn": lambda: sec_rnn(R, q), "gru": lambda: sec_gru(R, q), "ooo": lambda: sec_ooo(R, q, fm, cf)}[s]()
        log(f"   ({time.perf_counter() - t0:.0f} s)")
    return 1 if R.failures else 0


if __name__ == "__main__":
    sys.exit(main())
