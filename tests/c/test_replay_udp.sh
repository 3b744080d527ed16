#!/bin/sh
# test_replay_udp.sh -- random and mutated packets at a live skymem_node's ground
# port; the node must keep answering and count exactly the malformed ones.
# Usage: test_replay_udp.sh PATH/TO/skymem_node PATH/TO/skymem_replay [COUNT]
set -u
NODE=${1:?usage: $0 NODE REPLAY [COUNT]}
REPLAY=${2:?usage: $0 NODE REPLAY [COUNT]}
COUNT=${3:-20000}
PORT=$((32200 + $$ % 50))
"$NODE" --plane 0 --sat 0 --planes 1 --sats 1 --isl-port-base "$PORT" --ground-port-base "$((PORT + 100))" \
    --delay-scale 0 --log-level error &
PID=$!
trap 'kill -9 $PID 2>/dev/null' EXIT INT TERM
sleep 0.3
"$REPLAY" --udp "127.0.0.1:$((PORT + 100))" --count "$COUNT" --seed 11
rc=$?
kill -TERM "$PID"
wait "$PID"
nrc=$?
trap - EXIT
[ "$nrc" -eq 0 ] || { echo "node exited $nrc"; exit 1; }
exit $rc
