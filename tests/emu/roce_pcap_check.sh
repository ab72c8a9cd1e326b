#!/usr/bin/env bash
# Checks a pcap of emu's RoCE v2 packets with tools nobody here wrote:
#   - Wireshark's tshark: every packet decodes as InfiniBand (RRoCE), nothing malformed, no
#     expert warning, and the BTH opcodes appear exactly in the expected order;
#   - Scapy's RoCE layer (scapy.contrib.roce): the ICRC of every packet equals its own.
#   roce_pcap_check.sh GENERATOR            (runs GENERATOR OUT.pcap, which prints the opcodes)
#   roce_pcap_check.sh --pcap FILE OPCODES  (an existing capture and a file of expected opcodes)
# Exit 77 (skip) when tshark or Scapy is missing (scripts/dev.sh installs both).
set -uo pipefail
command -v tshark >/dev/null || { echo "SKIP: tshark not installed"; exit 77; }
py=""
for c in python3 /usr/bin/python3; do
  if command -v "$c" >/dev/null && "$c" -c 'import scapy.contrib.roce' 2>/dev/null; then
    py=$c; break
  fi
done
[ -n "$py" ] || { echo "SKIP: python3-scapy not installed"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "${1:-}" = "--pcap" ]; then
  pcap=$2; cp "$3" "$tmp/want"
else
  pcap=$tmp/roce.pcap
  "$1" "$pcap" >"$tmp/want" || { echo "FAIL: generator failed"; exit 1; }
fi
n_want=$(wc -l <"$tmp/want")
[ "$n_want" -gt 0 ] || { echo "FAIL: no packets expected"; exit 1; }

# Payload heuristics of other protocols can claim RDMA payloads (packet-rpcrdma.c reads past
# short payloads); they are not what is checked here.
heur=""
for h in rpcrdma_infiniband fc_infiniband smb_direct_infiniband iser_infiniband lnet_ib \
         sdp_infiniband smcr_infiniband eth_over_ib mellanox_eoib; do
  heur="$heur --disable-heuristic $h"
done
ts() { tshark -n -r "$pcap" $heur "$@" 2>"$tmp/tshark.err"; }

ts -T fields -e infiniband.bth.opcode >"$tmp/got" || { cat "$tmp/tshark.err"; exit 1; }
if ! diff -q "$tmp/want" "$tmp/got" >/dev/null; then
  echo "FAIL: tshark opcodes differ from the expected sequence (want | got):"
  diff "$tmp/want" "$tmp/got" | head -20
  exit 1
fi
bad=$(ts -Y '_ws.malformed || _ws.expert.severity >= "warning" || !infiniband' -T fields \
  -e frame.number | wc -l)
if [ "$bad" -ne 0 ]; then
  echo "FAIL: $bad packets malformed, with warnings, or not InfiniBand:"
  ts -Y '_ws.malformed || _ws.expert.severity >= "warning" || !infiniband' -V | head -60
  exit 1
fi
n_ib=$(ts -Y 'infiniband && udp.dstport == 4791' -T fields -e frame.number | wc -l)
[ "$n_ib" -eq "$n_want" ] || { echo "FAIL: $n_ib RoCE packets decoded, $n_want expected"; exit 1; }

"$py" - "$pcap" <<'PYEOF' || exit 1
import sys
from scapy.all import rdpcap, IP
from scapy.contrib.roce import BTH
pkts = rdpcap(sys.argv[1])
bad = 0
for i, p in enumerate(pkts, 1):
    raw = bytes(p)
    ip = IP(raw[: (raw[2] << 8) | raw[3]])  # trim to the IP total length
    if BTH not in ip:
        print(f"FAIL: packet {i}: scapy finds no BTH"); bad += 1; continue
    want = ip[BTH].compute_icrc(None)
    got = raw[(raw[2] << 8 | raw[3]) - 4:(raw[2] << 8 | raw[3])]
    if want != got:
        print(f"FAIL: packet {i}: ICRC {got.hex()} but scapy computes {want.hex()}"); bad += 1
print(f"scapy: {len(pkts) - bad}/{len(pkts)} ICRCs match")
sys.exit(1 if bad or not pkts else 0)
PYEOF
echo "ok: $n_want packets decode as RoCE v2 in order, ICRCs verified by scapy"
