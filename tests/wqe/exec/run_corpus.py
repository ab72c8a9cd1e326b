#!/usr/bin/env python3
"""Runs the planted-PRM-violation corpus (corpus.jsonl) through `rdmx-wqe exec` and checks, for
every entry, the CQEs of both QPs, the PRM checker's reports and the QP state it ends in.

An entry: name; wrs (an `rdmx-wqe encode` request's work requests, with "$name" placeholders
for the exec environment: $w0..$w3 the windows, $lkey, $buf, $peer_rkey, $peer_buf, the
memory-window set-up ($mw, $mw2, $pd2_mw, $bind_lkey/$bind_buf, $bind_ro_lkey/$bind_ro_buf,
$pd2_lkey/$pd2_buf: any env key), and "$NxLEN" for N translation entries of LEN bytes); optional mutate [{wqebb, byte, or|set}]
(the planted violation, applied to the encoded bytes), doorbell_record, sq_pi, profile; expect
{local, peer: ["CQE_OPCODE[:wqe_opcode or syndrome name or *]"], reports: [rule], qp_state}.
Usage: run_corpus.py RDMX_WQE CORPUS
"""
import json
import subprocess
import sys

wqe, corpus = sys.argv[1], sys.argv[2]
entries = [json.loads(l) for l in open(corpus) if l.strip()]
envs = {}


def env(profile):
    if profile not in envs:
        args = [wqe, "exec"] + (["--profile", profile] if profile else [])
        out = subprocess.run(args, input="", capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        envs[profile] = json.loads(out.stdout.splitlines()[0])["env"]
    return envs[profile]


def subst(v, e):
    if isinstance(v, list):
        return [subst(x, e) for x in v]
    if isinstance(v, dict):
        return {k: subst(x, e) for k, x in v.items()}
    if isinstance(v, str) and v.startswith("$"):
        name = v[1:]
        if name[0] == "w" and name[1:].isdigit():
            return e["windows"][int(name[1:])]
        if "x" in name and name.split("x")[0].isdigit():
            n, ln = (int(x) for x in name.split("x"))
            return [{"lkey": e["lkey"], "addr": e["buf"] + i * ln, "length": ln} for i in range(n)]
        return e[name]
    return v


failures = []
by_profile = {}
for ent in entries:
    by_profile.setdefault(ent.get("profile", ""), []).append(ent)
for profile, group in by_profile.items():
    e = env(profile)
    lines = []
    for ent in group:
        req = {"qpn": e["qpn"], "sq_wqe_cnt": e["sq_wqe_cnt"], "sq_pi": ent.get("sq_pi", 0),
               "max_inline_data": e["max_inline_data"], "wrs": subst(ent["wrs"], e)}
        r = subprocess.run([wqe, "encode"], input=json.dumps(req) + "\n", capture_output=True,
                           text=True, timeout=30)
        enc = json.loads(r.stdout)
        assert enc["rc"] == 0, f"{ent['name']}: encode refused: {enc}"
        bbs = [bytearray.fromhex(h) for h in enc["wqebbs"]]
        for m in ent.get("mutate", []):
            b = bbs[m["wqebb"]]
            b[m["byte"]] = m["set"] if "set" in m else b[m["byte"]] | m["or"]
        batch = {"wqebbs": [b.hex() for b in bbs], "sq_pi": ent.get("sq_pi", 0),
                 "doorbell_record": ent.get("doorbell_record", enc["doorbell_record"])}
        lines.append(json.dumps(batch))
    args = [wqe, "exec"] + (["--profile", profile] if profile else [])
    out = subprocess.run(args, input="\n".join(lines) + "\n", capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        failures.append(f"exec ({profile or 'default'}): exit {out.returncode}: {out.stderr}")
        continue
    results, cur = [], {"local": [], "peer": [], "reports": []}
    for l in out.stdout.splitlines()[1:]:
        o = json.loads(l)
        if "cqe" in o:
            c = o["cqe"]
            detail = c.get("wqe_opcode") or c.get("syndrome_name")
            cur[c["qp"]].append(c["opcode"] + (":" + detail if detail else ""))
        elif "report" in o:
            cur["reports"].append(o["report"]["rule"])
        elif "batch" in o:
            cur["qp_state"] = o["batch"]["qp_state"]
            results.append(cur)
            cur = {"local": [], "peer": [], "reports": []}
    if len(results) != len(group):
        failures.append(f"{profile}: {len(results)} batch results for {len(group)} entries")
        continue
    for ent, got in zip(group, results):
        exp = ent["expect"]
        for side in ("local", "peer"):
            if side not in exp:
                continue
            want = exp[side]
            ok = len(want) == len(got[side]) and all(
                w == g or (w.endswith(":*") and g.startswith(w[:-1])) for w, g in zip(want, got[side]))
            if not ok:
                failures.append(f"{ent['name']}: {side} CQEs {got[side]}, want {want}")
        if "reports" in exp and sorted(set(got["reports"])) != sorted(set(exp["reports"])):
            failures.append(f"{ent['name']}: reports {got['reports']}, want {exp['reports']}")
        if "qp_state" in exp and got.get("qp_state") != exp["qp_state"]:
            failures.append(f"{ent['name']}: QP {got.get('qp_state')}, want {exp['qp_state']}")
for f in failures:
    print("FAIL", f)
print(f"{len(entries) - len({f.split(':')[0] for f in failures})}/{len(entries)} corpus entries as expected")
sys.exit(1 if failures else 0)
