#!/usr/bin/env python3
"""rdmx(3) names every function of the C headers, and nothing else (suite 'functional').

Usage: test_rdmx3.py RDMX_3 DOCDIR HEADER... (rdmx.h and rdmx_rpcrdma.h)
Every function declared in a header must appear in the page as \\fBrdmx_name\\fR, and every
function the page names must be declared: a call added to the header without the page (or
renamed) fails. The page must name the guides where meson installs them (DOCDIR/guides), with
no placeholder left."""
import re
import shutil
import subprocess
import sys


def header_functions(path):
    s = open(path).read()
    s = re.sub(r"/\*.*?\*/", "", s, flags=re.S)
    s = re.sub(r"//[^\n]*", "", s)
    s = re.sub(r"^\s*#.*$", "", s, flags=re.M)  # macros (RDMX_VERSION_... use no call syntax)
    return set(re.findall(r"\b(rdmx_[a-z0-9_]+)\s*\(", s))


def main(page, docdir, *headers):
    declared = set().union(*(header_functions(h) for h in headers))
    header = " and ".join(headers)
    if len(declared) < 10:
        sys.exit(f"{header}: found only {sorted(declared)}: the parser is wrong")
    roff = open(page).read()
    named = set(re.findall(r"\\fB(rdmx_[a-z0-9_]+)\\fR", roff))
    missing = sorted(declared - named)
    extra = sorted(named - declared)
    if missing or extra:
        sys.exit(f"{page} and {header} disagree: not in the page {missing}, "
                 f"not in the header {extra}")
    if "@" in re.sub(r"\\fB[^\\]*\\fR", "", roff).replace("<rdmx/rdmx.h>", ""):
        if "@DOCDIR@" in roff:
            sys.exit(f"{page}: @DOCDIR@ left unconfigured")
    # As a reader sees it (man -l, 80 columns): every name whole, none broken by hyphenation.
    if shutil.which("man"):
        r = subprocess.run(["man", "-l", "-Tutf8", page], capture_output=True, text=True,
                           timeout=30, env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin"})
        text = re.sub(r".\x08", "", r.stdout)
        broken = sorted(n for n in declared if not re.search(r"\b%s\b" % n, text))
        if broken:
            sys.exit(f"{page} rendered at 80 columns does not show {broken} whole")
    want = docdir.rstrip("/") + "/guides"
    if want not in roff:
        sys.exit(f"{page} does not name the installed guides ({want})")
    if "/usr/share/doc/rdmx" in roff and not want.startswith("/usr/share/doc/rdmx"):
        sys.exit(f"{page} names /usr/share/doc/rdmx, but the guides install to {want}")
    print(f"{page}: {len(declared)} functions, as in {header}; guides at {want}")


if __name__ == "__main__":
    main(*sys.argv[1:])
