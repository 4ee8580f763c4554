#!/usr/bin/python3
"""compare.py — ratio tables (scanprop vs PyTorch CPU) from the JSON lines bench.py wrote.

Usage: /usr/bin/python3 bench/compare.py bench/results/bench-<stamp>.jsonl

Every number is the median over rounds of each run's own median (ours: the app's JSON
keys, which are medians over steps; PyTorch: the peer scripts' medians). The VGG-11 and
ResNet-20 steps leave out as many first steps of each of our runs as the peer's
--warmup leaves out of its own (their per-step wall times, from the app's --log). Every ratio is
"scanprop speed / PyTorch speed": images/s ours ÷ theirs, or ms theirs ÷ ours, so > 1
always means scanprop is faster. Stdlib only.
"""
import json
import statistics
import sys

# VGG-11 config A on 3x32x32 (vgg11_step.py, models.c): conv widths and max-pools.
CFG_A = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


def vgg_step_flop(batch):
    """Useful FLOPs of one VGG-11 training step: forward (2·MACs) + weight gradient
    (same count) + input gradient (same count) for every conv/linear except conv1, whose
    input gradient neither framework computes (the data needs none). Equals
    build/schedule --model vgg11 --costs-out's per-layer fwd/bwd_grad/bwd_delta sum."""
    layers, c, hw = [], 3, 32
    for v in CFG_A:
        if v == "M":
            hw //= 2
        else:
            layers.append(2 * c * v * 9 * hw * hw)
            c = v
    layers.append(2 * 512 * 10)
    fwd = sum(layers)
    return batch * (3 * fwd - layers[0])


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=1):
    if x is None:
        return "—"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{nd}f}"


def spread(xs, nd=1):
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return ""
    return f" ({fmt(min(xs), nd)}–{fmt(max(xs), nd)})"


def ratio(a, b):
    return a / b if a and b else None


def rfmt(r):
    return "—" if r is None else f"**{r:.2f}×**"


def load(path):
    recs = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            recs.append(json.loads(line))
    return recs


def sel(recs, section, who, **cfg):
    out = []
    for r in recs:
        if r.get("section") != section or r.get("who") != who or not r.get("json"):
            continue
        if all(r["cfg"].get(k) == v for k, v in cfg.items()):
            out.append(r)
    return out


def torch_rows(recs, section, key, **match):
    """Rows from the peers' per-config lists (runs / throughput) across rounds."""
    rows = []
    for r in sel(recs, section, "torch"):
        for row in r["json"].get(key, []):
            if all(row.get(k) == v for k, v in match.items()):
                rows.append(row)
    return rows


def windows(rec, window, warm=10):
    """Images/s of consecutive `window`-step windows after `warm` steps of one of our
    runs (from its per-step log), the peer's throughput method."""
    st = rec.get("step_s") or []
    b = rec["json"]["batch"]
    out = []
    for i in range(warm, len(st) - window + 1, window):
        t = sum(st[i:i + window])
        if t > 0:
            out.append(window * b / t)
    return out


def best_step_ms(recs):
    """Fastest single step (ms) over our runs, the first step of each run excluded."""
    xs = [min(r["step_s"][1:]) * 1e3 for r in recs if len(r.get("step_s") or []) > 1]
    return min(xs) if xs else None


def table(head, rows):
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


def ooo_goal(app, batch):
    """The ooo-vs-linear goal of a case: LeNet-5 b64 1.1×, the others (VGG-11 b8 among
    them) at least linear's speed."""
    return 1.1 if (app, batch) == ("lenet", 64) else 1.0


def target_line(name, med_r, best_r, goal, unit="×", at_most=False):
    """Met only if the ratio of medians and the ratio of bests both reach the goal:
    on a loaded machine the two can disagree, and then the verdict says so. at_most: the
    goal is an upper bound (memory); unit "%": the values are fractions shown as percent."""
    def show(v):
        return "—" if v is None else (f"{100 * v:.0f}%" if unit == "%" else fmt(v, 2) + unit)
    ok = (lambda r: r <= goal) if at_most else (lambda r: r >= goal)
    got = [r for r in (med_r, best_r) if r is not None]
    head = ("≤ " if at_most else "≥ ") + show(goal)
    if not got:
        return [name, head, "—", "—", "not measured"]
    if all(ok(r) for r in got):
        verdict = "met"
    elif not any(ok(r) for r in got):
        near = min(got) if at_most else max(got)
        verdict = f"missed ({show(near)} at best)"
    else:
        verdict = "met on one measure only (load)"
    return [name, head, show(med_r), show(best_r), verdict]


def peer_warmup(recs, section):
    """The warm-up steps the section's PyTorch runs left out (their --warmup), 0 if none."""
    ws = [int(r["cmd"].split("--warmup")[1].split()[0]) for r in recs
          if r.get("section") == section and r.get("who") == "torch" and "--warmup" in (r.get("cmd") or "")]
    return max(ws, default=0)


def our_step_ms(rec, warm):
    """One of our runs' median step (ms) after its first `warm` steps: the per-step wall
    times where the run logged them and has steps left, else the app's own median."""
    st = rec.get("step_s") or []
    return statistics.median(st[warm:]) * 1e3 if len(st) > warm else rec["json"]["step_ms"]


def step_table(recs, section, batches, goals, targets, label):
    """The VGG-11 / ResNet-20 table: step, forward and backward, scanprop against the
    peer's per-batch runs; appends the step targets. Returns {batch: (our median step ms,
    our best)} for the FLOP rate."""
    rows, steps = [], {}
    for b in batches:
        orr = sel(recs, section, "ours", batch=b)
        o = [r["json"] for r in orr]
        t = torch_rows(recs, section, "runs", batch=b)
        if not o and not t:
            continue
        warm = peer_warmup(recs, section)
        os_, ts = med([our_step_ms(r, warm) for r in orr]), med([j["step_ms"] for j in t])
        ob_, tb_ = best_step_ms(orr), min((j["step_minmax_ms"][0] for j in t), default=None)
        of, tf = med([j["forward_ms"] for j in o]), med([j["fwd_grad_ms"] for j in t])
        ob, tb = med([j["backward_ms"] for j in o]), med([j["bwd_derived_ms"] for j in t])
        rt, rtb = ratio(ts, os_), ratio(tb_, ob_)
        if b in goals:
            targets.append(target_line(f"{label} b{b} step time vs PyTorch", rt, rtb, goals[b]))
        rows.append([str(b), f"{fmt(os_)} / {fmt(ob_)}", f"{fmt(ts)} / {fmt(tb_)}", rfmt(rt), rfmt(rtb),
                     fmt(of), fmt(tf), rfmt(ratio(tf, of)), fmt(ob), fmt(tb), rfmt(ratio(tb, ob)),
                     f"{len(o)}/{len(t)}"])
        steps[b] = (os_, ob_)
    print("Step ms as *median / best*. Forward: scanprop `forward_ms` vs PyTorch forward with autograd "
          "recording (`fwd_grad`); backward: scanprop engine only vs PyTorch step − forward "
          "(backward + SGD).\n")
    table(["batch", "scanprop step ms", "PyTorch step ms", "step ratio (median)", "step ratio (best)",
           "scanprop fwd ms", "PyTorch fwd ms", "fwd ratio", "scanprop bwd ms", "PyTorch bwd+opt ms",
           "bwd ratio", "runs"], rows)
    return steps


MEM_ORDER = ["lenet", "vgg11", "resnet20", "rnn", "gru"]
MEM_NAMES = {"lenet": "LeNet-5", "vgg11": "VGG-11", "resnet20": "ResNet-20", "rnn": "RNN T=1000", "gru": "GRU T=1034"}


def memory_table(recs, targets):
    """Peak RSS (the child's ru_maxrss) and steady-state RSS (VmRSS after the last step,
    read by the process itself) of each workload, both sides, and scanprop's own
    accounting (--mem-report) beside it; "rest" is the peak minus what scanprop accounts
    for (libraries' code and data, the loader, thread stacks, malloc's slack)."""
    rows, rows2 = [], []
    names = [n for n in MEM_ORDER if sel(recs, "mem", "ours", workload=n) or sel(recs, "mem", "torch", workload=n)]
    for n in names:
        o, t = sel(recs, "mem", "ours", workload=n), sel(recs, "mem", "torch", workload=n)
        op = med([r["maxrss_kib"] / 1024 for r in o if r.get("maxrss_kib")])
        tp = med([r["maxrss_kib"] / 1024 for r in t if r.get("maxrss_kib")])
        os_ = med([r["json"].get("rss_steady_mib") for r in o])
        ts = med([r["json"].get("rss_steady_mib") for r in t])
        cfg = (o or t)[0]["cfg"]
        r = ratio(op, tp)
        targets.append(target_line(f"{MEM_NAMES[n]} b{cfg['batch']} peak RSS vs PyTorch", r, None, 0.5,
                                   at_most=True))
        op_, tp_ = (o[-1]["json"].get("params") if o else None), (t[-1]["json"].get("params") if t else None)
        same = "" if op_ == tp_ else " **(differ)**"
        rows.append([f"{MEM_NAMES[n]} b{cfg['batch']}", fmt(op, 0), fmt(tp, 0), f"{r:.2f}×" if r else "—",
                     f"{fmt(os_, 0)} / {fmt(ts, 0)}", f"{op_:,} / {tp_:,}{same}" if op_ and tp_ else "—",
                     str(cfg["steps"])])
        if o:
            keys = ["mem_params_mib", "mem_grads_mib", "mem_optim_mib", "mem_arena_mib", "mem_eval_arena_mib",
                    "mem_dataset_mib"]
            vals = [med([x["json"].get(k) for x in o]) for k in keys]
            acc = sum(v for v in vals if v is not None)
            rows2.append([f"{MEM_NAMES[n]} b{cfg['batch']}", fmt(op, 0)] + [fmt(v, 1) for v in vals] +
                         [fmt(op - acc, 0) if op is not None else "—"])
    if not rows:
        return
    print("## Memory: peak and steady-state resident set\n")
    print("Each side runs each workload as a child process of its own for the same number of training steps "
          "(scanprop: the app with `--mem-report`; PyTorch: `bench/peers/memory.py`). *Peak* = the child's "
          "`ru_maxrss` (`os.wait4` on that child); *steady* = `VmRSS` the process read itself after its last "
          "training step (after warm-up, before scanprop's end-of-run evaluation). MiB, median over rounds. "
          "Ratio = scanprop ÷ PyTorch (< 1: scanprop smaller).\n")
    table(["workload", "scanprop peak MiB", "PyTorch peak MiB", "peak ratio", "steady MiB (scanprop / PyTorch)",
           "parameters (scanprop / PyTorch)", "steps"], rows)
    print("scanprop's own accounting (MiB, `--mem-report`): parameters with buffers, gradients, optimizer "
          "state, the step tapes' arena high water (activations, saved state, gradients of activations, "
          "workspaces), the evaluation tape's, the datasets' samples held in memory; *rest* = peak − their sum "
          "(libraries' code and data — torch's import alone is ~250 MiB on the other side —, the loader's "
          "buffers, thread stacks, allocator slack; the arenas are mapped on demand, so a high-water figure "
          "counts bytes that were touched).\n")
    table(["workload", "peak", "params", "grads", "optimizer", "step arena", "eval arena", "dataset", "rest"], rows2)


def memrun_table(recs, targets):
    """Peak RSS of each image app's default run (training, then the evaluation of the
    whole test set) next to bench/peers/default_run.py doing the same in PyTorch."""
    rows = []
    for n in MEM_ORDER:
        o, t = sel(recs, "memrun", "ours", workload=n), sel(recs, "memrun", "torch", workload=n)
        if not o and not t:
            continue
        op = med([r["maxrss_kib"] / 1024 for r in o if r.get("maxrss_kib")])
        tp = med([r["maxrss_kib"] / 1024 for r in t if r.get("maxrss_kib")])
        os_ = med([r["json"].get("rss_steady_mib") for r in o])
        ts = med([r["json"].get("rss_steady_mib") for r in t])
        ev = med([r["json"].get("mem_eval_arena_mib") for r in o])
        st = med([r["json"].get("mem_arena_mib") for r in o])
        cfg = (o or t)[0]["cfg"]
        r = ratio(op, tp)
        targets.append(target_line(f"{MEM_NAMES[n]} default run (b{cfg['batch']}, with its evaluation) peak RSS "
                                   "vs PyTorch", r, None, 0.5, at_most=True))
        acc = " / ".join(fmt(x[-1]["json"].get("test_acc"), 4) if x else "—" for x in (o, t))
        rows.append([f"{MEM_NAMES[n]} b{cfg['batch']}", fmt(op, 0), fmt(tp, 0), f"{r:.2f}×" if r else "—",
                     f"{fmt(os_, 0)} / {fmt(ts, 0)}", f"{fmt(st, 1)} / {fmt(ev, 1)}", acc, str(cfg["steps"])])
    if not rows:
        return
    print("## Memory: default runs, training and evaluation\n")
    print("Each image app as a user first runs it: `build/APP --steps N --mem-report` (its default batch, "
          "Debian's Fashion-MNIST, then the evaluation of the 10 000 test images at its default `--eval-batch`, "
          "the training batch), next to `bench/peers/default_run.py` doing the same in PyTorch (the same "
          "steps, then the test set at the same batch in eval mode under `torch.no_grad()`). *Peak* = the "
          "child's `ru_maxrss`; *steady* = `VmRSS` after the last training step, before the evaluation. MiB, "
          "median over rounds; ratio = scanprop ÷ PyTorch.\n")
    table(["workload", "scanprop peak MiB", "PyTorch peak MiB", "peak ratio", "steady MiB (scanprop / PyTorch)",
           "scanprop step / eval arena MiB", "test accuracy (scanprop / PyTorch)", "steps"], rows)


def report(recs):
    targets = []

    loads = [(r["section"], r["load1"]) for r in recs if r.get("load1") is not None]
    if loads:
        print("## Machine load during the runs\n")
        print("1-minute load average read before each run (2 cores: above 2 means others' work was "
              "competing for the CPUs).\n")
        rows = []
        for sec in dict.fromkeys(s for s, _ in loads):
            xs = [x for s, x in loads if s == sec]
            rows.append([sec, str(len(xs)), f"{med(xs):.2f}", f"{min(xs):.2f}–{max(xs):.2f}"])
        table(["section", "runs", "median load", "range"], rows)

    # ---- GEMM ---------------------------------------------------------------------------
    g = [r for r in recs if r.get("section") == "gemm" and r.get("json")]
    if g:
        print("## SGEMM context: OpenBLAS, n = 2048, 2 threads\n")
        rows = []
        for ct in dict.fromkeys(r["cfg"]["coretype"] for r in g):
            rs = [r["json"] for r in g if r["cfg"]["coretype"] == ct]
            gf = [j["gflops_median"] for j in rs]
            rows.append([f"`{ct}`", rs[0]["core"], fmt(med(gf)) + spread(gf), fmt(max(j["gflops_best"] for j in rs))])
        table(["SGEMM (oneDNN, or OpenBLAS under OPENBLAS_CORETYPE)", "kernel core", "GFLOP/s (median)", "best"], rows)

    # ---- LeNet --------------------------------------------------------------------------
    if sel(recs, "lenet", "ours") or sel(recs, "lenet", "torch"):
        print("## LeNet-5 / Fashion-MNIST training throughput (2 threads)\n")
        print("Both sides: 10 warm-up steps, then windows of equal step counts; *median* = median window "
              "(median over rounds), *best* = fastest window of any round. The app's own JSON "
              "`images_per_s` (all steps, warm-up included) is shown for reference.\n")
        rows = []
        for b in (64, 256):
            rs = sel(recs, "lenet", "ours", batch=b)
            js_rate = [r["json"]["images_per_s"] for r in rs]
            per_run = [windows(r, r["cfg"].get("window", 50)) for r in rs]
            o_med = med([med(w) for w in per_run if w])
            o_best = max((max(w) for w in per_run if w), default=None)
            th = torch_rows(recs, "lenet", "throughput", batch=b)
            t_med = med([t["images_per_s_median"] for t in th])
            t_best = max((t["images_per_s_max"] for t in th), default=None)
            rm, rb = ratio(o_med, t_med), ratio(o_best, t_best)
            targets.append(target_line(f"LeNet-5 b{b} images/s vs PyTorch", rm, rb, 3.0 if b == 64 else 2.0))
            rows.append([str(b), fmt(med(js_rate), 0), fmt(o_med, 0), fmt(o_best, 0), fmt(t_med, 0), fmt(t_best, 0),
                         rfmt(rm), rfmt(rb), f"{len(rs)}/{len(th)}"])
        table(["batch", "scanprop JSON img/s", "scanprop median", "scanprop best", "PyTorch median", "PyTorch best",
               "ratio (median)", "ratio (best)", "runs"], rows)

    # ---- VGG-11 -------------------------------------------------------------------------
    gemm_peak = med([r["json"]["gflops_median"] for r in recs if r.get("section") == "gemm" and r.get("json")
                     and r["cfg"]["coretype"] == "oneDNN"])
    gemm_best = max((r["json"]["gflops_best"] for r in recs if r.get("section") == "gemm" and r.get("json")
                     and r["cfg"]["coretype"] == "oneDNN"), default=None)
    if sel(recs, "vgg", "ours") or sel(recs, "vgg", "torch"):
        print("## VGG-11 (3×32×32, SGD) training step (2 threads)\n")
        steps = step_table(recs, "vgg", (32, 128), {32: 1.4, 128: 1.1}, targets, "VGG-11")   # issue 41: b32 ≥ 1.4×
        rows2 = []
        for b in (32, 128):
            t = torch_rows(recs, "vgg", "runs", batch=b)
            if b not in steps and not t:
                continue
            os_, ob_ = steps.get(b, (None, None))
            ts, tb_ = med([j["step_ms"] for j in t]), min((j["step_minmax_ms"][0] for j in t), default=None)
            flop = vgg_step_flop(b)
            gf, gfb = (flop / os_ / 1e6 if os_ else None), (flop / ob_ / 1e6 if ob_ else None)
            rows2.append([str(b), f"{flop / 1e9:.2f}", fmt(gf), fmt(gfb), fmt(flop / ts / 1e6 if ts else None),
                          fmt(flop / tb_ / 1e6 if tb_ else None),
                          f"{100 * gf / gemm_peak:.0f}%" if gf and gemm_peak else "—"])
            if b == 128:
                targets.append(target_line("VGG-11 b128 conv+linear FLOP rate vs oneDNN SGEMM peak",
                                           ratio(gf, gemm_peak), ratio(gfb, gemm_best), 0.75, unit="%"))
        print("Achieved GFLOP/s (useful conv+linear FLOPs of a step ÷ step time); the last column against "
              "oneDNN's SGEMM median of the same run (the SGEMM table):\n")
        table(["batch", "GFLOP per step", "scanprop (median)", "scanprop (best)", "PyTorch (median)",
               "PyTorch (best)", "scanprop ÷ SGEMM"], rows2)

    # ---- ResNet-20 ----------------------------------------------------------------------
    if sel(recs, "resnet", "ours") or sel(recs, "resnet", "torch"):
        print("## ResNet-20 (3×32×32, SGD momentum 0.9, weight decay 1e-4) training step (2 threads)\n")
        step_table(recs, "resnet", (64, 128), {64: 1.3, 128: 1.2}, targets, "ResNet-20")   # issue 41

    memory_table(recs, targets)
    memrun_table(recs, targets)

    # ---- RNN ----------------------------------------------------------------------------
    if sel(recs, "rnn", "ours") or sel(recs, "rnn", "torch"):
        print("## RNN (hidden 20) bitstream task, backward and step time (2 threads)\n")
        Ts = sorted({r["cfg"]["T"] for r in recs if r.get("section") == "rnn"})
        rows, rows2 = [], []
        for T in Ts:
            for B in (1, 16):
                lin = [r["json"] for r in sel(recs, "rnn", "ours", T=T, B=B, engine="linear")]
                bp = [r["json"] for r in sel(recs, "rnn", "ours", T=T, B=B, engine="bppsa")]
                nr = [r for r in torch_rows(recs, "rnn", "runs", T=T, B=B, impl="rnn")]
                nc = [r for r in torch_rows(recs, "rnn", "runs", T=T, B=B, impl="cell")]
                if not (lin or bp or nr or nc):
                    continue
                lb, bb = med([j["backward_ms"] for j in lin]), med([j["backward_ms"] for j in bp])
                rb, cb = med([j["bwd_derived_ms"] for j in nr]), med([j["bwd_derived_ms"] for j in nc])
                ls, bs = med([j["step_ms"] for j in lin]), med([j["step_ms"] for j in bp])
                rs, cs = med([j["step_ms"] for j in nr]), med([j["step_ms"] for j in nc])
                steps = ",".join(str(r["cfg"]["steps"]) for r in sel(recs, "rnn", "ours", T=T, B=B, engine="bppsa"))
                if T == 1000 and B == 16:   # issue 14: no regression of the RNN row
                    targets.append(target_line("RNN linear backward vs nn.RNN, T=1000 B=16", ratio(rb, lb), None, 25.0))
                rows.append([str(T), str(B), fmt(lb, 2), fmt(bb, 2) + (f" [{steps} steps]" if T >= 10000 else ""),
                             fmt(rb, 2), fmt(cb, 2), rfmt(ratio(rb, lb)), rfmt(ratio(rb, bb)),
                             f"{ratio(bb, lb):.1f}×" if ratio(bb, lb) else "—"])
                lbest = best_step_ms(sel(recs, "rnn", "ours", T=T, B=B, engine="linear"))
                rbest = min((j["step_minmax_ms"][0] for j in nr), default=None)
                rows2.append([str(T), str(B), fmt(ls, 2), fmt(bs, 2), fmt(rs, 2), fmt(cs, 2), rfmt(ratio(rs, ls)),
                              rfmt(ratio(rbest, lbest)), rfmt(ratio(cs, ls)), rfmt(ratio(rs, bs))])
        print("Backward: scanprop = the engine alone (`backward_ms`); PyTorch = step − forward "
              "(backward + Adam + zero_grad, `bwd_derived_ms`).\n")
        table(["T", "B", "linear ms", "bppsa ms", "nn.RNN ms", "RNNCell loop ms", "linear vs nn.RNN",
               "bppsa vs nn.RNN", "bppsa slower than linear"], rows)
        print("Whole training step (forward + backward + Adam):\n")
        table(["T", "B", "linear ms", "bppsa ms", "nn.RNN ms", "RNNCell loop ms", "linear vs nn.RNN",
               "linear vs nn.RNN (best)", "linear vs RNNCell", "bppsa vs nn.RNN"], rows2)
        plans = [r for r in recs if r.get("section") in ("rnn", "gru") and r.get("plan")]
        if plans:
            print("Sequential steps and arithmetic (from `--plan`; per sample):\n")
            rows = []
            for r in plans:
                p = r["plan"]
                name = f"RNN T={r['cfg']['T']}" if r["section"] == "rnn" else "GRU T=1034"
                if "bppsa_levels" not in p:
                    continue
                rows.append([name, str(p["linear_steps"]), str(p["bppsa_levels"]), str(p["multiply_levels"]),
                             f"{p.get('linear_flop', 0):,}", f"{p.get('bppsa_flop', 0):,}",
                             f"{p.get('critical_flop', 0):,}",
                             f"{p['bppsa_flop'] / p['linear_flop']:.1f}×" if p.get("linear_flop") else "—"])
            table(["model", "linear BP steps (n−1)", "bppsa levels", "levels that multiply", "linear FLOP",
                   "bppsa FLOP", "bppsa critical-path FLOP", "bppsa work / linear"], rows)

    # ---- GRU ----------------------------------------------------------------------------
    if sel(recs, "gru", "ours") or sel(recs, "gru", "torch"):
        print("## GRU (input 12, hidden 20, T = 1034, B = 16, Adam), 2 threads\n")
        t = [r["json"] for r in sel(recs, "gru", "torch")]
        ts, tf, tb = (med([j[k] for j in t]) for k in ("step_ms", "fwd_grad_ms", "bwd_derived_ms"))
        tbest = min((j["step_minmax_ms"][0] for j in t), default=None)
        rows = []
        for e in ("linear", "bppsa"):
            orr = sel(recs, "gru", "ours", engine=e)
            o = [r["json"] for r in orr]
            if not o:
                continue
            os_, of, ob = (med([j[k] for j in o]) for k in ("step_ms", "forward_ms", "backward_ms"))
            obest = best_step_ms(orr)
            if e == "linear":
                targets.append(target_line("GRU linear step time vs PyTorch", ratio(ts, os_), ratio(tbest, obest), 10.0))
            rows.append([f"scanprop {e}", f"{fmt(os_)} / {fmt(obest)}", fmt(of), fmt(ob), rfmt(ratio(ts, os_)),
                         rfmt(ratio(tbest, obest)), rfmt(ratio(tb, ob)), str(len(o))])
        if t:
            rows.append(["PyTorch nn.GRU", f"{fmt(ts)} / {fmt(tbest)}", fmt(tf), fmt(tb) + " (bwd+Adam)", "1.00×",
                         "1.00×", "1.00×", str(len(t))])
        print("Step ms as *median / best*; fwd and bwd are medians (scanprop bwd: engine only).\n")
        table(["", "step ms", "fwd ms", "bwd ms", "step ratio (median)", "step ratio (best)", "bwd ratio", "runs"],
              rows)

    # ---- ooo ----------------------------------------------------------------------------
    st = [r for r in recs if r.get("section") == "ooo" and r.get("who") == "status"]
    oo = sel(recs, "ooo", "ours")
    if st or oo:
        print("## Out-of-order backward: training step time by policy (2 threads)\n")
        pol = ["conventional", "ooo", "reverse-first-k", "list"]
        if st and not oo:
            print(f"ooo: {st[-1]['status']}\n")
        else:
            cases = list(dict.fromkeys((r["cfg"]["app"], r["cfg"]["batch"]) for r in oo))
            rows = []
            for app, b in cases:
                lin = med([r["json"]["step_ms"] for r in sel(recs, "ooo", "ours", app=app, batch=b, engine="linear")])
                row = [app, str(b), fmt(lin, 2)]
                for p in pol:
                    v = med([r["json"]["step_ms"] for r in sel(recs, "ooo", "ours", app=app, batch=b, engine="ooo",
                                                                 order=p)])
                    row.append(f"{fmt(v, 2)} ({ratio(lin, v):.2f}×)" if v and lin else "—")
                rows.append(row)
                # issue 14: the best policy, by the ratio of medians and of the rounds' bests
                lin_best = min((r["json"]["step_ms"] for r in sel(recs, "ooo", "ours", app=app, batch=b,
                                                                   engine="linear")), default=None)
                best_p = max(pol, key=lambda p: ratio(lin, med([r["json"]["step_ms"] for r in sel(
                    recs, "ooo", "ours", app=app, batch=b, engine="ooo", order=p)])) or 0)
                pb = [r["json"]["step_ms"] for r in sel(recs, "ooo", "ours", app=app, batch=b, engine="ooo", order=best_p)]
                goal = ooo_goal(app, b)
                targets.append(target_line(f"ooo ({best_p}) vs linear, {app} b{b}", ratio(lin, med(pb)),
                                           ratio(lin_best, min(pb, default=None)), goal))
            print("Cells: step ms (linear step ms ÷ this policy's step ms; > 1 = faster than linear).\n")
            table(["model", "batch", "linear ms"] + [f"ooo --order {p}" for p in pol], rows)
        paired = sel(recs, "ooo", "paired")
        if paired:
            print("Paired: every engine in one process (`build/ooo_bench MODEL BATCH ROUNDS 2`), two steps "
                  "each in turn, the steps as the apps run them. Cells: median / best step ms "
                  "(linear ÷ this order, of medians / of bests).\n")
            rows = []
            for r in paired:
                js, app, b = r["json"], r["cfg"]["app"], r["cfg"]["batch"]
                ts = {o: [1e3 * t for t in v] for o, v in js["step_s"].items() if v}
                lin = ts.get("linear")
                if not lin:
                    continue
                row = [app, str(b), str(len(lin)), f"{fmt(med(lin), 2)} / {fmt(min(lin), 2)}"]
                for p in pol:
                    v = ts.get(p)
                    row.append(f"{fmt(med(v), 2)} / {fmt(min(v), 2)} ({ratio(med(lin), med(v)):.2f}× / "
                               f"{ratio(min(lin), min(v)):.2f}×)" if v else "—")
                rows.append(row)
                best_p = max((p for p in pol if ts.get(p)), key=lambda p: ratio(med(lin), med(ts[p])), default=None)
                if best_p:
                    targets.append(target_line(f"ooo ({best_p}, paired in one process) vs linear, {app} b{b}",
                                               ratio(med(lin), med(ts[best_p])), ratio(min(lin), min(ts[best_p])),
                                               ooo_goal(app, b)))
            table(["model", "batch", "steps each", "linear ms"] + [f"ooo --order {p}" for p in pol], rows)

    if targets:
        print("## Targets\n")
        print("Verdict \"met\" needs both the ratio of medians and the ratio of bests to reach the goal.\n")
        table(["target", "goal", "achieved (median)", "achieved (best)", "verdict"], targets)

    failed = [r for r in recs if r.get("error") and r.get("who") != "status"]
    if failed:
        print("## Failed runs\n")
        for r in failed:
            print(f"- `{r['cmd']}`: rc {r['rc']}: {r['error']}")
        print()


CPU_TITLES = {"native": "CPU: the libraries' own choices (OPENBLAS_CORETYPE and ISA caps unset)",
              "avx2": "CPU: an AVX2 machine emulated on both sides (OPENBLAS_CORETYPE=Haswell, "
                      "DNNL_MAX_CPU_ISA=ONEDNN_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2)"}


def main(path):
    recs = load(path)
    cpus = list(dict.fromkeys(r.get("cpu", "native") for r in recs))
    for c in cpus:
        if len(cpus) > 1 or c != "native":
            print(f"# {CPU_TITLES.get(c, c)}\n")
        cores = {r["json"].get("openblas_core") for r in recs if r.get("cpu", "native") == c and
                 r.get("who") == "torch" and r.get("json")} - {None}
        if cores:
            print(f"OpenBLAS core picked (as the peers report it): {', '.join(sorted(cores))}.\n")
        report([r for r in recs if r.get("cpu", "native") == c])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: compare.py RESULTS.jsonl")
    main(sys.argv[1])
