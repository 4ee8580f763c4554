#!/usr/bin/python3
"""Cluster predictions (labelled as such): build/schedule's simulated compute plus the
communication of each step on an example cluster (--nodes, comm_cost.h's two link
classes), for every scheme and 2 to 512 workers, on VGG-11, ResNet-20 and LeNet.

    scripts/predict_cluster.py [--build build] [--csv docs/img/cluster-predictions.csv]
                               [--md OUT.md] [--plots docs/img] [--models vgg11,resnet20,lenet]

Writes one CSV row per (model, cluster, scheme, workers), the Markdown tables of
docs/MEASUREMENTS.md's "Cluster predictions" (to --md, or stdout), and with --plots one
figure per model and cluster (scripts/plot.py --cluster). A scheme build/schedule
refuses at some W (a pipeline with more ranks than layers, a shape it needs) is recorded
as refused with its reason. ResNet-20 is a DAG: build/schedule places it as the chain
of its segments (cut at the nodes every path goes through: the stem's conv1 and its
batch norm (ReLU fused), each residual block up to its add (ReLU fused), the pooling, the
fc; 13 stages, schedule_segments.c).

Compute is each model's op FLOPs at a worker speed in GFLOP/s: the cluster's, except
where MODEL_GFLOPS names a measured profile for that model and cluster; the rate is then
the model's FLOPs over the profile's measured time (model_rate), and the table header
says so.
The step is build/schedule's simulation with communication on the cluster (the
cluster-prediction line's step_with_comm: every message, bucket allreduce, broadcast and
reduce a job on its ranks' communication lanes, costed by comm_cost.h's topology, and
the optimizer step as a job at the cluster's --opt-gbs). Beside it, the communication
added up per worker without a timeline brackets the step between full overlap
(max(compute, communication)) and none (their sum): the CSV keeps that bracket."""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

# The example clusters: (name, ranks per node, intra α µs, intra GB/s, inter α µs,
# inter GB/s per node, per-worker GFLOP/s, optimizer GB/s, what the figures are)
CLUSTERS = [
    ("gpu", 8, 3.0, 300.0, 5.0, 100.0, 30000.0, 1500.0,
     "8 GPUs per node on NVLink (300 GB/s, 3 us), 4 x 200 Gb/s InfiniBand per node (100 GB/s, 5 us); "
     "30 TFLOP/s per GPU (assumed: about 45% of an H100's 67 TFLOP/s FP32; not measured here); the "
     "optimizer step streams at 1500 GB/s (assumed: about half of an H100's memory bandwidth)"),
    ("cpu", 1, 1.0, 20.0, 15.0, 12.5, 250.0, 10.0,
     "one worker per node, 100 GbE between nodes (12.5 GB/s, 15 us); 250 GFLOP/s per worker "
     "(measured: VGG-11's training step on this machine's CPU, docs/PERFORMANCE.md); the optimizer "
     "step streams at 10 GB/s (the simulator's default, sim_comm.h)"),
]
SCHEMES = ["ddp", "ddp-ooo", "fsdp", "gpipe", "1f1b", "ooo-ff", "ooo-modulo", "lpp", "fslpp", "1f1b-strict",
           "zb-h1", "zb-h2", "interleaved-1f1b", "looped-bfs", "zbv", "v-half", "v-min", "dualpipev", "zb-auto"]
WORKERS = [2, 4, 8, 16, 32, 64, 128, 256, 512]
# (model, cluster) → a profile measured on this machine's CPU whose rate the cpu workers
# take for that model: ResNet-20's 16–64-channel convolutions, batch norm and adds reach
# far less than VGG-11's 250 GFLOP/s. The gpu cluster keeps its assumed 30 TFLOP/s.
MODEL_GFLOPS = {("resnet20", "cpu"): "site/profiles/resnet20.csv"}
MICRO_SAMPLES = 32      # samples per micro-batch
LPP_R = 4               # lpp/fslpp: workers per group


def shape_flags(scheme, w):
    """(flags, micro-batches) of a weak-scaling run: one micro-batch per worker for the
    data-parallel schemes, two per worker for the pipelines."""
    if scheme in ("ddp", "ddp-ooo", "fsdp"):
        return ["--workers", str(w), "--microbatches", str(w)], w
    if scheme in ("lpp", "fslpp"):
        r = min(LPP_R, w)
        return ["--groups", str(w // r), "--per-group", str(r), "--microbatches", str(2 * w)], 2 * w
    return ["--workers", str(w), "--microbatches", str(2 * w)], 2 * w


def model_rate(build, model, profile):
    """GFLOP/s of a measured profile: the model's F + δ + G FLOPs at MICRO_SAMPLES samples
    (build/schedule --model at 1 GFLOP/s: its µs are 10^3 FLOPs) over the profile's µs."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        subprocess.run([os.path.join(build, "schedule"), "--scheme", "ddp", "--workers", "1", "--microbatches", "1",
                        "--model", model, "--batch-size", str(MICRO_SAMPLES), "--gflops", "1", "--no-diagram",
                        "--costs-out", f.name], check=True, capture_output=True)
        flops = sum(float(r["fwd"]) + float(r["bwd_grad"]) + float(r["bwd_delta"]) for r in read_csv(f.name)) * 1e3
    us = sum(float(r["fwd"]) + float(r["bwd_grad"]) + float(r["bwd_delta"]) for r in read_csv(profile))
    return flops / us / 1e3


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def gflops_of(build, model, cl, cache={}):
    key = (model, cl[0])
    if key not in cache:
        cache[key] = model_rate(build, model, MODEL_GFLOPS[key]) if key in MODEL_GFLOPS else cl[6]
    return cache[key]


def predict(build, model, cl, scheme, w):
    name, rpn, ia, ib, ea, eb, _, opt_gbs, _ = cl
    gflops = gflops_of(build, model, cl)
    flags, micro = shape_flags(scheme, w)
    nodes = (w + rpn - 1) // rpn
    cmd = [os.path.join(build, "schedule"), "--scheme", scheme, "--model", model, "--batch-size",
           str(MICRO_SAMPLES), "--gflops", str(gflops), "--no-diagram", "--nodes", str(nodes), "--ranks-per-node",
           str(min(rpn, w)), "--intra-latency-us", str(ia), "--intra-bw-gbs", str(ib), "--inter-latency-us",
           str(ea), "--inter-bw-gbs", str(eb), "--opt-gbs", str(opt_gbs)] + flags
    p = subprocess.run(cmd, capture_output=True, text=True)
    row = {"model": model, "cluster": name, "scheme": scheme, "workers": w, "microbatches": micro,
           "gflops": f"{gflops:.0f}" if gflops >= 100 else f"{gflops:.1f}"}
    if p.returncode != 0:
        row["refused"] = p.stderr.strip().splitlines()[-1].replace("scanprop: ", "") if p.stderr else "failed"
        return row
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    cpred = next(x for x in lines if x.get("mode") == "cluster-prediction")
    sim = lines[-1]
    lat, comm, step = cpred["compute_latency"], cpred["comm_max"], cpred["step_with_comm"]
    hi, lo = lat + comm, max(lat, comm)
    samples = micro * MICRO_SAMPLES
    row.update({
        "compute_ms": lat / 1e3, "comm_ms": comm / 1e3, "step_ms": step / 1e3, "comm_lane_ms": cpred["comm_lane_max"] / 1e3,
        "opt_ms": cpred["opt_max"] / 1e3, "step_ms_overlap": lo / 1e3, "step_ms_no_overlap": hi / 1e3,
        "utilization_compute": sim["utilization"], "utilization": sim["utilization"] * lat / step,
        "samples_per_s": samples / (step / 1e6),
        "peak_memory_mb": max(sim["peak_memory_bytes"]) / 2**20, "refused": "",
    })
    return row


def stop_scaling(rows, key):
    """The first W whose throughput per worker is below half of W = 2's (or at which the
    scheme is refused), and the best throughput's W."""
    ok = [r for r in rows if not r["refused"]]
    if not ok:
        return "refused", "-"
    base = ok[0][key] / ok[0]["workers"]
    stop = "> 512"
    for r in rows:
        if r["refused"]:
            stop = f"{r['workers']} (refused)"
            break
        if r[key] / r["workers"] < 0.5 * base:
            stop = str(r["workers"])
            break
    best = max(ok, key=lambda r: r[key])
    return stop, str(best["workers"])


def tables(rows, out, models):
    show = [2, 8, 32, 128, 512]
    for model in models:
        for cl in CLUSTERS:
            sub = [r for r in rows if r["model"] == model and r["cluster"] == cl[0]]
            rate = sub[0]["gflops"] if sub else "?"
            src = (f"{rate} GFLOP/s per worker from {MODEL_GFLOPS[(model, cl[0])]}"
                   if (model, cl[0]) in MODEL_GFLOPS else f"{rate} GFLOP/s per worker")
            out.write(f"\n**{model}, cluster `{cl[0]}`** ({src}) — simulated step ms with communication and its "
                      f"utilisation; prediction\n\n")
            out.write("| scheme | " + " | ".join(f"W = {w}" for w in show) +
                      " | efficiency < 50% from W | best throughput at W |\n")
            out.write("| --- |" + " --- |" * (len(show) + 2) + "\n")
            for sc in SCHEMES:
                rs = sorted([r for r in sub if r["scheme"] == sc], key=lambda r: r["workers"])
                cells = []
                for w in show:
                    r = next((x for x in rs if x["workers"] == w), None)
                    if r is None or r["refused"]:
                        cells.append("refused")
                    else:
                        cells.append(f"{r['step_ms']:.3g} ({100 * r['utilization']:.0f}%)")
                stop, best = stop_scaling(rs, "samples_per_s")
                out.write(f"| {sc} | " + " | ".join(cells) + f" | {stop} | {best} |\n")
        sub = [r for r in rows if r["model"] == model and r["cluster"] == CLUSTERS[0][0]]
        out.write(f"\n**{model}: peak memory per rank, MB** (the largest rank; weights, gradients, SGD momentum, "
                  "gradient buckets, activations in flight of 32-sample micro-batches; the same on both clusters)\n\n")
        out.write("| scheme | " + " | ".join(f"W = {w}" for w in show) + " |\n")
        out.write("| --- |" + " --- |" * len(show) + "\n")
        for sc in SCHEMES:
            cells = []
            for w in show:
                r = next((x for x in sub if x["scheme"] == sc and x["workers"] == w), None)
                cells.append("refused" if r is None or r["refused"] else f"{r['peak_memory_mb']:.4g}")
            out.write(f"| {sc} | " + " | ".join(cells) + " |\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--csv", default="docs/img/cluster-predictions.csv")
    ap.add_argument("--md", help="write the tables here (default: stdout)")
    ap.add_argument("--plots", help="folder for the figures (scripts/plot.py --cluster)")
    ap.add_argument("--models", default="vgg11,resnet20,lenet")
    a = ap.parse_args()
    rows = []
    for model in a.models.split(","):
        for cl in CLUSTERS:
            for sc in SCHEMES:
                for w in WORKERS:
                    rows.append(predict(a.build, model, cl, sc, w))
            print(f"predict_cluster.py: {model} on {cl[0]} done", file=sys.stderr)
    keys = ["model", "cluster", "scheme", "workers", "microbatches", "gflops", "compute_ms", "step_ms", "comm_lane_ms", "opt_ms",
            "comm_ms", "step_ms_overlap", "step_ms_no_overlap", "utilization_compute", "utilization", "samples_per_s",
            "peak_memory_mb", "refused"]
    with open(a.csv, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys, restval="")
        wr.writeheader()
        for r in rows:
            wr.writerow(r)
    out = open(a.md, "w") if a.md else sys.stdout
    out.write("Clusters (prediction):\n\n")
    for cl in CLUSTERS:
        out.write(f"* `{cl[0]}`: {cl[8]}.\n")
    tables(rows, out, a.models.split(","))
    if a.md:
        out.close()
    if a.plots:
        here = os.path.dirname(os.path.abspath(__file__))
        for model in a.models.split(","):
            for cl in CLUSTERS:
                subprocess.run([os.path.join(here, "plot.py"), "--cluster", a.csv, "--model", model,   # its python3: matplotlib
                                "--cluster-name", cl[0], "-o",
                                os.path.join(a.plots, f"cluster-{model}-{cl[0]}.svg")], check=True)


if __name__ == "__main__":
    main()
