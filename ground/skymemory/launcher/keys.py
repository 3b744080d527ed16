"""The per-constellation authentication keys: made at launch, kept in the run directory, named in the manifest.

`make_key_file(run_dir)` writes `constellation.keys` (mode 0600): key 0, the constellation key the
satellites sign what they send each other with, and key 1, the ground key every client of this
constellation signs with (skymemory.protocol.auth). Native nodes get the file with --auth-keys, cFS
instances a copy in their /cf (`install_for_cfs`), clients find it through the manifest's
`auth_key_file`. On --hosts machines the launcher copies it to `remote_key_file(--remote-dir)`
(ssh.copy_key, removed again by `stop`); containers get it bind-mounted read-only at
CONTAINER_KEY_FILE (docker.write_compose). A new launch makes new keys, so traffic recorded from an
earlier run is refused too.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from skymemory.protocol import auth

KEY_FILE_NAME = "constellation.keys"
GROUND_KEY_ID = 1
CFS_KEY_FILE = Path("cf") / "skymem_auth.keys"  # /cf/skymem_auth.keys as the SKYMEM app reads it (docs/CFS.md)
# The copy on an ssh host, inside --remote-dir. Not the ground's name: where --remote-dir is the run
# directory of this machine, `stop` removing the host's copy must not remove the ground's file.
REMOTE_KEY_FILE = "skymem_auth.keys"
CONTAINER_KEY_FILE = "/run/secrets/skymem_auth.keys"  # where each container sees the (read-only) key file


def make_key_file(run_dir: Path) -> Path:
    """Fresh random keys 0 and 1 in run_dir/constellation.keys, readable by this user only."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / KEY_FILE_NAME
    path.unlink(missing_ok=True)  # created anew, so the mode is 0600 whatever an old file had
    auth.write_key_file(path, [auth.CONSTELLATION_KEY_ID, GROUND_KEY_ID])
    return path


def install_for_cfs(key_file: Path, workdir: Path) -> Path:
    """The key file where a cFS instance's SKYMEM app reads it, mode 0600 from its creation on."""
    target = workdir / CFS_KEY_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)  # the copy of --cfs-exe may hold one, with any mode
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out, open(key_file, "rb") as src:
        shutil.copyfileobj(src, out)
    return target


def remote_key_file(remote_dir: str) -> str:
    """Where the key file goes on an ssh host (the nodes' --auth-keys there; the manifest's remote_key_file)."""
    return f"{remote_dir}/{REMOTE_KEY_FILE}"
