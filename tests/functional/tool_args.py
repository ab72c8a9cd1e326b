#!/usr/bin/env python3
"""The tools' argument convention (rdmx/core/cli.hpp; blockd keeps it in C): getopt_long, so
`--opt value` and `--opt=value` mean the same; a bad argument is one line on stderr,
"TOOL: error: ...", then "try 'TOOL --help' for the options", and exit status 2.

Usage: tool_args.py TOOL PATH   (TOOL: blockd; rdmx-wqe is covered by tests/wqe/test_cli.cpp)"""
import os
import subprocess
import sys

CASES = {
    "blockd": {
        "ok": [["--qd", "4", "--max-io=2", "--blocks", "64", "--requests=200"],
               ["--qd=4", "--max-io", "2", "--blocks=64", "--requests", "200"],
               ["--qd=4", "--max-io=2", "--blocks=64", "--requests=200", "--isolate", "peer"],
               ["--qd=4", "--max-io=2", "--blocks=64", "--requests=200", "--metadata=16"]],
        "bad": [["--bogus"], ["--qd"], ["--qd", "0"], ["--qd=64"], ["--max-io", "x"],
                ["--blocks", "-1"], ["stray"], ["--role", "server"], ["--role", "sideways"],
                ["--wire", "tmp:x", "--role", "server"], ["--wire", "shm:x"],
                ["--qd", "8", "--max-io", "16", "--blocks", "100"],
                ["--listen", "127.0.0.1:1"], ["--role", "client", "--listen", "127.0.0.1:1"],
                ["--role", "server", "--peer", "127.0.0.1:1"],
                ["--role", "client", "--peer", "127.0.0.1:1", "--wire", "shm:x"],
                ["--isolate", "pd"], ["--clients", "9"], ["--clients", "2"],
                ["--role", "server", "--listen", "127.0.0.1:1", "--clients", "2"],
                ["--metadata", "2"], ["--metadata", "129"], ["--metadata", "x"],
                ["--cm"], ["--role", "server", "--listen", "127.0.0.1:0", "--cm"],
                ["--role", "client", "--peer", "127.0.0.1:1", "--cm", "--device", "emu-inline"],
],
        # --help names each of these options.
        "help": ["--cm", "--isolate", "--metadata", "--max-refusals"],
        # mlx5 with --cm on a host where rdma_cm finds no RDMA device: exit 3 ("no such
        # device") with one line, before any client is awaited.
        "nodev": [["--device", "mlx5", "--cm", "--role", "server", "--listen", "127.0.0.1:0"]],
    },
}


def main(tool, path):
    for args in CASES[tool]["ok"]:
        p = subprocess.run([path] + args, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise SystemExit(f"{tool} {' '.join(args)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        print(f"{tool} {' '.join(args)}: exit 0")
    for args in CASES[tool]["bad"]:
        p = subprocess.run([path] + args, capture_output=True, text=True, timeout=60)
        lines = p.stderr.splitlines()
        want_try = f"try '{tool} --help' for the options"
        if (p.returncode != 2 or len(lines) != 2 or not lines[0].startswith(f"{tool}: error: ")
                or lines[1] != want_try):
            raise SystemExit(f"{tool} {' '.join(args)}: exit {p.returncode} (want 2) and "
                             f"{len(lines)} stderr lines (want '{tool}: error: ...' and "
                             f"\"{want_try}\", never the usage):\n{p.stderr}")
        print(f"{tool} {' '.join(args)}: exit 2: {lines[0]}")
    p = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    for opt in CASES[tool].get("help", []):
        if p.returncode != 0 or opt not in p.stdout:
            raise SystemExit(f"{tool} --help: exit {p.returncode}, {opt} not listed:\n{p.stdout}")
    print(f"{tool} --help lists {', '.join(CASES[tool].get('help', []))}")
    for args in CASES[tool].get("nodev", []):
        if os.path.exists("/dev/infiniband/rdma_cm"):
            print(f"{tool} {' '.join(args)}: skipped (this host has rdma_cm)")
            continue
        p = subprocess.run([path] + args, capture_output=True, text=True, timeout=60)
        lines = p.stderr.splitlines()
        if p.returncode != 3 or len(lines) != 1 or "no such device" not in lines[0].lower():
            raise SystemExit(f"{tool} {' '.join(args)}: exit {p.returncode} (want 3) and "
                             f"{len(lines)} stderr lines (want one naming the device):\n{p.stderr}")
        print(f"{tool} {' '.join(args)}: exit 3: {lines[0]}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
