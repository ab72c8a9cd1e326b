"""What a capture of RoCE v2 traffic must show, judged with Wireshark's own dissectors (tshark)
and nothing of rdmx: every UDP 4791 frame dissected as InfiniBand, none malformed or flagged,
each ICRC right, each BTH opcode one the traffic's mode produces, the PSNs of every QP in order,
and the R_Keys of the RETHs the ones the mode handed out, used only while they are live.

Each check appends what it finds wrong to Wire.problems as (frame, text) and never raises: a
good capture has no problem, and a capture with faults injected (tests/functional/twohost
pcap_faults.py) must have exactly the problems of its faults (test_tshark.py tshark-faults).

References: IBTA InfiniBand Architecture Specification vol. 1, 9.2 (BTH, opcodes), 9.3 (RETH,
AETH, IETH), 9.7 (RC PSNs, ACKs), Annex A17 (RoCE v2, the ICRC); Linux
drivers/infiniband/sw/rxe/rxe_icrc.c (rxe_icrc_hdr: the masked fields)."""
import struct
import subprocess
import zlib

MTU = 1024  # the path MTU the tests give emu (mtu=1024, emu's default)
PSN_MOD = 1 << 24

# RC opcodes (IBTA vol. 1 9.2.1, the OpCode field) as tshark's infiniband.bth.opcode gives them.
OP = {0: "SEND First", 1: "SEND Middle", 2: "SEND Last", 3: "SEND Last with Immediate",
      4: "SEND Only", 5: "SEND Only with Immediate", 6: "RDMA WRITE First",
      7: "RDMA WRITE Middle", 8: "RDMA WRITE Last", 9: "RDMA WRITE Last with Immediate",
      10: "RDMA WRITE Only", 11: "RDMA WRITE Only with Immediate", 12: "RDMA READ Request",
      13: "RDMA READ Response First", 14: "RDMA READ Response Middle",
      15: "RDMA READ Response Last", 16: "RDMA READ Response Only", 17: "Acknowledge",
      18: "Atomic Acknowledge", 19: "CmpSwap", 20: "FetchAdd", 22: "SEND Last with Invalidate",
      23: "SEND Only with Invalidate"}
SENDS = {0, 1, 2, 4}
WRITES = {6, 7, 8, 10}
READ_REQ = 12
READ_RESPONSES = {13, 14, 15, 16}
ACK = 17
SEND_INV = {22, 23}
REQUESTS = set(range(0, 13)) | SEND_INV  # what a requester sends; the rest are responses

# The opcodes each mode may put on the wire, from the client (c2s) and from the server (s2c),
# and those it must (with 8 KiB I/Os over a 1 KiB MTU: FIRST, MIDDLE and LAST of each).
# rdmafwd's client ends every engine with a goodbye, an NFSv3 NULL call in one SEND, which the
# server answers with a SEND when it runs rpc (apps/rdmafwd/engines/rpc.cpp rpc_send_bye).
MODES = {
    # the client RDMA WRITEs into the server's windows (engines/onesided.cpp)
    "write": dict(c2s=WRITES | {4, ACK}, s2c={4, ACK},
                  need={("c2s", 6), ("c2s", 7), ("c2s", 8), ("s2c", ACK)}),
    # the client RDMA READs from them
    "read": dict(c2s={READ_REQ, 4, ACK}, s2c=READ_RESPONSES | {4, ACK},
                 need={("c2s", READ_REQ), ("s2c", 13), ("s2c", 14), ("s2c", 15)}),
    # SENDs only: source -> relay-in, relay-out -> sink; no RDMA, no invalidation
    "relay": dict(c2s=SENDS | {ACK}, s2c=SENDS | {ACK},
                  need={("c2s", 0), ("c2s", 1), ("c2s", 2), ("s2c", 0), ("s2c", 1),
                        ("s2c", 2), ("c2s", ACK), ("s2c", ACK)}),
    # map + unmap on the client's own SQ: nothing on the wire but the goodbye
    "umr": dict(c2s={4, ACK}, s2c={4, ACK}, need={("c2s", 4), ("s2c", 4)}),
    # calls in SENDs; the server WRITEs (NFS READ) or READs (NFS WRITE) through the call's
    # chunk and replies with SEND_WITH_INV of it (engines/rpc.cpp)
    "rpc": dict(c2s={4, ACK} | READ_RESPONSES, s2c=WRITES | SEND_INV | {READ_REQ, 4, ACK},
                need={("c2s", 4), ("c2s", 13), ("s2c", 6), ("s2c", READ_REQ), ("s2c", 23)}),
    # blockd: requests in SENDs; the server WRITEs (client read) or READs (client write)
    # through the request's rkey and replies with SEND_WITH_INV of it, or a plain SEND to the
    # STOP (examples/blockd/blockd_server.c)
    "blockd": dict(c2s={4, ACK} | READ_RESPONSES, s2c=WRITES | SEND_INV | {READ_REQ, 4, ACK},
                   need={("c2s", 4), ("c2s", 13), ("s2c", 6), ("s2c", READ_REQ),
                         ("s2c", 23), ("s2c", 4)}),
}

FIELDS = ["frame.number", "ip.src", "ip.dst", "udp.dstport", "tcp.srcport", "tcp.seq",
          "tcp.payload", "_ws.malformed", "_ws.expert.severity", "infiniband.bth.opcode",
          "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.reth.va",
          "infiniband.reth.r_key", "infiniband.reth.dmalen", "infiniband.aeth.syndrome",
          "infiniband.ieth", "infiniband.invariant.crc", "data.data",
          # RPC-over-RDMA, ONC RPC and NFS (--fwd rpc)
          "rpcordma.version", "rpcordma.xid", "rpcordma.msg_type", "rpcordma.rdma_handle",
          "rpcordma.position", "rpc.msgtyp", "rpc.replystat", "rpc.state_accept",
          "nfs.procedure_v3"]
# Payload heuristics of other protocols claim RDMA payloads that are not theirs, and Wireshark
# 4.0's RPC-over-RDMA heuristic (packet-rpcrdma.c) reads past a payload shorter than 16 bytes
# and marks a correct 8-byte SEND (blockd's reply) malformed; off unless the traffic is rpc.
HEURISTICS = ["rpcrdma_infiniband", "fc_infiniband", "smb_direct_infiniband", "iser_infiniband",
              "lnet_ib", "sdp_infiniband", "smcr_infiniband", "eth_over_ib", "mellanox_eoib"]
SEVERITY_WARNING = 0x00600000  # Wireshark epan/proto.h PI_WARN


def ints(v, base=0):
    return [int(x, base) for x in v.split(",") if x]


def pcap_frames(path):
    """The frames of a classic pcap file, numbered from 1 as tshark numbers them ([0] unused)."""
    with open(path, "rb") as f:
        data = f.read()
    order = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">",
             b"\xa1\xb2\x3c\x4d": ">"}.get(data[:4])
    assert order, f"{path}: not a pcap file"
    assert struct.unpack(order + "I", data[20:24])[0] == 1, f"{path}: not Ethernet"
    frames, off = [None], 24
    while off + 16 <= len(data):
        incl = struct.unpack(order + "I", data[off + 8:off + 12])[0]
        frames.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return frames


def roce_icrc(frame):
    """(ICRC computed, ICRC stored) of a RoCE v2 Ethernet/IPv4 frame: CRC-32 over 8 bytes of 1s
    (the absent LRH), the IPv4 header with TOS, TTL and checksum as 1s, the UDP header with its
    checksum as 1s, the BTH with byte 4 (FECN, BECN, reserved) as 1s, and the rest up to the
    ICRC, stored least-significant byte first (IBTA Annex A17; rxe_icrc.c)."""
    ip = frame[14:]
    ihl = (ip[0] & 0xF) * 4
    ip = ip[:int.from_bytes(ip[2:4], "big")]
    hdr = bytearray(b"\xff" * 8 + ip[:ihl + 8 + 12])
    hdr[8 + 1] = 0xFF                        # TOS
    hdr[8 + 8] = 0xFF                        # TTL
    hdr[8 + 10:8 + 12] = b"\xff\xff"         # header checksum
    hdr[8 + ihl + 6:8 + ihl + 8] = b"\xff\xff"  # UDP checksum
    hdr[8 + ihl + 8 + 4] = 0xFF              # BTH FECN, BECN, reserved
    crc = zlib.crc32(ip[ihl + 20:-4], zlib.crc32(bytes(hdr)))
    return crc, int.from_bytes(ip[-4:], "little")


def psn_diff(a, b):
    """a - b in 24-bit serial arithmetic, in [-2^23, 2^23)."""
    return (a - b + (PSN_MOD >> 1)) % PSN_MOD - (PSN_MOD >> 1)


class Wire:
    """A capture decoded by tshark: the RoCE frames and the TCP segments (the rendezvous)."""

    def __init__(self, pcap, client, heuristics=False):
        off = [] if heuristics else [a for h in HEURISTICS for a in ("--disable-heuristic", h)]
        p = subprocess.run(["tshark", "-n", "-r", pcap] + off +
                           ["-Y", "udp.port == 4791 || tcp.len > 0", "-T", "fields", "-E",
                            "separator=\t", "-E", "occurrence=a", "-E", "aggregator=,"] +
                           [a for f in FIELDS for a in ("-e", f)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, f"tshark: exit {p.returncode}: {p.stderr}"
        rows = [dict(zip(FIELDS, line.split("\t") + [""] * len(FIELDS)))
                for line in p.stdout.splitlines()]
        self.roce = [r for r in rows if r["udp.dstport"] == "4791"]
        self.tcp = [r for r in rows if r["tcp.payload"]]
        self.frames = pcap_frames(pcap)
        self.client = client
        self.problems = []
        for r in self.roce:
            r["n"] = int(r["frame.number"])
            r["dir"] = "c2s" if r["ip.src"] == client else "s2c"
            r["op"] = int(r["infiniband.bth.opcode"]) if r["infiniband.bth.opcode"] else None
            r["psn"] = int(r["infiniband.bth.psn"] or 0)
            r["first"] = True  # a first transmission unless check_psns finds otherwise

    def bad(self, frame, text):
        self.problems.append((frame, text))

    def stream(self, port):
        """The bytes a TCP port sent, reassembled by sequence number (a retransmitted segment
        counted once)."""
        segs = sorted({int(r["tcp.seq"]): bytes.fromhex(r["tcp.payload"])
                       for r in self.tcp if r["tcp.srcport"] == str(port)}.items())
        out, end = b"", None
        for seq, data in segs:
            if end is None or seq >= end:
                out, end = out + data, seq + len(data)
        return out


def check_dissected(w):
    """Every UDP 4791 frame dissected as InfiniBand, none malformed, no expert warning."""
    for r in w.roce:
        sev = max(ints(r["_ws.expert.severity"]), default=0)
        if r["_ws.malformed"] or sev >= SEVERITY_WARNING or r["op"] is None:
            w.bad(r["n"], f"malformed or flagged by tshark ({r['_ws.malformed'] or hex(sev)})")


def check_icrc(w):
    """Each frame's ICRC, as tshark shows it (infiniband.invariant.crc), is the one computed from
    the frame's bytes. (tshark 4.0 shows the ICRC but has no preference to verify it; it shows
    none when a header is cut short, which check_dissected reports.)"""
    for r in w.roce:
        shown = ints(r["infiniband.invariant.crc"], 16)
        want, stored = roce_icrc(w.frames[r["n"]])
        if shown[:1] != [int.from_bytes(stored.to_bytes(4, "little"), "big")] and \
                not (not shown and r["_ws.malformed"]):  # tshark stops at a malformed header
            w.bad(r["n"], f"tshark shows ICRC {shown} where the frame holds {stored:#010x}")
        elif want != stored:
            w.bad(r["n"], f"bad ICRC {stored:#010x}, computed {want:#010x} ({OP.get(r['op'])})")


def check_opcodes(w, mode):
    """Every opcode one the mode produces, from the side that produces it; each opcode the mode
    must produce seen; every AETH an ACK or a PSN sequence NAK (after a loss), never an RNR or
    error NAK. Returns the number of sequence NAKs."""
    spec, seen, naks = MODES[mode], set(), 0
    who = {"c2s": "client", "s2c": "server"}
    for r in w.roce:
        if r["op"] is None:
            continue
        seen.add((r["dir"], r["op"]))
        if r["op"] not in spec[r["dir"]]:
            w.bad(r["n"], f"opcode {r['op']} ({OP.get(r['op'], 'reserved')}) from the "
                  f"{who[r['dir']]}: not one --fwd {mode} produces")
        for s in ints(r["infiniband.aeth.syndrome"]):
            if s >> 5 == 3 and s & 0x1F == 0:
                naks += 1
            elif s >> 5 != 0:
                w.bad(r["n"], f"AETH syndrome {s:#04x}: an RNR or error NAK")
    for d, op in sorted(spec["need"] - seen):
        w.bad(0, f"no {OP[op]} from the {who[d]} in the whole capture")
    return naks


def check_psns(w):
    """PSNs per QP and direction (IBTA 9.7.1, 9.7.5): a requester's first transmission has
    exactly the next PSN (+1, a READ request + max(1, ceil(length / MTU))); a packet behind it is
    a retransmission of a PSN already sent; a responder's new PSNs increase, each response PSN
    is one the other side sent, and a READ's responses use exactly its PSNs, in order, FIRST (or
    ONLY) at the request's PSN and LAST (or ONLY) at its last one. Marks every row's "first";
    returns (retransmissions, {(src, dst, qp): next PSN})."""
    nxt, sent, top, retrans = {}, {}, {}, 0
    reads, cur = {}, {}  # (requester, responder) -> {first PSN: [last PSN, frame, answered]}
    for r in w.roce:
        if r["op"] is None:
            continue
        key, p = (r["ip.src"], r["ip.dst"], r["infiniband.bth.destqp"]), r["psn"]
        if r["op"] in REQUESTS:
            n = 1
            if r["op"] == READ_REQ:
                n = max(1, -(-(ints(r["infiniband.reth.dmalen"]) or [0])[0] // MTU))
            e = nxt.setdefault(key, p)
            d = psn_diff(p, e)
            if d > 0:
                w.bad(r["n"], f"PSN {p} on QP {key[2]} from {key[0]}: {d} ahead of the next "
                      f"PSN {e} (a gap)")
            if d >= 0:
                nxt[key] = (p + n) % PSN_MOD
                sent.setdefault((key[0], key[1]), set()).update((p + i) % PSN_MOD for i in range(n))
                if r["op"] == READ_REQ:
                    last = (p + n - 1) % PSN_MOD
                    reads.setdefault((key[0], key[1]), {})[p] = [last, r["n"], False]
            else:
                r["first"] = False
                retrans += 1
                if p not in sent.get((key[0], key[1]), ()):
                    w.bad(r["n"], f"PSN {p} behind the next PSN {e} but never sent")
        else:
            t = top.get(key)
            if p not in sent.get((key[1], key[0]), ()):
                w.bad(r["n"], f"{OP[r['op']]} PSN {p}: no request of {key[1]} had it")
            if t is not None and psn_diff(p, t) <= 0:
                r["first"] = False
                retrans += r["op"] != ACK  # an ACK may repeat (duplicates are acknowledged)
                continue
            if r["op"] in (14, 15) and t is not None and psn_diff(p, t) != 1:
                w.bad(r["n"], f"{OP[r['op']]} PSN {p} after {t}: not the next")
            top[key] = p
            rd = reads.get((key[1], key[0]), {})
            if r["op"] in (13, 16):
                cur[key] = p
                if p not in rd:
                    w.bad(r["n"], f"{OP[r['op']]} PSN {p}: no READ request starts there")
            if r["op"] in (15, 16):
                start = cur.pop(key, None)
                if start in rd and rd[start][0] == p:
                    rd[start][2] = True
                else:
                    w.bad(r["n"], f"{OP[r['op']]} PSN {p}: the READ from PSN {start} ends "
                          f"at {rd[start][0] if start in rd else None}")
    for (req, _), starts in sorted(reads.items()):
        for p, (last, frame, answered) in sorted(starts.items(), key=lambda x: x[1][1]):
            if not answered:
                w.bad(frame, f"RDMA READ Request PSN {p} from {req}: no response up to its last "
                      f"PSN {last}")
    return retrans, nxt


def check_no_reth(w, mode):
    for r in w.roce:
        if r["infiniband.reth.r_key"] or r["infiniband.ieth"]:
            w.bad(r["n"], f"an RETH or IETH in --fwd {mode}, which moves no data by RDMA")


def check_lane_keys(w, lanes):
    """RDMA into windows the server mapped once (--fwd write/read): all the R_Keys sent to one
    QP are among one lane's keys (what READY handed out), no two QPs share a lane, and every key
    handed out is used."""
    by_qp = {}
    for r in w.roce:
        for k in ints(r["infiniband.reth.r_key"], 16):
            by_qp.setdefault((r["ip.dst"], r["infiniband.bth.destqp"]), []).append((r["n"], k))
    taken = set()
    for qp, uses in sorted(by_qp.items()):
        keys = {k for _, k in uses}
        lane = next((i for i, s in enumerate(lanes) if keys & s), None)
        if lane is None or lane in taken:
            w.bad(uses[0][0], f"QP {qp}: R_Keys {sorted(map(hex, keys))[:4]} of no lane of its own")
            continue
        taken.add(lane)
        for n, k in uses:
            if k not in lanes[lane]:
                w.bad(n, f"R_Key {k:#x} on QP {qp}: not one of lane {lane}'s keys")
        for k in sorted(lanes[lane] - keys):
            w.bad(0, f"lane {lane}'s key {k:#x} never used")
    if len(taken) != len(lanes):
        w.bad(0, f"{len(lanes)} lanes handed out keys, {len(taken)} QPs used them")


def check_key_life(w, names):
    """Keys handed out per I/O and invalidated by the reply (blockd, rpc): names = {frame:
    (key, "RDMA WRITE" or "RDMA READ", va or None, length or None)} where a request or call
    named its key. A first transmission's RETH uses a key that is named and not yet invalidated,
    with the I/O's operation (and VA, length); the SEND_WITH_INV's IETH invalidates a live key
    that moved data; a key comes back only when a later I/O names it again (window keys are
    drawn anew at each map). Returns the number of I/Os whose key was used and invalidated."""
    live, dead, done = {}, {}, 0
    for r in w.roce:
        n = r["n"]
        if n in names:
            k = names[n][0]
            if k in live:
                w.bad(n, f"R_Key {k:#x} named again while still live (named at {live[k][0]})")
            live[k] = (n, names[n], False)
            dead.pop(k, None)
        if not r["first"]:
            continue
        for k in set(ints(r["infiniband.reth.r_key"], 16)):
            what = "RDMA WRITE" if r["op"] in WRITES else "RDMA READ"
            if k not in live:
                why = f"invalidated at frame {dead[k]}" if k in dead else "never named"
                w.bad(n, f"{what} with R_Key {k:#x}: no live I/O has it ({why})")
                continue
            f0, (_, want, va, length), _ = live[k]
            got_va = (ints(r["infiniband.reth.va"], 16) or [None])[0]
            got_len = (ints(r["infiniband.reth.dmalen"]) or [None])[0]
            if what != want or (va is not None and (va, length) != (got_va, got_len)):
                w.bad(n, f"{what} VA {got_va} length {got_len} with R_Key {k:#x}: the I/O named "
                      f"at frame {f0} wants {want} VA {va} length {length}")
            live[k] = (f0, live[k][1], True)
        for k in set(ints(r["infiniband.ieth"], 16)):  # tshark 4.0 shows the IETH twice
            if k not in live or not live[k][2]:
                w.bad(n, f"SEND with Invalidate of R_Key {k:#x}: "
                      f"{'no live I/O has it' if k not in live else 'no RDMA used it'}")
            else:
                done += 1
            live.pop(k, None)
            dead[k] = n
    for k, (f0, _, _) in live.items():
        w.bad(f0, f"R_Key {k:#x} named at frame {f0} never invalidated")
    return done


def check_all(w, mode):
    """The checks every capture gets. Returns (sequence NAKs, retransmissions, next PSNs)."""
    check_dissected(w)
    check_icrc(w)
    naks = check_opcodes(w, mode)
    retrans, nxt = check_psns(w)
    return naks, retrans, nxt
