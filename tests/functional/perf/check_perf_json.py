#!/usr/bin/env python3
"""Smoke test of rdmx-perf: runs one test with tiny iterations and checks that the JSON it writes
is well formed and has the expected keys, and that the printed table says what its figures are:
a unit in every column header, a bandwidth column for io_bw, a reason under every case whose
means and median differ by more than 2x; for rpc_lat and rpc_bw, that every RPC issued completed,
that each window RPC mapped one window and saw it invalidated by the reply while register-once
mapped none, and that each ratio is the quotient of the two figures it compares (never the
timings themselves).
Usage: check_perf_json.py BINARY TEST"""
import json
import re
import subprocess
import sys
import tempfile

CASE_KEYS = {"name", "unit", "role", "pages", "bytes", "burst", "depth", "ops", "ns_per_op",
             "best_round_ns_per_op", "cycles_per_op", "ops_per_s", "allocs_per_op",
             "syscalls_per_op", "bw_MB_per_s", "round_ns_per_op", "latency_ns", "at_resolution",
             "mean_vs_median", "ratios", "extra", "histogram"}
LAT_KEYS = {"samples", "min", "p50", "avg", "stdev", "p99", "p99_9", "max", "resolution",
            "slow_fraction", "slow_time_share"}
CONFIG_KEYS = {"cpu_model", "online_cpus", "tsc_hz", "core_hz", "hugepages", "measure_cpu",
               "device_thread_cpu", "cores_used", "allocs_check", "syscalls_check", "governor"}
# The table's columns, each naming its unit (perftest's style: t_avg[usec], BW average[MB/sec]).
COLUMNS = ["case", "pages", "ns/op", "min[ns]", "p50[ns]", "avg[ns]", "stdev[ns]", "p99[ns]",
           "p99.9[ns]", "max[ns]", "Mops/s", "cyc/op", "allocs/op", "sys/op"]
LAT_COLUMNS = ["min[ns]", "p50[ns]", "avg[ns]", "p99[ns]", "p99.9[ns]", "max[ns]"]
SPREAD = 2.0  # means and median further apart than this need a reason under the row
EXPECT = {  # test -> (case name prefixes that must be there, needs an rdmx case with ratios)
    "cache": ["window_cache.single", "rte_mempool.single", "rte_ring.spsc.single",
              "rte_ring.mpmc.single", "window_cache.burst32", "rte_mempool.burst32"],
    "umr": ["umr.map_unmap.p1", "umr.map_unmap.p64", "rte_mempool.single", "syscall+pin.floor"],
    "umr_lat": ["umr_lat.map.p", "syscall+pin.floor"],
    "io_lat": ["io.write.map_unmap", "io.write.register_once", "io.read.map_unmap",
               "io.read.register_once", "syscall+pin.floor"],
    "io_bw": ["io.write.map_unmap", "io.write.register_once", "syscall+pin.floor"],
    "rpc_lat": ["rpc.write.window.p1", "rpc.write.register_once.p1", "rpc.read.window.p1",
                "rpc.read.register_once.p1", "rpc.write.window.p16", "rpc.read.register_once.p16"],
    "rpc_bw": ["rpc.write.window.p1", "rpc.write.register_once.p1", "rpc.read.window.p16",
               "rpc.read.register_once.p16"],
}
ARGS = {"umr": ["--pages", "1,64"], "io_lat": ["--pages", "1"], "io_bw": ["--pages", "1"]}
BW_TESTS = {"io_bw", "rpc_bw"}  # tests with a bandwidth column


def check_rpc(test, cases, table):
    """rpc_lat / rpc_bw: the counts add up and every ratio is the quotient of its two figures."""
    by_name = {c["name"]: c for c in cases}
    for c in cases:
        x = c["extra"]
        issued, done = x["rpcs_issued"], x["rpcs_completed"]
        if issued != done or issued < c["ops"] or c["ops"] <= 0:
            fail("case %s: %s RPCs issued, %s completed, %s timed" % (c["name"], issued, done, c["ops"]))
        if c["unit"] != "RPC" or c["depth"] != (32 if test == "rpc_bw" else 1):
            fail("case %s: unit %r depth %r" % (c["name"], c["unit"], c["depth"]))
        if ".window." in c["name"]:
            # One window per call, every one taken back by the reply's SEND_WITH_INV.
            if x["maps"] != issued or x["remote_invalidations"] != done or x["local_invalidations"]:
                fail("case %s: maps %s, remote %s, local %s invalidations for %s RPCs"
                     % (c["name"], x["maps"], x["remote_invalidations"], x["local_invalidations"], done))
            peer = c["name"].replace(".window.", ".register_once.")
            p = by_name[peer]
            if test == "rpc_lat":
                key, want = peer + "@p50", c["latency_ns"]["p50"] / p["latency_ns"]["p50"]
                ov = c["latency_ns"]["p50"] - p["latency_ns"]["p50"]
            else:
                key, want = peer, c["ns_per_op"] / p["ns_per_op"]
                ov = c["ns_per_op"] - p["ns_per_op"]
            if set(c["ratios"]) != {key} or abs(c["ratios"][key] - want) > 1e-9 * want:
                fail("case %s: ratios %s, want {%s: %s}" % (c["name"], c["ratios"], key, want))
            if abs(x["window_overhead_ns"] - ov) > 1e-6 * max(1.0, abs(ov)):
                fail("case %s: window_overhead_ns %s, want %s" % (c["name"], x["window_overhead_ns"], ov))
            # The printed ratio is the JSON one, in the table's format.
            row = [l for l in table.splitlines() if l.startswith(c["name"] + " ")][0]
            if ("%.3gx %s" % (want, key)) not in row and ("%.0fx %s" % (want, key)) not in row:
                fail("case %s: the printed ratio is not %.3g: %r" % (c["name"], want, row))
        elif x["maps"] or x["remote_invalidations"] or x["local_invalidations"] or c["ratios"]:
            fail("register-once case %s mapped or invalidated: %s" % (c["name"], x))


def fmt_ns(v):
    """A time as the table prints one (report.cpp fmt_ns)."""
    return "%.2f" % v if v < 100 else "%.1f" % v if v < 10000 else "%.0f" % v


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    binary, test = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        jpath, hpath = d + "/out.json", d + "/hist.txt"
        cmd = [binary, "--", "--test", test, "--iterations=400", "--warmup", "40",
               "--rounds", "2", "--json", jpath, "--histogram", hpath] + ARGS.get(test, [])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            fail("%s exited %d\n%s\n%s" % (cmd, r.returncode, r.stdout, r.stderr))
        with open(jpath) as f:
            doc = json.load(f)
        with open(hpath) as f:
            hist = [l for l in f if not l.startswith("#")]
        table = r.stdout
    if doc.get("tool") != "rdmx-perf":
        fail("tool key")
    missing = CONFIG_KEYS - set(doc["config"])
    if missing:
        fail("config keys missing: %s" % missing)
    # The measured core clock (a dependent add chain timed with the TSC): a real clock, not 0 or
    # a unit slip (kHz, or ticks instead of Hz).
    if not 0.2e9 <= doc["config"]["core_hz"] <= 10e9:
        fail("core_hz %r is not a core clock" % doc["config"]["core_hz"])
    if not doc["config"]["governor"]:
        fail("empty governor in the configuration")
    tests = doc["tests"]
    if len(tests) != 1 or tests[0]["test"] != test:
        fail("tests array")
    cases = tests[0]["cases"]
    lines = table.splitlines()
    header = [l for l in lines if l.startswith("case ")]
    if len(header) != 1:
        fail("no single table header in %r" % table)
    cols = header[0].split("ratios")[0].split()
    want = COLUMNS[:11] + (["BW[MB/s]"] if test in BW_TESTS else []) + COLUMNS[11:]
    if cols != want:
        fail("table columns %s, want %s" % (cols, want))
    at = {name: i for i, name in enumerate(cols)}
    names = {c["name"] for c in cases}
    any_below = False
    for c in cases:
        if CASE_KEYS - set(c):
            fail("case %s lacks %s" % (c.get("name"), CASE_KEYS - set(c)))
        if LAT_KEYS - set(c["latency_ns"]):
            fail("case %s latency lacks %s" % (c["name"], LAT_KEYS - set(c["latency_ns"])))
        if c["role"] == "rdmx" and not c["ratios"]:
            fail("rdmx case %s has no ratio to a peer" % c["name"])
        lat = c["latency_ns"]
        if not lat["min"] <= lat["p50"] <= lat["max"] or lat["stdev"] < 0 or lat["resolution"] <= 0:
            fail("case %s: latency figures out of order: %s" % (c["name"], lat))
        rows = [i for i, l in enumerate(lines) if l.startswith(c["name"] + " ")]
        if len(rows) != 1:
            fail("case %s not once in the printed table" % c["name"])
        row = lines[rows[0]].split()
        # A figure below the timer's resolution is printed as "<R", R in the figures' own format.
        for col in LAT_COLUMNS:
            tok = row[at[col]]
            v = lat[{"p99.9[ns]": "p99_9"}.get(col, col[:-4])]
            if (v < lat["resolution"]) != tok.startswith("<"):
                fail("case %s: %s %s (resolution %s) printed as %r"
                     % (c["name"], col, v, lat["resolution"], tok))
            if tok.startswith("<"):
                any_below = True
                if tok != "<" + fmt_ns(lat["resolution"]):
                    fail("case %s: %r is not '<' and the resolution %s in the figures' format"
                         % (c["name"], tok, lat["resolution"]))
        # The bandwidth column (io_bw, rpc_bw): MB/s as perftest counts them, 2^20 bytes.
        if test in BW_TESTS and c["name"].startswith(("io.", "rpc.")):
            bw = c["bw_MB_per_s"]
            want_bw = c["bytes"] * c["ops_per_s"] / 2**20
            if bw is None or abs(bw - want_bw) > 1e-6 * want_bw + 0.01:
                fail("case %s: bw_MB_per_s %s, want %s" % (c["name"], bw, want_bw))
            if abs(float(row[at["BW[MB/s]"]]) - want_bw) > 0.006 + 1e-4 * want_bw:
                fail("case %s: BW column %s, want %.2f" % (c["name"], row[at["BW[MB/s]"]], want_bw))
        elif c["bw_MB_per_s"] is not None:
            fail("case %s: a bandwidth outside io_bw's and rpc_bw's cases" % c["name"])
        # Means (ns/op over ~2048-op chunks, avg of the stamped ops) against the median: further
        # apart than 2x, the case says why, in JSON and in a note under its row.
        med = max(lat["p50"], lat["resolution"])
        hi = max(c["ns_per_op"], lat["avg"]) / med
        lo = 0 if c["at_resolution"] else lat["p50"] / c["ns_per_op"]
        notes = []
        for l in lines[rows[0] + 1:]:
            if l.split(" ")[0] in names or not l.strip().startswith("note:"):
                break
            notes.append(l.strip())
        spread = c["mean_vs_median"]
        if max(hi, lo) > SPREAD * 1.001:
            if not spread or not spread.get("reason") or abs(spread["factor"] - max(hi, lo)) > 0.01 * max(hi, lo):
                fail("case %s: means %.3gx the median and no reason in JSON: %s" % (c["name"], max(hi, lo), spread))
            if ("note: " + spread["reason"]) not in notes:
                fail("case %s: the reason is not under its row: %s" % (c["name"], notes))
        elif max(hi, lo) < SPREAD * 0.999 and spread is not None:
            fail("case %s: a reason though means and median agree (%.3gx): %s" % (c["name"], max(hi, lo), spread))
        if c["role"] == "rdmx" and c["allocs_per_op"] != 0:
            fail("rdmx case %s allocates" % c["name"])
    if any_below and not any(l.startswith("<R: below the timer's resolution") for l in lines):
        fail("figures printed as <R and no line saying what <R means")
    names = [c["name"] for c in cases]
    if doc["schema"] != 2:
        fail("schema %r, want 2" % doc["schema"])
    for prefix in EXPECT[test]:
        if not any(n.startswith(prefix) for n in names):
            fail("no case starting with %s in %s" % (prefix, names))
    if test.startswith("rpc_"):
        check_rpc(test, cases, table)
    if not hist:
        fail("empty histogram file")
    print("ok: %s, %d cases" % (test, len(cases)))


if __name__ == "__main__":
    main()
