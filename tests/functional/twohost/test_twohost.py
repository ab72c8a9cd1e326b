#!/usr/bin/env python3
"""rdmafwd and blockd between two "hosts" (suite 'twohost'): the TCP rendezvous (--listen/--peer) over
loopback and across two network namespaces joined by a veth pair (netns.sh), with emu's
shared-memory wire underneath (the namespaces share /dev/shm); and every bad case of the
rendezvous: one line on stderr, the documented exit code, no wait beyond the stated timeout,
nothing left behind (sockets, shm files, DPDK runtime directories, namespaces).

Usage: test_twohost.py PATH_TO_RDMAFWD CASE [PATH_TO_BLOCKD [PATH_TO_TEST_CAPI_PEERS]]"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

# DPDK's per-process runtime directory of an rdmafwd: one definition, in the rdmafwd tests.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "rdmafwd"))
from test_rdmafwd import runtime_dir_left  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NETNS = os.path.join(HERE, "netns.sh")
MEM = ["--no-huge", "-m", "256"]
# Server and client on one machine of 2 CPUs: each process's main lcore on the CPU of the
# other's poll lcore (the main lcore mostly sleeps while forwarding).
SERVER_EAL = ["-l", "0-1", "--main-lcore", "1"] + MEM
CLIENT_EAL = ["-l", "0-1"] + MEM
BUDGET = 60  # seconds any process of a case may live


def loopback_net():
    """The second octet N of this process's loopback addresses 127.N.x.y (1..254: never
    127.0.0.x), this process's alone on the host: claimed as tests/loopback_net.hpp claims it (an
    exclusive flock on /tmp/rdmx-loopback-127.N.lock, held until exit, from the pid's octet on),
    so that two test runs at once never put emu RoCE devices (UDP 4791) on one address."""
    global _LOOPBACK_NET
    if _LOOPBACK_NET is None:
        import fcntl
        first = os.getpid() % 254
        for i in range(254):
            k = 1 + (first + i) % 254
            f = open(f"/tmp/rdmx-loopback-127.{k}.lock", "a")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            _LOOPBACK_HOLD.append(f)  # open until exit: the lock with it
            _LOOPBACK_NET = k
            break
        else:
            _LOOPBACK_NET = 1 + first
    return _LOOPBACK_NET


_LOOPBACK_NET = None
_LOOPBACK_HOLD = []


def roce_dev(host):
    """An emu RoCE device on this process's loopback address 127.N.0.host."""
    return f"emu@roce:127.{loopback_net()}.0.{host}"


def fail(msg, *procs):
    for name, out, err in procs:
        msg += f"\n--- {name} stdout ---\n{out}\n--- {name} stderr ---\n{err}"
    raise AssertionError(msg)


def check(cond, msg, *procs):
    if not cond:
        fail(msg, *procs)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rdmafwd_lines(err):
    """rdmafwd's own lines on stderr (DPDK's EAL prints its start-up lines there too)."""
    return [l for l in err.splitlines() if l.startswith("rdmafwd:")]


def summary(out):
    lines = [l for l in out.splitlines() if l.startswith('{"type":"summary"')]
    return json.loads(lines[-1]) if lines else None


def clients(out):
    """The server's per-client statistics ({"type":"clients"} with --json), or None."""
    lines = [l for l in out.splitlines() if l.startswith('{"type":"clients"')]
    return json.loads(lines[-1]) if lines else None


def leftovers(pid):
    """What a finished rdmafwd of process id pid left behind."""
    # The server's wire is rdmx-emu-rdmafwd-PID (a longer pid of another run must not match).
    left = [f for f in os.listdir("/dev/shm") if re.search(rf"rdmafwd-{pid}($|\.)", f)]
    d = runtime_dir_left(pid)
    return left + ([d] if d else [])


def reap(p):
    """A process a failing case leaves running: killed, and what it owned removed (a killed
    process cannot clean up: its shm wire and DPDK runtime directory)."""
    if p.poll() is None:
        p.kill()
        p.wait()
        import shutil
        for f in os.listdir("/dev/shm"):
            if re.search(rf"(rdmafwd|blockd)-{p.pid}$", f):
                os.unlink(os.path.join("/dev/shm", f))
        d = runtime_dir_left(p.pid)
        if d:
            shutil.rmtree(d, ignore_errors=True)


def start(binary, eal, args, ns=None):
    return subprocess.Popen(command(binary, eal, args, ns), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(p, timeout=BUDGET):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        reap(p)
        out, err = p.communicate()
        fail(f"pid {p.pid} still running after {timeout} s", ("it", out, err))
    return out, err


def run(binary, eal, args, timeout=BUDGET):
    p = start(binary, eal, args)
    out, err = finish(p, timeout)
    return p, out, err


def wait_line(p, stream, text, timeout=BUDGET):
    """Reads stream until a line holding text; returns what was read."""
    seen = []
    end = time.monotonic() + timeout
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    while time.monotonic() < end:
        if not sel.select(timeout=max(0.0, end - time.monotonic())):
            break
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    fail(f"never saw {text!r}", ("it", "".join(seen), ""))


class Tail:
    """Reads a process's stdout and stderr on threads, line by line, as they come: a test can
    wait for several lines of one stream in turn (wait_line's select cannot see lines already
    read into the stream's buffer, so a second wait on a stream may miss a line that came in
    the same burst as the first)."""

    def __init__(self, p):
        self.p = p
        self.lines = {"out": [], "err": []}
        self.cond = threading.Condition()
        self.threads = [threading.Thread(target=self._read, args=(k, st), daemon=True)
                        for k, st in (("out", p.stdout), ("err", p.stderr))]
        for t in self.threads:
            t.start()

    def _read(self, key, stream):
        for line in stream:
            with self.cond:
                self.lines[key].append(line)
                self.cond.notify_all()

    def wait(self, key, text, after=0, timeout=BUDGET):
        """The index of the first line of stream `key` from line `after` on that holds text."""
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                for i in range(after, len(self.lines[key])):
                    if text in self.lines[key][i]:
                        return i
                left = end - time.monotonic()
                if left <= 0 or not any(t.is_alive() for t in self.threads):
                    fail(f"never saw {text!r}", ("it", "".join(self.lines["out"]),
                                                 "".join(self.lines[key])))
                self.cond.wait(min(left, 0.2))

    def finish(self, timeout=BUDGET):
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            reap(self.p)
            fail(f"pid {self.p.pid} still running after {timeout} s",
                 ("it", "".join(self.lines["out"]), "".join(self.lines["err"])))
        for t in self.threads:
            t.join(10)
        return "".join(self.lines["out"]), "".join(self.lines["err"])


def command(binary, eal, args, ns=None):
    cmd = [binary] + (eal + ["--"] if eal is not None else []) + args
    return [NETNS, "exec", ns] + cmd if ns else cmd  # exec: the process is the program itself


def serve(server_cmd, client_cmd, ready=None):
    """Runs a server and, once its output shows `ready` (None: at once), a client to the end.
    Returns (server, client, procs) with procs = [(name, stdout, stderr)] for messages."""
    popen = lambda cmd: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
    srv = popen(server_cmd)
    try:
        if ready:
            wait_line(srv, srv.stdout, ready)
        cli = popen(client_cmd)
        cout, cerr = finish(cli)
        sout, serr = finish(srv)
    finally:
        reap(srv)
    return srv, cli, [("server", sout, serr), ("client", cout, cerr)]


def both_ok(srv, cli, procs, what=""):
    check(cli.returncode == 0 and srv.returncode == 0,
          f"{what}exit: server {srv.returncode}, client {cli.returncode}", *procs)


# ---- Good runs ---------------------------------------------------------------------------------

def pair(binary, listen, peer, extra=(), server_ns=None, client_ns=None, duration="1.5",
         server_extra=()):
    """Runs a server and a client to the end; checks both summaries and the cleanup."""
    srv, cli, procs = serve(
        command(binary, SERVER_EAL, ["--role", "server", "--listen", listen, "--json",
                                     "--rendezvous-timeout", "40"] + list(extra) +
                list(server_extra), server_ns),
        command(binary, CLIENT_EAL, ["--role", "client", "--peer", peer, "--duration", duration,
                                     "--json", "--rendezvous-timeout", "40"] + list(extra),
                client_ns))
    (_, sout, serr), (_, cout, cerr) = procs
    both_ok(srv, cli, procs)
    c, s = summary(cout), summary(sout)
    check(c and s, "no summary", *procs)
    ct, st = c["total"], s["total"]
    check(ct["ios"] > 0 and ct["errors"]["total"] == 0 and st["errors"]["total"] == 0,
          f"client {ct['ios']} I/Os, errors {ct['errors']} / {st['errors']}", *procs)
    check(st["ios"] == ct["ios"], f"server served {st['ios']}, client completed {ct['ios']}",
          *procs)
    check(ct["remote_invalidations"] == ct["ios"], "a reply did not invalidate its window", *procs)
    # The client uses only the rkeys the server gave it: the server's QPs refuse nothing.
    check(st["errors"]["refused_remote"] == 0, f"server refused: {st['errors']}", *procs)
    check(len(c["lanes"]) == len(s["lanes"]), "lanes differ", *procs)
    for i, (cl, sl) in enumerate(zip(c["lanes"], s["lanes"])):
        check(cl["ios"] > 0 and cl["ios"] == sl["ios"], f"lane {i}: {cl['ios']} vs {sl['ios']}",
              *procs)
    check("waiting for a client on" in serr and "Ctrl-C to stop" in serr,
          "the server's wait was not announced", *procs)
    check("connecting to" in cerr, "the client's wait was not announced", *procs)
    for p in (srv, cli):
        check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
    return c, s, procs


def case_loopback(binary):
    port = free_port()
    # With the refusal policy on and a client that is not refused, the run is unchanged.
    c, _, _ = pair(binary, f"127.0.0.1:{port}", f"127.0.0.1:{port}",
                   server_extra=["--max-refusals", "1/1"])
    t = c["total"]
    print(f"loopback: {t['ios']} RPCs verified, p50 {t['latency_us']['p50']:.1f} us")


def case_loopback_metadata(binary):
    # rpc with 8 bytes of metadata per block: interleaved windows on both sides, both verified;
    # the size exchange carries --metadata.
    port = free_port()
    c, _, _ = pair(binary, f"127.0.0.1:{port}", f"127.0.0.1:{port}", extra=["--metadata", "8"])
    t = c["total"]
    print(f"loopback --metadata 8: {t['ios']} RPCs, data and metadata verified")


def case_lanes(binary):
    # Two lanes, one QP each, over one rendezvous: 3 lcores on the 2 CPUs of the machine.
    port = free_port()
    srv_eal = ["--lcores", "0@1,1@0,2@1", "--main-lcore", "0"] + MEM
    cli_eal = ["--lcores", "0@0,1@1,2@0"] + MEM
    global SERVER_EAL, CLIENT_EAL
    SERVER_EAL, CLIENT_EAL = srv_eal, cli_eal
    c, _, _ = pair(binary, str(port), f"localhost:{port}", ["--nb-cores", "2"])
    check(len(c["lanes"]) == 2, f"{len(c['lanes'])} lanes")
    print("lanes: " + ", ".join(f"lane {i} {l['ios']} RPCs" for i, l in enumerate(c["lanes"])))


def case_umr(binary):
    # The client maps and unmaps on its QP connected across the processes; the server (rpc)
    # has nothing to serve but the goodbye, and both end with exit 0.
    port = free_port()
    srv, cli, procs = serve(
        command(binary, SERVER_EAL, ["--role", "server", "--listen", str(port), "--json"]),
        command(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}", "--fwd",
                                     "umr", "--duration", "1", "--json"]))
    (_, sout, serr), (_, cout, cerr) = procs
    both_ok(srv, cli, procs)
    t = summary(cout)["total"]
    check(t["ios"] > 0 and t["maps"] == t["ios"] and t["unmaps"] == t["ios"] and
          t["errors"]["total"] == 0, f"client: {t}", *procs)
    check("running --fwd umr (nothing to serve but its goodbye)" in serr, "server note", *procs)
    print(f"umr across processes: {t['ios']} map+unmap pairs")


def case_relay(binary):
    """--fwd relay across the processes: the client's source SENDs to the server's relay-in, the
    server maps the received chunk pages and SENDs them on from its relay-out to the client's
    sink (a second QP per lane), zero-copy; the sink checks every message (sequence and
    checksum). Both sides count the same messages, nothing fails, no RNR."""
    port = free_port()
    srv, cli, procs = serve(
        command(binary, SERVER_EAL, ["--role", "server", "--listen", str(port), "--json"]),
        command(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}", "--fwd",
                                     "relay", "--duration", "1.5", "--json"]))
    (_, sout, serr), (_, cout, cerr) = procs
    both_ok(srv, cli, procs)
    c, s = summary(cout)["total"], summary(sout)["total"]
    check(c["ios"] > 0 and c["errors"]["total"] == 0 and s["errors"]["total"] == 0,
          f"client {c['ios']} messages, errors {c['errors']} / {s['errors']}", *procs)
    check(s["ios"] == c["ios"], f"server forwarded {s['ios']}, sink counted {c['ios']}", *procs)
    check("running --fwd relay" in serr, "server note", *procs)
    for p in (srv, cli):
        check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
    print(f"relay across processes: {c['ios']} messages source -> relay -> sink, verified")


def case_forged_rkey(binary):
    """A client that forges the key byte of the server's rkey (hidden --forge-rkey-every): the
    server's QP refuses the WRITE and counts it (refused_remote in the server's stats); the
    client's request fails with a remote access error and its lane stops (exit 1)."""
    port = free_port()
    srv, cli, procs = serve(
        command(binary, SERVER_EAL, ["--role", "server", "--listen", str(port), "--json"]),
        command(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}", "--fwd",
                                     "write", "--duration", "1", "--json",
                                     "--forge-rkey-every", "20"]))
    (_, sout, serr), (_, cout, cerr) = procs
    c, s = summary(cout), summary(sout)
    check(c and s, "no summary", *procs)
    check(cli.returncode == 1, f"client exit {cli.returncode}, want 1", *procs)
    check(c["total"]["errors"]["by_syndrome"].get("remote-access", 0) >= 1,
          f"client saw no remote access error: {c['total']['errors']}", *procs)
    refused = s["total"]["errors"]["refused_remote"]
    check(refused >= 1 and c["total"]["errors"]["refused_remote"] == 0,
          f"refusals: server {refused}, client {c['total']['errors']['refused_remote']}", *procs)
    # The client's goodbye names only slots whose last WRITE completed: the server finds them
    # intact (a failed WRITE's slot is not reported as a mismatch on top of the real error).
    check("against the client's goodbye: all match" in serr,
          "the server reported slots the failed WRITEs never wrote", *procs)
    # As on a ConnectX, the refusal moved the server's responder QP to the error state and the
    # device raised QP_ACCESS_ERR: the server names it, with the lane.
    check(re.search(r"rdmafwd: async event qp-access-err on QP 0x[0-9a-f]+ \(lane 0\)", serr),
          "the server did not report its QP's access-error event", *procs)
    print(f"forged rkey: server refused {refused}, client exit {cli.returncode}, "
          f"server exit {srv.returncode}")


def onesided(binary, fwd, corrupt):
    """--fwd write/read against a server that maps windows over its slots at the rendezvous.
    write: the server checks the last write of every slot against the client's goodbye; read:
    the client checks every payload against the checksums the server sent. With corrupt, the
    server flips one byte (hidden --corrupt-every) and the side that checks must fail."""
    port = free_port()
    extra = ["--corrupt-every", "1"] if corrupt else []
    srv, cli, procs = serve(
        command(binary, SERVER_EAL, ["--role", "server", "--listen", str(port), "--json"] + extra),
        command(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}", "--fwd",
                                     fwd, "--duration", "1", "--json"]))
    (_, sout, serr), (_, cout, cerr) = procs
    c, s = summary(cout)["total"], summary(sout)["total"]
    check(c["ios"] > 0 and c["maps"] == c["ios"], f"client: {c}", *procs)
    checker = c if fwd == "read" else s
    want = (1, 0) if fwd == "read" else (0, 1)  # (client, server) exit status when corrupted
    if corrupt:
        check((cli.returncode, srv.returncode) == want and checker["errors"]["verify"] > 0,
              f"corruption not caught: exit client {cli.returncode}, server {srv.returncode}",
              *procs)
        check("verification failed" in (cerr if fwd == "read" else serr), "no message", *procs)
    else:
        check(cli.returncode == 0 and srv.returncode == 0 and c["errors"]["total"] == 0 and
              s["errors"]["total"] == 0, f"exit client {cli.returncode}, server {srv.returncode}",
              *procs)
    # The server's banner names what its client runs, as its summary does (not its own --fwd).
    banner = [l for l in (sout + serr).splitlines() if l.startswith("rdmafwd: fwd ")]
    check(banner and banner[0].startswith(f"rdmafwd: fwd {fwd} on "), f"server banner {banner}",
          *procs)
    if fwd == "write":
        line = [l for l in serr.splitlines() if "checked the last write" in l]
        check(line and ("differ" in line[0]) == corrupt, f"server check: {line}", *procs)
        check("of 0 slot" not in line[0], "nothing checked", *procs)
    print(f"{fwd}{' (corrupted)' if corrupt else ''}: {c['ios']} I/Os across processes, "
          f"exit client {cli.returncode}, server {srv.returncode}")


class Netns:
    """Two namespaces joined by a veth pair, always torn down (also on SIGTERM from meson)."""

    def __init__(self):
        self.name = f"rx{os.getpid() % 1000000}"

    def __enter__(self):
        p = subprocess.run([NETNS, "up", self.name], capture_output=True, text=True, timeout=30)
        if p.returncode == 77:
            print(p.stderr.strip() or "network namespaces unavailable: skipped")
            sys.exit(77)
        if p.returncode != 0:
            subprocess.run([NETNS, "down", self.name], timeout=30)
            raise AssertionError(f"netns.sh up: exit {p.returncode}: {p.stderr}")
        self.a, self.b, self.addr_a, self.addr_b = p.stdout.split()
        signal.signal(signal.SIGTERM, lambda *_: (self.__exit__(), sys.exit(1)))
        return self

    def __exit__(self, *exc):
        subprocess.run([NETNS, "down", self.name], timeout=30)
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert self.name not in out, f"namespaces left: {out}"


def case_netns(binary):
    with Netns() as n:
        port = 7471  # each namespace has its own ports: the default is free in a new one
        c, s, procs = pair(binary, f"{n.addr_a}:{port}", f"{n.addr_a}:{port}",
                           server_ns=n.a, client_ns=n.b)
        serr, cerr = procs[0][2], procs[1][2]
        check(f"server {n.addr_a}:{port} over TCP from {n.addr_b}:" in cerr,
              "the client did not reach the server across the veth pair", *procs)
        check(f"client {n.addr_b}:" in serr, "the server saw another client address", *procs)
        t = c["total"]
        print(f"netns: {t['ios']} RPCs verified across {n.a} -> {n.b}, "
              f"p50 {t['latency_us']['p50']:.1f} us")


def case_roce(binary, fwd, lossy):
    """rdmafwd across the veth pair with each process on its own emu device speaking RoCE v2
    (emu@roce:ADDR): no shared memory between the "hosts", every packet on the veth link. With
    lossy, 1 % loss, reordering and duplication are injected on both sides: the RC transport
    (PSN, NAK, go-back-N) must deliver everything, verified, with retransmissions counted."""
    with Netns() as n:
        # Injected loss: a lost tail packet waits one ACK timeout, so the lossy cases ask for
        # 33.5 ms (exponent 13) instead of rdma_cm's 1.07 s.
        faults = ",loss=1,reorder=1,dup=1,seed=7,ack_timeout=13" if lossy else ""
        common = ["--json", "--rendezvous-timeout", "40"]
        srv, cli, procs = serve(
            command(binary, SERVER_EAL, ["--role", "server", "--listen", f"{n.addr_a}:7471",
                                         "--device", f"emu@roce:{n.addr_a}{faults}"] + common,
                    n.a),
            command(binary, CLIENT_EAL, ["--role", "client", "--peer", f"{n.addr_a}:7471",
                                         "--fwd", fwd, "--duration", "2", "--device",
                                         f"emu@roce:{n.addr_b}{faults}"] + common, n.b))
        (_, sout, serr), (_, cout, cerr) = procs
        both_ok(srv, cli, procs)
        c, s = summary(cout)["total"], summary(sout)["total"]
        check(c["ios"] > 0 and c["errors"]["total"] == 0 and s["errors"]["total"] == 0,
              f"client {c['ios']} I/Os, errors {c['errors']} / {s['errors']}", *procs)
        if fwd in ("rpc", "relay"):  # relay: the server counts what it forwarded
            check(s["ios"] == c["ios"], f"server {s['ios']} vs client {c['ios']}", *procs)
        check("RoCE v2 on this host's network from" in cerr, "the device note", *procs)
        links = [json.loads(l) for out in (sout, cout) for l in out.splitlines()
                 if l.startswith('{"type":"roce"')]
        check(len(links) == 2 and all(l["tx_packets"] > 0 and l["rx_packets"] > 0 for l in links),
              f"RoCE link counters: {links}", *procs)
        retrans = sum(l["retransmits"] for l in links)
        injected = sum(sum(l["injected"].values()) for l in links)
        if lossy:
            check(injected > 0 and retrans > 0, f"injected {injected}, retransmits {retrans}",
                  *procs)
        else:
            check(injected == 0, f"injected {injected} without faults", *procs)
        for p in (srv, cli):
            check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
        print(f"roce {fwd}{' lossy' if lossy else ''}: {c['ios']} I/Os verified across the veth "
              f"pair, p50 {c['latency_us']['p50']:.0f} us, retransmits {retrans}, "
              f"injected faults {injected}")


def case_roce_rpc_local_inv(binary):
    """--fwd rpc across the veth pair over emu RoCE v2, the client started with
    --rpc-remote-invalidate off: its hello's RFC 8797 private data does not offer remote
    invalidation, so the server replies with plain SENDs (remote-invalidated 0 on the client)
    and the client invalidates every call's window itself (local-invalidated = I/Os), each
    reply handed on only after that invalidate completed (early_replies 0; the engine checks it
    against the client's send queue). Every 7th call carries a forged file handle (hidden
    --forge-handle-every): the server answers it NFS3ERR_BADHANDLE and serves the client on."""
    with Netns() as n:
        common = ["--json", "--rendezvous-timeout", "40"]
        srv, cli, procs = serve(
            command(binary, SERVER_EAL, ["--role", "server", "--listen", f"{n.addr_a}:7471",
                                         "--device", f"emu@roce:{n.addr_a}"] + common, n.a),
            command(binary, CLIENT_EAL, ["--role", "client", "--peer", f"{n.addr_a}:7471",
                                         "--duration", "2", "--device", f"emu@roce:{n.addr_b}",
                                         "--rpc-remote-invalidate", "off",
                                         "--forge-handle-every", "7"] + common, n.b))
        (_, sout, serr), (_, cout, cerr) = procs
        both_ok(srv, cli, procs)
        c, s = summary(cout)["total"], summary(sout)["total"]
        check(c["ios"] > 0 and c["errors"]["total"] == 0 and s["errors"]["total"] == 0,
              f"client {c['ios']} I/Os, errors {c['errors']} / {s['errors']}", *procs)
        check(c["remote_invalidations"] == 0 and c["local_invalidations"] == c["ios"],
              f"client: remote-invalidated {c['remote_invalidations']}, local-invalidated "
              f"{c['local_invalidations']}, I/Os {c['ios']}", *procs)
        check(c["errors"]["early_replies"] == 0, f"early replies: {c['errors']}", *procs)
        bad = s["errors"]["bad_handles"]
        check(bad == c["ios"] // 7 and s["ios"] + bad == c["ios"] and
              s["errors"]["refused_requests"] == 0,
              f"server: served {s['ios']}, bad handles {bad}; client {c['ios']} calls", *procs)
        check("dropped" not in serr, "the server dropped the client", *procs)
        for p in (srv, cli):
            check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
        print(f"roce rpc, remote invalidation off: {c['ios']} calls, {c['local_invalidations']} "
              f"windows invalidated by the client, {bad} forged handles answered BADHANDLE")


def roce_two_client_server(binary, n, extra):
    """A second address (10.47.0.3) in namespace b for a second client, and an rdmafwd server
    for two clients (one lane each, --io-depth 8) over emu RoCE v2 in namespace a, started with
    `extra`. Returns (that address, the options both sides share, a Popen with pipes, the
    server)."""
    addr_c = "10.47.0.3"
    subprocess.run(["ip", "-n", n.b, "addr", "add", f"{addr_c}/24", "dev",
                    n.b.replace("-b", "-vb")], check=True, timeout=10)
    common = ["--json", "--rendezvous-timeout", "40", "--io-depth", "8"]
    srv_eal = ["--lcores", "0@1,1@0,2@1", "--main-lcore", "0"] + MEM
    popen = lambda cmd: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
    srv = popen(command(binary, srv_eal, ["--role", "server", "--listen", f"{n.addr_a}:7471",
                                          "--clients", "2", "--nb-cores", "2", "--device",
                                          f"emu@roce:{n.addr_a}"] + extra + common, n.a))
    return addr_c, common, popen, srv


def case_roce_clients(binary):
    """One rdmafwd server serving two clients at once (--clients 2, one lane each) with each
    lane's QP and windows in a protection domain of its own (--isolate peer), over emu RoCE v2
    across the veth pair; the clients on two addresses of the second namespace. Client 1 runs
    rpc, client 2 write (through windows the server mapped in its lane's own PD): the server
    serves client 1 lane for lane, checks client 2's last writes against its goodbye, and both
    clients end verified."""
    RPCS = 500
    with Netns() as n:
        addr_c, common, popen, srv = roce_two_client_server(binary, n, ["--isolate", "peer"])
        clis, outs, seen = [], [], ""
        try:
            seen += wait_line(srv, srv.stderr, "waiting for 2 clients")
            # In this order (the server's lane 0 serves client 1): the second starts once the
            # server has connected the first. The rpc client counts RPCs, not seconds: the
            # server runs once the second client came, which may take seconds on a loaded
            # machine, and a duration (and the drain after it) would run out meanwhile.
            for fwd, a, until in (("rpc", n.addr_b, ["--io-count", str(RPCS)]),
                                  ("write", addr_c, ["--duration", "1.5"])):
                if clis:
                    seen += wait_line(srv, srv.stderr, "client 1 of 2")
                clis.append(popen(command(binary, CLIENT_EAL,
                                          ["--role", "client", "--peer", f"{n.addr_a}:7471",
                                           "--fwd", fwd] + until + ["--device",
                                           f"emu@roce:{a}"] + common, n.b)))
            outs = [finish(c) for c in clis]
            sout, serr = finish(srv)
            serr = seen + serr  # the lines wait_line read
        finally:
            for p in [srv] + clis:
                reap(p)
        procs = [("server", sout, serr)] + [(f"client {i + 1}", o, e)
                                            for i, (o, e) in enumerate(outs)]
        check(srv.returncode == 0 and all(c.returncode == 0 for c in clis),
              f"exit: server {srv.returncode}, clients {[c.returncode for c in clis]}", *procs)
        s = summary(sout)
        c1, c2 = (summary(o)["total"] for o, _ in outs)
        check(c1["ios"] == RPCS and c2["ios"] > 0 and c1["errors"]["total"] == 0 and
              c2["errors"]["total"] == 0, f"clients: {c1['ios']} / {c2['ios']} I/Os, errors "
              f"{c1['errors']} / {c2['errors']}", *procs)
        check(s["lanes"][0]["ios"] == c1["ios"],
              f"server lane 0 served {s['lanes'][0]['ios']}, rpc client completed {c1['ios']}",
              *procs)
        check(s["total"]["errors"]["total"] == 0 and s["total"]["errors"]["refused_remote"] == 0,
              f"server errors {s['total']['errors']}", *procs)
        check("client 1 of 2" in serr and "client 2 of 2" in serr, "clients not announced",
              *procs)
        check("--isolate peer: each lane's QP" in serr, "the lanes were not isolated", *procs)
        m = re.search(r"checked the last write of (\d+) slot\(s\) against the client's goodbye: "
                      r"all match", serr)
        check(m and int(m.group(1)) > 0, "the write client's slots were not checked", *procs)
        for p in [srv] + clis:
            check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
        print(f"roce-clients: rpc client {c1['ios']} RPCs, write client {c2['ios']} WRITEs, "
              f"{m.group(1)} slots checked, isolated lanes")


def case_roce_client_killed(binary):
    """One rdmafwd server serving two rpc clients at once over emu RoCE v2 across the veth
    pair; the second is killed (SIGKILL) in the middle of its run. The server drops it alone,
    with one line naming it, its lane's QP to the error state; the first client carries on to
    its goodbye and ends verified with the server's count for its lane equal to its own; the
    server then ends 1 (a client was lost) with nothing left behind."""
    with Netns() as n:
        addr_c, common, popen, srv = roce_two_client_server(binary, n, [])
        survivor = victim = None
        seen, out = "", ("", "")
        try:
            seen += wait_line(srv, srv.stderr, "waiting for 2 clients")
            client = lambda a, d: popen(command(binary, CLIENT_EAL,
                                                ["--role", "client", "--peer",
                                                 f"{n.addr_a}:7471", "--duration", d, "--device",
                                                 f"emu@roce:{a}"] + common, n.b))
            survivor = client(n.addr_b, "4")
            seen += wait_line(srv, srv.stderr, "client 1 of 2")
            victim = client(addr_c, "60")
            seen += wait_line(srv, srv.stderr, "client 2 of 2")
            time.sleep(1.0)  # in the middle of both runs
            victim.kill()
            victim.wait()
            out = finish(survivor)
            sout, serr = finish(srv)
            serr = seen + serr  # the lines wait_line read
        finally:
            for p in (srv, survivor, victim):
                if p:
                    reap(p)
        procs = [("server", sout, serr), ("survivor", *out)]
        check(survivor.returncode == 0, f"survivor exit {survivor.returncode}", *procs)
        check(srv.returncode == 1, f"server exit {srv.returncode}, want 1 (a client lost)", *procs)
        cl = clients(sout)
        check(cl and [r["dropped"] for r in cl["served"]] == [False, True], f"clients: {cl}",
              *procs)
        dropped = [l for l in rdmafwd_lines(serr) if " dropped: " in l]
        check(len(dropped) == 1 and f"client {cl['served'][1]['peer']} dropped" in dropped[0] and
              "went away during the run" in dropped[0] and "served on" in dropped[0],
              f"server drop lines {dropped}", *procs)
        check(not [l for l in rdmafwd_lines(serr) if "rdmafwd: the client" in l],
              "the server ended at the lost client", *procs)
        s, c = summary(sout), summary(out[0])["total"]
        check(c["ios"] > 0 and c["errors"]["total"] == 0, f"survivor: {c}", *procs)
        check(s["lanes"][0]["ios"] == c["ios"],
              f"server lane 0 served {s['lanes'][0]['ios']}, the survivor completed {c['ios']}",
              *procs)
        # The victim could clean nothing up (SIGKILL); the next rdmafwd removes its runtime
        # directory (stale-runtime-dir). The others leave nothing.
        for p in (srv, survivor):
            check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
        print(dropped[0])
        print(f"roce-client-killed: the survivor's {c['ios']} RPCs served in full")


def case_serve_next_client(binary):
    """A one-client server asked to serve on (--serve-clients 0), over emu RoCE v2 across the
    veth pair: its client is killed (SIGKILL) in the middle of its run; the server says so in one
    line and waits for the next client (its lane's QP drained, RESET, reconnected with a new
    initial PSN, its windows invalidated); a second client is served to the end, verified, with
    the server's count equal to its own; the server is still up, and Ctrl-C ends it with exit 0,
    leaving nothing behind."""
    with Netns() as n:
        common = ["--json", "--rendezvous-timeout", "40"]
        srv = start(binary, SERVER_EAL, ["--role", "server", "--listen", f"{n.addr_a}:7471",
                                         "--serve-clients", "0", "--device",
                                         f"emu@roce:{n.addr_a}"] + common, n.a)
        client = lambda extra: start(binary, CLIENT_EAL,
                                     ["--role", "client", "--peer", f"{n.addr_a}:7471",
                                      "--device", f"emu@roce:{n.addr_b}"] + common + extra, n.b)
        victim = cli = None
        sout, serr, cout, cerr = "", "", "", ""
        tail = Tail(srv)
        try:
            tail.wait("err", "waiting for a client")
            victim = client(["--stats-period", "0.2"])
            wait_line(victim, victim.stdout, '"type":"periodic"')
            victim.kill()
            victim.communicate()
            # The drop line ends "; waiting for the next client" and the wait's own line follows
            # ("waiting for the next client on ADDR"): wait for the latter, both times, or the
            # second wait can match the first drop's second line and stop the server mid-run.
            at = tail.wait("err", "waiting for the next client on", 0, 20)
            cli = client(["--duration", "1.5"])
            cout, cerr = finish(cli)
            # Served, and still up: it waits for a third.
            tail.wait("err", "waiting for the next client on", at + 1, 20)
            up = srv.poll() is None
            srv.send_signal(signal.SIGINT)
            sout, serr = tail.finish(20)
        finally:
            for p in (srv, victim, cli):
                if p:
                    reap(p)
        procs = [("server", sout, serr), ("client 2", cout, cerr)]
        check(up, "the server ended after the second client", *procs)
        check(cli.returncode == 0 and srv.returncode == 0,
              f"exit: server {srv.returncode}, client {cli.returncode}", *procs)
        drops = [l for l in rdmafwd_lines(serr) if "dropped" in l]
        check(len(drops) == 1 and "went away during the run" in drops[0] and
              "waiting for the next client" in drops[0], f"drop lines {drops}", *procs)
        c, s = summary(cout)["total"], summary(sout)["total"]
        check(c["ios"] > 0 and c["errors"]["total"] == 0 and s["errors"]["total"] == 0 and
              s["ios"] == c["ios"], f"client {c['ios']} / server {s['ios']} I/Os, errors "
              f"{c['errors']} / {s['errors']}", *procs)
        cl = clients(sout)
        check(cl and [r["dropped"] for r in cl["served"]] == [True, False], f"clients: {cl}",
              *procs)
        check("stopped while waiting for the next client (2 served)" in serr, "no end line",
              *procs)
        for p in (srv, cli):
            check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
        print(drops[0])
        print(f"serve-next-client: the second client's {c['ios']} RPCs served in full")


def case_roce_server_restart(binary, extra=()):
    """A client over emu RoCE v2 across the veth pair whose server is killed (SIGKILL) in the
    middle of the run and started again 1 s later on the same port: the client says so in one
    line (the I/Os it completed, those in flight abandoned and counted), reconnects within its
    --reconnect-for (a new session; its QP drained, RESET, reconnected with a new initial PSN,
    its windows invalidated) in one more line, and finishes verified with exit 0: the new
    server served exactly the I/Os the client completed after the reconnect (nothing lost or
    twice), and nothing is left behind."""
    with Netns() as n:
        common = ["--json", "--rendezvous-timeout", "40"]
        server = lambda: start(binary, SERVER_EAL,
                               ["--role", "server", "--listen", f"{n.addr_a}:7471", "--device",
                                f"emu@roce:{n.addr_a}"] + common, n.a)
        srv1 = server()
        srv2 = cli = None
        sout = serr = cout = cerr = ""
        try:
            wait_line(srv1, srv1.stderr, "waiting for a client")
            cli = start(binary, CLIENT_EAL, ["--role", "client", "--peer", f"{n.addr_a}:7471",
                                             "--duration", "4", "--stats-period", "0.2",
                                             "--device", f"emu@roce:{n.addr_b}"] + common +
                        list(extra), n.b)
            wait_line(cli, cli.stdout, '"type":"periodic"')
            srv1.kill()
            srv1.communicate()
            time.sleep(1.0)
            srv2 = server()
            cout, cerr = finish(cli)
            sout, serr = finish(srv2, 20)
        finally:
            for p in (srv1, srv2, cli):
                if p:
                    reap(p)
        procs = [("server 2", sout, serr), ("client", cout, cerr)]
        check(cli.returncode == 0 and srv2.returncode == 0,
              f"exit: client {cli.returncode}, server 2 {srv2.returncode}", *procs)
        lines = rdmafwd_lines(cerr)
        lost = [l for l in lines if "failed (" in l]
        back = [l for l in lines if "reconnected to" in l]
        check(len(lost) == 1 and len(back) == 1, f"client lines {lines}", *procs)
        m = re.search(r"after (\d+) I/O\(s\); (\d+) in flight abandoned", lost[0])
        check(m, f"{lost[0]!r}", *procs)
        before, abandoned = int(m.group(1)), int(m.group(2))
        c, s = summary(cout)["total"], summary(sout)["total"]
        # Every I/O issued completed once: served and verified, or abandoned at the failure.
        f = c["faults"]
        # The errors of the failure (what was in flight, the lane that failed) are excused by
        # the reconnect: what is left is what the exit status counts (none).
        e = c["errors"]
        check(e["excused"] >= abandoned > 0 and e["total"] - e["excused"] == 0,
              f"client errors {e}: total - excused must be 0 after a reconnect, exit 0", *procs)
        check(c["errors"]["verify"] == 0 and f["abandoned_ios"] == abandoned and
              f["issued"] == c["ios"] + abandoned and f["lost_ios"] == 0,
              f"client: issued {f['issued']}, completed {c['ios']}, abandoned "
              f"{f['abandoned_ios']} (the line said {abandoned}), errors {c['errors']}", *procs)
        check(before > 0 and c["ios"] > before and s["ios"] == c["ios"] - before and
              s["errors"]["total"] == 0,
              f"client {c['ios']} I/Os ({before} before the reconnect), server 2 served "
              f"{s['ios']}, its errors {s['errors']}", *procs)
        for p in (srv2, cli):
            check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
        print(lost[0])
        print(back[0])
        print(f"roce-server-restart: {before} RPCs before, {s['ios']} after, {abandoned} "
              "abandoned and counted, verified")


def case_server_stops_answering(binary):
    """The server stops answering in the middle of a write run (SIGSTOP: alive, its QP never
    answers again) and the transport's retry timer is longer than the test (ack_timeout=20:
    4.3 s x 8): the client must end by its own bounds all the same, --duration 1 plus the 5 s
    drain bound (doc/guides/rdmafwd.md, "How long a stop takes"), the I/Os in flight abandoned and counted,
    exit 1 and nothing left behind; the teardown must not wait for the transport either."""
    port = free_port()
    srv = start(binary, SERVER_EAL, ["--role", "server", "--listen", f"127.0.0.1:{port}",
                                     "--rendezvous-timeout", "30"])
    cli = None
    sout = serr = cout = cerr = ""
    try:
        wait_line(srv, srv.stdout, "waiting for a client")
        cli = start(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}",
                                         "--fwd", "write", "--duration", "1", "--json",
                                         "--stats-period", "0.2", "--device",
                                         "emu,ack_timeout=20"])
        wait_line(cli, cli.stdout, '"type":"periodic"')
        srv.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            cli.wait(30)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - t0
        srv.send_signal(signal.SIGCONT)
        cout, cerr = finish(cli, 30)
        sout, serr = finish(srv, 30)
    finally:
        for p in (srv, cli):
            if p:
                p.send_signal(signal.SIGCONT)
                reap(p)
    procs = [("server", sout, serr), ("client", cout, cerr)]
    # The stop came less than 1 s into the run: 1 s, the 5 s drain bound, 2 s for the rest.
    check(took < 8, f"the client ended {took:.1f} s after its server stopped answering "
          "(bound: --duration 1 + the 5 s drain + 2 s)", *procs)
    check(cli.returncode == 1, f"client exit {cli.returncode} (1: I/Os abandoned)", *procs)
    c = summary(cout)
    check(c["seconds"] < 1 + 5 + 1, f"the client's run lasted {c['seconds']:.1f} s", *procs)
    f = c["total"]["faults"]
    check(f["abandoned_ios"] > 0 and f["unrecovered_lanes"] == 1,
          f"abandoned {f['abandoned_ios']}, lanes not recovered {f['unrecovered_lanes']}", *procs)
    check(not leftovers(cli.pid), f"left behind: {leftovers(cli.pid)}", *procs)
    print(f"server stopped answering: the client ended {took:.1f} s later (run "
          f"{c['seconds']:.1f} s, {f['abandoned_ios']} I/Os abandoned, exit 1)")


def sigint_mid_run(binary, who):
    """Ctrl-C (SIGINT) to the server or the client in the middle of a run: that side says
    goodbye; the other finishes its I/Os in flight (the server serves them) and ends too, both
    with exit 0 within a few seconds, the client with one line when it was the server that
    stopped; every I/O the client completed was served (the counts agree), nothing failed, and
    nothing is left in /dev/shm or /var/run/dpdk."""
    port = free_port()
    srv = start(binary, SERVER_EAL, ["--role", "server", "--listen", f"127.0.0.1:{port}",
                                     "--json", "--rendezvous-timeout", "30"])
    cli = None
    try:
        wait_line(srv, srv.stderr, "waiting for a client")
        cli = start(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}",
                                         "--json", "--stats-period", "0.2"])
        wait_line(cli, cli.stdout, '"type":"periodic"')
        t0 = time.monotonic()
        (srv if who == "server" else cli).send_signal(signal.SIGINT)
        cout, cerr = finish(cli, 20)
        sout, serr = finish(srv, 20)
        took = time.monotonic() - t0
    finally:
        for p in (srv, cli):
            if p:
                reap(p)
    procs = [("server", sout, serr), ("client", cout, cerr)]
    check(cli.returncode == 0 and srv.returncode == 0,
          f"exit: server {srv.returncode}, client {cli.returncode}", *procs)
    check(took < 8, f"the ends took {took:.1f} s", *procs)
    stopped = "rdmafwd: signal received, stopped"
    check(stopped in (serr if who == "server" else cerr + cout), "no stop line", *procs)
    quiet = [l for l in rdmafwd_lines(cerr if who == "server" else serr)
             if re.search(r"goodbye|went away|error|dropped|abandoned", l)]
    if who == "server":
        check(len(quiet) == 1 and "said goodbye (it is stopping)" in quiet[0],
              f"client lines {quiet}", *procs)
    else:
        check(not quiet, f"server lines {quiet}", *procs)
    c, s = summary(cout)["total"], summary(sout)["total"]
    check(c["ios"] > 0 and c["errors"]["total"] == 0 and s["errors"]["total"] == 0 and
          s["ios"] == c["ios"], f"client {c['ios']} / server {s['ios']} I/Os, errors "
          f"{c['errors']} / {s['errors']}", *procs)
    for p in (srv, cli):
        check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
    print(f"Ctrl-C to the {who} mid-run: both exit 0 in {took:.1f} s, {c['ios']} RPCs served "
          "and counted on both sides" + (f"; client: {quiet[0]}" if quiet else ""))


def idle_door(binary, n_idle):
    """n_idle TCP connections to the rendezvous port that send nothing, then a real client: the
    server admits without waiting on any connection (the Door), so the client is served at once
    and finishes in its normal time, verified; the idle ones are refused when their hello
    deadline passes (or the server ends first). Returns (seconds the client took, server
    stderr)."""
    port = free_port()
    srv = start(binary, SERVER_EAL, ["--role", "server", "--listen", f"127.0.0.1:{port}",
                                     "--json", "--rendezvous-timeout", "30"])
    idle = []
    try:
        wait_line(srv, srv.stderr, "waiting for a client")
        for _ in range(n_idle):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        t0 = time.monotonic()
        cli, cout, cerr = run(binary, CLIENT_EAL, ["--role", "client", "--peer",
                                                   f"127.0.0.1:{port}", "--duration", "1.5",
                                                   "--json"])
        took = time.monotonic() - t0
        sout, serr = finish(srv, 30)
    finally:
        for c in idle:
            c.close()
        reap(srv)
    procs = [("server", sout, serr), ("client", cout, cerr)]
    check(cli.returncode == 0 and srv.returncode == 0,
          f"exit: server {srv.returncode}, client {cli.returncode}", *procs)
    c, s = summary(cout)["total"], summary(sout)["total"]
    check(c["ios"] > 0 and c["errors"]["total"] == 0 and s["ios"] == c["ios"],
          f"client {c['ios']} / server {s['ios']} I/Os, errors {c['errors']}", *procs)
    # A client alone takes about 1.5 s of run and a second or two of start-up; one that queued
    # behind the silent connections would wait out their 10 s hello deadline.
    check(took < 8, f"the client took {took:.1f} s behind {n_idle} idle connections", *procs)
    for p in (srv, cli):
        check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
    return took, serr


def case_idle_door(binary):
    took, _ = idle_door(binary, 50)
    print(f"50 idle connections: the real client served in {took:.1f} s, verified")


def case_server_dies_mid_run(binary):
    """kill -9 of the server while forwarding, the client on emu's shared-memory wire (which a
    restarted server cannot join: no reconnect): the client sees the rendezvous connection close
    without a goodbye, stops at once and says so in one line (not one per window or I/O), exit
    1, leaving nothing behind."""
    _, cli, cout, cerr, took = killed_mid_run(binary, "server")
    procs = [("client", cout, cerr)]
    lines = [l for l in rdmafwd_lines(cerr) if "Ctrl-C" not in l and "fwd rpc" not in l and
             not re.search(r"device:|windows:|cores:|telemetry:|client: server 127|forwarding;",
                           l)]
    check(cli.returncode == 1, f"client exit {cli.returncode}", *procs)
    # The event in one line, and the I/Os it cut off counted in one more.
    check(len(lines) == 2 and "went away during the run" in lines[1] and
          re.search(r"abandoned I/Os \d+", lines[0]), f"client lines {lines}", *procs)
    check(took < 10, f"the client took {took:.1f} s to end", *procs)
    check(not leftovers(cli.pid), f"left: {leftovers(cli.pid)}", *procs)
    print(f"server killed: the client ended in {took:.1f} s with: " +
          " | ".join(lines))


def case_netns_unreachable(binary):
    # Across the veth pair: a wrong port (refused at once, retried until the timeout) and a
    # host nobody has (no answer): each one line within the client's timeout, exit 1. (Inside
    # the namespaces: the host's own network may have a proxy that answers any address.)
    with Netns() as n:
        srv = start(binary, SERVER_EAL, ["--role", "server", "--listen", f"{n.addr_a}:7471",
                                         "--rendezvous-timeout", "30"], n.a)
        try:
            wait_line(srv, srv.stdout, "waiting for a client")
            for to, why in ((f"{n.addr_a}:7472", "Connection refused"),
                            ("10.47.0.3:7471", "")):
                t0 = time.monotonic()
                cli = start(binary, CLIENT_EAL, ["--role", "client", "--peer", to,
                                                 "--rendezvous-timeout", "1"], n.b)
                out, err = finish(cli)
                check(time.monotonic() - t0 < 30, "waited too long")
                one_line(cli, out, err, 1, f"no server at {to} within 1 s (last attempt: {why}")
            srv.send_signal(signal.SIGINT)
            sout, serr = finish(srv)
            check(srv.returncode == 130, f"server exit {srv.returncode}", ("server", sout, serr))
            check(not leftovers(srv.pid), f"left: {leftovers(srv.pid)}")
        finally:
            reap(srv)


# ---- Bad cases ---------------------------------------------------------------------------------

def one_line(p, out, err, code, text, who="rdmafwd"):
    lines = rdmafwd_lines(err)
    errs = [l for l in lines if "Ctrl-C to stop" not in l]
    check(p.returncode == code, f"exit {p.returncode}, want {code}", (who, out, err))
    check(len(errs) == 1, f"want one error line, got {errs}", (who, out, err))
    check(text in errs[0], f"{errs[0]!r} lacks {text!r}", (who, out, err))
    check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", (who, out, err))
    print(f"exit {code}: {errs[0]}")


def case_no_server(binary):
    port = free_port()
    t0 = time.monotonic()
    p, out, err = run(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}",
                                           "--rendezvous-timeout", "1"])
    one_line(p, out, err, 1, f"no server at 127.0.0.1:{port} within 1 s (last attempt: "
                             "Connection refused; is the server running?)")
    check(time.monotonic() - t0 < 30, "waited too long")


def case_bad_host(binary):
    p, out, err = run(binary, CLIENT_EAL, ["--role", "client", "--peer", "no-such-host.invalid:9"])
    one_line(p, out, err, 2, "cannot resolve 'no-such-host.invalid'")


def case_bad_address(binary):
    # Syntax: refused before the EAL starts. Not an address of this host: refused at bind.
    p, out, err = run(binary, SERVER_EAL, ["--role", "server", "--listen", "1.2.3.4:99999"])
    check(p.returncode == 2 and "port '99999' is not a number in 0..65535" in err,
          f"exit {p.returncode}", ("server", out, err))
    p, out, err = run(binary, SERVER_EAL, ["--role", "server", "--listen", "203.0.113.9:7471"])
    one_line(p, out, err, 2, "cannot listen on 203.0.113.9:7471: Cannot assign requested address"
                             " (not an address of this host)")


def case_port_busy(binary):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        p, out, err = run(binary, SERVER_EAL, ["--role", "server", "--listen", f"127.0.0.1:{port}"])
    finally:
        s.close()
    one_line(p, out, err, 1, f"cannot listen on 127.0.0.1:{port}: Address already in use")


def case_no_client(binary):
    port = free_port()
    t0 = time.monotonic()
    p, out, err = run(binary, SERVER_EAL, ["--role", "server", "--listen", f"127.0.0.1:{port}",
                                           "--rendezvous-timeout", "1"])
    one_line(p, out, err, 1, f"no client on 127.0.0.1:{port} within 1 s")
    check(time.monotonic() - t0 < 30, "waited too long")


def fake_server(reply, port_box, ready):
    """A TCP server that reads the client's hello and answers `reply` bytes, then closes."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port_box.append(s.getsockname()[1])
    ready.set()
    s.settimeout(BUDGET)
    try:
        c, _ = s.accept()
        c.settimeout(BUDGET)
        c.recv(4096)
        c.sendall(reply)
        c.close()
    except OSError:
        pass
    s.close()


def against_fake_server(binary, reply):
    port, ready = [], threading.Event()
    t = threading.Thread(target=fake_server, args=(reply, port, ready), daemon=True)
    t.start()
    ready.wait(10)
    p, out, err = run(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port[0]}",
                                           "--rendezvous-timeout", "5"])
    t.join(10)
    return p, out, err


def case_version_mismatch(binary):
    p, out, err = against_fake_server(binary, b"RDXR\x09\x02\x00\x00")
    one_line(p, out, err, 1, "speaks rendezvous version 9, this program speaks 1")


def case_foreign_server(binary):
    p, out, err = against_fake_server(binary, b"SSH-2.0-OpenSSH_9.2\r\n")
    one_line(p, out, err, 1, "does not speak the rdmx rendezvous")


def case_server_dies_mid_exchange(binary):
    p, out, err = against_fake_server(binary, b"RDXR\x01\x02\x00\x20wire x")
    one_line(p, out, err, 1, "closed the connection in the middle of welcome")


def serve_next_client(binary, srv, port):
    """A server on 127.0.0.1:port that is waiting for a client serves a good one to the end.
    Returns (the client, procs) once both have ended."""
    cli, cout, cerr = run(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}",
                                               "--duration", "0.5", "--json"])
    sout, serr = finish(srv)
    return cli, [("server", sout, serr), ("client", cout, cerr)]


def case_client_dies_mid_exchange(binary):
    # A client that sends half a hello and goes: the server says so in one line and waits for
    # the next client (a broken client does not end a server).
    port = free_port()
    srv = start(binary, SERVER_EAL, ["--role", "server", "--listen", f"127.0.0.1:{port}",
                                     "--rendezvous-timeout", "30"])
    try:
        wait_line(srv, srv.stdout, "waiting for a client")
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.sendall(b"RDXR\x01\x01\x00\x40fwd")
        c.close()
        # It is still waiting: now a good client is served.
        cli, procs = serve_next_client(binary, srv, port)
    finally:
        reap(srv)
    (_, sout, serr), (_, cout, cerr) = procs
    check(cli.returncode == 0 and srv.returncode == 0,
          f"exit: server {srv.returncode}, client {cli.returncode}", *procs)
    lines = [l for l in rdmafwd_lines(serr) if "not served" in l]
    check(len(lines) == 1 and "closed the connection in the middle of hello" in lines[0],
          f"server lines {lines}", *procs)
    print(lines[0])


def case_size_mismatch(binary):
    port = free_port()
    srv = start(binary, SERVER_EAL, ["--role", "server", "--listen", f"127.0.0.1:{port}",
                                     "--rendezvous-timeout", "30"])
    try:
        wait_line(srv, srv.stdout, "waiting for a client")
        cli, out, err = run(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}",
                                                 "--page-size", "65536"])
        one_line(cli, out, err, 2, f"refused by 127.0.0.1:{port}: the client runs page-size "
                                   "65536, this server 4096: start both with the same --page-size")
        cli, out, err = run(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}",
                                                 "--io-depth", "8"])
        one_line(cli, out, err, 2, "the client runs io-depth 8, this server 32")
        cli, out, err = run(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}",
                                                 "--metadata", "8"])
        one_line(cli, out, err, 2, "the client runs metadata 8, this server 0: start both with "
                                   "the same --metadata")
        cli, out, err = run(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}",
                                                 "--device", roce_dev(2)])
        one_line(cli, out, err, 2, "the client runs link network, this server shm: start both on "
                                   "one link")
        srv.send_signal(signal.SIGINT)
        sout, serr = finish(srv)
    finally:
        reap(srv)
    lines = [l for l in rdmafwd_lines(serr) if "not served" in l]
    check(len(lines) == 4, f"server lines {lines}", ("server", sout, serr))
    check(srv.returncode == 130, f"server exit {srv.returncode}", ("server", sout, serr))
    check(not leftovers(srv.pid), f"left: {leftovers(srv.pid)}")
    # The other way round: a RoCE server and a shared-memory client. Before the link field the
    # client waited 30 s for a shared wire the server never made.
    port = free_port()
    srv = start(binary, SERVER_EAL, ["--role", "server", "--listen", f"127.0.0.1:{port}",
                                     "--device", roce_dev(1), "--rendezvous-timeout",
                                     "30"])
    try:
        wait_line(srv, srv.stdout, "waiting for a client")
        t0 = time.monotonic()
        cli, out, err = run(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}"])
        one_line(cli, out, err, 2, "the client runs link shm, this server network: start both on "
                                   "one link")
        check(time.monotonic() - t0 < 10, f"refusal took {time.monotonic() - t0:.1f} s")
        srv.send_signal(signal.SIGINT)
        sout, serr = finish(srv)
    finally:
        reap(srv)
    check(srv.returncode == 130, f"server exit {srv.returncode}", ("server", sout, serr))


def interrupted_wait(binary, eal, args, announce, phase):
    p = start(binary, eal, args)
    try:
        wait_line(p, p.stdout, announce)
        p.send_signal(signal.SIGINT)
        out, err = finish(p)
    finally:
        reap(p)
    one_line(p, out, err, 130, f"rdmafwd: interrupted {phase}")


def case_sigint_server(binary):
    interrupted_wait(binary, SERVER_EAL, ["--role", "server", "--listen", str(free_port())],
                     "Ctrl-C to stop", "while waiting for the peer")


def case_sigint_client(binary):
    interrupted_wait(binary, CLIENT_EAL, ["--role", "client", "--peer",
                                          f"127.0.0.1:{free_port()}"],
                     "Ctrl-C to stop", "while waiting for the peer")


def killed_mid_run(binary, victim):
    """A server and a client over loopback; once the client forwards, `victim` ("server" or
    "client") is killed (SIGKILL). Returns (server, client, the survivor's stdout and stderr,
    seconds it took to end after the kill)."""
    port = free_port()
    srv = start(binary, SERVER_EAL, ["--role", "server", "--listen", f"127.0.0.1:{port}"])
    cli = start(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}", "--json",
                                     "--stats-period", "0.2"])
    dead, survivor = (srv, cli) if victim == "server" else (cli, srv)
    try:
        wait_line(cli, cli.stdout, '"type":"periodic"')
        dead.kill()
        dead.communicate()
        t0 = time.monotonic()
        out, err = finish(survivor, 30)
        took = time.monotonic() - t0
    finally:
        for p in (srv, cli):
            reap(p)
    return srv, cli, out, err, took


def case_client_dies_mid_run(binary):
    # kill -9 of the client while forwarding: the server sees the rendezvous connection close
    # without a goodbye, stops at once and says so (exit 1), leaving nothing behind.
    srv, cli, sout, serr, took = killed_mid_run(binary, "client")
    lines = rdmafwd_lines(serr)
    check(srv.returncode == 1, f"server exit {srv.returncode}", ("server", sout, serr))
    check(any("went away during the run" in l for l in lines), f"lines {lines}",
          ("server", sout, serr))
    check(not leftovers(srv.pid), f"left: {leftovers(srv.pid)}")
    # The client's own runtime directory (it was killed) is removed by the next rdmafwd.
    import shutil
    d = runtime_dir_left(cli.pid)
    if d:
        shutil.rmtree(d, ignore_errors=True)
    print(f"server stopped {took:.2f} s after the client died: "
          f"{[l for l in lines if 'went away' in l][0]}")


# ---- blockd (the C API's rdmx_listen/rdmx_connect_to) -------------------------------------------

def blockd_pair(blockd, listen, peer, server_ns=None, client_ns=None, devices=(None, None),
                extra=()):
    args = ["--requests", "300", "--blocks", "256"] + list(extra)
    dev = [["--device", d] if d else [] for d in devices]
    srv, cli, procs = serve(
        command(blockd, None, ["--role", "server", "--listen", listen] + args + dev[0], server_ns),
        command(blockd, None, ["--role", "client", "--peer", peer] + args + dev[1], client_ns),
        ready="waiting for a client")
    (_, sout, serr), (_, cout, cerr) = procs
    both_ok(srv, cli, procs, "blockd ")
    check("verified end to end" in cout and "server done" in sout, "no verified run", *procs)
    check(not [f for f in os.listdir("/dev/shm") if f.endswith(f"blockd-{srv.pid}")], "wire left",
          *procs)
    print([l for l in cout.splitlines() if "verified" in l][0])
    return cout


def case_blockd_loopback(binary, blockd):
    port = free_port()
    blockd_pair(blockd, f"127.0.0.1:{port}", f"127.0.0.1:{port}")


def case_blockd_netns(binary, blockd):
    with Netns() as n:
        blockd_pair(blockd, f"{n.addr_a}:7471", f"{n.addr_a}:7471", n.a, n.b)


def case_blockd_roce(binary, blockd):
    # blockd (the C API) with each side on its own emu device speaking RoCE v2 across the pair.
    with Netns() as n:
        blockd_pair(blockd, f"{n.addr_a}:7471", f"{n.addr_a}:7471", n.a, n.b,
                    (f"emu@roce:{n.addr_a}", f"emu@roce:{n.addr_b}"))


def case_blockd_roce_metadata(binary, blockd):
    # --metadata 8 over emu RoCE v2: each block's 4 KiB and its 8 bytes of metadata (kept in
    # separate arrays on both sides) cross in one WRITE/READ through one interleaved window; the
    # server checks the reference tags of what is written, the client data and metadata read.
    # --max-io 16: 16 x 4104 bytes are 65 packets of 1 KiB, more than emu's RoCE window of 64:
    # acknowledged in parts (AckReq every half window, doc/guides/emu.md).
    with Netns() as n:
        cout = blockd_pair(blockd, f"{n.addr_a}:7471", f"{n.addr_a}:7471", n.a, n.b,
                           (f"emu@roce:{n.addr_a}", f"emu@roce:{n.addr_b}"),
                           ["--metadata", "8", "--max-io", "16"])
        line = [l for l in cout.splitlines() if l.startswith("blockd: metadata:")]
        check(line and "8 bytes per block" in line[0] and "verified" in line[0],
              "no verified metadata", ("client", cout, ""))
        print(line[0])


def blockd_two_clients(blockd, steps):
    """A blockd server for two clients at once (--clients 2), each client's core in a protection
    domain of its own (--isolate peer), over emu RoCE v2 across the veth pair; the clients run on
    two addresses of the second namespace (n.addr_b and 10.47.0.3), each its own emu@roce device.
    steps(n, addr_c, server, srv, client, clis) starts them (client(addr, requests) starts one)
    and appends to clis those that must end 0 with their data verified. The server must end 0
    with its wire gone. Returns (server stdout, server stderr, procs) for more checks."""
    with Netns() as n:
        addr_c = "10.47.0.3"
        subprocess.run(["ip", "-n", n.b, "addr", "add", f"{addr_c}/24", "dev",
                        n.b.replace("-b", "-vb")], check=True, timeout=10)
        server = f"{n.addr_a}:7471"
        args = ["--blocks", "256"]
        popen = lambda cmd: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True)
        client = lambda addr, requests: popen(command(
            blockd, None, ["--role", "client", "--peer", server, "--requests", str(requests),
                           "--device", f"emu@roce:{addr}"] + args, n.b))
        srv = popen(command(blockd, None, ["--role", "server", "--listen", server, "--clients",
                                           "2", "--isolate", "peer", "--device",
                                           f"emu@roce:{n.addr_a}"] + args, n.a))
        clis = []
        try:
            wait_line(srv, srv.stdout, "waiting for client 1 of 2")
            steps(n, addr_c, server, srv, client, clis)
            outs = [finish(c) for c in clis]
            sout, serr = finish(srv)
        finally:
            for p in [srv] + clis:
                reap(p)
        procs = [("server", sout, serr)] + [(f"client {i + 1}", o, e)
                                            for i, (o, e) in enumerate(outs)]
        check(srv.returncode == 0 and all(c.returncode == 0 for c in clis),
              f"exit: server {srv.returncode}, clients {[c.returncode for c in clis]}", *procs)
        for o, _ in outs:
            check("verified end to end" in o, "a client did not verify its run", *procs)
        check("2 client(s), each core in a protection domain of its own" in sout,
              "the server did not isolate its clients", *procs)
        check(not [f for f in os.listdir("/dev/shm") if f.endswith(f"blockd-{srv.pid}")],
              "wire left", *procs)
        return sout, serr, procs


def case_blockd_roce_clients(binary, blockd):
    """One blockd server serving two clients at once, isolated, over emu RoCE v2: every client's
    I/O verified end to end, and the server served both."""
    def steps(n, addr_c, server, srv, client, clis):
        clis += [client(n.addr_b, 300), client(addr_c, 300)]
    sout, _, procs = blockd_two_clients(blockd, steps)
    served = [int(m) for m in re.findall(r"client \d \(.*\): (\d+) requests served", sout)]
    check(len(served) == 2 and all(x > 0 for x in served), f"served {served}", *procs)
    print(f"blockd-roce-clients: two clients served at once over RoCE v2, isolated, "
          f"requests {served}")


def case_capi_peers(binary, blockd, peers):
    """The C API across the veth pair on emu RoCE v2 (tests/capi/test_capi_peers.c): a server
    exposes one window on a victim's connection; the client's attacker connection uses the
    victim's exact rkey ATTEMPTS times, recovering after each refusal. Isolated (a PD per
    connection): nothing accepted, changed or disclosed, every attempt counted on the attacker's
    server core. Not isolated: every attempt accepted (what the bed would miss without the PD
    check). Both: the victim's rkey, once the server unmapped the window, refused across the
    network (the stale key) and counted on the victim's server core."""
    # Each refused attempt errors the server's QP for the attacker and reconnects it (about 5 ms,
    # 20 ms under ASan): 2,000 attempts, 300 in a sanitizer build, stay well inside BUDGET.
    many = 2000 if os.environ.get("RDMX_SANITIZE", "none") == "none" else 300
    with Netns() as n:
        for isolate, attempts, guard in ((1, many, 0), (0, 20, 0), (1, many, 100)):
            port = 7471 + isolate + guard
            srv = subprocess.Popen(
                command(peers, None, ["server", f"{n.addr_a}:{port}", f"emu@roce:{n.addr_a}",
                                      str(isolate), str(guard)], n.a),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                wait_line(srv, srv.stdout, "waiting on")
                cli = subprocess.Popen(
                    command(peers, None, ["client", f"{n.addr_a}:{port}", f"emu@roce:{n.addr_b}",
                                          str(attempts)], n.b),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                cout, cerr = finish(cli)
                sout, serr = finish(srv)
            finally:
                reap(srv)
            procs = [("server", sout, serr), ("client", cout, cerr)]
            both_ok(srv, cli, procs, f"isolate={isolate}: ")
            m = re.search(r"peers: attempts=(\d+) accepted=(\d+) changed=(\d+) disclosed=(\d+) "
                          r"stale=(\w+) refused_attacker=(\d+) refused_victim=(\d+) "
                          r"cut_off_after=(\d+)", cout)
            check(m, "no result line", *procs)
            tried, acc, changed, disclosed, stale, rx, rv, cut = m.groups()
            tried, acc, changed, disclosed, rx, rv, cut = map(
                int, (tried, acc, changed, disclosed, rx, rv, cut))
            check(stale == "refused" and rv == 1,
                  f"isolate={isolate}: stale key {stale}, victim refusals {rv}", *procs)
            if guard:
                # rdmx_core_guard: more than `guard` refusals -> cut off, with one line naming
                # the peer; the victim's connection carries on (the stale-key step above).
                check(cut == guard + 1 and tried == cut and acc == 0 and rx == cut,
                      f"guard {guard}: cut off after {cut}, refused {rx}, accepted {acc}", *procs)
                check(re.search(rf"peer {re.escape(n.addr_b)}:\d+ disconnected: {guard + 1} "
                                rf"remote accesses refused within", serr),
                      "the server did not name the peer it cut off", *procs)
                print(f"capi-peers guard={guard}: {m.group(0)}")
                continue
            check(tried == attempts and cut == 0, f"attempts {tried}, cut off {cut}", *procs)
            if isolate:
                check(acc == 0 and changed == 0 and disclosed == 0 and rx == attempts,
                      f"isolated: accepted {acc}, changed {changed}, disclosed {disclosed}, "
                      f"refused {rx} of {attempts}", *procs)
            else:
                check(acc == attempts and changed > 0 and disclosed > 0 and rx == 0,
                      f"not isolated: accepted {acc} of {attempts}, changed {changed}, "
                      f"disclosed {disclosed}", *procs)
            print(f"capi-peers isolate={isolate}: {m.group(0)}")


def case_blockd_refusals(binary, blockd):
    # A client with another --qd: refused in one line (exit 2), the server carries on; Ctrl-C
    # then ends the server's wait (exit 130) and its shm wire goes with it.
    port = free_port()
    srv = subprocess.Popen([blockd, "--role", "server", "--listen", f"127.0.0.1:{port}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_line(srv, srv.stdout, "waiting for a client")
        cli = subprocess.run([blockd, "--role", "client", "--peer", f"127.0.0.1:{port}",
                              "--qd", "4"], capture_output=True, text=True, timeout=BUDGET)
        lines = cli.stderr.strip().splitlines()
        check(cli.returncode == 2 and len(lines) == 1 and
              f"refused by 127.0.0.1:{port}: this server runs \"blockd qd 8 max-io 16 metadata 0 blocks 1024\""
              in lines[0],
              f"client exit {cli.returncode}", ("client", cli.stdout, cli.stderr))
        srv.send_signal(signal.SIGINT)
        sout, serr = finish(srv)
    finally:
        reap(srv)
    check(srv.returncode == 130 and serr.strip().splitlines()[-1] ==
          "blockd: interrupted while waiting for the peer", f"server exit {srv.returncode}",
          ("server", sout, serr))
    check(not [f for f in os.listdir("/dev/shm") if f.endswith(f"blockd-{srv.pid}")], "wire left")
    print(lines[0])


def case_blockd_link_mismatch(binary, blockd):
    # The session's link rule through the C API: a blockd server on emu@roce and a client on emu
    # (shared memory), then the other way round. The client is refused at its exchange in one line
    # naming both links (exit 2, at once: not a wait for a wire that never comes), the server
    # says so in one line and serves the next client, on its own link.
    for srv_dev, cli_dev, ok_dev in ((roce_dev(1), "emu", roce_dev(2)),
                                     ("emu", roce_dev(2), "emu")):
        port = free_port()
        srv = subprocess.Popen([blockd, "--role", "server", "--listen", f"127.0.0.1:{port}",
                                "--device", srv_dev, "--requests", "200"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_line(srv, srv.stdout, "waiting for a client")
            theirs, mine = (("shm", "network") if srv_dev != "emu" else ("network", "shm"))
            t0 = time.monotonic()
            cli = subprocess.run([blockd, "--role", "client", "--peer", f"127.0.0.1:{port}",
                                  "--device", cli_dev, "--requests", "200"],
                                 capture_output=True, text=True, timeout=BUDGET)
            took = time.monotonic() - t0
            lines = cli.stderr.strip().splitlines()
            check(cli.returncode == 2 and len(lines) == 1 and
                  f"refused by 127.0.0.1:{port}: the client runs link {theirs}, this server "
                  f"{mine}: start both on one link" in lines[0],
                  f"client on {cli_dev} against a server on {srv_dev}: exit {cli.returncode}",
                  ("client", cli.stdout, cli.stderr))
            # 0.2-0.8 s on a quiet machine; the bound leaves room for two busy CPUs (before the
            # rule: 5 s of waiting for a shared wire, then an unrelated message, or a QP error).
            check(took < 10, f"refusal took {took:.1f} s", ("client", cli.stdout, cli.stderr))
            good = subprocess.run([blockd, "--role", "client", "--peer", f"127.0.0.1:{port}",
                                   "--device", ok_dev, "--requests", "200"],
                                  capture_output=True, text=True, timeout=BUDGET)
            check(good.returncode == 0, f"next client exit {good.returncode}",
                  ("client", good.stdout, good.stderr))
            sout, serr = finish(srv)
        finally:
            reap(srv)
        check(srv.returncode == 0, f"server exit {srv.returncode}", ("server", sout, serr))
        refused = [l for l in serr.splitlines() if "not served" in l]
        check(len(refused) == 1 and f"the client runs link {theirs}, this server {mine}"
              in refused[0], f"server lines {refused}", ("server", sout, serr))
        print(f"{took:.2f} s: {lines[0]}")


# ---- blockd against hostile clients (tests/capi/blockd_hostile.c) --------------------------------

def blockd_hostile_run(binary, mode, server, device, blocks, ns=None):
    """Runs one hostile client to its end; returns its result line (it must say ok)."""
    p = subprocess.run(command(binary, None, [mode, server, device, str(blocks)], ns),
                       capture_output=True, text=True, timeout=BUDGET)
    line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    check(p.returncode == 0 and line.startswith(f"blockd_hostile {mode}: ok"),
          f"hostile {mode}: exit {p.returncode}", (f"hostile {mode}", p.stdout, p.stderr))
    return line


def case_blockd_hostile(binary, blockd, hostile_bin):
    """One blockd server (one client at a time, RoCE v2 on loopback addresses) and, one after the
    other, clients that break its protocol: a hello with junk after its NUL, silence after the
    hello, an application message where the connect info belongs (each refused at the door, one
    line), a request with tag 99 (dropped, one line), every out-of-range request (each refused
    with -RDMX_ERANGE and one line, nothing moved, its own blocks still served; then it leaves
    without a STOP: dropped, one line), an RDMA WRITE into the server with a forged key (its QP,
    the responder, fails: dropped, one line, and the async event printed as one stdout line
    naming the QP's client). A real client then runs verified and the server ends 0."""
    port = free_port()
    server = f"127.0.0.1:{port}"
    dev_s, dev_c = roce_dev(1), roce_dev(2)
    srv = subprocess.Popen([blockd, "--role", "server", "--listen", server, "--blocks", "256",
                            "--device", dev_s], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        wait_line(srv, srv.stdout, "waiting for a client")
        said = [blockd_hostile_run(hostile_bin, m, server, dev_c, 256)
                for m in ("junk-hello", "silent", "bad-info", "bad-tag", "ranges",
                          "forged-write")]
        cli = subprocess.run([blockd, "--role", "client", "--peer", server, "--blocks", "256",
                              "--requests", "300", "--device", dev_c], capture_output=True,
                             text=True, timeout=BUDGET)
        sout, serr = finish(srv)
    finally:
        reap(srv)
    procs = [("server", sout, serr), ("client", cli.stdout, cli.stderr)]
    check(cli.returncode == 0 and "verified end to end" in cli.stdout,
          f"the real client: exit {cli.returncode}", *procs)
    check(srv.returncode == 0 and "1 client(s); 3 dropped" in sout,
          f"server exit {srv.returncode}", *procs)
    lines = serr.strip().splitlines()
    door = [l for l in lines if "not served:" in l]
    dropped = [l for l in lines if " dropped: " in l]
    refused = [l for l in lines if "request refused:" in l]
    check(len(door) == 3 and len(dropped) == 3 and len(refused) == 11 and
          len(lines) == len(door) + len(dropped) + len(refused),
          f"server lines: {len(door)} at the door, {len(dropped)} dropped, {len(refused)} "
          f"refused, {len(lines)} in all", *procs)
    check("a tag outside the queue depth" in dropped[0] and
          "went away before its STOP" in dropped[1] and "11 refused" in dropped[1],
          "the drops do not say why", *procs)
    events = [l for l in sout.splitlines() if "async event" in l]
    check(len(events) == 1 and
          re.match(r"blockd: server: async event qp-access-err on QP 0x[0-9a-f]+ "
                   r"\(client 1, 127\.0\.0\.1:\d+\)$", events[0]),
          f"the forged WRITE's async event: {len(events)} line(s), want one naming the client",
          *procs)
    check(all(re.match(r"blockd: server: client 127\.0\.0\.1:\d+[: ]", l) for l in lines),
          "a server line does not name the client", *procs)
    for l in said:
        print(l)
    print(events[0])
    print(f"blockd-hostile: {len(door)} refused at the door, {len(dropped)} dropped, "
          f"{len(refused)} requests refused, {len(events)} async event; the next client verified")


def case_blockd_bye_leave(binary, blockd, hostile_bin):
    """A blockd client (RoCE v2 on loopback addresses) that sends its STOP and leaves without
    taking the reply: no receive posted for it, so the server's reply SEND fails (RNR retries
    exceeded), as a reply whose ACK never comes does once the client left. After the client's
    goodbye a QP error ends its session, it is not a failure (Session::qp_error through
    rdmx_conn_peer_bye / rdmx_conn_qp_error): the server says so in one stdout line, drops
    nobody and ends 0 at once, its one client served to its end."""
    port = free_port()
    server = f"127.0.0.1:{port}"
    srv = subprocess.Popen([blockd, "--role", "server", "--listen", server, "--blocks", "256",
                            "--device", roce_dev(1)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_line(srv, srv.stdout, "waiting for a client")
        said = blockd_hostile_run(hostile_bin, "bye-leave", server, roce_dev(2), 256)
        sout, serr = finish(srv, timeout=15)  # before: the client dropped, the server waits on
    finally:
        reap(srv)
    procs = [("server", sout, serr)]
    check(srv.returncode == 0, f"server exit {srv.returncode}", *procs)
    check(" dropped" not in sout + serr, "the server dropped the client after its goodbye",
          *procs)
    left = [l for l in sout.splitlines() if "left after its STOP" in l]
    check(len(left) == 1 and "served to its end" in left[0], "no line for the client's end",
          *procs)
    print(said)
    print(left[0])


def case_blockd_hostile_roce(binary, blockd, hostile_bin):
    """Two clients at once, isolated, over emu RoCE v2 across the namespace pair: a victim (a
    real blockd client, first, so it owns blocks 0-255 of the server's volume) and then a hostile
    one whose wrapped block number 2^64 - 16 would land on the victim's blocks 240-255 (read and
    overwritten when the check wrapped). The hostile client's requests are all refused; it leaves
    without a STOP and is dropped; a third client takes its slot. Victim and third client verify
    their data; the server ends 0."""
    said = []
    def steps(n, addr_c, server, srv, client, clis):
        clis.append(client(n.addr_b, 1500))  # the victim
        wait_line(srv, srv.stdout, "waiting for client 2 of 2")
        said.append(blockd_hostile_run(hostile_bin, "ranges", server, f"emu@roce:{addr_c}", 256,
                                       n.b))
        clis.append(client(addr_c, 300))  # takes the hostile one's slot
    sout, _, procs = blockd_two_clients(blockd, steps)
    check("; 1 dropped" in sout, "the server did not drop exactly the hostile client", *procs)
    print(said[0])
    print("blockd-hostile-roce: the victim and the next client verified, the hostile client "
          "refused and dropped")


def case_blockd_idle_door(binary, blockd):
    """50 TCP connections to a blockd server that send nothing, then a real client: the server
    admits clients without waiting on any one (rdmx_accept_hello), so the client runs in its
    normal time; each idle connection is closed after its 10 s with one line. Before the door,
    each idle connection held the server for 10 s."""
    port = free_port()
    server = f"127.0.0.1:{port}"
    srv = subprocess.Popen([blockd, "--role", "server", "--listen", server, "--blocks", "256"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    idle = []
    try:
        wait_line(srv, srv.stdout, "waiting for a client")
        for _ in range(50):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        t0 = time.monotonic()
        cli = subprocess.run([blockd, "--role", "client", "--peer", server, "--blocks", "256",
                              "--requests", "300"], capture_output=True, text=True,
                             timeout=BUDGET)
        took = time.monotonic() - t0
        sout, serr = finish(srv)
    finally:
        for c in idle:
            c.close()
        reap(srv)
    procs = [("server", sout, serr), ("client", cli.stdout, cli.stderr)]
    check(cli.returncode == 0 and "verified end to end" in cli.stdout,
          f"client exit {cli.returncode}", *procs)
    check(srv.returncode == 0, f"server exit {srv.returncode}", *procs)
    check(took < 8, f"the client took {took:.1f} s behind 50 idle connections", *procs)
    print(f"blockd-idle-door: a client behind 50 idle connections ran in {took:.2f} s, verified")

def case_blockd_client_killed(binary, blockd):
    """Two clients at once over emu RoCE v2 across the namespace pair; one is killed (SIGKILL)
    in the middle of its run. The server drops it alone (one line), the other client carries on
    and verifies its data, a third client takes the dead one's slot, and the server ends 0.
    The kill waits for the victim's "running" line (its rendezvous done): a kill timed from its
    "connecting to" line alone could land during the rendezvous on a loaded machine, where the
    server refuses a joining client ("not served", its slot free at once) instead of dropping a
    running one."""
    def steps(n, addr_c, server, srv, client, clis):
        clis.append(client(n.addr_b, 1500))  # the survivor
        wait_line(srv, srv.stdout, "waiting for client 2 of 2")
        victim = client(addr_c, 1000000)  # runs until killed
        try:
            wait_line(victim, victim.stdout, "blockd: client: running")
            time.sleep(0.3)  # in the middle of its run
        finally:
            victim.kill()
            victim.wait()
        wait_line(srv, srv.stdout, "slot 2 waits for the next client")  # the victim's
        clis.append(client(addr_c, 300))  # takes the dead one's slot
    sout, serr, procs = blockd_two_clients(blockd, steps)
    dropped = [l for l in serr.splitlines() if " dropped: " in l]
    check(len(dropped) == 1 and "went away before its STOP" in dropped[0] and
          "; 1 dropped" in sout, f"the server dropped {len(dropped)} client(s)", *procs)
    print(dropped[0])
    print("blockd-client-killed: the other client and the next one verified, the server "
          "served on")


# ---- Hostile clients: a python client speaking the rendezvous (lib/endpoint/rendezvous.hpp) ----

FRAME_HELLO, FRAME_WELCOME, FRAME_INFO, FRAME_READY, FRAME_REFUSE = 1, 2, 3, 4, 5
# What a default rdmafwd server states in its hello check (setup.cpp sizes_fields; the link is
# the session's own first field, session.hpp).
# "link shm": the server runs emu's shared-memory wire; a RoCE server wants "link network".
DEFAULT_HELLO = (b"fwd rpc\nlink shm\nlanes 1\nio-depth 32\nmetadata 0\nmax-pages 16\n"
                 b"pages-per-io 16\npage-size 4096\ncm off\n")


def send_frame(sock, kind, payload):
    sock.sendall(b"RDXR" + bytes([1, kind]) + len(payload).to_bytes(2, "big") + payload)


def recv_frame(sock):
    def exactly(n):
        b = b""
        while len(b) < n:
            chunk = sock.recv(n - len(b))
            if not chunk:
                raise AssertionError(f"the server closed the connection after {len(b)} bytes")
            b += chunk
        return b
    h = exactly(8)
    check(h[:4] == b"RDXR", f"not a rendezvous frame: {h!r}")
    return h[5], exactly(int.from_bytes(h[6:8], "big"))


def seal_info(b):
    """A 56-byte connect info (connect_info.hpp) with its CRC-32 of bytes 0..51 set."""
    import zlib
    b = bytearray(b)
    b[52:56] = zlib.crc32(bytes(b[:52])).to_bytes(4, "big")
    return bytes(b)


def client_info(server_info, qpn=0x4321, **over):
    """A connect info a client on the other side of the server's wire could send: the server's
    own with the client's QPN and the wire's other port token (emu: token ^ side), then fields
    overridden by offset: over = {"at_16": bytes, ...}."""
    b = bytearray(server_info)
    b[8:12] = qpn.to_bytes(4, "big")
    b[39] ^= 1  # port token (offset 32, 8 bytes big-endian): the other side of the wire
    for k, v in over.items():
        off = int(k[3:])
        b[off:off + len(v)] = v
    return seal_info(bytes(b))


def hostile(port, infos_of):
    """One hostile client: hello, welcome, the server's INFO, then the INFO frame infos_of(its
    info) makes. Returns (its address "127.0.0.1:PORT", the frame type and text the server
    answered)."""
    c = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        me = "%s:%d" % c.getsockname()
        send_frame(c, FRAME_HELLO, DEFAULT_HELLO)
        kind, _ = recv_frame(c)
        check(kind == FRAME_WELCOME, f"no welcome: frame type {kind}")
        kind, info = recv_frame(c)
        check(kind == FRAME_INFO and len(info) == 56, f"no server info: {kind}, {len(info)} B")
        send_frame(c, FRAME_INFO, infos_of(info))
        kind, text = recv_frame(c)
        return me, kind, text[1:].decode(errors="replace")
    finally:
        c.close()


def refused_then_served(binary, offenders):
    """A server meets each offender in turn (each must get a REFUSE frame and one "not served"
    line naming it), then serves a good client to the end: both exit 0."""
    port = free_port()
    srv = start(binary, SERVER_EAL, ["--role", "server", "--listen", f"127.0.0.1:{port}",
                                     "--rendezvous-timeout", "30", "--json"])
    answers = []
    try:
        wait_line(srv, srv.stderr, "waiting for a client")
        for why, infos_of in offenders:
            me, kind, text = hostile(port, infos_of)
            answers.append((why, me, kind, text))
        cli, procs = serve_next_client(binary, srv, port)
    finally:
        reap(srv)
    (_, sout, serr), (_, cout, cerr) = procs
    for why, me, kind, text in answers:
        check(kind == FRAME_REFUSE, f"{why}: the server answered frame type {kind}, not a "
                                    f"refusal", *procs)
        print(f"{why}: refused: {text}")
    check(cli.returncode == 0 and srv.returncode == 0,
          f"exit: server {srv.returncode}, client {cli.returncode}", *procs)
    lines = [l for l in rdmafwd_lines(serr) if "not served" in l]
    check(len(lines) == len(offenders), f"want {len(offenders)} lines, got {lines}", *procs)
    for (why, me, _, _), line in zip(answers, lines):
        check(f"client {me} not served" in line, f"{why}: {line!r} does not name {me}", *procs)
    c, s = summary(cout), summary(sout)
    check(c and s and c["total"]["ios"] > 0 and c["total"]["ios"] == s["total"]["ios"] and
          c["total"]["errors"]["total"] == 0 and s["total"]["errors"]["total"] == 0,
          "the good client was not served in full", *procs)
    check(not leftovers(srv.pid) and not leftovers(cli.pid), "left behind", *procs)
    # The server's per-client statistics name every refused client and the one it served.
    cl = clients(sout)
    check(cl and [r["peer"] for r in cl["refused_at_rendezvous"]] == [a[1] for a in answers] and
          len(cl["served"]) == 1 and not cl["served"][0]["dropped"], f"clients: {cl}", *procs)
    return lines


def case_dup_info(binary):
    """A client that sends two connect infos for its one lane (the same QP twice, and two QPs)
    is refused before any QP is connected; the server serves the next client."""
    lines = refused_then_served(binary, [
        ("same info twice", lambda si: client_info(si) * 2),
        ("two QPs for one lane", lambda si: client_info(si) + client_info(si, qpn=0x4322)),
    ])
    check(all("2 connection info(s) for 1 QP(s)" in l for l in lines), f"lines {lines}")


def case_absurd_info(binary):
    """Well-formed connect infos (right CRC, on the server's wire) with absurd values: QP0, the
    multicast QPN, a multicast GID, the permissive LID, a multicast IPv4 GID; and one for another
    wire, which emu refuses at connect (the QP goes back to RESET). Each refused alone."""
    v4 = bytes(10) + b"\xff\xff"
    lines = refused_then_served(binary, [
        ("QPN 0", lambda si: client_info(si, qpn=0)),
        ("multicast QPN", lambda si: client_info(si, qpn=0xffffff)),
        ("multicast GID", lambda si: client_info(si, at_16=b"\xff\x02" + bytes(13) + b"\x01")),
        ("permissive LID", lambda si: client_info(si, at_40=b"\xff\xff")),
        ("multicast IPv4 GID", lambda si: client_info(si, at_16=v4 + bytes([224, 0, 0, 1]))),
        ("another wire", lambda si: client_info(si, at_32=b"\x12\x34\x56\x78\x9a\xbc\xde\xf0")),
    ])
    for word, line in zip(["QP0/QP1", "multicast QPN", "multicast GID", "permissive LID",
                           "not a unicast IPv4 host", "not on the other side of this wire"], lines):
        check(word in line, f"{line!r} lacks {word!r}")


def case_info_during_run(binary):
    """A client that is served (its INFO connected, READY received) and then sends a second INFO
    during the run breaks the protocol: the server drops it at once with one line naming it,
    closes its socket, and (its only client gone) ends with exit 1, leaving nothing behind."""
    port = free_port()
    srv = start(binary, SERVER_EAL, ["--role", "server", "--listen", f"127.0.0.1:{port}",
                                     "--rendezvous-timeout", "30", "--json"])
    closed, me = False, None
    try:
        wait_line(srv, srv.stderr, "waiting for a client")
        c = socket.create_connection(("127.0.0.1", port), timeout=20)
        me = "%s:%d" % c.getsockname()
        send_frame(c, FRAME_HELLO, DEFAULT_HELLO)
        check(recv_frame(c)[0] == FRAME_WELCOME, "no welcome")
        kind, info = recv_frame(c)
        check(kind == FRAME_INFO, f"no server info: {kind}")
        send_frame(c, FRAME_INFO, client_info(info))
        kind, _ = recv_frame(c)
        check(kind == FRAME_READY, f"not served: frame type {kind}")
        send_frame(c, FRAME_READY, b"")  # READY both ways: the session runs
        t0 = time.monotonic()
        send_frame(c, FRAME_INFO, client_info(info))
        c.settimeout(10)
        try:
            closed = c.recv(1) == b""
        except OSError:
            closed = False
        took = time.monotonic() - t0
        c.close()
        sout, serr = finish(srv, 20)
    finally:
        reap(srv)
    procs = [("server", sout, serr)]
    check(closed and took < 5, f"the server did not close the offender's socket ({took:.1f} s)",
          *procs)
    # --json: the announcements are on stderr too; the drop is the one line that is not.
    lines = [l for l in rdmafwd_lines(serr)
             if re.search(r"dropped|error|went away|no I/O|not served", l)]
    check(len(lines) == 1 and f"client {me} dropped: sent connection info" in lines[0],
          f"server lines {lines}", *procs)
    check(srv.returncode == 1, f"server exit {srv.returncode}", *procs)
    check(not leftovers(srv.pid), f"left behind: {leftovers(srv.pid)}", *procs)
    print(lines[0])


def hostile_main(host, port, mode, my_ip):
    """A hostile client as its own process (run inside a namespace by netns.sh exec): `dup`
    sends two infos for its one lane; `during-run` is served (its info names my_ip as a RoCE v2
    GID) and then sends a second INFO. Prints what it saw, one "key value" line each."""
    c = socket.create_connection((host, int(port)), timeout=30)
    print("addr %s:%d" % c.getsockname(), flush=True)
    send_frame(c, FRAME_HELLO, DEFAULT_HELLO.replace(b"io-depth 32", b"io-depth 8")
               .replace(b"link shm", b"link network"))
    check(recv_frame(c)[0] == FRAME_WELCOME, "no welcome")
    kind, info = recv_frame(c)
    gid = bytes(10) + b"\xff\xff" + socket.inet_aton(my_ip)
    mine = client_info(info, at_16=gid)
    send_frame(c, FRAME_INFO, mine * 2 if mode == "dup" else mine)
    kind, text = recv_frame(c)
    print(f"answer {kind}", flush=True)
    if mode == "during-run" and kind == FRAME_READY:
        send_frame(c, FRAME_READY, b"")  # READY both ways: the session runs
        send_frame(c, FRAME_INFO, mine)
        c.settimeout(30)
        try:
            print(f"closed {int(c.recv(1) == b'')}", flush=True)
        except OSError:
            print("closed 0", flush=True)
    c.close()


def case_roce_clients_hostile(binary):
    """--clients 2 over emu RoCE v2 across the veth pair, with two hostile clients: one sends two
    connect infos for its lane (refused: the server still waits for two clients), one is served
    and then sends a second INFO during the run (dropped alone, its QP cut off). The rpc client
    on the other lane is served to the end, verified, lane for lane; the server exits 1 (a client
    was cut off), each offender named in exactly one line."""
    me = os.path.abspath(__file__)
    with Netns() as n:
        common = ["--json", "--rendezvous-timeout", "40", "--io-depth", "8"]
        srv_eal = ["--lcores", "0@1,1@0,2@1", "--main-lcore", "0"] + MEM
        popen = lambda cmd: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True)
        hostile_cmd = lambda mode: [NETNS, "exec", n.b, sys.executable, me, "--hostile",
                                    n.addr_a, "7471", mode, n.addr_b]
        srv = popen(command(binary, srv_eal, ["--role", "server", "--listen", f"{n.addr_a}:7471",
                                              "--clients", "2", "--nb-cores", "2", "--device",
                                              f"emu@roce:{n.addr_a}"] + common, n.a))
        procs_run, seen = [], ""
        try:
            seen += wait_line(srv, srv.stderr, "waiting for 2 clients")
            dup = popen(hostile_cmd("dup"))
            dout, derr = finish(dup, 30)
            seen += wait_line(srv, srv.stderr, "not served")
            # A count, not a duration: the server runs once the second client (the hostile
            # one, a Python process that may take seconds to start on a loaded machine) came;
            # a duration would run out, and the drain after it, while this client's first call
            # waits for that.
            cli = popen(command(binary, CLIENT_EAL,
                                ["--role", "client", "--peer", f"{n.addr_a}:7471", "--fwd",
                                 "rpc", "--io-count", "500", "--device",
                                 f"emu@roce:{n.addr_b}"] + common, n.b))
            procs_run.append(cli)
            seen += wait_line(srv, srv.stderr, "client 1 of 2")
            late = popen(hostile_cmd("during-run"))
            procs_run.append(late)
            lout, lerr = finish(late, 40)
            cout, cerr = finish(cli)
            sout, serr = finish(srv)
            serr = seen + serr
        finally:
            for p in [srv] + procs_run:
                reap(p)
        procs = [("server", sout, serr), ("client", cout, cerr), ("dup", dout, derr),
                 ("during-run", lout, lerr)]
        kv = lambda out: dict(l.split(" ", 1) for l in out.splitlines() if " " in l)
        d, h = kv(dout), kv(lout)
        check(d.get("answer") == str(FRAME_REFUSE), f"dup offender not refused: {d}", *procs)
        check(h.get("answer") == str(FRAME_READY) and h.get("closed") == "1",
              f"during-run offender: {h}", *procs)
        not_served = [l for l in rdmafwd_lines(serr) if "not served" in l]
        dropped = [l for l in rdmafwd_lines(serr) if "dropped" in l]
        check(len(not_served) == 1 and f"client {d['addr']} not served" in not_served[0] and
              "2 connection info(s) for 1 QP(s)" in not_served[0], f"{not_served}", *procs)
        check(len(dropped) == 1 and f"client {h['addr']} dropped: sent connection info" in
              dropped[0] and "the other clients are served on" in dropped[0], f"{dropped}",
              *procs)
        check(cli.returncode == 0 and srv.returncode == 1,
              f"exit: server {srv.returncode} (want 1), client {cli.returncode}", *procs)
        c, s = summary(cout)["total"], summary(sout)
        check(c["ios"] == 500 and c["errors"]["total"] == 0, f"client: {c}", *procs)
        check(s["lanes"][0]["ios"] == c["ios"] and s["total"]["errors"]["total"] == 0,
              f"server lane 0 served {s['lanes'][0]['ios']} of {c['ios']}; "
              f"errors {s['total']['errors']}", *procs)
        cl = clients(sout)
        check(cl and [(r["peer"], r["dropped"]) for r in cl["served"]] ==
              [(summary(cout) and cl["served"][0]["peer"], False), (h["addr"], True)] and
              [r["peer"] for r in cl["refused_at_rendezvous"]] == [d["addr"]],
              f"clients: {cl}", *procs)
        for p in (srv, cli):
            check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
        print(not_served[0])
        print(dropped[0])
        print(f"rpc client served in full: {c['ios']} RPCs")


BLOCKD_CASES = {
    "blockd-loopback": case_blockd_loopback,
    "blockd-netns": case_blockd_netns,
    "blockd-roce": case_blockd_roce,
    "blockd-roce-clients": case_blockd_roce_clients,
    "blockd-roce-metadata": case_blockd_roce_metadata,
    "blockd-refusals": case_blockd_refusals,
    "blockd-link-mismatch": case_blockd_link_mismatch,
    "blockd-idle-door": case_blockd_idle_door,
}
HOSTILE_CASES = {
    "blockd-bye-leave": case_blockd_bye_leave,
    "blockd-hostile": case_blockd_hostile,
    "blockd-hostile-roce": case_blockd_hostile_roce,
}
BLOCKD_CASES["blockd-client-killed"] = case_blockd_client_killed

def case_server_stats(binary):
    """A server's statistics block names what its client runs and reads true on the server's
    side: relay (issued = I/Os served, no latency samples: it has no clock of the source, so
    "latency: -" as everywhere else without samples) and write (it maps nothing during the run:
    "cache hit -", not 0.0 %)."""
    import re
    for fwd in ("relay", "write"):
        port = free_port()
        srv, cli, procs = serve(
            command(binary, SERVER_EAL, ["--role", "server", "--listen", str(port)]),
            command(binary, CLIENT_EAL, ["--role", "client", "--peer", f"127.0.0.1:{port}",
                                         "--fwd", fwd, "--duration", "1", "--json"]))
        (_, sout, serr), (_, cout, cerr) = procs
        both_ok(srv, cli, procs)
        c = summary(cout)["total"]
        header = [l for l in sout.splitlines() if "rdmafwd statistics since" in l]
        check(len(header) == 1 and f"fwd {fwd} on " in header[0],
              f"{fwd}: server header {header!r} does not name the client's mode", *procs)
        ios = int(re.search(r"I/Os (\d+) ", sout).group(1))
        issued = int(re.search(r" issued (\d+) ", sout).group(1))
        lost = int(re.search(r" lost (\d+) ", sout).group(1))
        abandoned = int(re.search(r" abandoned (\d+) ", sout).group(1))
        failed = int(re.search(r"I/Os failed by faults (\d+) ", sout).group(1))
        check(issued == ios + failed + abandoned and lost == 0,
              f"{fwd}: server issued {issued} != I/Os {ios} + failed {failed} + abandoned "
              f"{abandoned}", *procs)
        if fwd == "relay":
            check(ios == c["ios"] > 0, f"relay: server {ios}, client {c['ios']}", *procs)
            check("    latency: -" in sout and "latency us:" not in sout,
                  "relay server: latency figures without samples", *procs)
        else:
            check("cache hit -" in sout and "cache hit 0.0%" not in sout,
                  "write server: a cache hit rate of no maps", *procs)
    print("server statistics: relay and write servers name the mode, identity holds")


CASES = {
    "loopback": case_loopback,
    "lanes": case_lanes,
    "umr": case_umr,
    "write": lambda b: onesided(b, "write", False),
    "read": lambda b: onesided(b, "read", False),
    "write-corrupt": lambda b: onesided(b, "write", True),
    "forged-rkey": case_forged_rkey,
    "read-corrupt": lambda b: onesided(b, "read", True),
    "netns": case_netns,
    "loopback-metadata": case_loopback_metadata,
    "roce-rpc": lambda b: case_roce(b, "rpc", False),
    "roce-read": lambda b: case_roce(b, "read", False),
    "roce-rpc-lossy": lambda b: case_roce(b, "rpc", True),
    "roce-rpc-local-inv": case_roce_rpc_local_inv,
    "roce-write-lossy": lambda b: case_roce(b, "write", True),
    "roce-read-lossy": lambda b: case_roce(b, "read", True),
    "roce-clients": case_roce_clients,
    "roce-client-killed": case_roce_client_killed,
    "serve-next-client": case_serve_next_client,
    "roce-server-restart": case_roce_server_restart,
    "sigint-server-run": lambda b: sigint_mid_run(b, "server"),
    "sigint-client-run": lambda b: sigint_mid_run(b, "client"),
    "idle-door": case_idle_door,
    "server-dies-mid-run": case_server_dies_mid_run,
    "relay": case_relay,
    "server-stats": case_server_stats,
    "server-stops-answering": case_server_stops_answering,
    "roce-relay-lossy": lambda b: case_roce(b, "relay", True),
    "netns-unreachable": case_netns_unreachable,
    "no-server": case_no_server,
    "bad-host": case_bad_host,
    "bad-address": case_bad_address,
    "port-busy": case_port_busy,
    "no-client": case_no_client,
    "version-mismatch": case_version_mismatch,
    "foreign-server": case_foreign_server,
    "server-dies-mid-exchange": case_server_dies_mid_exchange,
    "client-dies-mid-exchange": case_client_dies_mid_exchange,
    "size-mismatch": case_size_mismatch,
    "sigint-server": case_sigint_server,
    "sigint-client": case_sigint_client,
    "client-dies-mid-run": case_client_dies_mid_run,
    "dup-info": case_dup_info,
    "absurd-info": case_absurd_info,
    "info-during-run": case_info_during_run,
    "roce-clients-hostile": case_roce_clients_hostile,
}

if __name__ == "__main__":
    if sys.argv[1] == "--hostile":
        hostile_main(*sys.argv[2:6])
    elif sys.argv[2] == "capi-peers":
        case_capi_peers(sys.argv[1], sys.argv[3], sys.argv[4])
    elif sys.argv[2] in HOSTILE_CASES:
        HOSTILE_CASES[sys.argv[2]](sys.argv[1], sys.argv[3], sys.argv[4])
    elif sys.argv[2] in BLOCKD_CASES:
        BLOCKD_CASES[sys.argv[2]](sys.argv[1], sys.argv[3])
    else:
        CASES[sys.argv[2]](sys.argv[1])
