#!/usr/bin/env python3
"""Runs the commands the guides show, where they run on emu, and checks their exit status.

Usage: test_docs.py SOURCE_ROOT BUILD_ROOT

A code block is runnable when the line before its opening fence is an HTML comment
`<!-- docs-test -->` (or `<!-- docs-test exit=N -->`: the status every command of the block must
exit with unless the block says otherwise). In the block, each line starting with `$ ` is a
command and the lines after it are its output, not compared (they are a real run's, timings
differ) unless the marker says `output` (`<!-- docs-test output -->`, for deterministic output):
then stdout and stderr must be those lines, where `...` in a line stands for any text and a line
that is only `...` for any number of lines. `$ echo $?` followed by a number gives the previous
command's exit status. Commands run
under `sh -c` in a scratch directory where `build` is the build tree, with the tools
(rdmafwd, rdmx-perf, rdmx-wqe) on PATH, each with a 60 s bound."""
import glob
import os
import re
import subprocess
import sys
import tempfile

MARK = re.compile(r"^<!--\s*docs-test(?:\s+exit=(\d+))?(\s+output)?\s*-->\s*$")


def output_pattern(expected):
    """The regex a command's output must match: the guide's lines, `...` as a wildcard."""
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*".join(re.escape(x) for x in line.rstrip().split("...")) + r"[ \t]*\n")
    return re.compile("".join(parts))


def blocks(path):
    """(line number, [(command, expected exit, expected output or None)]) for each marked
    block."""
    lines = open(path).read().splitlines()
    out = []
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i])
        if not m or i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            i += 1
            continue
        default = int(m.group(1) or 0)
        compare = bool(m.group(2))
        start = i + 2
        j = start
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        body = lines[start:j]
        cmds = []
        k = 0
        while k < len(body):
            if body[k].startswith("$ "):
                cmd = body[k][2:]
                if cmd.strip() == "echo $?":
                    if cmds and k + 1 < len(body) and body[k + 1].strip().isdigit():
                        cmds[-1] = (cmds[-1][0], int(body[k + 1].strip()), cmds[-1][2])
                else:
                    expected = []
                    while k + 1 < len(body) and not body[k + 1].startswith("$ "):
                        k += 1
                        expected.append(body[k])
                    cmds.append((cmd, default, expected if compare else None))
            k += 1
        if not cmds:
            raise SystemExit(f"{path}:{i + 1}: a docs-test block with no `$ ` command")
        out.append((i + 1, cmds))
        i = j + 1
    return out


def main():
    src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    guides = sorted(glob.glob(os.path.join(src, "doc", "guides", "*.md"))) + [os.path.join(src, "README.md")]
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(os.path.join(build, "apps", t) for t in ("rdmafwd", "rdmx-perf", "rdmx-wqe")) \
        + os.pathsep + env.get("PATH", "")
    ran, failed = 0, []
    with tempfile.TemporaryDirectory() as scratch:
        os.symlink(build, os.path.join(scratch, "build"))
        for g in guides:
            for line, cmds in blocks(g):
                for cmd, want, expected in cmds:
                    where = f"{os.path.relpath(g, src)}:{line}"
                    try:
                        p = subprocess.run(["sh", "-c", cmd], cwd=scratch, env=env, capture_output=True,
                                           text=True, timeout=60)
                        rc = p.returncode
                    except subprocess.TimeoutExpired:
                        rc, p = "timeout", None
                    ran += 1
                    got = (p.stdout + p.stderr) if p else ""
                    if got and not got.endswith("\n"):
                        got += "\n"
                    if rc != want:
                        tail = (p.stderr.strip().splitlines() or [""])[-1] if p else ""
                        failed.append(f"{where}: `{cmd[:80]}` exited {rc}, the guide says {want}: {tail}")
                    elif expected is not None and not output_pattern(expected).fullmatch(got):
                        failed.append(f"{where}: `{cmd[:80]}` printed what the guide does not "
                                      f"show:\n{got}")
                    else:
                        print(f"ok {where}: exit {rc}: {cmd[:80]}")
    for f in failed:
        print("FAIL " + f)
    if ran == 0:
        print("FAIL: no runnable block found (is the <!-- docs-test --> marker gone?)")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
