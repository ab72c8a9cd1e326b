#!/bin/sh
# blockd as two processes joined by a shared-memory emu wire: server and client verify the
# protocol and the data end to end; both must exit 0. Then over a TCP rendezvous on loopback:
# the number of requests the client says it is running is the number it reports done.
set -u
blockd=$1
wire="shm:blockd-test-$$"
"$blockd" --wire "$wire" --role server --requests 200 --blocks 256 &
srv=$!
"$blockd" --wire "$wire" --role client --requests 200 --blocks 256
cli=$?
wait $srv
srv_rc=$?
rm -f /dev/shm/blockd-blockd-test-$$.* 2>/dev/null
echo "blockd_2proc: client exit $cli, server exit $srv_rc"
[ $cli -eq 0 ] && [ $srv_rc -eq 0 ] || exit 1

port=$((20000 + $$ % 20000))
timeout 60 "$blockd" --role server --listen "127.0.0.1:$port" --blocks 256 &
srv=$!
out=$(timeout 60 "$blockd" --role client --peer "127.0.0.1:$port" --requests 50 --blocks 256)
cli=$?
wait $srv
srv_rc=$?
printf '%s\n' "$out"
echo "blockd_2proc (TCP): client exit $cli, server exit $srv_rc"
[ $cli -eq 0 ] && [ $srv_rc -eq 0 ] || exit 1
said=$(printf '%s\n' "$out" | sed -n 's/^blockd: client: running \([0-9]*\) requests.*/\1/p')
done=$(printf '%s\n' "$out" | sed -n 's/^blockd: \([0-9]*\) requests, .*/\1/p')
[ -n "$said" ] && [ "$said" = "$done" ] ||
  { echo "the client said it runs '$said' requests and ran '$done'"; exit 1; }
