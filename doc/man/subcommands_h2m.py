#!/usr/bin/env python3
"""A help2man --include file with each subcommand's own --help, for a tool whose --help lists
its subcommands only (rdmx-wqe: encode, decode, exec), and a SEE ALSO naming the installed guide.

Usage: subcommands_h2m.py TOOL_BINARY OUT GUIDE_PATH SUBCOMMAND...
Each subcommand's text goes in a section COMMANDS as preformatted roff (.nf/.fi), so its own
layout (tables, examples) survives; roff's control characters are escaped."""
import os
import subprocess
import sys


def roff_escape(line):
    line = line.replace("\\", "\\e")
    return "\\&" + line if line.startswith((".", "'")) else line


def main(binary, out, guide, subs):
    tool = os.path.basename(binary)
    parts = ["[COMMANDS]"]
    for sub in subs:
        r = subprocess.run([binary, sub, "--help"], capture_output=True, text=True, timeout=30,
                           check=True)
        parts += [f'.SS "{tool} {sub}"', ".nf"] + [roff_escape(l) for l in r.stdout.splitlines()]
        parts += [".fi"]
    parts += ["[SEE ALSO]", ".BR rdmafwd (1),", ".BR rdmx-perf (1),", ".BR rdmx (3).", ".PP",
              f"The {tool} guide, with examples:", f".I {guide}"]
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
