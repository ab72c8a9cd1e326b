#!/usr/bin/env python3
"""Every rdmafwd mode's traffic, and blockd's, over emu RoCE v2 across the namespace test bed,
captured with tcpdump on the server's veth end and judged with Wireshark's own dissectors
(tshark; roce_wire.py says what each check requires): nothing malformed, every ICRC right, every
BTH opcode one the mode produces, the PSNs of each QP in order, and every RETH R_Key one the
mode's windows handed out (READY's keys for write/read; for rpc and blockd the key the I/O named,
used only until the reply invalidates it). `tshark-faults` injects one fault of each kind into a
real capture and requires each check to name exactly its frame (doc/guides/two-hosts.md,
"Looking at the wire with tshark").

Usage: test_tshark.py PATH_TO_RDMAFWD CASE PATH_TO_BLOCKD"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import roce_wire as rw
from test_twohost import (CLIENT_EAL, MEM, NETNS, SERVER_EAL, Netns, both_ok, check, command,
                          leftovers, serve, summary, wait_line)

HERE = os.path.dirname(os.path.abspath(__file__))
PORT = 7471
IOS = 64  # rdmafwd I/Os per run: 8 KiB each (2 pages), 8 in flight, slots reused 8 times
COMMON = ["--json", "--rendezvous-timeout", "40", "--pages-per-io", "2", "--io-depth", "8"]
BLOCKD_REQUESTS = 32  # blockd writes them, then reads every block back: 64 keys handed out


def need_tools():
    for tool in ("tshark", "tcpdump"):
        if not shutil.which(tool):
            print(f"{tool} not installed: skipped")
            sys.exit(77)


class Capture:
    """tcpdump on the server's end of the veth pair: the RoCE v2 packets (UDP 4791) and the TCP
    rendezvous, whole packets (a snap length shorter than a frame makes it malformed). stop()
    sends a marker datagram across the pair and waits until tcpdump has written it (it writes in
    order, so everything before it is in the file: on a busy machine tcpdump lags), then ends
    tcpdump and requires every packet the filter received to be in the file."""
    MARK_PORT = 47999
    MARK = b"rdmx: end of capture"

    def __init__(self, n, tmp):
        self.n = n
        self.pcap = os.path.join(tmp, "roce.pcap")
        # --immediate-mode (no 1 s block timeout: the marker shows at once) makes libpcap use a
        # ring of snap-length slots: 4 KiB slots (the largest frame here is 1,098 bytes) in
        # 16 MiB hold 4,096 frames; the default snap length (256 KiB) would leave 64.
        self.p = subprocess.Popen([NETNS, "exec", n.a, "tcpdump", "-i", f"{n.name}-va", "-U",
                                   "--immediate-mode", "-s", "4096", "-B", "16384", "-n", "-w",
                                   self.pcap, f"udp port 4791 or tcp port {PORT} or udp port "
                                   f"{self.MARK_PORT}"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_line(self.p, self.p.stderr, "listening on", timeout=20)

    def stop(self):
        subprocess.run([NETNS, "exec", self.n.a, sys.executable, "-c",
                        "import socket, sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
                        f".sendto({self.MARK!r}, ({self.n.addr_b!r}, {self.MARK_PORT}))"],
                       check=True, timeout=20)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            with open(self.pcap, "rb") as f:
                f.seek(max(0, os.path.getsize(self.pcap) - 200))
                if self.MARK in f.read():
                    break
            time.sleep(0.1)
        self.p.send_signal(signal.SIGINT)
        try:
            _, err = self.p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            _, err = self.p.communicate()
        got = re.search(r"(\d+) packets captured\s+(\d+) packets received by filter\s+"
                        r"(\d+) packets dropped by kernel", err)
        check(got and got.group(1) == got.group(2) and got.group(3) == "0",
              f"tcpdump did not capture everything: {err.strip()}")
        if os.environ.get("RDMX_KEEP_PCAP"):  # a copy to look at (the test's is deleted)
            shutil.copy(self.pcap, os.environ["RDMX_KEEP_PCAP"])


def captured(run, heuristics=False, then=None):
    """Runs run(n) across a fresh namespace pair under a capture and decodes it; then(wire, pcap,
    directory) may look further before the capture is deleted with its directory. Returns
    (Wire, run's result)."""
    need_tools()
    with Netns() as n, tempfile.TemporaryDirectory() as tmp:
        cap = Capture(n, tmp)
        try:
            result = run(n)
        finally:
            cap.stop()
        w = rw.Wire(cap.pcap, n.addr_b, heuristics=heuristics)
        if then:
            then(w, cap.pcap, tmp)
        return w, result


def device(addr):
    return ["--device", f"emu@roce:{addr},mtu={rw.MTU}"]


def rdmafwd_run(binary, fwd, lanes=1):
    """A server and a `--fwd fwd` client of IOS I/Os over `lanes` lanes, both exit 0, every I/O
    without error; returns run(n) for captured()."""
    srv_eal, cli_eal = SERVER_EAL, CLIENT_EAL
    if lanes == 2:  # 3 lcores on the 2 CPUs: main + one poll lcore per lane
        srv_eal = ["--lcores", "0@1,1@0,2@1", "--main-lcore", "0"] + MEM
        cli_eal = ["--lcores", "0@0,1@1,2@0"] + MEM
    lanes_arg = ["--nb-cores", str(lanes)]

    def run(n):
        srv, cli, procs = serve(
            command(binary, srv_eal, ["--role", "server", "--listen", f"{n.addr_a}:{PORT}"] +
                    device(n.addr_a) + COMMON + lanes_arg, n.a),
            command(binary, cli_eal, ["--role", "client", "--peer", f"{n.addr_a}:{PORT}",
                                      "--fwd", fwd, "--io-count", str(IOS)] + device(n.addr_b) +
                    COMMON + lanes_arg, n.b))
        both_ok(srv, cli, procs)
        c = summary(procs[1][1])["total"]
        check(c["ios"] == IOS and c["errors"]["total"] == 0, f"client: {c}", *procs)
        for p in (srv, cli):
            check(not leftovers(p.pid), f"left behind: {leftovers(p.pid)}", *procs)
        return c
    return run


def verdict(w, what):
    check(not w.problems, f"{what}: {len(w.problems)} problem(s) on the wire:\n" +
          "\n".join(f"  frame {f}: {t}" for f, t in w.problems[:20]))


def summary_line(case, w, naks, retrans, extra):
    ops = sorted({r["op"] for r in w.roce if r["op"] is not None})
    print(f"{case}: {len(w.roce)} RoCE v2 frames decoded by tshark, none malformed, ICRCs right, "
          f"opcodes {ops}, PSNs in order ({retrans} retransmitted, {naks} sequence NAKs){extra}")


def ready_keys(w, lanes):
    """The keys the server handed out in READY ("lane L rkeys K0 K1 ...", two-hosts.md), read
    from the captured TCP stream."""
    found = re.findall(rb"lane (\d+) rkeys((?: \d+)+)\n", w.stream(PORT))
    check(len(found) == lanes, f"READY with {len(found)} lanes' keys in the capture, not {lanes}")
    return [set(map(int, keys.split())) for _, keys in sorted(found)]


def case_onesided(binary, fwd, lanes):
    """--fwd write / read: RDMA WRITEs (FIRST/MIDDLE/LAST) or READ requests and responses, every
    RETH R_Key one of the keys its lane's READY handed out, all of them used."""
    w, _ = captured(rdmafwd_run(binary, fwd, lanes))
    naks, retrans, _ = rw.check_all(w, fwd)
    keys = ready_keys(w, lanes)
    rw.check_lane_keys(w, keys)
    verdict(w, f"--fwd {fwd}")
    summary_line(f"roce-{fwd}-tshark", w, naks, retrans,
                 f"; {lanes} lane(s), every R_Key one of READY's {sum(map(len, keys))}")


def case_sends_only(binary, fwd):
    """--fwd relay / umr: SENDs and ACKs only, no RETH and no IETH (relay forwards the received
    pages by SEND; umr maps and unmaps on its own SQ and sends nothing but the goodbye)."""
    w, _ = captured(rdmafwd_run(binary, fwd))
    naks, retrans, _ = rw.check_all(w, fwd)
    rw.check_no_reth(w, fwd)
    verdict(w, f"--fwd {fwd}")
    summary_line(f"roce-{fwd}-tshark", w, naks, retrans, "; no RETH, no IETH")


def blockd_names(w):
    """The key each first copy of a blockd READ/WRITE request names (struct req in its SEND,
    examples/blockd/blockd_proto.h: op, tag, nblk, rkey as 32-bit and lba, iova, len as 64-bit
    words, little-endian on both ends here): the server must RDMA WRITE the volume into it for a
    read, RDMA READ from it for a write, at its iova and len."""
    names = {}
    for r in w.roce:
        data = bytes.fromhex(r["data.data"])
        if r["dir"] == "c2s" and r["op"] == 4 and r["first"] and len(data) == 40:
            op, _tag, _nblk, key = (int.from_bytes(data[i:i + 4], "little")
                                    for i in range(0, 16, 4))
            iova, length = (int.from_bytes(data[i:i + 8], "little") for i in (24, 32))
            if op in (1, 2):
                names[r["n"]] = (key, "RDMA WRITE" if op == 1 else "RDMA READ", iova, length)
    return names


def blockd_run(blockd, requests=BLOCKD_REQUESTS):
    args = ["--requests", str(requests), "--blocks", "256"]

    def run(n):
        srv, cli, procs = serve(
            command(blockd, None, ["--role", "server", "--listen", f"{n.addr_a}:{PORT}"] +
                    args + device(n.addr_a), n.a),
            command(blockd, None, ["--role", "client", "--peer", f"{n.addr_a}:{PORT}"] +
                    args + device(n.addr_b), n.b), ready="waiting for a client")
        both_ok(srv, cli, procs, "blockd ")
        check("verified end to end" in procs[1][1], "no verified run", *procs)
    return run


def blockd_checks(w):
    naks, retrans, nxt = rw.check_all(w, "blockd")
    names = blockd_names(w)
    done = rw.check_key_life(w, names)
    return naks, retrans, nxt, names, done


def case_blockd(blockd):
    """blockd over emu@roce: each request's key (in its SEND) used by exactly the RDMA operation
    the request asks for, at its VA and length, then invalidated by the reply's SEND with
    Invalidate, and never used again until a later request names it."""
    w, _ = captured(blockd_run(blockd))
    naks, retrans, _, names, done = blockd_checks(w)
    check(len(names) > BLOCKD_REQUESTS, f"{len(names)} requests with a key decoded")
    verdict(w, "blockd")
    summary_line("blockd-roce-tshark", w, naks, retrans,
                 f"; {done} requests' keys used and invalidated, each once")


def scapy_python():
    """A Python that has Scapy's RoCE layer (python3-scapy may be the system Python's only)."""
    for py in (sys.executable, "/usr/bin/python3"):
        find = "import importlib.util as u, sys; sys.exit(not u.find_spec('scapy.contrib.roce'))"
        if shutil.which(py) and not subprocess.run([py, "-c", find],
                                                   capture_output=True).returncode:
            return py
    print("python3-scapy not installed: skipped")
    sys.exit(77)


def case_faults(blockd):
    """Each check can fail: a real blockd capture (clean: no problem) gets one fault of each kind
    (pcap_faults.py, the changed frames sealed again by Scapy) and the checks must report
    exactly those frames, each for its own reason. The clean capture is also judged with wrong
    expectations (another mode's opcodes, no RETH, a lane's keys short of one or with one more,
    a second lane) which must fail; and Scapy's ICRC of one frame per opcode equals the one the
    frame carries."""
    py = scapy_python()

    def then(w, pcap, tmp):
        _, _, nxt, _, _ = blockd_checks(w)
        verdict(w, "blockd, before the faults")
        rows = w.roce
        key = lambda r: (r["ip.src"], r["ip.dst"], r["infiniband.bth.destqp"])
        answered = {r["psn"] for r in rows if r["dir"] == "c2s" and r["op"] not in rw.REQUESTS}
        mids = [r for r in rows if r["op"] == 7 and r["dir"] == "s2c" and r["psn"] not in answered]
        firsts = [r for r in rows if r["op"] == 6 and r["dir"] == "s2c"]
        inval = lambda k, after: next(r["n"] for r in rows if r["n"] > after and
                                      k in rw.ints(r["infiniband.ieth"], 16))
        rkey_of = lambda r: rw.ints(r["infiniband.reth.r_key"], 16)[0]
        stop = [r for r in rows if r["dir"] == "c2s" and r["op"] == 4 and
                r["data.data"].startswith("03000000")]
        read_req = next(r for r in rows if r["op"] == rw.READ_REQ)
        acks = [r for r in rows if r["op"] == rw.ACK]
        s2c_ack = next(r for r in acks if r["dir"] == "s2c")
        # an ACK after the client's last READ response: its PSN moved far ahead must not hide
        # a later response of the same stream from the checks
        after = max(r["n"] for r in rows if r["dir"] == "c2s" and r["op"] in rw.READ_RESPONSES)
        c2s_ack = [r for r in acks if r["dir"] == "c2s" and r["n"] > after][-1]
        stepped = [r for r, q in zip(rows, rows[1:]) if r["op"] == 14 and q["op"] in (14, 15)
                   and key(q) == key(r) and q["psn"] == (r["psn"] + 1) % rw.PSN_MOD]
        first_req = next(r for r in rows if r["dir"] == "c2s" and r["op"] in rw.REQUESTS)
        never = (first_req["psn"] - 5) % rw.PSN_MOD
        far = (c2s_ack["psn"] + (1 << 22)) % rw.PSN_MOD
        check(len(mids) >= 2 and len(firsts) >= 3 and stop and stepped,
              "no frames to inject faults into")
        f_icrc, f_drop = mids[0], mids[-1]
        f_next = next(r for r in rows if r["n"] > f_drop["n"] and key(r) == key(f_drop))
        f_rkey, f_stale, f_va = firsts[len(firsts) // 2], firsts[0], firsts[-1]
        va = (rw.ints(f_va["infiniband.reth.va"], 16)[0] + 4096) % (1 << 64)
        forged = rkey_of(f_rkey) ^ 0x5A5A0000
        read_last = next(r for r in rows if r["op"] == 15 and r["n"] > stepped[0]["n"] + 1)
        span = lambda r: -(-rw.ints(r["infiniband.reth.dmalen"])[0] // rw.MTU)
        read_of = next(r for r in rows if r["op"] == rw.READ_REQ and r["n"] < read_last["n"] and
                       0 <= rw.psn_diff(read_last["psn"], r["psn"]) < span(r))
        drops = (f_drop["n"], read_last["n"])
        last = len(w.frames) - 1 - len(drops)  # the frames kept; the appended ones follow
        renum = lambda n: n - sum(d < n for d in drops)
        sample = {r["op"]: r["n"] for r in rows}
        faults = [f"scapy:{n}" for n in sample.values()] + [
            f"icrc:{f_icrc['n']}", f"rkey:{f_rkey['n']}:{forged:#x}", f"opcode:{stop[-1]['n']}:5",
            f"drop:{f_drop['n']}", f"append:{f_stale['n']}:{nxt[key(f_stale)]}",
            f"append:{read_req['n']}:{read_req['psn']}:6", f"aeth:{s2c_ack['n']}:0x21",
            f"psn:{stepped[0]['n']}:{(stepped[0]['psn'] + 1) % rw.PSN_MOD}",
            f"psn:{c2s_ack['n']}:{far}", f"append:{first_req['n']}:{never}",
            f"va:{f_va['n']}:{va:#x}", f"drop:{read_last['n']}"]
        want = {(renum(f_icrc["n"]), "bad ICRC"),
                (renum(f_rkey["n"]), f"R_Key {forged:#x}: no live I/O has it (never named)"),
                (renum(inval(rkey_of(f_rkey), f_rkey["n"])), "no RDMA used it"),
                (renum(stop[-1]["n"]), "opcode 5 (SEND Only with Immediate) from the client"),
                (renum(f_next["n"]), "1 ahead of the next PSN"),
                (last + 1, f"R_Key {rkey_of(f_stale):#x}: no live I/O has it (invalidated at"),
                (last + 2, "malformed or flagged by tshark ([Malformed Packet: IB]"),
                (renum(s2c_ack["n"]), "AETH syndrome 0x21: an RNR or error NAK"),
                (renum(stepped[0]["n"]), f"RDMA READ Response Middle PSN "
                 f"{(stepped[0]['psn'] + 1) % rw.PSN_MOD} after"),
                (renum(c2s_ack["n"]), f"Acknowledge PSN {far}: no request of"),
                (last + 3, f"PSN {never} behind the next PSN"),
                (renum(f_va["n"]), f"RDMA WRITE VA {va} length"),
                (renum(read_of["n"]), f"RDMA READ Request PSN {read_of['psn']} from "
                 f"{read_of['ip.src']}: no response up to its last PSN")}
        bad = os.path.join(tmp, "faults.pcap")
        p = subprocess.run([py, os.path.join(HERE, "pcap_faults.py"), pcap, bad] + faults,
                           capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, f"pcap_faults.py: exit {p.returncode}: {p.stderr}")
        scapy = p.stdout.split()
        check(scapy.count("ok") == len(sample), f"Scapy's ICRCs: {p.stdout}")
        f = rw.Wire(bad, w.client)
        blockd_checks(f)
        got = sorted(f.problems)
        missed = [(n, t) for n, t in sorted(want) if not any(g[0] == n and t in g[1] for g in got)]
        extra = [g for g in got if not any(g[0] == n and t in g[1] for n, t in want)]
        check(not missed and not extra, f"faults not found: {missed}\nproblems not injected: "
              f"{extra[:10]}")
        print(f"tshark-faults: {len(want)} problems from {len(faults) - len(sample)} faults in "
              f"{len(w.frames) - 1} frames, each found at its frame for its reason: " +
              "; ".join(f"frame {n}: {t}" for n, t in sorted(want)))
        # Wrong expectations of the clean capture.
        used = {rkey_of(r) for r in rows if r["infiniband.reth.r_key"]}
        wrong = [("--fwd relay's opcodes", lambda: rw.check_opcodes(w, "relay"),
                  "not one --fwd relay"),
                 ("--fwd relay's SEND First", lambda: rw.check_opcodes(w, "relay"),
                  "no SEND First from the client in the whole capture"),
                 ("no RETH (umr)", lambda: rw.check_no_reth(w, "umr"), "an RETH or IETH"),
                 ("a lane's keys short of one",
                  lambda: rw.check_lane_keys(w, [used - {rkey_of(f_rkey)}]),
                  "not one of lane 0's keys"),
                 ("a lane's keys and one more", lambda: rw.check_lane_keys(w, [used | {7}]),
                  "lane 0's key 0x7 never used"),
                 ("a second lane", lambda: rw.check_lane_keys(w, [used, {7}]),
                  "2 lanes handed out keys, 1 QPs used them")]
        for what, run, text in wrong:
            w.problems = []
            run()
            check(any(text in t for _, t in w.problems), f"{what}: not flagged ({w.problems[:3]})")
            print(f"tshark-faults: expecting {what}: {len(w.problems)} problems, e.g. "
                  f"{next(p for p in w.problems if text in p[1])}")
        print(f"tshark-faults: Scapy's ICRC equals the frame's for one frame of each of "
              f"{len(sample)} opcodes")

    captured(blockd_run(blockd, requests=8), then=then)  # a short run has every kind of frame


def case_rpc(binary):
    """--fwd rpc with the payload heuristics on: every SEND decodes as RPC-over-RDMA version 1,
    32 NFSv3 READ and 32 WRITE calls, each reply an accepted, successful ONC RPC reply to one of
    them that invalidates (IETH) the handle its call named; the handle used by exactly the RDMA
    operation the call needs (WRITE for a READ, READ for a WRITE) and by nothing after the reply
    until a later call names it again (a window's key is drawn at random at each map)."""
    w, _ = captured(rdmafwd_run(binary, "rpc"), heuristics=True)
    naks, retrans, _ = rw.check_all(w, "rpc")
    sends = [r for r in w.roce if r["op"] in {4, 5} | rw.SEND_INV]
    check(sends and all(r["rpcordma.version"] == "1" for r in sends),
          f"SENDs not decoded as RPC-over-RDMA v1: "
          f"{[r['n'] for r in sends if r['rpcordma.version'] != '1'][:5]}")
    # A RoCE retransmission repeats a SEND: a call counts from its first copy, a reply from its
    # last (a go-back-N resends the data ahead of it too).
    calls, replies = {}, {}
    for r in sends:
        if r["dir"] == "c2s":
            if r["first"]:
                calls.setdefault(r["rpcordma.xid"], r)
        else:
            replies[r["rpcordma.xid"]] = r

    # tshark 4.0 dissects a READ call's NFS arguments; a WRITE call's RPC message it holds back
    # for the Read chunk's data (left as "Data"), so a WRITE is known by its Read chunk at the
    # data's XDR position (96 behind the server's 32-byte file handle: RFC 8267). It pairs no
    # reply with its call over an RC QP pair (no NFS procedure in the reply): a reply is an
    # accepted, successful ONC RPC reply to the xid of one of our calls.
    def proc_of(cl):
        if cl["nfs.procedure_v3"]:
            return cl["nfs.procedure_v3"]
        return "7" if cl["rpcordma.position"] == "96" else "?"
    kinds = {}
    for xid, cl in calls.items():
        kinds.setdefault(proc_of(cl), []).append(xid)
    check(len(kinds.get("6", [])) == IOS // 2 and len(kinds.get("7", [])) == IOS // 2,
          f"calls by NFS procedure: { {k: len(v) for k, v in kinds.items()} }")
    names = {}
    for xid, cl in calls.items():
        if proc_of(cl) not in ("6", "7"):
            continue
        handles = rw.ints(cl["rpcordma.rdma_handle"], 16)
        check(len(handles) == 1, f"call {xid}: handles {handles}")
        names[cl["n"]] = (handles[0], "RDMA WRITE" if proc_of(cl) == "6" else "RDMA READ",
                          None, None)
        rep = replies.get(xid)
        check(rep, f"call {xid}: no reply captured")
        one = lambda f, v: set(rep[f].split(",")) == {v}  # tshark may show the RPC twice
        check(one("rpc.msgtyp", "1") and one("rpc.replystat", "0") and
              one("rpc.state_accept", "0"),
              f"reply {xid}: not an accepted, successful ONC RPC reply: {rep}")
        check(set(rw.ints(rep["infiniband.ieth"], 16)) == {handles[0]},
              f"reply {xid} (frame {rep['n']}) invalidates {rep['infiniband.ieth']}, its call "
              f"named {handles[0]:#x}")
    check(len(names) == IOS and set(replies) <= set(calls),
          f"{len(names)} READ/WRITE calls, replies to unknown xids "
          f"{sorted(set(replies) - set(calls))[:3]}")
    done = rw.check_key_life(w, names)
    verdict(w, "--fwd rpc")
    summary_line("roce-rpc-tshark", w, naks, retrans,
                 f"; {len(sends)} SENDs decoded as RPC-over-RDMA v1, {len(names)} NFSv3 "
                 f"READ/WRITE calls whose handles the RDMA ops used and the replies invalidated "
                 f"({done}), none used after its reply")


def case_every_engine(binary, cases):
    """Every engine `rdmafwd --help` lists has its capture case here and registered in meson.build
    beside this file, so an engine added later cannot go uncaptured."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"--fwd MODE\s+forwarding engine: ([a-z|]+)", out)
    check(found, f"no engine list in rdmafwd --help:\n{out}")
    engines = found.group(1).split("|")
    with open(os.path.join(HERE, "meson.build")) as f:
        registered = f.read()
    missing = [e for e in engines
               if f"roce-{e}-tshark" not in cases or f"'roce-{e}-tshark'" not in registered]
    check(not missing, f"rdmafwd engines without a tshark capture case: {missing}")
    print(f"tshark-every-engine: {len(engines)} engines ({', '.join(engines)}), each captured")


if __name__ == "__main__":
    binary, case = sys.argv[1], sys.argv[2]
    blockd = sys.argv[3] if len(sys.argv) > 3 else None
    CASES = {
        "roce-rpc-tshark": lambda: case_rpc(binary),
        "roce-write-tshark": lambda: case_onesided(binary, "write", 2),
        "roce-read-tshark": lambda: case_onesided(binary, "read", 1),
        "roce-relay-tshark": lambda: case_sends_only(binary, "relay"),
        "roce-umr-tshark": lambda: case_sends_only(binary, "umr"),
        "blockd-roce-tshark": lambda: case_blockd(blockd),
        "tshark-faults": lambda: case_faults(blockd),
        "tshark-every-engine": lambda: case_every_engine(binary, CASES),
    }
    CASES[case]()
