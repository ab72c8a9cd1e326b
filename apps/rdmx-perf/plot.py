#!/usr/bin/env python3
"""Turns rdmx-perf JSON into PNG plots (matplotlib; Debian: apt-get install python3-matplotlib).

usage: plot.py RESULT.json [RESULT.json ...] --out DIR

Plots (only those whose test is in the input):
  cache.png       ns per get+put: window cache vs rte_mempool / rte_ring (single, burst 32)
  umr_sweep.png   map+unmap ns per pair vs pages per window (sink), beside rte_mempool and the
                  syscall+pin floor (log scale), inline / pointer regimes marked
  <test>_cdf.png  latency CDF from each case's log-linear histogram
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    tests = {}
    config = None
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        config = config or d["config"]
        for t in d["tests"]:
            tests[t["test"]] = t
    return config, tests


def subtitle(cfg):
    return "%s, %s CPUs, %s, TSC %.2f GHz" % (
        cfg.get("cpu_model", "?"), int(cfg.get("online_cpus", 0)),
        "hugepages" if cfg.get("hugepages") else "no hugepages", cfg.get("tsc_hz", 0) / 1e9)


def plot_cache(t, cfg, out):
    cases = t["cases"]
    names = [c["name"] for c in cases]
    vals = [c["ns_per_op"] for c in cases]
    colors = ["tab:green" if c["role"] == "rdmx" else "tab:gray" for c in cases]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.barh(names, vals, color=colors)
    ax.invert_yaxis()
    ax.set_xlabel("ns per get+put (per object for burst32), median of rounds")
    ax.set_title("cache: window cache vs DPDK peers\n" + subtitle(cfg), fontsize=9)
    for i, v in enumerate(vals):
        ax.text(v, i, " %.2f" % v, va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "cache.png"), dpi=110)
    plt.close(fig)


def plot_umr(t, cfg, out):
    umr = [c for c in t["cases"] if c["name"].startswith("umr.map_unmap.")]
    mp = [c for c in t["cases"] if c["name"].startswith("rte_mempool.single")]
    fl = [c for c in t["cases"] if c["name"].startswith("syscall+pin.floor")]
    fig, ax = plt.subplots(figsize=(8, 5))
    for series, label, style in ((umr, "rdmx map+unmap (sink)", "o-"),
                                 (fl, "syscall+pin floor", "s--"),
                                 (mp, "rte_mempool get+put", "^:")):
        if not series:
            continue
        xs = [c["pages"] if c["pages"] else u["pages"] for c, u in zip(series, umr)]
        ax.plot(xs, [c["ns_per_op"] for c in series], style, label=label)
    for c in umr:
        if c.get("extra", {}).get("inline") == 0:
            ax.axvspan(c["pages"] * 0.85, c["pages"] * 1.15, color="tab:orange", alpha=0.12)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("pages per window (4 KiB); shaded: pointer-mode KLM list")
    ax.set_ylabel("ns per op (median of rounds)")
    ax.set_title("umr: map+unmap vs peers\n" + subtitle(cfg), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "umr_sweep.png"), dpi=110)
    plt.close(fig)


def plot_cdf(t, cfg, out):
    fig, ax = plt.subplots(figsize=(8, 5))
    any_line = False
    for c in t["cases"]:
        h = c.get("histogram") or []
        total = sum(b[2] for b in h)
        if not total:
            continue
        xs, ys, cum = [], [], 0
        for lo, hi, n in h:
            cum += n
            xs.append(max(hi, 1e-3))
            ys.append(cum / total)
        ax.step(xs, ys, where="post", label=c["name"],
                linewidth=2 if c["role"] == "rdmx" else 1)
        any_line = True
    if not any_line:
        plt.close(fig)
        return
    ax.set_xscale("log")
    ax.set_xlabel("ns per op (stamped phase)")
    ax.set_ylabel("fraction of ops")
    ax.set_title("%s: latency CDF\n%s" % (t["test"], subtitle(cfg)), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "%s_cdf.png" % t["test"]), dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("json", nargs="+")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cfg, tests = load(a.json)
    if "cache" in tests:
        plot_cache(tests["cache"], cfg, a.out)
    if "umr" in tests:
        plot_umr(tests["umr"], cfg, a.out)
    for t in tests.values():
        plot_cdf(t, cfg, a.out)
    print("plots written to %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
