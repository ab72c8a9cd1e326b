#!/usr/bin/env bash
# Checks the RPC-over-RDMA codec's bytes with a decoder nobody here wrote: Wireshark's rpcordma
# dissector (epan/dissectors/packet-rpcrdma.c, reached through its InfiniBand heuristic on
# RoCE v2 SENDs). GENERATOR writes a pcap and prints, per packet, the fields the dissector must
# find (from the Headers it encoded); tshark must decode every packet as RPC-over-RDMA with the
# same fields and report nothing malformed and no expert finding.
#   rpcrdma_pcap_check.sh GENERATOR
# Exit 77 (skip) when tshark is missing (scripts/dev.sh installs it).
set -uo pipefail
command -v tshark >/dev/null || { echo "SKIP: tshark not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1" "$tmp/rpc.pcap" >"$tmp/want" || { echo "FAIL: generator failed"; exit 1; }
n_want=$(wc -l <"$tmp/want")
[ "$n_want" -gt 0 ] || { echo "FAIL: no packets expected"; exit 1; }
fields=""
for f in xid version flow_control msg_type reads_count writes_count reply_count rdma_handle \
         rdma_length rdma_offset position errcode vers_low vers_high; do
  fields="$fields -e rpcordma.$f"
done
# tshark writes an empty field where the packet has none; the generator writes "-".
tshark -n -r "$tmp/rpc.pcap" -T fields -E separator=/t -E occurrence=a -E aggregator=, $fields \
    2>"$tmp/err" | awk 'BEGIN { FS = OFS = "\t" } { for (i = 1; i <= NF; ++i) if ($i == "") $i = "-"; print }' \
    >"$tmp/got" || { cat "$tmp/err"; exit 1; }
if ! diff "$tmp/want" "$tmp/got"; then
  echo "FAIL: tshark's rpcordma fields differ from what was encoded (< encoded, > decoded)"
  exit 1
fi
bad=$(tshark -n -r "$tmp/rpc.pcap" -Y '_ws.malformed || _ws.expert || !rpcordma' 2>/dev/null)
if [ -n "$bad" ]; then
  echo "FAIL: packets tshark found malformed, flagged, or not RPC-over-RDMA:"
  echo "$bad"
  exit 1
fi
echo "OK: $n_want RPC-over-RDMA messages decoded by tshark $(tshark --version | head -1 | awk '{print $3}') as encoded"
