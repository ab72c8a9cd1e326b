#!/usr/bin/env python3
"""Functional tests of rdmafwd over the emulated device (suite 'functional').

Usage: test_rdmafwd.py PATH_TO_RDMAFWD CASE
Each case runs the real binary (EAL + threaded emu) for about a second and checks its exit
status and its --json summary (or its text output for the prompt cases)."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

EAL = ["-l", "0-1", "--no-huge", "-m", "256"]


def run(binary, app_args, eal=EAL, stdin=None, timeout=40):
    cmd = [binary] + eal + ["--"] + app_args
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    return p


def summary(p):
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    assert lines, "no JSON line on stdout:\n" + p.stdout + p.stderr
    s = json.loads(lines[-1])
    assert s["type"] == "summary", s
    return s


def check(cond, msg, p=None):
    if not cond:
        if p is not None:
            msg += "\n--- stdout ---\n" + p.stdout + "\n--- stderr ---\n" + p.stderr
        raise AssertionError(msg)


def mode(binary, fwd, extra=()):
    p = run(binary, ["--fwd", fwd, "--duration", "1.2", "--json", "--stats-period", "0.5"] + list(extra))
    check(p.returncode == 0, f"fwd {fwd}: exit {p.returncode}", p)
    s = summary(p)
    t = s["total"]
    check(t["ios"] > 0 and t["bytes"] > 0, f"fwd {fwd}: no traffic: {t}", p)
    check(t["errors"]["total"] == 0, f"fwd {fwd}: errors: {t['errors']}", p)
    # Every rkey the lanes use is their own: the responders refuse nothing (emu counts per QP).
    check(t["errors"]["refused_remote"] == 0 and
          sum(l["errors"]["refused_remote"] for l in s["lanes"]) == 0,
          f"fwd {fwd}: refused remote accesses in a clean run: {t['errors']}", p)
    check(t["latency_us"]["count"] > 0 and t["latency_us"]["p50"] > 0, "no latency samples", p)
    check(t["maps"] > 0, "no maps", p)
    lat = t["latency_us"]
    check(0 < lat["min"] <= lat["p50"] <= lat["max"] and lat["min"] <= lat["avg"] <= lat["max"]
          and lat["stdev"] >= 0, f"latency figures out of order: {lat}", p)
    want_kind = "mapped" if fwd == "umr" else "posted" if "emu-sink" in extra else "moved"
    check(s["bytes_kind"] == want_kind, f"bytes_kind {s['bytes_kind']!r}, want {want_kind!r}", p)
    check(s["since"] == "start" and t["in_flight"] == 0, "summary: since/in_flight", p)
    periodic = [json.loads(l) for l in p.stdout.splitlines() if '"type":"periodic"' in l]
    check(len(periodic) >= 1, "no periodic line with --stats-period", p)
    # I/Os in flight while the lanes run are in flight, not lost, and no error.
    for per in periodic:
        check(per["total"]["faults"]["lost_ios"] == 0 and per["total"]["errors"]["total"] == 0,
              f"periodic line reports lost I/Os or errors: {per['total']}", p)
    if fwd == "rpc" and "--rpc-remote-invalidate" not in extra:
        check(t["remote_invalidations"] == t["ios"], "rpc: replies did not invalidate every window", p)
        check(t["local_invalidations"] == 0, f"rpc: local invalidations: {t}", p)
    print(f"fwd {fwd}: {t['ios']} I/Os, {t['ios_per_s']:.0f}/s, p50 {t['latency_us']['p50']:.1f} us")
    return s


def case_corrupt(binary):
    # A count, not a duration: the 200th RPC comes however slow the machine (or TSan) is.
    p = run(binary, ["--fwd", "rpc", "--io-count", "450", "--json", "--corrupt-every", "200"])
    check(p.returncode == 1, f"corrupted payload: exit {p.returncode}, want 1", p)
    t = summary(p)["total"]
    check(t["corrupted"] > 0 and t["errors"]["verify"] > 0, f"not caught: {t}", p)
    check("verification failed" in p.stderr, "no verification message", p)
    # The same run without --corrupt-every is clean (the test above is not a false alarm).
    print(f"caught {t['errors']['verify']} of {t['corrupted']} corrupted payloads")


def case_metadata(binary):
    # --metadata 8: data and metadata of every block through interleaved windows on both sides.
    t = mode(binary, "rpc", ["--metadata", "8"])["total"]
    # Interleaved maps count their pages too (length in pages): each I/O maps 16 blocks of
    # 4096 + 8 bytes on both sides, 17 pages' worth each.
    check(t["pages_mapped"] >= 16 * t["maps"], f"--metadata: maps {t['maps']}, pages mapped "
          f"{t['pages_mapped']}")
    # A flipped metadata byte (the data stays intact) is caught by the metadata check alone.
    p = run(binary, ["--fwd", "rpc", "--metadata", "8", "--io-count", "450", "--json",
                     "--corrupt-every", "200"])
    check(p.returncode == 1, f"corrupted metadata: exit {p.returncode}, want 1", p)
    t = summary(p)["total"]
    check(t["corrupted"] > 0 and t["errors"]["verify"] > 0, f"not caught: {t}", p)
    # Two processes over the shared-memory wire, meeting on loopback: both run --metadata 16
    # (the session's hello checks they agree).
    c, _, cli = two_process(binary, f"fwdmd{os.getpid()}", ["--io-count", "1500"],
                            sizes=["--metadata", "16"])
    check(c["ios"] == 1500 and c["errors"]["total"] == 0, f"client: {c}", cli)
    print(f"metadata: caught {t['errors']['verify']} of {t['corrupted']} corrupted metadata; "
          f"two processes {c['ios']} RPCs")


def case_rpc_local_inv(binary):
    # --rpc-remote-invalidate off: the client's RFC 8797 private data does not offer remote
    # invalidation, so the server replies with plain SENDs and the client invalidates each call's
    # window itself; no reply is handed on before that invalidate completed (early_replies, an
    # error, checked by the engine against the client's send queue).
    t = mode(binary, "rpc", ["--rpc-remote-invalidate", "off"])["total"]
    check(t["remote_invalidations"] == 0 and t["local_invalidations"] == t["ios"] == t["unmaps"],
          f"remote-invalidated {t['remote_invalidations']}, local-invalidated "
          f"{t['local_invalidations']}, unmaps {t['unmaps']}, I/Os {t['ios']}")
    check(t["errors"]["early_replies"] == 0, f"early replies: {t['errors']}")
    p = run(binary, ["--fwd", "rpc", "--duration", "0.5", "--rpc-remote-invalidate", "on"])
    check(p.returncode == 0, f"--rpc-remote-invalidate on: exit {p.returncode}", p)
    print(f"rpc local invalidation: {t['ios']} calls, every window invalidated by the client")


def case_bad_handle(binary):
    # The file handle is the server's, handed out at setup; a client that forges it (hidden
    # --forge-handle-every N: a byte flipped in every N-th call) gets NFS3ERR_BADHANDLE in a
    # well-formed reply and is served on: nothing moved for those calls, no error on either side.
    # Replies of no slot are written into the buffer of the receive slot the call came in, again
    # only after the previous one's SEND completed (a rewrite while in flight counts an I/O error).
    for extra, every in ((["--io-depth", "1"], 1), ([], 3), (["--metadata", "8"], 2)):
        p = run(binary, ["--fwd", "rpc", "--duration", "0.7", "--json", "--forge-handle-every",
                         str(every)] + extra)
        check(p.returncode == 0, f"forged every {every} {extra}: exit {p.returncode}", p)
        t = summary(p)["total"]
        bad = t["errors"]["bad_handles"]
        check(t["ios"] > 0 and bad == t["ios"] // every and t["errors"]["total"] == 0 and
              t["errors"]["refused_requests"] == 0,
              f"forged every {every} {extra}: {t['ios']} calls, {bad} bad handles, {t['errors']}", p)
        if every == 1:
            check(t["bytes"] == 0 and t["remote_invalidations"] == 0, f"moved data: {t}", p)
    print("bad handle: every forged handle answered NFS3ERR_BADHANDLE, the client served on")


def case_twin_calls(binary):
    # A client ignoring the protocol (hidden --forge-twin-every N: every N-th READ call sent twice
    # for its slot, back to back, under two xids) makes the server receive a second call for a
    # slot before the first reply's SEND completed. The server must not rewrite that reply's
    # buffer (nor the payload's header) while the device may still read it: the second call
    # waits (calls_waited) and is served after; both replies arrive intact, nothing fails. A
    # rewrite in flight shows as an I/O error on the server and a reply the client cannot match.
    p = run(binary, ["--fwd", "rpc", "--duration", "0.7", "--json", "--forge-twin-every", "3",
                     "--rpc-remote-invalidate", "off"])
    check(p.returncode == 0, f"twin calls: exit {p.returncode}", p)
    t = summary(p)["total"]
    check(t["ios"] > 0 and t["errors"]["total"] == 0 and t["errors"]["refused_requests"] == 0,
          f"twin calls: {t['ios']} calls, {t['errors']}", p)
    check(t["calls_waited"] > 0, f"twin calls: no call waited for its slot: {t}", p)
    p = run(binary, ["--fwd", "rpc", "--duration", "0.2", "--forge-twin-every", "3"])
    check(p.returncode == 2 and "--rpc-remote-invalidate off" in p.stderr,
          f"--forge-twin-every without --rpc-remote-invalidate off: exit {p.returncode}", p)
    print(f"twin calls: {t['ios']} calls, {t['calls_waited']} waited for their slot, no error")


def case_credits(binary):
    # RFC 8166 3.3.1: a client has the credits granted in the last reply, one before the first.
    # A client ignoring them (hidden --forge-credits: io-depth calls at once, the first a WRITE,
    # whose reply waits for the server's RDMA READ) sends calls the server never granted: it
    # refuses the second (refused_requests) and serves that client no more. A server checking
    # against what it could grant now (io-depth) would serve them all.
    p = run(binary, ["--fwd", "rpc", "--duration", "0.3", "--json", "--forge-credits"])
    t = summary(p)["total"]
    check(t["errors"]["refused_requests"] == 1 and t["ios"] <= 1,
          f"credits ignored: {t['ios']} calls served, {t['errors']}", p)
    print(f"credits: the call past the first grant refused ({t['errors']['refused_requests']})")


def case_no_verify_corrupt(binary):
    # --no-verify: nothing is checked, so the corruption goes unnoticed (exit 0).
    p = run(binary, ["--fwd", "rpc", "--io-count", "450", "--json", "--corrupt-every", "200",
                     "--no-verify"])
    check(p.returncode == 0, f"exit {p.returncode}", p)
    t = summary(p)["total"]
    check(t["corrupted"] > 0 and t["errors"]["verify"] == 0, f"corrupted unnoticed? {t}", p)


def case_faults(binary):
    # --fault-every: emu faults (error CQE mid-burst, QP to error, peer unreachable for a while,
    # delayed completions) injected while forwarding; every one is recovered (both ends of the
    # connection back to RTS), every I/O is completed or counted as failed once, verification
    # finds nothing, and the run exits 0. umr counts its I/Os from the core's UMR completions:
    # after a recovery its `recovered` hook rebases that count (without it the lane stalls).
    # The data engines run a count, not a duration: their three faults come however slow the
    # machine (or TSan) is; umr (no wire, thousands of I/Os a second even under TSan) runs 1.5 s.
    for fwd in ("rpc", "relay", "write", "umr"):
        bound = ["--duration", "1.5"] if fwd == "umr" else ["--io-count", "1000"]
        p = run(binary, ["--fwd", fwd, "--json", "--fault-every", "300", "--fault-seed", "7"] +
                bound)
        check(p.returncode == 0, f"fwd {fwd} with faults: exit {p.returncode}", p)
        t = summary(p)["total"]
        f = t["faults"]
        check(f["injected"] > 0, f"fwd {fwd}: no fault injected: {f}", p)
        check(f["recovered"] == f["injected"], f"fwd {fwd}: not every fault recovered: {f}", p)
        check(f["lost_ios"] == 0, f"fwd {fwd}: lost I/Os: {f}", p)
        check(f["unrecovered_lanes"] == 0 and f["abandoned_ios"] == 0, f"fwd {fwd}: {f}", p)
        check(f["issued"] == t["ios"] + f["failed_ios"],
              f"fwd {fwd}: I/Os not accounted exactly once: ios {t['ios']}, {f}", p)
        check(t["errors"]["verify"] == 0, f"fwd {fwd}: verification failures: {t['errors']}", p)
        check(t["errors"]["total"] == 0, f"fwd {fwd}: errors: {t['errors']}", p)
        check(t["ios"] > 0 and t["errors"]["wqe"] > 0, f"fwd {fwd}: no traffic or no error CQE", p)
        print(f"fwd {fwd}: {f['injected']} faults injected, {f['recovered']} recovered, "
              f"{t['ios']} I/Os completed, {f['failed_ios']} failed by faults, syndromes "
              f"{t['errors']['by_syndrome']}")


PROMPT_SCRIPT = """help
show config
start
sleep 1
show stats
stop
show windows
set fwd umr
frobnicate now
set pages 999
set pages 8
start
sleep 1
stop
set fwd relay
start
sleep 1
stop
quit
"""


def check_prompt_output(p, want_exit=0):
    out = p.stdout
    check(p.returncode == want_exit, f"exit {p.returncode}, want {want_exit}", p)
    for want in ["forwarding started: fwd rpc", "forwarding stopped", "every window in exactly one place: ok",
                 "error: unknown command 'frobnicate'", "larger than the windows", "pages set to 8",
                 "fwd set to umr", "forwarding started: fwd umr", "forwarding started: fwd relay",
                 "emu PRM checker reports: 0", "commands (TAB completes)"]:
        check(want in out, f"missing {want!r}", p)
    check("INVARIANT VIOLATED" not in out, "census failed", p)


def case_prompt_stdin(binary):
    p = run(binary, ["-i"], stdin=PROMPT_SCRIPT)
    check_prompt_output(p)


def case_prompt_terminal(binary):
    # On a terminal (a pty here) the line editor runs; a line that does not parse gets the same
    # error as in scripts, listing what is valid, and the prompt stays.
    import pty
    import select
    master, slave = pty.openpty()
    p = subprocess.Popen([binary] + EAL + ["--", "-i"], stdin=slave, stdout=slave,
                         stderr=subprocess.PIPE)
    os.close(slave)
    out = b""

    def read_until(pat, timeout=30, since=0):
        nonlocal out
        end = time.time() + timeout
        while time.time() < end and pat not in out[since:]:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    out += os.read(master, 4096)
                except OSError:
                    break
        return pat in out[since:]

    try:
        check(read_until(b"rdmafwd> "), f"no prompt: {out[-400:]!r}")
        os.write(master, b"set fwd io\r")
        check(read_until(b"error: option --fwd: unknown mode 'io' (one of umr, write, read, rpc, relay)"),
              f"no error listing the modes: {out[-400:]!r}")
        os.write(master, b"frobnicate\r")
        check(read_until(b"error: unknown command 'frobnicate'"), f"unknown: {out[-400:]!r}")
        # The prompt comes back after the error (it may arrive in a later read).
        err_at = out.rfind(b"error: unknown command")
        check(read_until(b"rdmafwd> ", since=err_at), f"the prompt did not stay: {out[-200:]!r}")
        os.write(master, b"quit\r")
        rc = p.wait(timeout=30)
        check(rc == 0, f"quit: exit {rc}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)


def case_hugepage_notice(binary):
    # Without memory options and without free hugepages, rdmafwd falls back to --no-huge and
    # says so exactly once.
    free = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("HugePages_Free:"):
                free = int(line.split()[1])
    # A count, not a duration: a 0.2 s run under TSan on a busy machine completed no I/O.
    p = run(binary, ["--io-count", "64"], eal=["-l", "0-1"])
    check(p.returncode == 0, f"exit {p.returncode}", p)
    n = sum("no free hugepages" in l for l in (p.stdout + p.stderr).splitlines())
    check(n == (0 if free else 1), f"the no-hugepage notice appeared {n} times (free {free})", p)


def case_prompt_latency_reset(binary):
    # A run's latency extremes do not survive `start`: a 16-page run (warm-up included), then a
    # 1-page run of 300 RPCs. With fewer than 1000 samples p99.9 is the top bucket's value, so
    # the second run's max must equal it (it read the first run's max, from a higher bucket).
    # The second run ends by itself at its 300th RPC; the sleep only has to outlast it (under
    # TSan, with a retransmission stall of ~1.1 s, it took 2.3 s).
    script = "start\nsleep 1\nset pages 1\nstart\nsleep 4\nshow stats\nquit\n"
    p = run(binary, ["--io-count", "300", "-i", "--json"], stdin=script)
    check(p.returncode == 0, f"exit {p.returncode}", p)
    docs = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    stats = [d for d in docs if d["type"] in ("stats", "summary")]
    check(len(stats) >= 2, f"want the second run's statistics, got {len(stats)} documents", p)
    lat = stats[-1]["total"]["latency_us"]
    check(stats[-1]["total"]["ios"] == 300 and lat["count"] == 300, f"second run: {lat}", p)
    check(lat["min"] <= lat["p50"] <= lat["max"] <= lat["p99_9"] + 1e-6,
          f"the second run shows a maximum no sample of it reached: {lat}", p)
    print(f"latency after start: p99.9 {lat['p99_9']:.1f} us, max {lat['max']:.1f} us")


def case_prompt_reset(binary):
    # `start` resets the statistics (an rpc run's remote invalidations do not reach the umr run's
    # figures), `clear stats` too, and each says since when it counts.
    script = "start\nsleep 1\nstop\nset fwd umr\nstart\nsleep 1\nstop\nclear stats\nshow stats\nquit\n"
    p = run(binary, ["-i", "--json"], stdin=script)
    check(p.returncode == 0, f"exit {p.returncode}", p)
    docs = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    stats = [d for d in docs if d["type"] == "stats"]
    check(len(stats) == 3, f"want 3 stats documents (stop, stop, show stats), got {len(stats)}", p)
    rpc, umr, cleared = stats
    check(rpc["fwd"] == "rpc" and rpc["total"]["remote_invalidations"] > 0, f"rpc run: {rpc}", p)
    check(umr["fwd"] == "umr" and umr["since"] == "start", f"umr run: {umr}", p)
    check(umr["total"]["remote_invalidations"] == 0 and umr["total"]["ios"] > 0,
          f"the umr run carries the rpc run's counters: {umr['total']}", p)
    check(cleared["since"] == "clear stats" and cleared["total"]["ios"] == 0, f"cleared: {cleared}", p)
    # Text form: the label.
    p = run(binary, ["-i"], stdin="start\nsleep 1\nstop\nquit\n")
    check("rdmafwd statistics since start" in p.stdout, "no 'since start' label", p)


def case_prompt_file(binary):
    with tempfile.NamedTemporaryFile("w", suffix=".cmds", delete=False) as f:
        f.write("# rdmafwd commands\n" + PROMPT_SCRIPT)
        path = f.name
    try:
        p = run(binary, ["--cmdline-file", path], stdin="")
        # The script's "frobnicate now" does not parse: the session runs to its end, then exit 2
        # with the line that failed (a piped prompt, above, is interactive use: exit 0).
        check_prompt_output(p, want_exit=2)
        check("running commands from" in p.stdout, "file not announced", p)
        last = p.stderr.strip().splitlines()[-1]
        check(last.startswith("rdmafwd: error: --cmdline-file") and "unknown command 'frobnicate'" in last
              and "line 10:" in last, f"last stderr line: {last!r}", p)
    finally:
        os.unlink(path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_process(binary, wire, client_args, sizes=()):
    """A server (--role server --wire WIRE, listening on loopback) and a client with client_args
    meeting it there, both with `sizes`, run to the end on the 2 CPUs (server: main lcore 1,
    poll lcore 0; client: main 0, poll 1); both must exit 0.
    Returns the client's and the server's summary totals."""
    port = free_port()
    srv = subprocess.Popen([binary, "-l", "0-1", "--main-lcore", "1", "--no-huge", "-m", "256", "--",
                            "--role", "server", "--listen", f"127.0.0.1:{port}", "--wire", wire,
                            "--json"] + list(sizes),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        cli = run(binary, ["--role", "client", "--peer", f"127.0.0.1:{port}", "--json"] +
                  list(sizes) + client_args)
        sout, serr = srv.communicate(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
    check(cli.returncode == 0, f"client exit {cli.returncode}", cli)
    check(srv.returncode == 0, f"server exit {srv.returncode}\n{sout}\n{serr}")
    # The server's last JSON lines: its summary, then its clients.
    srv_sum = [j for j in (json.loads(l) for l in sout.splitlines() if l.startswith("{"))
               if "total" in j][-1]
    return summary(cli)["total"], srv_sum["total"], cli


def case_two_process(binary):
    c, s, cli = two_process(binary, f"fwdtest{os.getpid()}", ["--duration", "1.5"])
    check(c["ios"] > 0 and c["errors"]["total"] == 0, f"client: {c}", cli)
    check(s["ios"] == c["ios"], f"server served {s['ios']}, client completed {c['ios']}")
    print(f"two-process: {c['ios']} RPCs, client p50 {c['latency_us']['p50']:.1f} us")


def case_bad_args(binary):
    cases = [
        (["--fwd", "bogus"], "unknown mode 'bogus'"),
        (["--pages-per-io"], "needs a value"),
        (["--burst", "0"], "--burst"),
        # Numbers are decimal: 010 is not octal 8, 0x10 not 16 (both refused, one line).
        (["--duration", "0.2", "--burst", "010"], "--burst: '010' is not a decimal number in 1.."),
        (["--duration", "0.2", "--burst", "0x10"], "--burst: '0x10' is not a decimal number in 1.."),
        (["--duration", "0.2", "--io-count", "+5"], "--io-count: '+5' is not a decimal number"),
        (["--frobnicate"], "unknown option '--frobnicate'"),
        (["--role", "server"], "--role server needs --listen"),
        (["--page-size", "1000"], "not a chunk page size"),
        (["--device", "emu-sink", "--fwd", "rpc"], "emu-sink moves no data"),
        (["--pages-per-io", "64", "--max-pages", "16"], "larger than the windows"),
        (["--nb-cores", "2"], "needs 2 worker lcore"),
        (["--fault-kinds", "meteor"], "--fault-kinds: 'meteor'"),
        (["--fault-every", "10", "--device", "mlx5_0"], "--fault-every injects"),
        (["--json=yes"], "option '--json' takes no value"),
        (["--fwd", "rpc", "stray"], "unexpected argument 'stray'"),
        (["--dur", "x"], "option --duration: 'x'"),
        (["--max-refusals", "5/1"], "--max-refusals is for the server"),
        (["--isolate", "peer"], "--isolate is for the server"),
        (["--cm", "--device", "mlx5_0"], "--cm is for two processes"),
        (["--role", "server", "--listen", "7471", "--cm"], "an mlx5 device only"),
        (["--role", "server", "--listen", "7471", "--isolate", "pd"], "neither peer nor none"),
        (["--clients", "2"], "--clients is for a server that listens"),
        (["--role", "server", "--listen", "7471", "--clients", "2"], "needs a device on a network"),
        (["--role", "server", "--listen", "7471", "--clients", "0"], "--clients"),
        (["--role", "server", "--listen", "7471", "--max-refusals", "5"], "is not N/SECONDS"),
        (["--role", "server", "--listen", "7471", "--max-refusals", "0/1"], "is not N/SECONDS"),
        (["--role", "server", "--listen", "7471", "--max-refusals", "3/0"], "is not N/SECONDS"),
        (["--metadata", "2"], "--metadata: '2': 0 or 4..128"),
        (["--metadata", "200"], "--metadata: '200' is not a decimal number in 0..128"),
        (["--fwd", "write", "--metadata", "8"], "--metadata is for --fwd rpc"),
        (["--metadata", "8", "--page-size", "65536"], "--metadata needs --page-size 4096"),
        (["--metadata", "8", "--max-pages", "16"], "do not fit windows of 16 pages"),  # getopt_long: a unique prefix names --duration
    ]
    for args, msg in cases:
        p = run(binary, args, timeout=20)
        check(p.returncode == 2, f"{args}: exit {p.returncode}, want 2", p)
        first = p.stderr.splitlines()[0] if p.stderr else ""
        err_lines = [l for l in p.stderr.splitlines() if l.startswith("rdmafwd: error:")]
        check(len(err_lines) == 1 and msg in err_lines[0], f"{args}: message {err_lines!r} lacks {msg!r}", p)
        # One error line and a pointer to --help, never the whole usage (77 lines).
        lines = p.stderr.splitlines()
        at = lines.index(err_lines[0])
        check(at + 1 < len(lines) and lines[at + 1] == "try 'rdmafwd --help' for the options",
              f"{args}: no --help pointer after the error line", p)
        check(not any(l.startswith("usage:") or "--pages-per-io N" in l for l in lines),
              f"{args}: a usage error prints the whole usage", p)
    p = subprocess.run([binary, "-l", "0-1", "--", "--help"], capture_output=True, text=True, timeout=20)
    check(p.returncode == 0 and "--pages-per-io" in p.stdout, "--help", p)


def first_rdmafwd_line(p):
    lines = [l for l in p.stderr.splitlines() if l.startswith("rdmafwd:")]
    return lines[0] if lines else ""


def case_eal_errors(binary):
    # A bad EAL argument is a usage error: exit 2, one rdmafwd line, "EAL:" once.
    p = subprocess.run([binary, "--no-such-eal-option", "--", "--fwd", "rpc"], capture_output=True,
                       text=True, timeout=30)
    check(p.returncode == 2, f"bad EAL argument: exit {p.returncode}, want 2", p)
    mine = [l for l in p.stderr.splitlines() if l.startswith("rdmafwd:")]
    check(len(mine) == 1 and mine[0].count("EAL:") == 1 and
          mine[0].startswith("rdmafwd: error: EAL:"), f"rdmafwd lines: {mine!r}", p)
    # Two processes with one --file-prefix: the second says who holds it, never "Success".
    prefix = f"fwdpfx{os.getpid()}"
    eal = EAL + ["--file-prefix", prefix]
    first = subprocess.Popen([binary] + eal + ["--", "--fwd", "rpc", "--duration", "20"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ok, seen = read_until(first.stdout, lambda l: l.startswith("rdmafwd: telemetry:"), 60)
        check(ok, f"first instance never came up: {seen}")
        p = run(binary, ["--fwd", "rpc", "--duration", "1"], eal=eal, timeout=30)
        check(p.returncode == 1, f"second instance: exit {p.returncode}, want 1", p)
        line = first_rdmafwd_line(p)
        check("Success" not in p.stderr and f"in use by process {first.pid}" in line,
              f"second instance: {line!r}", p)
    finally:
        first.send_signal(2)
        first.communicate(timeout=30)
        # A --file-prefix the user names is the user's: rdmafwd leaves its runtime directory (only
        # its own rdmafwd-PID goes with it), so the test removes the one it named.
        for base in ("/var/run/dpdk", os.path.join(os.environ.get("XDG_RUNTIME_DIR", "/tmp"), "dpdk")):
            shutil.rmtree(os.path.join(base, prefix), ignore_errors=True)


def case_options(binary):
    # --cmdline-file that cannot be read: exit 2 before any set-up (no EAL line at all).
    p = run(binary, ["--cmdline-file", "/nonexistent/cmds"], timeout=20)
    check(p.returncode == 2, f"missing --cmdline-file: exit {p.returncode}, want 2", p)
    check(p.stderr.splitlines()[0].startswith("rdmafwd: error: --cmdline-file /nonexistent/cmds"),
          "first stderr line", p)
    check("rte_eal_init" not in p.stderr, "the EAL was started before the file was checked", p)
    # testpmd's spellings: --forward-mode=MODE, -a; --opt=value.
    p = run(binary, ["--forward-mode=umr", "--duration=0.3", "--json"])
    check(p.returncode == 0 and summary(p)["fwd"] == "umr", f"--forward-mode=umr: exit {p.returncode}", p)
    p = run(binary, ["--forward-mode=io"], timeout=20)
    check(p.returncode == 2 and "unknown mode 'io' (one of umr, write, read, rpc, relay)" in p.stderr,
          f"--forward-mode=io: exit {p.returncode}", p)
    # Prompt: an error lists what is valid; `quit` after `stop` prints no prompt and no second
    # summary; -a started forwarding.
    p = run(binary, ["-i", "-a"], stdin="set fwd io\nstop\nquit\n")
    check(p.returncode == 0, f"-i -a: exit {p.returncode}", p)
    check("error: option --fwd: unknown mode 'io' (one of umr, write, read, rpc, relay)"
          in p.stdout, "the prompt error does not list the valid modes", p)
    check("forwarding stopped" in p.stdout, "-a did not start forwarding", p)
    check(p.stdout.count("rdmafwd statistics since") == 1, "statistics printed twice", p)
    check(p.stdout.rstrip().endswith("rdmafwd> quit"), f"output after quit: {p.stdout[-200:]!r}", p)
    # --duration 0 is documented as "until Ctrl-C".
    h = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=20)
    check("0, the default: until" in h.stdout and "Ctrl-C" in h.stdout, "--duration 0 undocumented", h)


def case_log_level(binary):
    # rdmx's own log lines go through DPDK's log type rdmx.lib once the EAL runs: the EAL option
    # --log-level=rdmx.*:debug shows its debug lines, the default does not.
    dbg = run(binary, ["--fwd", "rpc", "--duration", "0.3"], eal=EAL + ["--log-level=rdmx.*:debug"])
    check(dbg.returncode == 0, f"exit {dbg.returncode}", dbg)
    check("rdmx DEBUG: arena:" in dbg.stderr, "--log-level=rdmx.*:debug shows no rdmx debug line", dbg)
    plain = run(binary, ["--fwd", "rpc", "--duration", "0.3"])
    check(plain.returncode == 0 and "rdmx DEBUG" not in plain.stderr, "debug lines by default", plain)


def case_status(binary):
    # Without --stats-period, a long run prints a one-line status every 10 s (here shortened with
    # the hidden --status-period) on the text stream (stderr with --json, stdout stays JSON);
    # --quiet silences it.
    p = run(binary, ["--fwd", "rpc", "--duration", "1.3", "--json", "--status-period", "0.4"])
    check(p.returncode == 0, f"exit {p.returncode}", p)
    status = [l for l in p.stderr.splitlines() if l.startswith("[") and " I/O/s " in l]
    check(len(status) >= 1, "no status line on a run longer than the status period", p)
    check(all(l.startswith("{") for l in p.stdout.splitlines() if l.strip()), "stdout is not JSON", p)
    q = run(binary, ["--fwd", "rpc", "--duration", "1.3", "--quiet", "--status-period", "0.4"])
    check(q.returncode == 0, f"--quiet: exit {q.returncode}", q)
    check(not [l for l in q.stdout.splitlines() if " I/O/s " in l], "--quiet printed a status line", q)
    # The default period is 10 s: a 1-second run prints none.
    d = run(binary, ["--fwd", "rpc", "--duration", "1"])
    check(not [l for l in d.stdout.splitlines() if " I/O/s " in l], "a short run printed a status line", d)


def case_no_device(binary):
    p = run(binary, ["--device", "mlx5_0", "--fwd", "rpc", "--duration", "1"], timeout=20)
    check(p.returncode == 3, f"exit {p.returncode}, want 3", p)
    check("mlx5_0" in p.stderr, "the message does not name the device", p)
    # A --cm server: the device first (exit 3, one line), before any rdma_cm call.
    q = run(binary, ["--device", "mlx5_0", "--role", "server", "--listen", "127.0.0.1:0",
                     "--cm"], timeout=20)
    check(q.returncode == 3 and "mlx5_0" in q.stderr, f"--cm server: exit {q.returncode}", q)


def telemetry_query(p, cmds):
    """Reads the telemetry socket path rdmafwd `p` prints, then asks it each of `cmds`."""
    path = None
    deadline = time.time() + 15
    while time.time() < deadline and path is None:
        line = p.stdout.readline()
        if line.startswith("rdmafwd: telemetry: "):
            path = line.split()[2]
    check(path is not None, "no telemetry line")
    time.sleep(1.0)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    json.loads(s.recv(16384).decode())  # the greeting
    got = {}
    for cmd in cmds:
        s.send(cmd.encode())
        got[cmd] = json.loads(s.recv(65536).decode())[cmd]
    s.close()
    return got


def case_telemetry(binary):
    # /rdmafwd/config's verify is what the lanes run: off on emu-sink (nothing moved to check),
    # whatever --verify says.
    p = subprocess.Popen([binary] + EAL + ["--", "--fwd", "write", "--device", "emu-sink",
                                           "--duration", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        cfg = telemetry_query(p, ["/rdmafwd/config"])["/rdmafwd/config"]
    finally:
        out, err = p.communicate(timeout=30)
    check(p.returncode == 0 and cfg["verify"] == 0, f"emu-sink config: {cfg}, exit {p.returncode}")
    p = subprocess.Popen([binary] + EAL + ["--", "--fwd", "rpc", "--duration", "4"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        got = telemetry_query(p, ["/rdmafwd/stats", "/rdmafwd/config", "/rdmafwd/windows",
                                  "/rdmx/stats", "/rdmx/cores"])
        st = got["/rdmafwd/stats"]
        check(st["ios"] > 0, f"stats: {st}")
        # While forwarding, what is in flight is not an error (it was counted as lost once).
        check(st["errors"] == 0 and st["lost_ios"] == 0 and "in_flight" in st, f"stats: {st}")
        check(st["since"] == "start" and st["bytes_kind"] == "moved", f"stats: {st}")
        check(got["/rdmafwd/config"]["fwd"] == "rpc" and got["/rdmafwd/config"]["verify"] == 1,
              f"config: {got['/rdmafwd/config']}")
        check(got["/rdmafwd/windows"]["pool_A"]["ok"] == 1, f"windows: {got['/rdmafwd/windows']}")
        # The library's own commands: every poll core of the process (at least the client and
        # the peer of the lane), and its window counters, read after rdmafwd's (they only grow).
        lib = got["/rdmx/stats"]
        check(len(got["/rdmx/cores"]) >= 2, f"cores: {got['/rdmx/cores']}")
        check(lib["maps"] >= st["maps"] > 0 and lib["pages_mapped"] >= st["pages_mapped"],
              f"/rdmx/stats {lib} behind /rdmafwd/stats {st}")
        print("telemetry:", got["/rdmafwd/stats"], got["/rdmx/stats"]["maps"])
    finally:
        out, err = p.communicate(timeout=30)
    check(p.returncode == 0, f"exit {p.returncode}\n{out}\n{err}")


def handler_installed(pid, signo=2, timeout=20.0):
    """Waits until process pid catches signal signo (its SigCgt mask in /proc), so a test can
    send the signal after main() installed its handler without sleeping for a guessed time."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("SigCgt:") and int(line.split()[1], 16) & (1 << (signo - 1)):
                        return True
        except FileNotFoundError:
            return False
        time.sleep(0.001)
    return False


def runtime_dir_left(pid):
    """DPDK's per-process runtime directory of an rdmafwd (file prefix rdmafwd-PID), if left."""
    for base in ("/var/run/dpdk", os.path.join(os.environ.get("XDG_RUNTIME_DIR", "/tmp"), "dpdk")):
        d = os.path.join(base, f"rdmafwd-{pid}")
        if os.path.exists(d):
            return d
    return None


def read_until(stream, pred, timeout):
    """Reads lines from a pipe until pred(line) or timeout; returns (found, lines read). Reads the
    file descriptor itself: a text stream's readline may buffer lines that select() then no longer
    sees, and the wait would last until the process exits. What came with the matching line is
    returned too."""
    import select
    fd = stream.fileno()
    buf, seen = b"", []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not select.select([fd], [], [], max(0.0, end - time.monotonic()))[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            seen.append(line.decode(errors="replace") + "\n")
            if pred(seen[-1]):
                seen.append(buf.decode(errors="replace"))
                return True, seen
    return False, seen


def interrupt_when(binary, app_args, ready):
    """Starts rdmafwd, waits for ready(p) -> (ok, what it saw) to be true, sends SIGINT and
    collects the outcome: (process, stdout including what ready saw, stderr)."""
    p = subprocess.Popen([binary] + EAL + ["--"] + app_args,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ok, seen = ready(p)
        check(ok, f"rdmafwd {' '.join(app_args)}: never ready for the signal:\n{seen}")
        p.send_signal(2)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    return p, seen + out, err


def case_sigint(binary):
    # Ctrl-C while forwarding: sent once a periodic line shows completed I/O (no guessed sleep).
    def io_seen(p):
        ok, seen = read_until(
            p.stdout, lambda l: l.startswith("{") and json.loads(l)["total"]["ios"] > 0, 60)
        return ok, "".join(seen)
    p, out, err = interrupt_when(binary, ["--fwd", "rpc", "--json", "--stats-period", "0.2"], io_seen)
    check(p.returncode == 0, f"SIGINT: exit {p.returncode}\n{out}\n{err}")
    lines = [l for l in out.splitlines() if l.startswith('{"type":"summary"')]
    check(lines and json.loads(lines[-1])["total"]["ios"] > 0, f"no final summary\n{out}\n{err}")
    check("signal received, stopped" in err, f"no stop message\n{err}")
    check(runtime_dir_left(p.pid) is None, f"left {runtime_dir_left(p.pid)}")


def case_sigint_early(binary):
    # Ctrl-C as soon as the handler is in place, i.e. during EAL start-up: a clean exit 130 (or,
    # on a machine fast enough to be forwarding already, the normal stop), nothing left behind.
    p, out, err = interrupt_when(binary, ["--fwd", "rpc", "--json"],
                                 lambda p: (handler_installed(p.pid), ""))
    last = err.strip().splitlines()[-1] if err.strip() else ""
    check(p.returncode in (130, 0), f"early SIGINT: exit {p.returncode}, want 130\n{out}\n{err}")
    if p.returncode == 130:
        check(last.startswith("rdmafwd: interrupted "), f"last stderr line: {last!r}\n{err}")
    check(runtime_dir_left(p.pid) is None, f"left {runtime_dir_left(p.pid)}")
    print(f"early SIGINT: exit {p.returncode}: {last}")


def case_sigint_server_wait(binary):
    # A two-process server waiting for its client: announced, and Ctrl-C removes the shm wire.
    wire = f"fwdwait{os.getpid()}"
    def waiting(p):
        ok, seen = read_until(p.stdout, lambda l: "waiting for a client" in l, 60)
        return ok, "".join(seen)
    p, out, err = interrupt_when(binary, ["--role", "server", "--listen", f"127.0.0.1:{free_port()}",
                                          "--wire", wire], waiting)
    check(p.returncode == 130, f"server wait SIGINT: exit {p.returncode}, want 130\n{out}\n{err}")
    check("interrupted while waiting for the peer" in err, f"stderr: {err!r}")
    left = [f for f in os.listdir("/dev/shm") if wire in f]
    check(not left, f"left in /dev/shm: {left}")
    check(runtime_dir_left(p.pid) is None, f"left {runtime_dir_left(p.pid)}")


def case_stale_runtime_dir(binary):
    # A killed rdmafwd leaves DPDK's runtime directory rdmafwd-PID; the next start removes the
    # ones whose process is gone, and leaves a live process's alone.
    dead = subprocess.Popen(["true"]); dead.wait()
    base = "/var/run/dpdk" if os.geteuid() == 0 else os.path.join(
        os.environ.get("XDG_RUNTIME_DIR", "/tmp"), "dpdk")
    stale = os.path.join(base, f"rdmafwd-{dead.pid}")
    live = os.path.join(base, f"rdmafwd-{os.getpid()}")
    os.makedirs(stale, exist_ok=True)
    os.makedirs(live, exist_ok=True)
    open(os.path.join(stale, "config"), "w").close()
    try:
        p = run(binary, ["--fwd", "umr", "--duration", "0.3", "--json"])
        check(p.returncode == 0, f"exit {p.returncode}", p)
        check(not os.path.exists(stale), f"{stale} (pid {dead.pid} is gone) was not removed", p)
        check(os.path.exists(live), f"{live} (a live process) was removed", p)
    finally:
        import shutil
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)


def case_option_table(binary):
    # The option table, as `show config` lists it (every option, * when `set` may change it):
    # each option is in --help (hence the man page), `set` refuses each fixed one in one line
    # and changes each settable one.
    opts = {}
    p = run(binary, ["-i"], stdin="show config\nquit\n")
    check(p.returncode == 0, f"show config: exit {p.returncode}", p)
    section = p.stdout.split("options (* may be changed with `set NAME VALUE`):\n", 1)
    check(len(section) == 2, "show config lists no options", p)
    for line in section[1].splitlines():
        m = re.match(r"^    ([* ]) ([a-z][a-z0-9-]*)( .*)?$", line)
        if not m:
            break
        opts[m.group(2)] = m.group(1) == "*"
    check(len(opts) >= 40 and "device" in opts and "fwd" in opts, f"options listed: {opts}", p)
    h = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=20)
    helped = set(re.findall(r"^  (?:-[a-z], )?--([a-z][a-z0-9-]*)", h.stdout, re.M))
    missing = sorted(set(opts) - helped)
    check(not missing, f"options not in --help: {missing}", h)
    fixed = [n for n, settable in opts.items() if not settable]
    settable = [n for n, s in opts.items() if s]
    check(set(settable) == {"fwd", "burst", "pages-per-io"}, f"settable: {settable}", p)
    value = {"fwd": "umr", "burst": "8", "pages-per-io": "8"}
    script = "".join(f"set {n} 1\n" for n in fixed) + "".join(f"set {n} {value[n]}\n" for n in settable)
    p = run(binary, ["-i"], stdin=script + "quit\n")
    check(p.returncode == 0, f"set: exit {p.returncode}", p)
    lines = p.stdout.splitlines()
    for n in fixed:
        at = [i for i, l in enumerate(lines) if l.endswith(f"rdmafwd> set {n} 1")]
        check(len(at) == 1, f"set {n}: prompt line not found", p)
        got = lines[at[0] + 1:at[0] + 2] + [l for l in lines[at[0] + 2:at[0] + 3] if not l.startswith("rdmafwd> ")]
        check(len(got) == 1 and got[0].startswith(f"error: --{n} is fixed at start-up (set takes "),
              f"set {n}: not refused in one line: {got}", p)
    for n in settable:
        check(f"{n} set to {value[n]}" in p.stdout, f"set {n} {value[n]}: not set", p)


CASES = {
    "umr": lambda b: mode(b, "umr"),
    "write": lambda b: mode(b, "write"),
    "read": lambda b: mode(b, "read"),
    "rpc": lambda b: mode(b, "rpc"),
    "relay": lambda b: mode(b, "relay"),
    "sink-write": lambda b: mode(b, "write", ["--device", "emu-sink"]),
    # The forwarding loop under seccomp: any system call on the poll lcore would end the process.
    "strict-rpc": lambda b: mode(b, "rpc", ["--strict-no-syscalls"]),
    "strict-relay": lambda b: mode(b, "relay", ["--strict-no-syscalls"]),
    "corrupt": case_corrupt,
    "metadata": case_metadata,
    "no-verify": case_no_verify_corrupt,
    "rpc-local-inv": case_rpc_local_inv,
    "bad-handle": case_bad_handle,
    "twin-calls": case_twin_calls,
    "credits": case_credits,
    "faults": case_faults,
    "prompt-stdin": case_prompt_stdin,
    "prompt-file": case_prompt_file,
    "prompt-reset": case_prompt_reset,
    "prompt-latency-reset": case_prompt_latency_reset,
    "prompt-terminal": case_prompt_terminal,
    "hugepage-notice": case_hugepage_notice,
    "two-process": case_two_process,
    "bad-args": case_bad_args,
    "no-device": case_no_device,
    "eal-errors": case_eal_errors,
    "options": case_options,
    "option-table": case_option_table,
    "log-level": case_log_level,
    "status": case_status,
    "telemetry": case_telemetry,
    "sigint": case_sigint,
    "sigint-early": case_sigint_early,
    "sigint-server-wait": case_sigint_server_wait,
    "stale-runtime-dir": case_stale_runtime_dir,
}

if __name__ == "__main__":
    binary, name = sys.argv[1], sys.argv[2]
    if name.startswith("strict-") and os.environ.get("RDMX_SANITIZE") == "thread":
        # TSan's runtime makes its own system calls (futex, mmap) on the poll thread, which
        # strict mode rightly reports; the proof is made by the normal and ASan builds.
        print("skipped under TSan: its runtime makes system calls on the poll thread")
        sys.exit(77)
    CASES[name](binary)
