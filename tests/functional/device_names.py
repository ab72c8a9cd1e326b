#!/usr/bin/env python3
"""One device grammar through every entry point (lib/endpoint/include/rdmx/endpoint/device.hpp).

Usage: device_names.py TOOL PATH
TOOL is rdmafwd, rdmx-perf or blockd (the C API is covered by tests/capi/test_capi.c). Each
accepts emu-threaded (the meaning of plain "emu") and refuses a name that names no device, an
unknown emu mode and a verbs name alike: exit 3 and one error line naming the device, in the
tool's words (no C API call in it); the unknown emu mode's line lists the names, the RoCE v2
wire's spelling (NAME@roce:ADDR) among them, and --help names emu@roce:ADDR (rdmafwd, blockd:
the tools that take a wire)."""
import subprocess
import sys

EAL = ["--no-huge", "-m", "256"]
NOISE = ("EAL:", "TELEMETRY:", "rdmx INFO:")


def run(tool, path, device, ok_case):
    if tool == "rdmafwd":
        args = [path, "-l", "0-1"] + EAL + ["--", "--device", device, "--duration", "0.3"]
    elif tool == "rdmx-perf":
        args = [path] + EAL + ["--", "--test", "umr_lat", "--device", device, "--iterations", "200",
                               "--warmup", "10", "--rounds", "1", "--stamped", "100", "--pages", "1"]
    else:
        args = [path, "--device", device, "--requests", "200"]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def main(tool, path):
    for device in ["emu-threaded", "emu"]:
        p = run(tool, path, device, True)
        if p.returncode != 0:
            raise SystemExit(f"{tool} --device {device}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    for device in ["bogus_dev9", "emu-frob", "mlx5_7"]:
        p = run(tool, path, device, False)
        lines = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith(NOISE)]
        if p.returncode != 3 or len(lines) != 1 or device not in lines[0]:
            raise SystemExit(f"{tool} --device {device}: exit {p.returncode} (want 3) and "
                             f"{len(lines)} error lines (want 1 naming it):\n{p.stderr}")
        if not lines[0].startswith(f"{tool}: ") or any(c in lines[0] for c in ("&", "rdmx_")):
            raise SystemExit(f"{tool} --device {device}: the line should be the tool's words, "
                             f"not a C API call: {lines[0]}")
        if device == "emu-frob" and "@roce:ADDR" not in lines[0]:
            raise SystemExit(f"{tool} --device {device}: the list of names lacks the RoCE v2 "
                             f"wire's spelling (NAME@roce:ADDR): {lines[0]}")
        print(f"{tool} --device {device}: exit 3: {lines[0]}")
    # rdmx-perf opens its devices as an in-process pair, which takes no wire: not its to name.
    h = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    if tool != "rdmx-perf" and "emu@roce:ADDR" not in h.stdout:
        raise SystemExit(f"{tool} --help does not name emu@roce:ADDR:\n{h.stdout}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
