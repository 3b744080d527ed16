#!/bin/sh
# test_replay_udp.sh -- random and mutated packets at a live skymem_node's ground
# port; the node must keep answering and count exactly the malformed ones.
# Usage: test_replay_udp.sh PATH/TO/skymem_node PATH/TO/skymem_replay [COUNT]
set -u
NODE=${1:?usage: $0 NODE REPLAY [COUNT]}
REPLAY=${2:?usage: $0 NODE REPLAY [COUNT]}
COUNT=${3:-20000}
PID=""
trap '[ -n "$PID" ] && kill -9 $PID 2>/dev/null' EXIT INT TERM
for try in 1 2 3 4 5; do # ISL 10000-14999 / ground 15000-19999, another pair if taken
    PORT=$((10000 + ($$ + try * 53) % 250 * 20 + 18))
    "$NODE" --plane 0 --sat 0 --planes 1 --sats 1 --isl-port-base "$PORT" --ground-port-base "$((PORT + 5000))" \
        --delay-scale 0 --log-level error &
    PID=$!
    sleep 0.3
    kill -0 "$PID" 2>/dev/null && break
    wait "$PID"; PID=""
done
[ -n "$PID" ] || { echo "could not start a node"; exit 1; }
"$REPLAY" --udp "127.0.0.1:$((PORT + 5000))" --count "$COUNT" --seed 11
rc=$?
kill -TERM "$PID"
wait "$PID"
nrc=$?
trap - EXIT
[ "$nrc" -eq 0 ] || { echo "node exited $nrc"; exit 1; }
exit $rc
