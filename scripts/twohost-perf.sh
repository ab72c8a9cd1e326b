#!/usr/bin/env bash
# The figures of doc/performance.md "Two hosts over emu RoCE v2": rdmafwd rpc (16 pages of 4 KiB
# per I/O, io-depth 32, one lane) between two network namespaces joined by a veth pair
# (tests/functional/twohost/netns.sh), over three wires in turn: emu's shared-memory wire, RoCE v2
# (emu@roce:ADDR on each side), and RoCE v2 with 1 % loss, reordering and duplication injected on
# both sides. Needs root (network namespaces); the namespaces are removed at the end.
#
#   scripts/twohost-perf.sh [SECONDS]     (default 5 per wire; BUILD_DIR, default build)
#
# Prints one line per wire: I/O/s, p50 and p99 in µs, goodput, errors, retransmitted packets.
# TWOHOST_KEEP=1 keeps both sides' output of every wire (the directory is printed).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
secs=${1:-5}
fwd="${BUILD_DIR:-build}/apps/rdmafwd/rdmafwd"
netns=tests/functional/twohost/netns.sh
[ -x "$fwd" ] || { echo "twohost-perf: build rdmafwd first ($fwd)"; exit 1; }
name="tp$$"
read -r nsa nsb a b < <(sh "$netns" up "$name") || { echo "twohost-perf: no namespaces"; exit 1; }
tmp=$(mktemp -d)
trap 'sh "$netns" down "$name"; [ -n "${TWOHOST_KEEP:-}" ] && echo "logs: $tmp" || rm -rf "$tmp"' EXIT
echo "load $(cut -d' ' -f1-3 /proc/loadavg), $secs s per wire"
run() {  # run LABEL SERVER_DEVICE CLIENT_DEVICE
  local common=(--json --rendezvous-timeout 40 --pages-per-io 16 --io-depth 32)
  ip netns exec "$nsa" "$fwd" -l 0-1 --main-lcore 1 --no-huge -m 256 -- --role server \
    --listen "$a:7471" --device "$2" "${common[@]}" >"$tmp/s.out" 2>"$tmp/s.err" &
  local spid=$!
  sleep 1
  ip netns exec "$nsb" timeout $((secs + 60)) "$fwd" -l 0-1 --no-huge -m 256 -- --role client \
    --peer "$a:7471" --fwd rpc --duration "$secs" --device "$3" "${common[@]}" \
    >"$tmp/c.out" 2>"$tmp/c.err"
  local crc=$?
  wait "$spid"
  local src=$?
  for f in s.out s.err c.out c.err; do cp "$tmp/$f" "$tmp/${1//[^A-Za-z0-9]/_}.$f"; done
  python3 - "$1" "$crc" "$src" "$tmp/c.out" "$tmp/s.out" <<'PY'
import json, sys
label, crc, src, cpath, spath = sys.argv[1:]
def lines(p, t):
    return [json.loads(l) for l in open(p) if l.startswith('{"type":"%s"' % t)]
c = lines(cpath, "summary")[-1]["total"]
secs = lines(cpath, "summary")[-1].get("seconds") or 0
retr = [l["retransmits"] for p in (spath, cpath) for l in lines(p, "roce")]
rate = c["ios"] / secs if secs else 0
print(f"{label:28} exit {crc}/{src}  {rate:8.0f} I/O/s  p50 {c['latency_us']['p50']:9.0f} us  "
      f"p99 {c['latency_us']['p99']:9.0f} us  {rate * 65536 / 1e6:6.1f} MB/s  errors "
      f"{c['errors']['total']}  retransmits (server, client) {retr or '-'}")
PY
}
run "shared memory" emu emu
run "RoCE v2" "emu@roce:$a" "emu@roce:$b"
f=",loss=1,reorder=1,dup=1"
run "RoCE v2, 1 % faults" "emu@roce:$a$f" "emu@roce:$b$f"
