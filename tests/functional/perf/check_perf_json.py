#!/usr/bin/env python3
"""Smoke test of rdmx-perf: runs one test with tiny iterations and checks that the JSON it writes
is well formed and has the expected keys (never the timings). Usage: check_perf_json.py BINARY TEST"""
import json
import subprocess
import sys
import tempfile

CASE_KEYS = {"name", "unit", "role", "pages", "bytes", "burst", "ops", "ns_per_op",
             "best_round_ns_per_op", "cycles_per_op", "ops_per_s", "allocs_per_op",
             "syscalls_per_op", "round_ns_per_op", "latency_ns", "ratios", "extra", "histogram"}
LAT_KEYS = {"samples", "min", "p50", "avg", "stdev", "p99", "p99_9", "max", "resolution"}
CONFIG_KEYS = {"cpu_model", "online_cpus", "tsc_hz", "core_hz", "hugepages", "measure_cpu",
               "device_thread_cpu", "cores_used", "allocs_check", "syscalls_check"}
EXPECT = {  # test -> (case name prefixes that must be there, needs an rdmx case with ratios)
    "cache": ["window_cache.single", "rte_mempool.single", "rte_ring.spsc.single",
              "rte_ring.mpmc.single", "window_cache.burst32", "rte_mempool.burst32"],
    "umr": ["umr.map_unmap.p1", "umr.map_unmap.p64", "rte_mempool.single", "syscall+pin.floor"],
    "umr_lat": ["umr_lat.map.p", "syscall+pin.floor"],
    "io_lat": ["io.write.map_unmap", "io.write.register_once", "io.read.map_unmap",
               "io.read.register_once", "syscall+pin.floor"],
    "io_bw": ["io.write.map_unmap", "io.write.register_once", "syscall+pin.floor"],
}
ARGS = {"umr": ["--pages", "1,64"], "io_lat": ["--pages", "1"], "io_bw": ["--pages", "1"]}


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
    tests = doc["tests"]
    if len(tests) != 1 or tests[0]["test"] != test:
        fail("tests array")
    cases = tests[0]["cases"]
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
        # A figure below the timer's resolution is printed as "<resolution", never as 0.00.
        row = [l for l in table.splitlines() if l.startswith(c["name"] + " ")]
        if not row:
            fail("case %s not in the printed table" % c["name"])
        cols = row[0].split()
        if lat["p50"] < lat["resolution"] and not cols[4].startswith("<"):
            fail("case %s: p50 %s below the resolution %s printed as %r"
                 % (c["name"], lat["p50"], lat["resolution"], cols[4]))
        if c["role"] == "rdmx" and c["allocs_per_op"] != 0:
            fail("rdmx case %s allocates" % c["name"])
    names = [c["name"] for c in cases]
    for prefix in EXPECT[test]:
        if not any(n.startswith(prefix) for n in names):
            fail("no case starting with %s in %s" % (prefix, names))
    if not hist:
        fail("empty histogram file")
    print("ok: %s, %d cases" % (test, len(cases)))


if __name__ == "__main__":
    main()
