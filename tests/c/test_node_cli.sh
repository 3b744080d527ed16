#!/bin/sh
# test_node_cli.sh -- skymem_node argument validation: every bad argument exits 2
# with a message; --help exits 0; a good --config file starts a node that exits 0
# on SIGTERM. Usage: test_node_cli.sh PATH/TO/skymem_node
set -u
NODE=${1:?usage: $0 PATH/TO/skymem_node}
TMP=$(mktemp -d)
PID=""
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM
fails=0
BASE="--plane 0 --sat 0 --planes 2 --sats 2"

expect_exit() { # expected_code description args...
    want=$1; what=$2; shift 2
    "$NODE" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL: $what: exit $got, wanted $want"; cat "$TMP/err"; fails=$((fails + 1))
    elif [ "$want" -eq 2 ] && ! grep -q "skymem_node" "$TMP/err"; then
        echo "FAIL: $what: no message on stderr"; fails=$((fails + 1))
    fi
}

expect_exit 0 "help" --help
expect_exit 2 "no arguments"
expect_exit 2 "missing --sats" --plane 0 --sat 0 --planes 2
expect_exit 2 "unknown flag" $BASE --bogus 1
expect_exit 2 "stray argument" $BASE extra
expect_exit 2 "flag without value" $BASE --loss
expect_exit 2 "not a number" $BASE --altitude-km abc
expect_exit 2 "trailing junk" $BASE --memory-budget 100x
expect_exit 2 "negative" $BASE --isl-port-base -5
expect_exit 2 "plane outside grid" --plane 2 --sat 0 --planes 2 --sats 2
expect_exit 2 "sat outside grid" --plane 0 --sat 5 --planes 2 --sats 2
expect_exit 2 "zero planes" --plane 0 --sat 0 --planes 0 --sats 2
expect_exit 2 "loss above 1" $BASE --loss 1.5
expect_exit 2 "chunk too big" $BASE --chunk-size 60001
expect_exit 2 "time scale zero" $BASE --time-scale 0
expect_exit 2 "a signed integer" $BASE --walker-phase +1
expect_exit 2 "an option of SKYMEM on cFS only" $BASE --first-cpuid 3
expect_exit 2 "bad log level" $BASE --log-level loud
expect_exit 2 "ports overflow" $BASE --ground-port-base 65535
expect_exit 2 "budget below one chunk" $BASE --memory-budget 5000
expect_exit 2 "bad bind address" $BASE --bind not-an-ip --isl-port-base 39990 --ground-port-base 39994
expect_exit 2 "telemetry destination without port" $BASE --tlm-dest 127.0.0.1
expect_exit 2 "telemetry destination not an address" $BASE --tlm-dest 1.2.3:5
expect_exit 2 "telemetry port zero" $BASE --tlm-dest 127.0.0.1:0
expect_exit 2 "missing config file" $BASE --config "$TMP/nope.conf"
printf 'planes = 2\nnonsense\n' >"$TMP/bad.conf"
expect_exit 2 "config syntax" --config "$TMP/bad.conf"
printf 'plane = 0\nsat = 0\nplanes = 2\nsats = 2\nwhat = 1\n' >"$TMP/bad2.conf"
expect_exit 2 "config unknown key" --config "$TMP/bad2.conf"
printf '0 0 127.0.0.1 99999 1\n' >"$TMP/peers"
expect_exit 2 "bad peers file" $BASE --peers "$TMP/peers"
expect_exit 2 "unknown address layout" $BASE --addresses some
expect_exit 2 "an address each and a peers file" $BASE --addresses per-satellite --peers "$TMP/peers"
expect_exit 2 "an address each past 255.255.255.255" $BASE --addresses per-satellite --bind 255.255.255.254
expect_exit 2 "an address each on one port" $BASE --addresses per-satellite --isl-port-base 9000 --ground-port-base 9000

# a good config file: the node runs until SIGTERM and exits 0 (another port pair
# is tried if the first is taken by someone else)
started=0
for try in 1 2 3 4 5; do
    PORT=$((10000 + ($$ + try * 37) % 250 * 20 + 19))
    printf '# test node\nplane = 1\nsat = 1\nplanes = 2\nsats = 2\nisl-port-base = %s\nground-port-base = %s\nlog-level = warn\ndelay-scale = 0\n' \
        "$((PORT - 3))" "$((PORT + 5000 - 3))" >"$TMP/good.conf"
    "$NODE" --config "$TMP/good.conf" 2>"$TMP/err" &
    PID=$!
    sleep 0.3
    if kill -0 "$PID" 2>/dev/null; then started=1; break; fi
    if ! grep -q "cannot bind" "$TMP/err"; then break; fi
    wait "$PID"; PID=""
done
if [ "$started" -ne 1 ]; then
    echo "FAIL: node with a good config did not stay up"; cat "$TMP/err"; fails=$((fails + 1)); PID=""
else
    kill -TERM "$PID"
    i=0
    while kill -0 "$PID" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    if kill -0 "$PID" 2>/dev/null; then
        echo "FAIL: node ignored SIGTERM"; fails=$((fails + 1))
    else
        wait "$PID"; rc=$?
        [ "$rc" -eq 0 ] || { echo "FAIL: exit $rc after SIGTERM"; fails=$((fails + 1)); }
    fi
    PID=""
fi

echo "node_cli: $fails failures"
[ "$fails" -eq 0 ]
