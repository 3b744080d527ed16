#!/bin/sh
# The authentication, AES and CRC32C tests (SHA-256, POLYVAL, AES, the tag, the trailer; CRC32C) built for
# 64-bit Arm -- a Jetson ground host's CPU -- and run under qemu-user: the Arm PMULL, AES and CRC32 code
# and the portable code against the same known answers. Used by `make test-arm64`, which installs the
# cross compiler and qemu first.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
core="$here/../../cfs_apps/skymem_core/fsw"
out=${1:-$(mktemp -d)}
cc=${CC_ARM64:-aarch64-linux-gnu-gcc}
for tool in "$cc" qemu-aarch64; do
    command -v "$tool" >/dev/null || { echo "run_arm64.sh: $tool not found (make test-arm64 installs it)" >&2; exit 2; }
done
build() { # build NAME TEST.c CORE_SOURCES...
    name=$1 test=$2
    shift 2
    srcs=""
    for s in "$@"; do srcs="$srcs $core/src/$s.c"; done
    # shellcheck disable=SC2086
    "$cc" -O2 -std=c99 -D_GNU_SOURCE -Wall -Wextra -pedantic -static -I"$core/inc" -o "$out/$name" "$here/$test" $srcs
}
build test_auth_arm64 test_auth.c skymem_auth skymem_sha256 skymem_polyval skymem_aes skymem_codec skymem_crc32c
build test_aes_arm64 test_aes.c skymem_aes skymem_auth skymem_sha256 skymem_polyval skymem_codec skymem_crc32c
build test_crc32c_arm64 test_crc32c.c skymem_crc32c
# -cpu max: an Armv8 CPU with the crypto and CRC extensions; the tests also run the portable code
qemu-aarch64 -cpu max "$out/test_auth_arm64"
qemu-aarch64 -cpu max "$out/test_aes_arm64"
qemu-aarch64 -cpu max "$out/test_crc32c_arm64"
