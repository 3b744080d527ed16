"""The per-constellation authentication keys: made at launch, kept in the run directory, named in the manifest.

`make_key_file(run_dir, satellites)` writes the ground's file, `constellation.keys` (the link master and the
master of ground key 1, which every client of this constellation signs with: skymemory.protocol.auth),
and one file per satellite, `satellites/P-S.keys`, holding only what that satellite is given: the keys
of its links to its neighbours and its own UP and DOWN keys, derived from masters, which no satellite holds (docs/PROTOCOL.md,
"Key files"). All mode 0600. Each runtime hands a satellite its own file and nothing else: native nodes
get `--auth-keys` naming it, cFS instances a copy in their /cf (`install_for_cfs`), --hosts machines a
folder holding the files of the satellites they run (`remote_key_dir`, ssh.copy_keys, removed again by
`stop`), docker containers their own file bind-mounted read-only at CONTAINER_KEY_FILE
(docker.write_compose), swarm services their own secret mounted there (swarm.stack_text). Clients find
the ground's file through the manifest's `auth_key_file`. A new launch makes new keys, so traffic
recorded from an earlier run is refused too.

`make_content_key_file(run_dir)` writes `content.keys`, the ground's content masters (what chunks are sealed
under, skymemory.protocol.seal), named in the manifest's `content_key_file`; it stays on the ground host
(another ground host of the same constellation is given a copy by its operator), and `skymemory keys
rotate` / `retire` change it in place.
"""

from __future__ import annotations

import os
from pathlib import Path

from skymemory.protocol import auth, seal

KEY_FILE_NAME = "constellation.keys"
CONTENT_KEY_FILE_NAME = "content.keys"
GROUND_KEY_ID = 1
CFS_KEY_FILE = Path("cf") / "skymem_auth.keys"  # /cf/skymem_auth.keys as the SKYMEM app reads it (docs/CFS.md)
# The folder of the satellites' files on an ssh host, inside --remote-dir. Not the ground's name: where
# --remote-dir is the run directory of this machine, `stop` removing the host's copy must not remove the
# ground's files.
REMOTE_KEY_DIR = "skymem_keys"
CONTAINER_KEY_FILE = "/run/secrets/skymem_auth.keys"  # where each container sees its (read-only) key file


def make_key_file(run_dir: Path, satellites) -> Path:
    """Fresh keys: the ground's run_dir/constellation.keys (returned) and each satellite's own file
    (`satellite_key_file`), readable by this user only."""
    run_dir.mkdir(parents=True, exist_ok=True)
    auth.write_key_files(run_dir, satellites, (GROUND_KEY_ID,))
    return run_dir / KEY_FILE_NAME


def make_content_key_file(run_dir: Path) -> Path:
    """The ground's content keys (skymemory.protocol.seal), run_dir/content.keys, mode 0600: what every KV block
    and named object is sealed under. Ground hosts only: no runtime hands it to a satellite, and a
    satellite's key file holds none of it. Made with --insecure too (sealing needs nothing of the satellites)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    return seal.ContentKeys.new().save(run_dir / CONTENT_KEY_FILE_NAME)


def satellite_key_file(ground_key_file: str | os.PathLike, plane: int, sat: int) -> Path:
    """Satellite (plane, sat)'s own key file, beside the ground's."""
    return auth.satellite_key_file(Path(ground_key_file).parent, plane, sat)


def install_for_cfs(key_file: Path, workdir: Path) -> Path:
    """A satellite's key file where its cFS instance's SKYMEM app reads it, mode 0600 from its creation on."""
    target = workdir / CFS_KEY_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)  # the copy of --cfs-exe may hold one, with any mode
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(Path(key_file).read_bytes())
    return target


def remote_key_dir(remote_dir: str) -> str:
    """The folder of the satellites' key files on an ssh host (the manifest's remote_key_dir)."""
    return f"{remote_dir}/{REMOTE_KEY_DIR}"


def remote_key_file(remote_dir: str, plane: int, sat: int) -> str:
    """Satellite (plane, sat)'s key file on its ssh host (its node's --auth-keys there)."""
    return f"{remote_key_dir(remote_dir)}/{plane}-{sat}.keys"
