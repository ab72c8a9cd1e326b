#!/usr/bin/env python3
"""Writes a copy of a capture of RoCE v2 frames (classic pcap, Ethernet) with faults injected,
for test_tshark.py's `tshark-faults` case: every check of roce_wire.py must find its fault.
Each changed frame except the bad-ICRC one is sealed again with Scapy's RoCE layer
(scapy.contrib.roce BTH.compute_icrc), so only the fault itself is wrong; and Scapy's ICRC of
a sample of unchanged frames is compared with the one they carry (a second, independent ICRC).

  pcap_faults.py IN OUT FAULT...   FAULT is KIND:FRAME[:VALUE], frames numbered from 1:
    icrc:F        flips a payload byte of F, its ICRC left as it was
    opcode:F:OP   F's BTH opcode set to OP
    rkey:F:KEY    the R_Key of F's RETH set to KEY
    va:F:VA       the VA of F's RETH set to VA
    psn:F:PSN     F's PSN set to PSN
    aeth:F:SYN    the syndrome of F's AETH set to SYN
    drop:F        F removed (the frames after it move up by one)
    append:F:PSN[:K]  a copy of F with PSN PSN added after the last frame; with K, cut to K
                  bytes after the BTH (IP and UDP lengths follow)
    scapy:F       no change: prints "scapy F ok" when Scapy's ICRC of F is the one F carries
Needs python3-scapy (exit 77 without it)."""
import struct
import sys

try:
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether
except ImportError:
    print("python3-scapy not installed: skipped")
    sys.exit(77)

BTH_AT = 14 + 20 + 8  # Ethernet, IPv4 without options, UDP


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"), "a little-endian pcap"
    recs, off = [], 24
    while off + 16 <= len(data):
        ts_s, ts_frac, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        recs.append([ts_s, ts_frac, data[off + 16:off + 16 + incl]])
        off += 16 + incl
    return data[:24], recs


def seal(frame):
    """The frame with its ICRC and IPv4 header checksum computed by Scapy."""
    p = Ether(frame)
    p[BTH].icrc = None
    p[IP].chksum = None
    return bytes(p)


def scapy_icrc_ok(frame):
    ip = Ether(frame)[IP]
    raw = bytes(ip)[:ip.len]
    return IP(raw)[BTH].compute_icrc(None) == raw[-4:]


def main(src, dst, faults):
    head, recs = read(src)
    appended, drops = [], []
    for spec in faults:
        kind, f, *val = spec.split(":")
        rec = recs[int(f) - 1]
        b = bytearray(rec[2])
        if kind == "icrc":
            b[len(b) - 4 - 100] ^= 0x01  # a payload byte 100 bytes before the ICRC
            rec[2] = bytes(b)
        elif kind == "opcode":
            b[BTH_AT] = int(val[0])
            rec[2] = seal(bytes(b))
        elif kind == "rkey":
            b[BTH_AT + 12 + 8:BTH_AT + 12 + 12] = int(val[0], 0).to_bytes(4, "big")
            rec[2] = seal(bytes(b))
        elif kind == "va":
            b[BTH_AT + 12:BTH_AT + 12 + 8] = int(val[0], 0).to_bytes(8, "big")
            rec[2] = seal(bytes(b))
        elif kind == "psn":
            b[BTH_AT + 9:BTH_AT + 12] = int(val[0]).to_bytes(3, "big")
            rec[2] = seal(bytes(b))
        elif kind == "aeth":
            b[BTH_AT + 12] = int(val[0], 0)
            rec[2] = seal(bytes(b))
        elif kind == "drop":
            drops.append(int(f) - 1)
        elif kind == "append":
            b[BTH_AT + 9:BTH_AT + 12] = int(val[0]).to_bytes(3, "big")
            if len(val) > 1:  # cut short (the IP and UDP lengths follow; Scapy must see the
                # rest as its payload: an opcode without a header Scapy decodes, e.g. READ)
                b = b[:BTH_AT + 12 + int(val[1])] + b"\0" * 4
                b[16:18] = (len(b) - 14).to_bytes(2, "big")
                b[BTH_AT - 4:BTH_AT - 2] = (len(b) - BTH_AT + 8).to_bytes(2, "big")
            appended.append([recs[-1][0], recs[-1][1], seal(bytes(b))])
        elif kind == "scapy":
            print(f"scapy {f} {'ok' if scapy_icrc_ok(rec[2]) else 'differs'}")
        else:
            raise SystemExit(f"unknown fault {spec}")
    recs = [r for i, r in enumerate(recs) if i not in drops] + appended
    with open(dst, "wb") as out:
        out.write(head)
        for ts_s, ts_frac, b in recs:
            out.write(struct.pack("<IIII", ts_s, ts_frac, len(b), len(b)) + b)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
