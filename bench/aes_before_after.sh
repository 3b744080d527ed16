#!/bin/sh
# The portable AES and the tag before and after a change, side by side on this machine: bench/bench_aes.c
# built (cc -O2, as CMake's RelWithDebInfo) against skymem_core as it was at REV and as it is in the work
# tree, the two run alternately, three times each.
#   bench/aes_before_after.sh [REV [ROUNDS]]     (defaults HEAD, 9)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
rev=$(git -C "$root" rev-parse --short "${1:-HEAD}^{commit}") || { echo "aes_before_after.sh: no commit ${1:-HEAD}" >&2; exit 2; }
rounds=${2:-9}
core=cfs_apps/skymem_core/fsw
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/old"
git -C "$root" archive "$rev" "$core" | tar -x -C "$tmp/old" || { echo "aes_before_after.sh: no $core at $rev" >&2; exit 2; }
build() { # build TREE OUTPUT
    tree=$1 out=$2
    set --
    for s in skymem_aes skymem_auth skymem_sha256 skymem_polyval skymem_codec skymem_crc32c; do
        set -- "$@" "$tree/$core/src/$s.c"
    done
    ${CC:-cc} -O2 -std=c99 -I"$tree/$core/inc" -o "$out" "$root/bench/bench_aes.c" "$@"
}
build "$tmp/old" "$tmp/bench_aes_old"
build "$root" "$tmp/bench_aes_new"
for i in 1 2 3; do
    echo "== $rev, run $i"
    "$tmp/bench_aes_old" "$rounds"
    echo "== work tree, run $i"
    "$tmp/bench_aes_new" "$rounds"
done
