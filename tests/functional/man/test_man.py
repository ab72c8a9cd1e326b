#!/usr/bin/env python3
"""The man page of a tool says what its --help says (suite 'functional').

Usage: test_man.py TOOL_BINARY MAN_PAGE
The page is rendered (groff via `man -l`, or the raw roff when man is missing) and every option
--help lists must appear in it, and every option the page lists must be one --help knows: a
page built from an older binary, or edited by hand, fails."""
import re
import shutil
import subprocess
import sys

OPT = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def main(binary, page):
    h = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    if h.returncode != 0:
        sys.exit(f"{binary} --help: exit {h.returncode}\n{h.stderr}")
    help_opts = set(OPT.findall(h.stdout + h.stderr))
    if not help_opts:
        sys.exit(f"{binary} --help lists no option:\n{h.stdout}")
    if shutil.which("man"):
        r = subprocess.run(["man", "-l", "-Tutf8", page], capture_output=True, text=True,
                           timeout=30, env={"MANWIDTH": "200", "PATH": "/usr/bin:/bin"})
        text = re.sub(r".\x08", "", r.stdout)
    else:
        text = open(page).read().replace("\\-", "-")
    text = text.replace("\u2010", "-").replace("\u2212", "-")
    page_opts = set(OPT.findall(text))
    missing = sorted(help_opts - page_opts)
    extra = sorted(page_opts - help_opts)
    if missing or extra:
        sys.exit(f"{page} and {binary} --help disagree: only in --help {missing}, "
                 f"only in the page {extra}")
    # A reader of the installed page has no source tree: no path of it.
    src = re.compile(r"(^|[\s(`\"])(doc|apps|lib|drivers|tests|scripts|examples)/")
    hits = [l for l in text.splitlines() if src.search(l)]
    if hits:
        sys.exit(f"{page} names a source path: {hits[:3]}")
    # help2man made a SYNOPSIS from "Usage:" and an "Exit status:" subsection whose codes are
    # paragraphs of their own (not run into the text before them).
    roff = open(page).read()
    if '.SH SYNOPSIS' not in roff:
        sys.exit(f"{page} has no SYNOPSIS (--help's first line must be 'Usage: ...')")
    if not re.search(r'^\.SS "?Exit status:?"?$', roff, re.M):
        sys.exit(f"{page} has no 'Exit status:' subsection")
    if re.search(r"^\S.*[a-z]\s+[Ee]xit status", text, re.M):
        sys.exit(f"{page}: the exit status runs into the paragraph before it")
    print(f"{page}: {len(help_opts)} options, same as --help; synopsis, exit status, no paths")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
