"""The launch manifest: what the launcher started and how the ground reaches it.

A JSON file written by tools/launch_constellation.py and read by every ground
command (`--manifest PATH`). It holds the grid, the orbit, the mission clock
(epoch + time scale, so every process computes the same mission time), the
ground station, the link-emulation options the nodes were given, and one entry
per satellite (host, ISL port, ground port, pid, network namespace; for cFS also
its cpuid and CI_LAB command port; where its telemetry goes, when it is sent).

With ground sites (the launcher's --sites N), the main manifest lists them in `sites`
(namespace, address, station id, overhead, manifest file), and each site has a manifest of its
own beside it (manifest.site-K.json): the same constellation, with that site's `ground_host`,
`ground_overhead`, `ground_station`, `ground_netns` (the namespace its processes run in:
`ip netns exec NS ...`) and `site_of` (the main manifest, which `stop` and `status` take).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from skymemory.orbit.manifest_check import FORMAT_VERSION, ManifestError, check_manifest

__all__ = ["Manifest", "SatelliteEntry", "ManifestError", "FORMAT_VERSION", "default_manifest_path"]
DEFAULT_DIR = Path("run")
DEFAULT_PATH = DEFAULT_DIR / "manifest.json"


@dataclass
class SatelliteEntry:
    plane: int
    sat: int
    host: str  # address the ground sends to (ground port) and peers send to (ISL port)
    isl_port: int
    ground_port: int
    pid: int = 0  # local pid of the process we started (0 when not local)
    netns: str = ""  # network namespace the node runs in ("" = the host's)
    remote: str = ""  # ssh destination when started over ssh
    cpuid: int = 0  # cFS: the PSP's --cpuid
    command_port: int = 0  # cFS: CI_LAB's port on host (control commands, as cmdUtil sends them); 0 = ground_port
    tlm_host: str = ""  # where its housekeeping goes (cFS: TO_LAB's destination; native: --tlm-dest); "" = to the asker
    tlm_port: int = 0


@dataclass
class Manifest:
    planes: int
    sats: int
    altitude_km: float = 550.0
    inclination_deg: float = 53.0
    walker_phase: int = 0
    epoch_ms: int = 0  # Unix ms at launch; mission time = epoch + scale * (now - epoch)
    time_scale: float = 1.0
    runtime: str = "native"
    ground_station: int = 0
    ground_overhead: tuple[int, int] = (0, 0)  # satellite overhead the ground host at epoch
    ground_host: str = "127.0.0.1"  # where the ground client binds
    ground_netns: str = ""  # network namespace the ground host's processes run in ("" = this host's); a site's
    # ground sites (--sites): per site {site, namespace, address, ground_station, ground_overhead, manifest}
    sites: list = field(default_factory=list)
    site_of: str = ""  # in a site's manifest: the main manifest ("" = this is one)
    chunk_size: int = 6144
    memory_budget: int = 64 * 1024 * 1024
    link: dict = field(default_factory=dict)  # delay_scale, ground_delay_ms, loss, dup, reorder, corrupt, ...
    satellites: list[SatelliteEntry] = field(default_factory=list)
    backend: dict = field(default_factory=dict)  # what teardown needs (namespaces, bridge, ssh hosts, compose file)
    auth_key_file: str = ""  # the constellation's key file (mode 0600, in the run dir); "" = launched --insecure
    # the ground's content keys (skymemory.protocol.seal: what chunks are sealed under; ground hosts only,
    # never a satellite); "" = a manifest written before sealing
    content_key_file: str = ""
    run_dir: str = ""
    launcher_pid: int = 0
    process_group: int = 0
    created_unix: float = 0.0
    format_version: int = FORMAT_VERSION

    # ---- lookups --------------------------------------------------------------
    def entry(self, plane: int, sat: int) -> SatelliteEntry:
        index = plane * self.sats + sat
        if not (0 <= plane < self.planes and 0 <= sat < self.sats):
            raise KeyError(f"satellite ({plane}, {sat}) is outside the {self.planes}x{self.sats} grid")
        e = self.satellites[index]
        if (e.plane, e.sat) != (plane, sat):
            raise ValueError("manifest satellites are not in plane-major order")
        return e

    def ground_addresses(self) -> dict[tuple[int, int], tuple[str, int]]:
        return {(e.plane, e.sat): (e.host, e.ground_port) for e in self.satellites}

    def ground_linked(self) -> set[tuple[int, int]]:
        """Satellites with a ground link of their own (a ground port); the others are reached over ISL."""
        return {(e.plane, e.sat) for e in self.satellites if e.ground_port > 0}

    def command_addresses(self) -> dict[tuple[int, int], tuple[str, int]]:
        """Where each satellite takes control commands: CI_LAB on cFS, the ground port on a native node."""
        return {(e.plane, e.sat): (e.host, e.command_port or e.ground_port) for e in self.satellites}

    def mission_ms(self, unix_ms: float | None = None) -> int:
        now = time.time() * 1000.0 if unix_ms is None else unix_ms
        return int(self.epoch_ms + self.time_scale * (now - self.epoch_ms))

    def constellation(self):
        from skymemory.orbit.constellation import Constellation

        return Constellation(planes=self.planes, sats=self.sats, altitude_km=self.altitude_km,
                             inclination_deg=self.inclination_deg, walker_phase=self.walker_phase,
                             epoch_ms=self.epoch_ms, time_scale=self.time_scale,
                             overhead_at_epoch=tuple(self.ground_overhead))

    # ---- (de)serialisation ------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically (a reader never sees half a file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, path)
        return path

    @classmethod
    def from_dict(cls, d) -> "Manifest":
        """A manifest from its decoded JSON; ManifestError (one line) when a field breaks the schema."""
        check_manifest(d, _defaults(cls), _defaults(SatelliteEntry))
        d = dict(d)
        d["satellites"] = [SatelliteEntry(**s) for s in d["satellites"]]
        d["ground_overhead"] = tuple(d.get("ground_overhead", (0, 0)))
        d["sites"] = [dict(s) for s in d.get("sites", [])]
        return cls(**d)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Manifest":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"no manifest at {path} (start a constellation with "
                                    "tools/launch_constellation.py)") from None
        except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
            raise ManifestError(f"manifest {path} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
        except json.JSONDecodeError as exc:
            raise ManifestError(f"manifest {path} is not valid JSON: {exc}") from None
        try:
            return cls.from_dict(data)
        except ManifestError as exc:
            raise ManifestError(f"manifest {path}: {exc}") from None


def _defaults(cls) -> dict:
    """Field name -> default (None where there is none) of a dataclass: what the schema check accepts."""
    out = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = None
    return out


def default_manifest_path() -> Path:
    return Path(os.environ.get("SKYMEM_MANIFEST", DEFAULT_PATH))
