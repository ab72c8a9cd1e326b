#!/bin/sh
# A two-host test bed on one machine: two network namespaces joined by a veth pair, the
# addresses inside the namespaces only (the host's own network is not touched).
#
#   netns.sh up NAME      creates NAME-a (10.47.0.1/24 on NAME-va) and NAME-b (10.47.0.2/24 on
#                         NAME-vb); prints "NAME-a NAME-b 10.47.0.1 10.47.0.2"
#   netns.sh down NAME    deletes both namespaces (the veth pair goes with them); never fails
#   netns.sh exec NS CMD  runs CMD in namespace NS (ip netns exec)
#
# NAME must be unique per run (the tests use a prefix and their process id) and at most 12
# characters (interface names have 15). Both namespaces share the host's /dev/shm and
# /var/run/dpdk (ip netns exec changes only the network namespace and /sys), so emu's
# shared-memory wire joins processes in the two "hosts". `up` undoes what it made when a step
# fails, and exits 77 (the test harness's "skipped") when namespaces cannot be made here (no
# root, no CAP_SYS_ADMIN, no iproute2).
set -u
cmd=${1:-}
name=${2:-}
A_ADDR=10.47.0.1
B_ADDR=10.47.0.2

down() {
  ip netns del "$1-a" 2>/dev/null
  ip netns del "$1-b" 2>/dev/null
  ip link del "$1-va" 2>/dev/null
  return 0
}

case "$cmd" in
  up)
    [ -n "$name" ] && [ ${#name} -le 12 ] || { echo "netns.sh: NAME of 1..12 characters" >&2; exit 2; }
    command -v ip >/dev/null 2>&1 || { echo "netns.sh: no 'ip' (iproute2): skipped" >&2; exit 77; }
    if ! ip netns add "$name-a" 2>/tmp/netns.$$; then
      echo "netns.sh: cannot create network namespaces here ($(cat /tmp/netns.$$)): skipped" >&2
      rm -f /tmp/netns.$$
      exit 77
    fi
    rm -f /tmp/netns.$$
    trap 'down "$name"; exit 1' INT TERM
    set -e
    {
      ip netns add "$name-b"
      ip link add "$name-va" netns "$name-a" type veth peer name "$name-vb" netns "$name-b"
      ip -n "$name-a" addr add "$A_ADDR/24" dev "$name-va"
      ip -n "$name-b" addr add "$B_ADDR/24" dev "$name-vb"
      for ns in a b; do
        ip -n "$name-$ns" link set lo up
        ip -n "$name-$ns" link set "$name-v$ns" up
      done
    } || { down "$name"; exit 1; }
    set +e
    echo "$name-a $name-b $A_ADDR $B_ADDR"
    ;;
  down)
    [ -n "$name" ] || { echo "netns.sh: down NAME" >&2; exit 2; }
    down "$name"
    ;;
  exec)
    shift 2
    exec ip netns exec "$name" "$@"
    ;;
  *)
    echo "usage: netns.sh up|down NAME | exec NS CMD..." >&2
    exit 2
    ;;
esac
