#!/usr/bin/python3
"""Training curves from scanprop --log CSVs: loss and test accuracy, against the step and
against wall seconds, one line per CSV.

    scripts/plot.py linear.csv bppsa.csv ooo.csv -o curves.png [--labels linear,bppsa,ooo]
                    [--title "LeNet-5, Fashion-MNIST"] [--smooth 20]

The CSV is what every app writes with --log: step,epoch,loss,lr,seconds,test_loss,test_acc
(a row per training step; a row per evaluation, --eval-every N or after each epoch, with
the loss column empty). The output format follows the file name (.png, .svg, .pdf).
Needs Debian's python3-matplotlib (scripts/deps.sh installs it); runs headless.

    scripts/plot.py --cluster cluster-predictions.csv --model resnet20 --cluster-name gpu -o out.svg

draws scripts/predict_cluster.py's predictions instead: per scheme against the workers,
the simulated step with communication (the band: communication added up without a
timeline, from full overlap to none), the utilisation and throughput of the simulated step
and the peak memory per rank."""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_log(path):
    """(train rows, eval rows) as lists of dicts with floats."""
    train, evals = [], []
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        need = {"step", "loss", "seconds"}
        if not r.fieldnames or not need <= set(r.fieldnames):
            sys.exit(f"plot.py: {path}: not a scanprop --log CSV (header {r.fieldnames})")
        for row in r:
            try:
                if row.get("loss"):
                    train.append({"step": float(row["step"]), "loss": float(row["loss"]),
                                  "seconds": float(row["seconds"])})
                elif row.get("test_acc"):
                    evals.append({"step": float(row["step"]), "seconds": float(row["seconds"]),
                                  "test_loss": float(row["test_loss"]), "test_acc": float(row["test_acc"])})
            except (KeyError, ValueError) as e:
                sys.exit(f"plot.py: {path}: bad row {row}: {e}")
    if not train:
        sys.exit(f"plot.py: {path}: no training rows")
    return train, evals


def smooth(values, k):
    """Trailing moving average over k rows (k <= 1: the values)."""
    if k <= 1:
        return values
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= k:
            acc -= values[i - k]
        out.append(acc / min(i + 1, k))
    return out


def cluster_main(argv):
    """--cluster: the cluster predictions of one model on one cluster, four panels."""
    ap = argparse.ArgumentParser(prog="plot.py --cluster")
    ap.add_argument("--cluster", required=True, help="scripts/predict_cluster.py's CSV")
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster-name", required=True)
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args(argv)
    series, rate = {}, ""
    with open(a.cluster, newline="") as f:
        for row in csv.DictReader(f):
            if row["model"] != a.model or row["cluster"] != a.cluster_name or row["refused"]:
                continue
            rate = row.get("gflops") or rate   # the worker speed the rows were simulated at
            try:
                series.setdefault(row["scheme"], []).append({k: float(row[k]) for k in (
                    "workers", "step_ms", "step_ms_overlap", "step_ms_no_overlap", "utilization",
                    "samples_per_s", "peak_memory_mb")})
            except (KeyError, ValueError) as e:
                sys.exit(f"plot.py: {a.cluster}: bad row {row}: {e}")
    if not series:
        sys.exit(f"plot.py: {a.cluster}: no rows for {a.model} on {a.cluster_name}")
    fig, ax = plt.subplots(2, 2, figsize=(12, 8.5))
    cmap = plt.get_cmap("tab20")
    for i, (name, rows) in enumerate(sorted(series.items())):
        rows.sort(key=lambda r: r["workers"])
        w = [r["workers"] for r in rows]
        c = cmap(i % 20)
        style = "-" if i < 10 else "--"
        ax[0][0].fill_between(w, [r["step_ms_overlap"] for r in rows], [r["step_ms_no_overlap"] for r in rows],
                              color=c, alpha=0.15)
        ax[0][0].plot(w, [r["step_ms"] for r in rows], style, color=c, marker=".", label=name)
        ax[0][1].plot(w, [r["utilization"] for r in rows], style, color=c, marker=".", label=name)
        ax[1][0].plot(w, [r["samples_per_s"] for r in rows], style, color=c, marker=".", label=name)
        ax[1][1].plot(w, [r["peak_memory_mb"] for r in rows], style, color=c, marker=".", label=name)
    ax[0][0].set(xlabel="workers", ylabel="step ms (line: simulated with communication;\nband: added-up communication, full overlap to none)", xscale="log",
                 yscale="log")
    ax[0][1].set(xlabel="workers", ylabel="utilisation (simulated step)", xscale="log", ylim=(0, 1.05))
    ax[1][0].set(xlabel="workers", ylabel="samples / s (simulated step)", xscale="log", yscale="log")
    ax[1][1].set(xlabel="workers", ylabel="peak memory per rank, MB (largest rank)", xscale="log", yscale="log")
    for row in ax:
        for x in row:
            x.grid(True, alpha=0.3)
            x.set_xscale("log", base=2)
    ax[0][1].legend(fontsize=7, ncol=2)
    speed = f", {rate} GFLOP/s per worker" if rate else ""
    fig.suptitle(f"PREDICTION: {a.model} on cluster '{a.cluster_name}'{speed} (scripts/predict_cluster.py)")
    fig.tight_layout()
    fig.savefig(a.out)
    plt.close(fig)
    print(f"plot.py: wrote {a.out}")


def main():
    if "--cluster" in sys.argv[1:]:
        return cluster_main(sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="--log CSV files")
    ap.add_argument("-o", "--out", required=True, help="output image (.png, .svg, .pdf)")
    ap.add_argument("--labels", help="comma-separated legend labels (default: file names)")
    ap.add_argument("--title", default="", help="figure title")
    ap.add_argument("--smooth", type=int, default=1, help="moving average of the loss over N steps")
    a = ap.parse_args()
    labels = a.labels.split(",") if a.labels else [os.path.splitext(os.path.basename(p))[0] for p in a.csv]
    if len(labels) != len(a.csv):
        sys.exit(f"plot.py: {len(labels)} labels for {len(a.csv)} files")
    logs = [read_log(p) for p in a.csv]
    any_eval = any(ev for _, ev in logs)
    rows = 2 if any_eval else 1
    fig, ax = plt.subplots(rows, 2, figsize=(11, 4 * rows), squeeze=False)
    for (train, evals), label in zip(logs, labels):
        loss = smooth([r["loss"] for r in train], a.smooth)
        ax[0][0].plot([r["step"] for r in train], loss, label=label, linewidth=1)
        ax[0][1].plot([r["seconds"] for r in train], loss, label=label, linewidth=1)
        if any_eval and evals:
            ax[1][0].plot([r["step"] for r in evals], [r["test_acc"] for r in evals], marker="o", label=label)
            ax[1][1].plot([r["seconds"] for r in evals], [r["test_acc"] for r in evals], marker="o", label=label)
    sm = f" (mean of {a.smooth} steps)" if a.smooth > 1 else ""
    ax[0][0].set(xlabel="step", ylabel="training loss" + sm)
    ax[0][1].set(xlabel="seconds", ylabel="training loss" + sm)
    if any_eval:
        ax[1][0].set(xlabel="step", ylabel="test accuracy")
        ax[1][1].set(xlabel="seconds", ylabel="test accuracy")
    for row in ax:
        for x in row:
            x.grid(True, alpha=0.3)
            x.legend()
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.out)
    print(f"plot.py: wrote {a.out}")


if __name__ == "__main__":
    main()
