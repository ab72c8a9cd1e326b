#!/usr/bin/env bash
# Runs the RoceWire.Capture test (two emu devices talking RoCE v2 over loopback, each writing a
# pcap of what it sent) and checks both captures with tshark and Scapy (roce_pcap_check.sh).
#   roce_capture_check.sh TEST_BINARY PCAP_CHECK_SCRIPT
# Exit 77 (skip) when the test cannot open raw sockets or the tools are missing.
set -uo pipefail
bin=$1 check=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
RDMX_ROCE_CAPTURE_DIR=$dir "$bin" --gtest_filter=RoceWire.Capture >"$dir/log" 2>&1 || {
  cat "$dir/log"; exit 1; }
if [ ! -s "$dir/a.pcap" ] || [ ! -s "$dir/a.ops" ]; then
  echo "SKIP: no capture written (no raw sockets here?)"; tail -5 "$dir/log"; exit 77
fi
for side in a b; do
  echo "--- packets sent by device $side"
  "$check" --pcap "$dir/$side.pcap" "$dir/$side.ops" || exit $?
done
