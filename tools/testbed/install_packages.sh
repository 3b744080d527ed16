#!/bin/sh
# Install the Debian packages named on the command line that are not installed yet.
#   tools/testbed/install_packages.sh openssh-server iptables
# Used by `make test-hosts` / `make test-containers`. As root, or through sudo.
#
# Services are not started by the install (a policy-rc.d that says "no" while it runs, when the
# machine has none): the testbeds start their own daemons with the options they need (dockerd
# without a bridge, one sshd per emulated host), and a stock sshd on port 22 is not wanted.
set -eu
missing=""
for pkg in "$@"; do
    dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
policy=/usr/sbin/policy-rc.d
ours=""
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary, from SkyMemory tools/testbed/install_packages.sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    ours=1
fi
trap '[ -n "$ours" ] && $SUDO rm -f "$policy"' EXIT
echo "installing:$missing"
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
