#!/bin/sh
# blockd as two processes joined by a shared-memory emu wire: server and client verify the
# protocol and the data end to end; both must exit 0.
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
[ $cli -eq 0 ] && [ $srv_rc -eq 0 ]
