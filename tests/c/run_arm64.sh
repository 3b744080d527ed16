#!/bin/sh
# The authentication tests (SHA-256, POLYVAL, AES, the tag, the trailer) built for 64-bit Arm -- a Jetson
# ground host's CPU -- and run under qemu-user: the Arm PMULL and AES code and the portable code against
# the same known answers. Used by `make test-arm64`, which installs the cross compiler and qemu first.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
core="$here/../../cfs_apps/skymem_core/fsw"
out=${1:-$(mktemp -d)}
cc=${CC_ARM64:-aarch64-linux-gnu-gcc}
for tool in "$cc" qemu-aarch64; do
    command -v "$tool" >/dev/null || { echo "run_arm64.sh: $tool not found (make test-arm64 installs it)" >&2; exit 2; }
done
"$cc" -O2 -std=c99 -D_GNU_SOURCE -Wall -Wextra -pedantic -static -I"$core/inc" -o "$out/test_auth_arm64" \
    "$here/test_auth.c" "$core/src/skymem_auth.c" "$core/src/skymem_sha256.c" "$core/src/skymem_polyval.c" \
    "$core/src/skymem_aes.c" \
    "$core/src/skymem_codec.c" "$core/src/skymem_crc32c.c"
# -cpu max: an Armv8 CPU with the crypto extensions (PMULL); the test also runs the portable code
qemu-aarch64 -cpu max "$out/test_auth_arm64"
