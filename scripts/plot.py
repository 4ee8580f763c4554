#!/usr/bin/python3
"""Training curves from scanprop --log CSVs: loss and test accuracy, against the step and
against wall seconds, one line per CSV.

    scripts/plot.py linear.csv bppsa.csv ooo.csv -o curves.png [--labels linear,bppsa,ooo]
                    [--title "LeNet-5, Fashion-MNIST"] [--smooth 20]

The CSV is what every app writes with --log: step,epoch,loss,lr,seconds,test_loss,test_acc
(a row per training step; a row per evaluation, --eval-every N or after each epoch, with
the loss column empty). The output format follows the file name (.png, .svg, .pdf).
Needs Debian's python3-matplotlib (scripts/deps.sh installs it); runs headless."""
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


def main():
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
