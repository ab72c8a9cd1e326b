#!/usr/bin/env python3
"""Reads `objdump -d --no-show-raw-insn` on stdin and asserts the device-ordering sequence of one
probe function of tests/cross/barrier_probe.cpp (see scripts/check-barriers.sh).

usage: check-barriers.py ARCH FUNCTION   (ARCH aarch64 | x86_64)
Exits 0 when the sequence holds; otherwise prints why and the function's instructions."""
import re
import sys


def function_body(lines, fn):
    body, inside = [], False
    for line in lines:
        if re.match(r"^[0-9a-f]+ <%s>:" % re.escape(fn), line):
            inside = True
            continue
        if inside:
            if not line.strip():
                break
            m = re.match(r"^\s*[0-9a-f]+:\s+(.*)$", line)
            if m:
                body.append(m.group(1).split("//")[0].strip())
    return body


def classify_aarch64(insn):
    op, _, args = insn.partition("\t") if "\t" in insn else insn.partition(" ")
    op, args = op.strip(), args.strip()
    if op in ("dmb", "dsb"):
        return ("bar", f"{op} {args}")
    if op in ("str", "stlr", "strb", "strh", "stp", "stlrb", "stlrh"):
        reg = args.split(",")[0].strip()
        return ("st", reg[0] if op in ("str", "stlr") else op)
    if op.startswith("ld"):
        return ("ld", insn)
    return None


def classify_x86(insn):
    op, _, args = insn.partition(" ")
    args = args.strip()
    if op in ("sfence", "lfence", "mfence"):
        return ("bar", op)
    if op.startswith("mov") and "," in args and "(" in args.rsplit(",", 1)[1]:
        src = args.rsplit(",", 1)[0].strip()
        return ("st", "x" if src.startswith("%r") else "w" if src.startswith("%e") else "?")
    if op.startswith("mov") and "(" in args.split(",")[0]:
        return ("ld", insn)
    if op.startswith("or") and "(" in args:
        return ("st", "b")
    return None


def fail(why, body):
    print(why)
    for i in body:
        print("  " + i)
    sys.exit(1)


def events(body):
    cls = classify_aarch64 if ARCH == "aarch64" else classify_x86
    return [e for e in (cls(i) for i in body) if e]


def check_doorbell(body, first_barrier, wc):
    ev = [e for e in events(body) if e[0] != "ld"]
    # The doorbell record store (32-bit), the register store (64-bit), the WC barriers around
    # the register store; on aarch64 the device write barrier right before the record.
    for i in range(len(ev)):
        seq = ev[i:i + 4]
        if len(seq) == 4 and seq[0] == ("st", "w") and seq[1] == ("bar", wc) and \
           seq[2] == ("st", "x") and seq[3] == ("bar", wc):
            if first_barrier and (i == 0 or ev[i - 1] != ("bar", first_barrier)):
                fail(f"no '{first_barrier}' right before the doorbell-record store", body)
            return
    fail(f"no 'record store, {wc}, 64-bit register store, {wc}' sequence", body)


def check_rq_doorbell(body):
    ev = [e for e in events(body) if e[0] != "ld"]
    for i in range(len(ev) - 1):
        if ev[i] == ("bar", "dmb oshst") and ev[i + 1] == ("st", "w"):
            return
    fail("no 'dmb oshst, record store' sequence", body)


def check_cqe(body, barrier, owner_re, field_re):
    idx_bar = [i for i, x in enumerate(body) if re.sub(r"\s+", " ", x) == barrier]
    if not idx_bar:
        fail(f"no '{barrier}'", body)
    b = idx_bar[0]
    owner = [i for i, x in enumerate(body) if re.search(owner_re, x)]
    field = [i for i, x in enumerate(body) if re.search(field_re, x)]
    if not owner or owner[0] > b:
        fail(f"the owner byte is not read before '{barrier}'", body)
    if not field or min(field) < b:
        fail(f"a CQE field is read before '{barrier}'", body)


ARCH, FN = sys.argv[1], sys.argv[2]
body = function_body(sys.stdin.read().splitlines(), FN)
if not body:
    print(f"function {FN} not found")
    sys.exit(1)
if ARCH == "aarch64":
    if any(re.match(r"dmb\s+ish", x) for x in body):
        fail("an inner-shareable barrier (dmb ish*) does not order memory for the NIC", body)
    if FN == "probe_sq_doorbell":
        check_doorbell(body, "dmb oshst", "dsb st")
    elif FN == "probe_rq_doorbell":
        check_rq_doorbell(body)
    elif FN == "probe_cqe_read":
        # op_own is byte 63 of the CQE; byte_cnt is at byte 44.
        check_cqe(body, "dmb oshld", r"^ldar?b\s.*#63\]|^ldar?b\s+w\d+, \[x\d+\]$", r"#44\]")
else:
    if FN == "probe_sq_doorbell":
        check_doorbell(body, None, "sfence")
    elif FN == "probe_cqe_read":
        check_cqe(body, "lfence", r"^movzbl\s+0x3f\(", r"0x2c\(")
sys.exit(0)
