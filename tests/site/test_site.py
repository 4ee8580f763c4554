#!/usr/bin/python3
"""make test-site: the teaching page (build/site) against the native programs.

1. The WebAssembly build under node runs the simulator unit tests' configurations
   (tests/test_schedule.c: Table 1's grid and schedules_are_valid) and every scheme of
   `build/schedule --list`; each report must equal `build/schedule`'s JSON line. It makes
   the zoo models' BPPSA plans (site_bppsa_plan: the text and JSON keys must equal
   `build/<app> --backward bppsa --plan=full`'s) and ooo task graphs (site_ooo: each
   order's peak_bytes and k must equal `build/<app> --backward ooo`'s plan_peak_bytes and k, its timeline must
   respect the graph), refusals included (the same message).
   Hostile calls into the module (tests/site/wasm_fuzz.js, under node): refusals, strings
   of several MB, refused simulations that must not grow its memory, seeded random calls.
2. Headless chromium loads the page from a static server on 127.0.0.1 with ?selftest=...:
   the page sets each configuration through its own controls (input/change events) and
   writes the figures it shows into the DOM; they must equal build/schedule's JSON, the
   apps' --plan (BPPSA) and the ooo engine's plan_peak_bytes and k. It also imports an action
   CSV. Any console error, page error or failed request fails the test.
   Each figure's text as shown must begin with the program's number, an integer digit for
   digit (the 32-bit build's scan memory carries its note); the sliders follow the source
   (n = the model's links); every command the page shows is run as shown (FILE.csv: the
   imported CSV; vgg11's ooo command on a one-image folder) and must print the view's
   figures; the mpirun line names the simulated workers; ooo box labels stay in their boxes.
3. Side by side, no two labels of the two figures lists overlap at 1280x800 and at a
   phone's 390x844 (their text boxes from the DOM), and every legend's items (pipelines,
   the scan tree, the ooo lanes) lie inside the window; every control of each view is
   reached by pressing Tab (real key events through chromium's DevTools pipe).
4. Screenshots of the three views (1280x800; the pipelines view also taller, in greyscale,
   with transfers, and at phone width) go to build/site-test/; docs/img/site-*.png are
   copies of pipelines-tall, bppsa and ooo.
Only the standard library."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.parse

BUILD = os.environ.get("BUILD", "build")
SITE = os.path.join(BUILD, "site")
OUT = os.path.join(BUILD, "site-test")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def run_json(argv):
    """The last stdout line of a native program, as JSON."""
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), p.returncode, p.stderr.strip()))
    return json.loads(p.stdout.strip().splitlines()[-1])


def schedule_argv(c):
    """build/schedule's flags for a page/wasm configuration (the page shows the same)."""
    custom = c["scheme"] == "custom"   # the list sets its ranks and micro-batches
    a = [os.path.join(BUILD, "schedule"), "--scheme", c["scheme"]] + \
        ([] if custom else ["--microbatches", str(c["micro"])]) + ["--no-diagram"]
    if c.get("costs", "uniform") != "uniform":
        a += ["--profile", "site/profiles/%s.csv" % c["costs"]]
    else:
        a += ["--stages", str(c["stages"]), "--fwd-cost", fmt(c.get("fwd", 1)),
              "--delta-cost", fmt(c.get("delta", 0.5)), "--grad-cost", fmt(c.get("grad", 0.5))]
    for k, flag in (("workers", "--workers"), ("groups", "--groups"), ("per_group", "--per-group")):
        if c.get(k) and not (custom and k == "workers"):
            a += [flag, str(c[k])]
    if c.get("split", -1) == 1:
        a.append("--split")
    if c.get("split", -1) == 0:
        a.append("--no-split")
    if c.get("no_input_grad"):
        a.append("--no-input-grad")
    if c.get("chunks"):
        a += ["--chunks", str(c["chunks"])]
    if c.get("mem_limit"):
        a += ["--mem-limit", fmt(c["mem_limit"])]
    if c["scheme"] == "custom":
        a += ["--actions", c["actions_file"]]
    if c.get("transfer"):
        a += ["--transfer-cost", fmt(c["transfer"])]
    return a


def fmt(x):
    return ("%g" % x)


# ---- 1. the wasm build under node -----------------------------------------------------------

def unit_configs(schemes):
    cs = []
    for S in range(1, 9):   # Table 1: F = 1/2, backward = 1/2
        for B in range(1, 9):
            cs.append(dict(scheme="ddp", stages=S, micro=B, workers=B, fwd=0.5, delta=0.25, grad=0.25))
            if B >= S:
                cs.append(dict(scheme="fsdp", stages=S, micro=B, workers=B, fwd=0.5, delta=0.25, grad=0.25))
    valid = [("ddp", 0, 0, 0), ("fsdp", 3, 0, 0), ("gpipe", 4, 0, 0), ("1f1b", 3, 0, 0), ("lpp", 0, 2, 3),
             ("fslpp", 0, 3, 2), ("ooo-ff", 2, 0, 0), ("ooo-modulo", 4, 0, 0)]
    for B in range(1, 7):   # schedules_are_valid: S = 6, F = 1, δ = 0.7, G = 1.3
        for split in (-1, 0, 1):
            for name, W, G, R in valid:
                cs.append(dict(scheme=name, stages=6, micro=B, workers=W, groups=G, per_group=R, split=split,
                               fwd=1, delta=0.7, grad=1.3))
    for name in schemes:    # every scheme, the ones added later included
        for costs in ("uniform", "lenet"):
            cs.append(dict(scheme=name, stages=4, micro=8, costs=costs))
            if name == "custom":
                cs[-1].update(stages=4, micro=2, actions=CSV)
    for name in ("gpipe", "1f1b", "ddp", "fsdp", "ooo-ff", "zb-h1", "zb-auto"):   # the resnet20 preset (a DAG's segments)
        if name in schemes:
            cs.append(dict(scheme=name, stages=4, micro=8, costs="resnet20", workers=0 if "dp" in name else 4))
    if "interleaved-1f1b" in schemes:
        cs.append(dict(scheme="interleaved-1f1b", stages=8, micro=8, workers=4, chunks=2))
    if "zb-auto" in schemes:
        cs.append(dict(scheme="zb-auto", stages=4, micro=8, mem_limit=3))
    # refused by both with the same line: flags the command line refuses, values past the
    # bounds of schedulers/plan/limits.h, a simulation past its work bound
    cs += [dict(scheme="interleaved-1f1b", stages=8, micro=8, workers=4, chunks=-1),
           dict(scheme="zb-h1", stages=4, micro=8, chunks=2), dict(scheme="gpipe", stages=4, micro=8, mem_limit=3),
           dict(scheme="gpipe", stages=4, micro=8, groups=2), dict(scheme="gpipe", stages=4, micro=8, transfer=1e308),
           dict(scheme="zb-h1", stages=4, micro=8, fwd=1e300), dict(scheme="gpipe", stages=1000, micro=100000),
           dict(scheme="1f1b", stages=1000, micro=1000), dict(scheme="zb-auto", stages=64, micro=512),
           dict(scheme="gpipe", stages=4, micro=8, workers=-1),
           dict(scheme="dualpipe", stages=4, micro=7), dict(scheme="dualpipe", stages=3, micro=8)]
    for name in ("gpipe", "1f1b", "ddp", "fsdp", "lpp", "ooo-ff", "zb-h1", "dualpipe"):   # the transfer slider's simulation
        if name in schemes:
            for t in (0.5, 2):
                cs.append(dict(scheme=name, stages=4, micro=4, transfer=t))
            cs.append(dict(scheme=name, stages=4, micro=4, costs="lenet", transfer=3))
    return cs


def check_wasm(schemes):
    node = shutil.which("node")
    if not node:
        fail("node not found (the wasm build's check needs it)")
        return
    cs = unit_configs(schemes)
    for c in cs:
        c["profile"] = open("site/profiles/%s.csv" % c["costs"]).read() if c.get("costs", "uniform") != "uniform" else ""
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(CSV)
    for c in cs:
        if c["scheme"] == "custom":
            c["actions_file"] = f.name
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(dict(simulate=cs, bppsa=BPPSA_WASM, ooo=OOO_WASM), f)
    p = subprocess.run([node, "--no-experimental-fetch", "scripts/site_wasm_check.js",
                        os.path.abspath(os.path.join(SITE, "scanprop.js")), f.name], capture_output=True, text=True)
    os.unlink(f.name)
    if p.returncode != 0:
        fail("node: exit %d: %s" % (p.returncode, p.stderr.strip()))
        return
    out = json.loads(p.stdout)
    check_wasm_bppsa(out["bppsa"])
    check_wasm_ooo(out["ooo"])
    answers = out["simulate"]
    bad = refused = 0
    for c, a in zip(cs, answers):
        q = subprocess.run(schedule_argv(c), capture_output=True, text=True)
        if q.returncode != 0:   # a refusal: the wasm build refuses with the same line
            refused += 1
            want = q.stderr.strip().replace("scanprop: ", "", 1)
            if a.get("ok") or a.get("error") != want:
                bad += 1
                fail("wasm vs native for %s: native refuses (%s), wasm %s" % (" ".join(schedule_argv(c)), want,
                                                                            a.get("error", "accepts")))
            continue
        native = json.loads(q.stdout.strip().splitlines()[-1])
        if not a.get("ok") or a["report"] != native:
            bad += 1
            if bad <= 5:
                fail("wasm vs native differ for %s:\n  wasm   %s\n  native %s" % (" ".join(schedule_argv(c)),
                                                                                a.get("report", a), native))
    for c in cs:
        if c.get("actions_file") and os.path.exists(c["actions_file"]):
            os.unlink(c["actions_file"])
    print("wasm: %d configurations (%d refused by both), %d differ from build/schedule" % (len(cs), refused, bad))


# The zoo models in WebAssembly (site/wasm_models.c) against the apps. rnn: the app's
# defaults are T = 100, hidden 64; the zoo's (seq_len/hidden 0) T = 1000, hidden 20.
BPPSA_WASM = [dict(model="lenet", levels=k, batch=8) for k in (-1, 0, 1, 2, 3)] + \
             [dict(model="lenet", levels=k, batch=8, prune=0.9) for k in (0, 1, 3)] + \
             [dict(model="rnn", levels=k, batch=8, seq_len=100, hidden=64) for k in (-1, 0, 3, 6)] + \
             [dict(model="rnn", levels=2, batch=4, seq_len=30, hidden=16), dict(model="lenet", levels=2, batch=1),
              dict(model="lenet", levels=9, batch=8),   # refused: deeper than the chain
              dict(model="lenet", levels=1, batch=8, prune=1.5)]   # refused: not a fraction
OOO_WASM = [dict(model="lenet", batch=8), dict(model="rnn", batch=8), dict(model="vgg11", batch=8, channels=1),
            dict(model="lenet", batch=4, order="reverse-first-k", k=1), dict(model="rnn", batch=2, seq_len=50, hidden=8),
            dict(model="lenet", batch=8, order="sideways")]   # refused: no such order

# The memory model counts the host's bookkeeping too (pointers, tape nodes, task records).
# The WebAssembly build has 32-bit pointers (Debian's emcc has no wasm64 libraries), so its
# scan_bytes and peak_bytes fall short of a 64-bit build's by part of that bookkeeping:
# never above, and by less than 512 bytes per link and sample (measured: 20 to 50).
# Everything else must be equal, the Jt values and the products (float storage) to the byte.
HOST_BYTES = ("scan_bytes", "peak_bytes")


def host_bytes_close(wasm, native, plan):
    return 0 <= float(native) - float(wasm) < 512 * plan["links"] * plan["batch"]


MEMORY_LINE = re.compile(r"^memory per step: scan .*? \(Jt values (.*?), products (.*?), arrays and tasks .*")


def same_plan_text(wasm, native):
    """The plan's lines equal, but the pointer-counting figures of the memory line."""
    a, b = wasm.split("\n"), native.split("\n")
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        mx, my = MEMORY_LINE.match(x), MEMORY_LINE.match(y)
        if not (x == y or mx and my and mx.groups() == my.groups()):
            return False
    return True


def app_of(model):
    return os.path.join(BUILD, model)


def native_refusal(argv):
    """(stdout, None) of a native run, or (None, its one-line refusal) when it exits non-zero."""
    q = subprocess.run(argv, capture_output=True, text=True)
    if q.returncode != 0:
        return None, q.stderr.strip().splitlines()[-1].replace("scanprop: ", "", 1)
    return q.stdout, None


def same_refusal(what, a, why):
    if a.get("ok") or a.get("error") != why:
        fail("wasm vs native for %s: native refuses (%s), wasm %s" % (what, why, a.get("error", "accepts")))
        return False
    return True


def check_wasm_bppsa(answers):
    n = refused = 0
    for c, a in zip(BPPSA_WASM, answers):
        argv = [app_of(c["model"]), "--backward", "bppsa", "--plan=full", "--scan-levels",
                "full" if c["levels"] < 0 else str(c["levels"]), "--batch", str(c["batch"]), "--quiet"]
        if c.get("prune"):
            argv += ["--prune", fmt(c["prune"])]
        if c.get("seq_len"):
            argv += ["--seq-len", str(c["seq_len"]), "--hidden", str(c["hidden"])]
        what = " ".join(argv)
        out, why = native_refusal(argv)
        if why is not None:
            refused += same_refusal(what, a, why)
            continue
        if not a.get("ok"):
            fail("wasm refuses %s: %s" % (what, a.get("error")))
            continue
        lines = out.rstrip("\n").split("\n")
        native, text = json.loads(lines[-1]), "\n".join(lines[:-1]) + "\n"
        ok = same_plan_text(a["text"], text)
        if not ok:
            fail("wasm vs native plan text differ for %s:\n--- wasm\n%s--- native\n%s" % (what, a["text"], text))
        keys = [k for k in native if k not in ("app", "backward", "mode")]
        if sorted(keys) != sorted(a["report"]) or any(
                not (host_bytes_close(a["report"][k], native[k], native) if k in HOST_BYTES else a["report"][k] == native[k])
                for k in keys):
            ok = False
            fail("wasm vs native plan keys differ for %s:\n  wasm   %s\n  native %s" % (what, a["report"], native))
        n += ok
    print("wasm: %d BPPSA plans equal the apps' --plan=full (text and keys; the pointer bookkeeping bytes aside), "
          "%d refused by both" % (n, refused))


def timeline_ok(d, o):
    """Every task of an order's timeline starts after its predecessors end, once each."""
    end = {t[0]: t[3] for t in o["tasks"]}
    if sorted(end) != list(range(len(d["tasks"]))):
        return False
    return all(end[q] <= t[2] + 1e-9 * max(1.0, t[2]) for t in o["tasks"] for q in d["tasks"][t[0]]["pred"])


_folder = []


def image_folder():
    """build/vgg11's flags for a tiny 1-channel image folder (10 classes, one image each in
    train and test): the model of its default data, without Fashion-MNIST's 10,000-image
    evaluation after the step (tens of seconds)."""
    if not _folder:
        root = tempfile.mkdtemp(prefix="sp-site-")
        _folder.append(root)
        for part in ("train", "test"):
            for c in range(10):
                os.makedirs(os.path.join(root, part, "c%d" % c))
                shutil.copy("tests/fuzz/corpus/image/rgb.png", os.path.join(root, part, "c%d" % c, "a.png"))
    return ["--data-format", "folder", "--data", _folder[0]]


def check_wasm_ooo(answers):
    n = refused = 0
    slowest = 0
    for c, a in zip(OOO_WASM, answers):
        base = [app_of(c["model"]), "--backward", "ooo", "--batch", str(c["batch"]), "--steps", "1", "--threads", "1",
                "--lanes", "1", "--quiet"]   # channels 1: the image apps' default data
        if c["model"] == "rnn":   # the zoo's rnn unless given
            base += ["--seq-len", str(c.get("seq_len") or 1000), "--hidden", str(c.get("hidden") or 20)]
        if c["model"] == "vgg11":
            base += image_folder()
        if c.get("k"):
            base += ["--k", str(c["k"])]
        if c.get("order") == "sideways":   # the app's flag layer words it otherwise: both refuse, naming it
            _, why = native_refusal(base + ["--order", c["order"]])
            if why is None or a.get("ok") or "--order sideways" not in a.get("error", ""):
                fail("ooo --order sideways: native %s, wasm %s" % (why or "accepts", a.get("error", "accepts")))
            else:
                refused += 1
            continue
        if not a.get("ok"):
            fail("wasm refuses ooo %s: %s" % (c, a.get("error")))
            continue
        slowest = max(slowest, a["ms"])
        orders = [o["order"] for o in a["orders"]]
        want = [c["order"]] if c.get("order") else ["conventional", "ooo", "reverse-first-k", "list"]
        if orders != want:
            fail("wasm ooo %s: orders %s, expected %s" % (c, orders, want))
        for o in a["orders"]:
            native = run_json(base + ["--order", o["order"]])
            ok = timeline_ok(a, o)
            if o["peak_bytes"] != native["plan_peak_bytes"] or (o["order"] == "reverse-first-k" and o["k"] != native["k"]):
                ok = False
                fail("wasm ooo %s %s: peak_bytes %s k %s, the engine's plan %s k %s" % (
                    c, o["order"], o["peak_bytes"], o["k"], native["plan_peak_bytes"], native.get("k")))
            if not timeline_ok(a, o):
                fail("wasm ooo %s %s: the timeline breaks the task graph" % (c, o["order"]))
            n += ok
        if not any(t["critical"] for t in a["tasks"]):
            fail("wasm ooo %s: no critical path" % c)
    print("wasm: %d ooo orders equal the engine's plan_peak_bytes and k, %d refused by both (slowest graph %d ms)"
          % (n, refused, slowest))


# ---- 2. the page in chromium ----------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def browse(exe, url, extra, log):
    with tempfile.TemporaryDirectory(prefix="sp-chrome-") as profile:
        argv = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0",
                "--virtual-time-budget=30000"] + extra + [url]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    browse.last = "chromium exit %d, %d bytes of DOM, %d lines on stderr" % (p.returncode, len(p.stdout),
                                                                         len(p.stderr.splitlines()))
    log.write(p.stderr)
    for line in p.stderr.splitlines():   # the page's console errors and failed loads
        if "SP-PAGE-ERROR" in line or "Uncaught" in line or "Failed to load resource" in line:
            fail("chromium: " + line.strip())
    return p.stdout


PIPELINE_CASES = [
    dict(scheme="gpipe", stages=4, micro=8),
    dict(scheme="1f1b", stages=4, micro=8),
    dict(scheme="1f1b", stages=6, micro=12, split=1, fwd=1, delta=0.75, grad=1.25),
    dict(scheme="lpp", stages=8, micro=16, groups=2, per_group=4, workers=8),
    dict(scheme="ddp", stages=3, micro=4, workers=4),
    dict(scheme="ooo-ff", stages=6, micro=4, workers=3, no_input_grad=True),
    dict(scheme="gpipe", stages=4, micro=8, costs="lenet"),
    dict(scheme="1f1b", stages=4, micro=4, costs="vgg11", workers=4),
    dict(scheme="gpipe", stages=4, micro=8, costs="resnet20", workers=4),
    # the transfer slider: every message between workers costs it (--transfer-cost)
    dict(scheme="gpipe", stages=2, micro=2, transfer=1),
    dict(scheme="1f1b", stages=4, micro=8, transfer=0.75),
    dict(scheme="ddp", stages=3, micro=4, workers=4, transfer=2),
    dict(scheme="gpipe", stages=4, micro=4, costs="lenet", transfer=4),
    # every kind of message drawn: broadcasts and reduces to an owner, bucket allreduces,
    # both directions of a V placement
    dict(scheme="fsdp", stages=3, micro=4, workers=3, transfer=1),
    dict(scheme="lpp", stages=8, micro=8, groups=2, per_group=4, workers=8, transfer=1),
    dict(scheme="zbv", stages=8, micro=8, workers=4, split=1, transfer=0.5),
]


def page_case(c, actions):
    """The page's control values for a case (every control set, so cases do not leak)."""
    d = dict(costs="uniform", workers=0, groups=0, per_group=0, split=-1, no_input_grad=False, fwd=1, delta=0.5,
             grad=0.5, transfer=0)
    if actions:   # the action-list schedules' controls exist
        d.update(chunks=0, mem_limit=0)
    d.update(c)
    return d


# Two ranks, chunk c on rank c, two micro-batches, I and W apart (PyTorch's CSV form).
CSV = "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1W0,1F1,1I1,1W1\n"


def check_page(schemes):
    exe = chromium()
    if not exe:
        fail("chromium not found (scripts/deps.sh site installs it)")
        return
    os.makedirs(OUT, exist_ok=True)
    port = free_port()
    srv_log = open(os.path.join(OUT, "server.log"), "w")
    srv = subprocess.Popen([sys.executable, "-m", "http.server", "-b", "127.0.0.1", "-d", SITE, str(port)],
                           stdout=srv_log, stderr=subprocess.STDOUT)
    log = open(os.path.join(OUT, "chromium.log"), "w")
    try:
        import time
        for _ in range(50):   # the server is up when it accepts a connection
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        base = "http://127.0.0.1:%d/index.html" % port
        actions = "custom" in schemes
        cases = [page_case(c, actions) for c in PIPELINE_CASES] + \
                [page_case(dict(scheme=s, stages=4, micro=8), actions) for s in schemes if s != "custom"]
        if actions:
            cases += [page_case(dict(scheme="interleaved-1f1b", stages=8, micro=8, chunks=2, workers=4), True),
                      page_case(dict(scheme="zb-h1", stages=4, micro=8, fwd=1, delta=1, grad=1), True)]
            cases = [c for c in cases if c["scheme"] in schemes]
        links, full = {}, {}
        for layers in (2, 4, 6):
            plan = run_json([os.path.join(BUILD, "demo"), "--layers", str(layers), "--backward", "bppsa", "--plan",
                             "--quiet"])
            links[layers], full[layers] = plan["links"], plan["full_levels"]
        bp = [dict(source="chain", n=links[L], k=k) for L in (2, 4, 6) for k in range(0, full[L] + 1)]
        bp += [dict(source="lenet", k=k) for k in range(0, 4)] + [dict(source="rnn", k=k) for k in (0, 3, 6)] + \
              [dict(source="lenet-pruned", k=k) for k in (0, 3)] + \
              [dict(source="chain", n=links[4], k=1)]   # the chain's slider back after a model's
        csv_set = page_case(dict(scheme="gpipe", stages=4, micro=8, fwd=1, delta=0.5, grad=0.5), actions)
        spec = dict(pipelines=cases, bppsa=bp, ooo=["lenet", "rnn", "vgg11"], csv=dict(set=csv_set, text=CSV))
        url = base + "?selftest=" + urllib.parse.quote(json.dumps(spec))
        dom = browse(exe, url, ["--dump-dom"], log)
        if 'data-selftest="done"' not in dom:
            # chromium has been seen to hand back a page before its self-test ran (once, on a
            # CI machine): run it once more, and say so; a second such page is a failure
            print("page: the self-test did not finish in chromium's first run (%s); running it again" % browse.last)
            dom = browse(exe, url, ["--dump-dom"], log)
        res = selftest_result(dom, log)
        if res is None:
            return
        for e in res["errors"]:
            fail("page error: " + e)
        if sorted(res.get("schemes", [])) != sorted(schemes):
            fail("the page offers the schemes %s, build/schedule --list %s" % (res.get("schemes"), schemes))
        else:
            print("page: offers every scheme of build/schedule --list (%d)" % len(schemes))
        check_pipelines(res)
        check_csv(res)
        check_bppsa(res, links)
        check_ooo(res)
        # side by side, the figures lists must not overlap at a laptop's and a phone's width
        for size in ("1280,800", "390,844"):
            spec = dict(layout=SIDE_BY_SIDE, csv=dict(set=csv_set, text=CSV))
            check_layout(page_at(exe, base + "?selftest=" + urllib.parse.quote(json.dumps(spec)), size, log), size)
        check_keyboard(exe, base, log)
        zb = "&".join("%s=%s" % kv for kv in SIDE_BY_SIDE.items())
        # name, query, viewport, greyscale, scrolled to; "pipelines-tall" (the timelines under
        # the figures) is the README's, "-grey" the same through achromatopsia's eyes
        shots = [("pipelines", "?" + zb, "1280,800", False, None), ("pipelines-tall", "?" + zb, "1280,1180", False, None),
                 ("pipelines-grey", "?" + zb, "1280,1180", True, None),
                 ("pipelines-transfers", "?p0-scheme=fsdp&p0-stages=3&p0-workers=3&p0-micro=4&p0-transfer=1",
                  "1280,800", False, "p0-figures"),
                 ("bppsa", "?view=bppsa", "1280,800", False, None), ("ooo", "?view=ooo", "1280,800", False, None),
                 ("pipelines-phone", "", "390,844", False, None),
                 ("pipelines-phone-compare", "?" + zb, "390,844", False, "p1-figures"),
                 ("tutorial", "TUTORIAL.html", "1280,800", False, None)]
        for name, q, size, grey, at in shots:
            path = os.path.abspath(os.path.join(OUT, name + ".png"))
            url = base.replace("index.html", q) if q.startswith("TUTORIAL") else base + q
            screenshot(exe, url, size, grey, at, path, log)
            if not os.path.exists(path) or os.path.getsize(path) < 2000:
                fail("screenshot %s missing or empty" % path)
    finally:
        srv.terminate()
        srv.wait()
        srv_log.close()
        log.close()
    for line in open(os.path.join(OUT, "server.log")):
        if '" 4' in line or '" 5' in line:   # "GET /x HTTP/1.1" 404 -
            fail("failed request: " + line.strip())


def selftest_result(dom, log):
    """The page's self-test answer from chromium's --dump-dom, or None (a failure)."""
    import html
    start = dom.find('<pre id="selftest-result"')
    if start < 0 or 'data-selftest="done"' not in dom:
        fail("the page's self-test did not finish (%s; see %s)" % (browse.last, log.name))
        return None
    return json.loads(html.unescape(dom[dom.index(">", start) + 1:dom.index("</pre>", start)]))


# Two schemes side by side with the longest figures lists: transfers (per-worker lists),
# the whole memory per worker; the README's screenshot shows the same.
SIDE_BY_SIDE = {"compare": 1, "p0-scheme": "zbv", "p0-stages": 8, "p0-workers": 4, "p0-split": 1, "p0-delta": 1,
                "p0-grad": 1, "p0-transfer": 0.5, "p1-scheme": "1f1b", "p1-stages": 8, "p1-workers": 4,
                "p1-split": 1, "p1-delta": 1, "p1-grad": 1, "p1-transfer": 0.5}


def overlap(a, b):
    """Do two boxes [left, top, right, bottom] overlap by more than half a pixel both ways?"""
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


def check_layout(res, size):
    """No two labels of the figures lists (their text boxes, from the DOM) overlap, and each
    stays inside its panel, with both panels shown."""
    if res is None:
        return
    lay = res.get("layout")
    want_w = int(size.split(",")[0])
    if not lay or lay["width"] != want_w:
        fail("layout at %s: the page reports a %s px wide window" % (size, lay and lay["width"]))
        return
    labels = []
    for i, p in enumerate(lay["panels"]):
        if p["box"][2] - p["box"][0] < 1:
            fail("layout at %s: panel %d not shown side by side" % (size, i))
        for l in p["labels"]:
            b = l["box"]
            if b[2] - b[0] < 0.5:
                continue
            labels.append((i, l["text"], b))
            if b[0] < p["box"][0] - 0.5 or b[2] > p["box"][2] + 0.5:
                fail("layout at %s: %r runs outside panel %d (%s, panel %s)" % (size, l["text"], i, b, p["box"]))
    bad = [(a, b) for k, a in enumerate(labels) for b in labels[k + 1:] if overlap(a[2], b[2])]
    for a, b in bad[:5]:
        fail("layout at %s: %r (panel %d) overlaps %r (panel %d)" % (size, a[1], a[0], b[1], b[0]))
    if len(labels) < 20:
        fail("layout at %s: only %d labels in the figures lists" % (size, len(labels)))
    # every legend (pipelines, the scan tree, chain and model, the ooo lanes): each item and its
    # text inside the window, nothing scrolled away
    legends = lay.get("legends", [])
    if len(legends) < 4:
        fail("layout at %s: %d legends measured (expected 4)" % (size, len(legends)))
    for lg in legends:
        if not lg["items"] or lg["scroll"][0] > lg["scroll"][1] + 0.5:
            fail("layout at %s: legend %s clipped (%s wide in %s)" % (size, lg["id"], lg["scroll"][0], lg["scroll"][1]))
        for it in lg["items"]:
            for b in (it["box"], it["text_box"]):
                if b[0] < -0.5 or b[2] > want_w + 0.5 or b[2] - b[0] < 1:
                    fail("layout at %s: legend %s item %r at %s, outside the %d px window" % (size, lg["id"], it["text"],
                                                                                            b, want_w))
    print("page at %s: %d labels of the two figures lists, %d overlapping" % (size, len(labels), len(bad)))


class Devtools:
    """chromium driven over --remote-debugging-pipe (the DevTools protocol: JSON messages
    ended by NUL, read by the browser on fd 3, written on fd 4): real key presses, which a
    page's own script cannot make. Only the standard library."""

    def __init__(self, exe, size, log):
        import fcntl
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        # moved above 10 first, so placing them on 3 and 4 cannot overwrite one another
        hi = [fcntl.fcntl(to_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)]

        def child():
            os.dup2(hi[0], 3)
            os.dup2(hi[1], 4)
        self.profile = tempfile.TemporaryDirectory(prefix="sp-chrome-")
        self.proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                      "--disable-extensions", "--user-data-dir=" + self.profile.name,
                                      "--remote-debugging-pipe", "--window-size=" + size, "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=child,
                                     pass_fds=(3, 4) + tuple(hi))
        for fd in [to_r, from_w] + hi:
            os.close(fd)
        self.buf, self.next_id, self.session = b"", 0, None

    def call(self, method, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        while True:   # events and other answers are skipped
            while b"\0" not in self.buf:
                chunk = os.read(self.from_r, 65536)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self.buf += chunk
            line, self.buf = self.buf.split(b"\0", 1)
            answer = json.loads(line)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError("%s: %s" % (method, answer["error"]))
                return answer.get("result", {})

    def open(self, url):
        target = self.call("Target.createTarget", url=url)["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("%s: %s" % (expr, r["exceptionDetails"].get("text")))
        return r["result"].get("value")

    def key(self, name, code):
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key=name, code=name, windowsVirtualKeyCode=code,
                      nativeVirtualKeyCode=code)

    def close(self):
        try:
            self.session = None
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_w)
        os.close(self.from_r)
        self.profile.cleanup()


def page_at(exe, url, size, log):
    """The self-test's answer with the page laid out at size ("W,H" CSS pixels). Through
    DevTools: a headless window is never narrower than 500 px, so a phone's width is an
    emulated viewport."""
    import time
    w, h = (int(v) for v in size.split(","))
    dt = Devtools(exe, size, log)
    try:
        dt.open("about:blank")
        dt.call("Emulation.setDeviceMetricsOverride", width=w, height=h, deviceScaleFactor=1, mobile=w < 500)
        dt.call("Page.navigate", url=url)
        for _ in range(600):
            if dt.eval("document.body && document.body.dataset.selftest") == "done":
                res = json.loads(dt.eval("document.getElementById('selftest-result').textContent"))
                for e in res["errors"]:
                    fail("page error at %s: %s" % (size, e))
                return res
            time.sleep(0.1)
        fail("the page's self-test did not finish at %s" % size)
    except (RuntimeError, OSError) as e:
        fail("layout at %s: DevTools: %s" % (size, e))
    finally:
        dt.close()
    return None


def screenshot(exe, url, size, grey, at, path, log):
    """A PNG of the page at size (an emulated viewport, as page_at), in greyscale if grey,
    scrolled to the element with id `at` if given; the page's own errors fail the test."""
    import base64
    import time
    w, h = (int(v) for v in size.split(","))
    dt = Devtools(exe, size, log)
    try:
        dt.open("about:blank")
        dt.call("Emulation.setDeviceMetricsOverride", width=w, height=h, deviceScaleFactor=1, mobile=w < 500)
        if grey:
            dt.call("Emulation.setEmulatedVisionDeficiency", type="achromatopsia")
        dt.call("Page.navigate", url=url)
        for _ in range(300):
            if dt.eval("document.readyState === 'complete' && (!document.getElementById('errors') || "
                       "document.body.dataset.ready === '1')"):
                break
            time.sleep(0.1)
        time.sleep(0.5)   # a view's data (fetched after the start) drawn
        if at:
            dt.eval("document.getElementById(%r).scrollIntoView()" % at)
        errors = dt.eval("Array.prototype.map.call(document.querySelectorAll('#errors p'), function (p) "
                         "{ return p.textContent; })") or []
        for e in errors:
            fail("page error in the screenshot %s: %s" % (os.path.basename(path), e))
        with open(path, "wb") as f:
            f.write(base64.b64decode(dt.call("Page.captureScreenshot", format="png")["data"]))
    except (RuntimeError, OSError) as e:
        fail("screenshot %s: DevTools: %s" % (path, e))
    finally:
        dt.close()


def check_keyboard(exe, base, log):
    """Every control of each view is reached by pressing Tab from the top of the page (the
    import's <details> open, both schemes shown): real key events through DevTools."""
    import time
    dt = Devtools(exe, "1280,800", log)
    try:
        dt.open(base + "?compare=1")
        for _ in range(300):
            if dt.eval("document.body && document.body.dataset.ready") == "1":
                break
            time.sleep(0.1)
        else:
            fail("keyboard: the page did not start")
            return
        total = 0
        for view in ("pipelines", "bppsa", "ooo"):
            dt.eval("document.getElementById('import').open = true; Promise.resolve(show(%r))" % view)
            want = [c["name"] for c in dt.eval("controlsShown()") if not c["disabled"]]
            dt.eval("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
            reached, first = [], None
            for _ in range(len(want) + 20):   # until focus comes round to the first control again
                dt.key("Tab", 9)
                name = dt.eval("document.activeElement === document.body ? '' : controlName(document.activeElement)")
                if name and name == first:
                    break
                if name and first is None:
                    first = name
                if name:
                    reached.append(name)
            missed = [n for n in want if n not in reached]
            if missed or not want:
                fail("keyboard: in the %s view Tab does not reach %s (of %d controls)" % (view, missed, len(want)))
            total += len(want)
            if not missed:
                print("page: %s view: Tab reaches all %d controls" % (view, len(want)))
        if total < 40:
            fail("keyboard: only %d controls found in the three views" % total)
    except (RuntimeError, OSError) as e:
        fail("keyboard: DevTools: %s" % e)
    finally:
        dt.close()


def close(a, b):
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def same_shown(text, value):
    """Does a figure's text, as the page shows it, begin with `value` (a number or a list)
    as the programs print it: an integer digit for digit, a fraction to the JSON's 6
    significant digits? Units and notes after the numbers are free."""
    values = value if isinstance(value, list) else [value]
    got = NUMBER.findall(str(text))
    if len(got) < len(values):
        return False
    for t, v in zip(got, values):
        if float(v) == int(float(v)) and abs(float(v)) < 1e15:
            if t != str(int(float(v))):
                return False
        elif not abs(float(t) - float(v)) <= 1e-5 * abs(float(v)):
            return False
    return True


def shown_argv(cmd, csv_file=None):
    """A command the page shows, as the test runs it: the repository's build/ is $BUILD/,
    FILE.csv the import box's CSV; everything after a '#' is a comment."""
    import shlex
    argv = shlex.split(cmd.split("#")[0])
    if argv and argv[0].startswith("build/"):
        argv[0] = os.path.join(BUILD, argv[0][len("build/"):])
    return [csv_file if a == "FILE.csv" and csv_file else a for a in argv]


def check_run_line(want, cmd, workers, c):
    """The page's second line for a model's profile: mpirun -np <the workers shown> with the
    schedule's own flags (a training run: its numbers are checked, it is not run here)."""
    lines = [l for l in cmd.split("\n") if l.startswith("mpirun")]
    if not c.get("costs") or c["costs"] == "uniform":
        if lines:
            fail("%s: a training command without a model: %r" % (want, lines))
        return
    if len(lines) != 1:
        fail("%s: no mpirun line in %r" % (want, cmd))
        return
    m = re.match(r"mpirun -np (\d+) build/(\w+) --parallel (\S+)(?: --microbatches (\d+)| --actions FILE\.csv)$",
                 lines[0])
    if not m or int(m.group(1)) != int(workers) or m.group(3) != c["scheme"] or \
            (c["scheme"] != "custom" and int(m.group(4) or -1) != int(c["micro"])):
        fail("%s: the run line %r does not name %s workers and --microbatches %s" % (want, lines[0], workers,
                                                                                  c.get("micro")))


def check_pipelines(res):
    n = nt = nm = 0
    for r in res["pipelines"]:
        c = r["set"]
        argv = schedule_argv(c)
        want = " ".join(["build/schedule"] + argv[1:]).replace(" --no-diagram", "")
        if r["error"]:
            fail("page refused %s: %s" % (want, r["error"]))
            continue
        native = run_json(argv)
        s, texts = r["shown"], r.get("texts", {})
        if not r["command"].startswith("build/schedule --scheme %s" % c["scheme"]):
            fail("the page shows the command %r for %s" % (r["command"], want))
        # the command shown, run as shown: its JSON is what the page shows
        ran = run_json(shown_argv(r["command"]))
        if ran != native:
            fail("the page's command %r prints %s, the configuration's build/schedule %s" % (r["command"], ran, native))
        check_run_line(want, r["commands"], ran["workers"], c)
        # every number shown as the programs print it (integers in full)
        for key, value in (("latency", native["latency"]), ("workers", native["workers"]),
                           ("utilization", native["utilization"]),
                           ("peak_activation_bytes_max", native["peak_activation_bytes_max"]),
                           ("peak_activation_bytes", native["peak_activation_bytes"]),
                           ("peak_memory_bytes", native.get("peak_memory_bytes")),
                           ("activation_transfers_max", native["activation_transfers_max"])):
            if value is not None and not same_shown(texts.get(key, ""), value):
                fail("%s: the page shows %s as %r, build/schedule %s" % (want, key, texts.get(key), value))
        for key, value in (("latency", native["latency"]), ("utilization", native["utilization"]),
                           ("bubble", 1 - native["utilization"]), ("workers", native["workers"]),
                           ("peak_activation_bytes_max", native["peak_activation_bytes_max"])):
            # the JSON prints 6 significant digits: 1 − utilisation from it is good to 1e-6
            if key not in s or not (close(s[key], value) or key == "bubble" and abs(float(s[key]) - value) < 2e-6):
                fail("%s: the page shows %s = %s, build/schedule %s" % (want, key, s.get(key), value))
        # per worker: the peak the page shows, build/schedule's, and the memory lane drawn from
        # the simulator's series (at most the peak: a release and an acquire at one instant
        # can peak within it; it reaches the peak when anything is held)
        shown = [float(v) for v in str(s.get("peak_activation_bytes", "")).split(",") if v.strip()]
        peaks = native["peak_activation_bytes"]
        if len(shown) != len(peaks) or not all(close(a, b) for a, b in zip(shown, peaks)):
            fail("%s: the page shows peak_activation_bytes %s, build/schedule %s" % (want, shown, peaks))
        lanes = r.get("lanes", [])
        if len(lanes) != len(peaks) or any(l > p * (1 + 1e-9) or (p > 0 and not l > 0) for l, p in zip(lanes, peaks)):
            fail("%s: memory lanes reach %s, build/schedule's peaks %s" % (want, lanes, peaks))
        if c.get("transfer"):   # the slider's simulation with transfers, and the command with its flag
            nt += 1
            if r["command"] != want:
                fail("the page shows the command %r, expected %r" % (r["command"], want))
            for key in ("latency_with_comm", "messages", "comm_time"):
                shown = [float(v) for v in str(s.get(key, "")).split(",") if v.strip()]
                value = native[key] if isinstance(native[key], list) else [native[key]]
                if len(shown) != len(value) or not all(close(x, y) for x, y in zip(shown, value)):
                    fail("%s: the page shows %s = %s, build/schedule %s" % (want, key, s.get(key), native[key]))
        elif "latency_with_comm" in s or "latency_with_comm" in native:
            fail("%s: a simulation with transfers without a transfer cost" % want)
        if r["boxes"] < 2 * native["stages"] * native["microbatches"]:
            fail("%s: %d job boxes drawn" % (want, r["boxes"]))
        # messages: one drawn per message of the C side's answer; with a transfer cost that
        # is sim_comm's list, as many as build/schedule --transfer-cost's "messages" sum to
        if r["drawn_msgs"] != r["answer_msgs"]:
            fail("%s: %d messages drawn, the simulator's answer has %d" % (want, r["drawn_msgs"], r["answer_msgs"]))
        if c.get("transfer"):
            if not r["transfers"] or r["drawn_msgs"] != sum(native["messages"]):
                fail("%s: %d messages drawn, build/schedule's messages %s" % (want, r["drawn_msgs"], native["messages"]))
            nm += r["drawn_msgs"]
        n += 1
    print("page: %d pipeline configurations set through the controls match build/schedule (%d with a transfer cost, "
          "%d messages drawn as build/schedule counts them)" % (n, nt, nm))
    if nm < 1:
        fail("page: no message drawn in the configurations with a transfer cost")
    if nt < 2:
        fail("page: %d configurations with a transfer cost set through the slider (expected >= 2)" % nt)


def check_csv(res):
    c = res["csv"]
    if not c["actions"]:
        fail("action CSV import: the page has no action-list schedules: " + c["status"])
        return
    if not c["status"].startswith("imported") or c["error"]:
        fail("action CSV import: %s %s" % (c["status"], c["error"]))
        return
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(CSV)
    cfg = dict(c["set"], scheme="custom", actions_file=f.name)
    native = run_json(schedule_argv(cfg))
    # the command shown after the import, run with the CSV as FILE.csv: the same figures,
    # the micro-batches the list has (no --microbatches of the controls)
    ran = run_json(shown_argv(c["command"], f.name))
    os.unlink(f.name)
    if "--microbatches" in c["command"] or ran != native:
        fail("action CSV: the page's command %r prints %s, build/schedule --scheme custom %s" % (c["command"], ran,
                                                                                               native))
    if not re.search(r"\b%d micro-batches" % native["microbatches"], c["status"]):
        fail("action CSV: the page says %r, the list has %d micro-batches" % (c["status"], native["microbatches"]))
    for key in ("latency", "workers", "peak_activation_bytes_max"):
        if not same_shown(c["texts"].get(key, ""), native[key]):
            fail("action CSV: the page shows %s as %r, build/schedule %s" % (key, c["texts"].get(key), native[key]))
    for key in ("latency", "utilization", "workers", "peak_activation_bytes_max"):
        if not close(c["shown"][key], native[key]):
            fail("action CSV: the page shows %s = %s, build/schedule --scheme custom %s" % (key, c["shown"][key],
                                                                                         native[key]))
    print("page: action CSV imported (%s) matches build/schedule --scheme custom" % c["status"])


def check_bppsa(res, links):
    n = 0
    for r in res["bppsa"]:
        c, s, before = r["set"], r["shown"], len(failures)
        if c["source"] == "chain":
            layers = [L for L, nl in links.items() if nl == c["n"]][0]
            argv = [os.path.join(BUILD, "demo"), "--layers", str(layers)]
        else:
            argv = [os.path.join(BUILD, c["source"].replace("-pruned", "")), "--batch", "8"]
            if c["source"].endswith("-pruned"):
                argv += ["--prune", "0.9"]
        native = run_json(argv + ["--backward", "bppsa", "--plan", "--scan-levels", str(c["k"]), "--quiet"])
        keys = ["links", "scan_levels", "levels", "linear_levels"]
        if c["source"] != "chain":
            keys += ["flops_per_sample", "linear_flops_per_sample", "scan_bytes"]
        texts = r.get("texts", {})
        for k in keys:
            if k not in s or not (host_bytes_close(s[k], native[k], native) if k in HOST_BYTES else close(s[k], native[k])):
                fail("bppsa %s: the page shows %s = %s, --plan %s" % (c, k, s.get(k), native[k]))
            # as shown: integers in full; the 32-bit build's bookkeeping bytes said so beside them
            if k in HOST_BYTES:
                if "32-bit" not in texts.get(k, "") or not same_shown(texts[k], s[k]):
                    fail("bppsa %s: the page shows %s as %r (its own %s, and why it differs from %s)" % (
                        c, k, texts.get(k), s[k], native[k]))
            elif not same_shown(texts.get(k, ""), native[k]):
                fail("bppsa %s: the page shows %s as %r, --plan %s" % (c, k, texts.get(k), native[k]))
        # the sliders follow the source: n is the chain's or the model's links, K the levels
        sl = r.get("sliders", {})
        if not (int(sl.get("n", -1)) == native["links"] == int(sl.get("n_out", -2)) and
                int(sl.get("k", -1)) == native["scan_levels"] == int(sl.get("k_out", -2))):
            fail("bppsa %s: the sliders show n %s (%s) and K %s (%s), the plan %d links and K %d" % (
                c, sl.get("n"), sl.get("n_out"), sl.get("k"), sl.get("k_out"), native["links"], native["scan_levels"]))
        # the command shown, run as shown, prints the view's figures (and, for a model, its table)
        lines = subprocess.run(shown_argv(r["command"]), capture_output=True, text=True).stdout.rstrip("\n").split("\n")
        try:
            ran = json.loads(lines[-1])
        except ValueError:
            ran = {}
        for k in keys:
            if k not in ran or not (host_bytes_close(s[k], ran[k], ran) if k in HOST_BYTES else close(s[k], ran[k])):
                fail("bppsa %s: the page's command %r prints %s = %s, the page shows %s" % (
                    c, r["command"], k, ran.get(k), s.get(k)))
        if c["source"] != "chain":
            table = "\n".join(l for l in r.get("table", "").split("\n") if not l.startswith("(this page: 32-bit"))
            if not same_plan_text(table.rstrip("\n") + "\n", "\n".join(lines[:-1]) + "\n"):
                fail("bppsa %s: the page's table differs from %r's text" % (c, r["command"]))
        crit = [l for l in r.get("legend", []) if "critical" in l["cls"] and "critical path" in l["text"]]
        if not crit or not any(l["text"].startswith("U") for l in r.get("legend", [])):
            fail("bppsa %s: the legend %s lacks the marks or the red critical-path edge" % (c, r.get("legend")))
        if r["steps"] < 1:
            fail("bppsa %s: no tree drawn" % c)
        n += len(failures) == before
    print("page: %d BPPSA views match the apps' --plan" % n)


def check_ooo(res):
    n = 0
    for r in res["ooo"]:
        app = r["model"]
        if sorted(r["orders"]) != sorted(["conventional", "ooo", "reverse-first-k", "list"]):
            fail("ooo %s: the page shows the orders %s" % (app, sorted(r["orders"])))
        for order, s in r["orders"].items():
            before = len(failures)
            native = run_json([os.path.join(BUILD, app), "--backward", "ooo", "--order", order, "--batch", "8",
                               "--steps", "1", "--threads", "1", "--lanes", "1", "--quiet"] +
                              (["--seq-len", "1000", "--hidden", "20"] if app == "rnn" else []) +
                              (image_folder() if app == "vgg11" else []))
            if not close(s["peak_bytes"], native["plan_peak_bytes"]):
                fail("ooo %s %s: the page shows peak_bytes %s, the engine's plan %s" % (r["model"], order, s["peak_bytes"],
                                                                                       native["plan_peak_bytes"]))
            if order == "reverse-first-k" and int(s["k"]) != native["k"]:
                fail("ooo %s: the page shows k = %s, the engine %s" % (r["model"], s["k"], native["k"]))
            t = r.get("texts", {}).get(order, {})
            if not same_shown(t.get("peak_bytes", ""), native["plan_peak_bytes"]):
                fail("ooo %s %s: the page shows peak_bytes as %r, the engine's plan %s" % (
                    app, order, t.get("peak_bytes"), native["plan_peak_bytes"]))
            if any(not same_shown(t.get(k, ""), float(s[k])) for k in ("makespan", "main_done")):
                fail("ooo %s %s: the page shows %r, its own figures %s" % (app, order, t, s))
            # the order's command, run as shown (vgg11: on a one-image folder instead of its
            # default Fashion-MNIST, whose 10,000-image evaluation takes tens of seconds)
            cmd = r.get("commands", {}).get(order, "")
            ran = run_json(shown_argv(cmd) + (image_folder() if app == "vgg11" else []) + ["--quiet"]) if cmd else {}
            if ran.get("plan_peak_bytes") != native["plan_peak_bytes"] or (order == "reverse-first-k" and ran.get("k") != native["k"]):
                fail("ooo %s %s: the page's command %r prints plan_peak_bytes %s, the page shows peak_bytes %s" % (
                    app, order, cmd, ran.get("plan_peak_bytes"), s["peak_bytes"]))
            lab = r.get("labels", {}).get(order, {})
            if lab.get("bad") or not lab.get("labels"):
                fail("ooo %s %s: box labels clash: %s (of %s)" % (app, order, lab.get("bad"), lab.get("labels")))
            n += len(failures) == before
    print("page: %d ooo orders match the engine's plan_peak_bytes (and k)" % n)


def check_wasm_fuzz():
    """Hostile calls into the module (tests/site/wasm_fuzz.js): each an answer or a
    refusal with a message, never a trap; the module keeps working; memory bounded."""
    node = shutil.which("node")
    if not node:
        fail("node not found (the wasm fuzz needs it)")
        return
    p = subprocess.run([node, "--no-experimental-fetch", "tests/site/wasm_fuzz.js",
                        os.path.abspath(os.path.join(SITE, "scanprop.js")), "1"], capture_output=True, text=True)
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        fail("wasm fuzz: exit %d, no summary: %s %s" % (p.returncode, p.stdout[-500:], p.stderr[-2000:]))
        return
    for f in out["failures"]:
        fail("wasm fuzz: " + f)
    if p.returncode != 0 and not out["failures"]:
        fail("wasm fuzz: exit %d" % p.returncode)
    print("wasm fuzz: %d calls, %d failures, wasm memory %.1f MB, slowest call %d ms" %
          (out["calls"], len(out["failures"]), out["memory_mb"], out["slowest_ms"]))


def check_tutorial_links():
    """Every TUTORIAL.html#anchor the page links to exists in the converted tutorial."""
    import re
    index = open(os.path.join(SITE, "index.html"), encoding="utf-8").read()
    tut = open(os.path.join(SITE, "TUTORIAL.html"), encoding="utf-8").read()
    ids = set(re.findall(r'id="([^"]+)"', tut))
    links = re.findall(r'href="TUTORIAL\.html#([^"]+)"', index)
    for a in links:
        if a not in ids:
            fail("the page links to TUTORIAL.html#%s, which the tutorial does not have" % a)
    print("page: %d links into the tutorial resolve" % len(links))


def main():
    if not os.path.exists(os.path.join(SITE, "scanprop.js")):
        print("test-site: %s/scanprop.js missing (make site)" % SITE)
        return 1
    schemes = run_json([os.path.join(BUILD, "schedule"), "--list"])["schemes"]
    check_wasm(schemes)
    check_wasm_fuzz()
    check_tutorial_links()
    check_page(schemes)
    for root in _folder:
        shutil.rmtree(root, ignore_errors=True)
    if failures:
        print("test-site: %d failure(s)" % len(failures))
        return 1
    print("test-site: passed (screenshots in %s)" % OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
