"""The connector's settings, read from vLLM's `kv_connector_extra_config` (every value checked, one-line errors).

    kv_connector_extra_config={
        "manifest": "run/manifest.json",   # the constellation (default $SKYMEM_MANIFEST or run/manifest.json)
        "model": "embedded-tinyllama",     # what KVCManager users load (default: the model vLLM serves)
        "policy": "auto",                  # auto | fetch | recompute (a request may say its own:
                                           #   SamplingParams(extra_args={"kv_transfer_params":
                                           #   {"skymemory_policy": "recompute"}}))
        "route": "auto",                   # direct | relay | auto (skymemory.store.routes)
        "kv_format": "fp16",               # fp16 | bf16 | fp32 | int8, as KVCManager's kv_dtype
        "servers": 10,                     # satellites a block is striped over: the nearest when it is set
                                           #   (1..placement.MAX_SERVERS; a smaller constellation: all of its
                                           #   satellites, the store's rule, stripe_width)
        "index_dir": "~/.cache/skymemory/index",   # the ground index shared with every other process
        "station_id": 2816,                # this engine's ground-station ids: station_id + 2 * rank (loads)
                                           #   and + 1 (saves), + 64 the scheduler's (its orbit lookups);
                                           #   apart from other clients' (0, the dashboard's);
                                           #   0..0xFFFF - 65, room for 32 ranks
        "load_timeout_s": 10.0,            # a load not in by then is a load error: vLLM recomputes (0 < s <= 3600)
        "host_tier_bytes": 0,              # blocks kept in this engine's host memory in front of the
                                           #   constellation (kv.transfer.tiers' host tier, LRU; 0: none; at most 1 TiB)
        "seal": true,                      # content sealed per tenant (AES-128-GCM, skymemory.protocol.seal);
                                           #   false keeps it in the clear, only so benchmarks can compare
                                           #   (its blocks are named apart: never mixed with sealed ones)
        "parity": 2,                       # parity chunks per coded stripe of a block (skymemory.protocol.
                                           #   stripes): any servers - parity chunks of a stripe give its data,
                                           #   so that many satellites may die or lie and nothing is recomputed;
                                           #   0: every chunk stored once. Default 2 (fewer when fewer than 3
                                           #   satellites); blocks keep the layout they were stored with
        "orbit_index": true,               # every saved block's record kept in orbit (skymemory.kv.
                                           #   orbit_records), and the blocks other ground hosts stored found
                                           #   through theirs: servers with their own index_dir share one
                                           #   cache; false: this index_dir's blocks only
    }

The config itself must be a mapping (a JSON object); manifest, model, index_dir and parity given as null take their
defaults (any other setting given as null is refused). Strings are
strings (paths and the model non-empty), numbers whole or finite as said, within their bounds, and `seal` a
JSON boolean: anything else is a ConfigError naming the setting, what it may be and the value it got.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from skymemory.kv.engine import KV_FORMATS, POLICIES, check_format, check_policy
from skymemory.orbit.manifest import Manifest, ManifestError, default_manifest_path
from skymemory.orbit.placement import MAX_SERVERS
from skymemory.protocol.stripes import MAX_STRIPE_CHUNKS
from skymemory.store.routes import ROUTES, check_route

DEFAULT_STATION_ID = 0x0B00  # away from the default client's 0 and the dashboard's 0x0DA5
# station_id + 2 * rank (loads) and + 1 (saves) stay in a u16 for 32 ranks, and so does the scheduler's + 64
MAX_STATION_ID = 0xFFFF - 65
SCHEDULER_STATION = 64  # the scheduler's station id, past its ranks': station_id + this
MAX_HOST_TIER_BYTES = 1 << 40  # 1 TiB of host memory for blocks
MAX_TIMEOUT_S = 3600.0  # a load waited for longer than an hour is not a cache hit
MAX_TEXT = 4096  # a path (PATH_MAX) or a model name, at most this many characters
SHOWN = 60  # characters of a bad value an error quotes
OPTIONAL = frozenset({"manifest", "model", "index_dir", "parity"})  # null (None) for these: the default
# a request's kv_transfer_params: the blocks a prefill site stored for it (the router, skymemory route, says so; the
# decode site's connector waits for them, bounded)
PREFILLED_PARAM = "skymemory_prefilled_blocks"


log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A setting of kv_connector_extra_config that cannot be used."""


@dataclass(frozen=True)
class ConnectorConfig:
    manifest: Path
    model: str
    policy: str = "auto"
    route: str = "auto"
    kv_format: str = "fp16"
    servers: int = 10
    index_dir: Path | None = None  # None: KVCManager's default (kv.model.models.cache_dir() / "index")
    station_id: int = DEFAULT_STATION_ID
    load_timeout_s: float = 10.0
    seal: bool = True  # both roles read it: the workers' stores seal, the roots and index entries say so
    host_tier_bytes: int = 0  # the worker's host tier (kv.transfer.tiers.HostTier), 0: none
    parity: int | None = None  # coded stripes' m; None: store.constellation.default_parity of the stripe width
    orbit_index: bool = True  # records in orbit (kv.index.orbit_records): both roles read it

    @classmethod
    def from_extra(cls, extra: Mapping | None, *, served_model: str) -> "ConnectorConfig":
        """The settings of `extra` (None or a mapping; a setting left out takes its default, as do manifest, model
        and index_dir given as null), each checked: ConfigError, one line naming the setting, what it may be and
        what it got, for the first that is not."""
        if extra is None:
            extra = {}
        if not isinstance(extra, Mapping):
            raise ConfigError(f"SkyMemory connector: kv_connector_extra_config must be a mapping (JSON object) of "
                              f"settings, got {type(extra).__name__} {_shown(extra)}")
        extra = dict(extra)
        known = {f.name for f in fields(cls)}
        unknown = sorted((k for k in extra if k not in known), key=repr)
        if unknown:
            raise ConfigError(f"unknown SkyMemory connector setting(s) {', '.join(_name(k) for k in unknown)}; "
                              f"known: {', '.join(sorted(known))}")
        # the optional ones given as null (None) take their defaults, as when left out
        given = {k: v for k, v in extra.items() if v is not None or k not in OPTIONAL}
        try:
            config = cls(
                manifest=_path(given.get("manifest", default_manifest_path()), "manifest"),
                model=_text(given.get("model", served_model), "model", "a model name or path"),
                policy=check_policy(_choice(given.get("policy", "auto"), "policy", POLICIES)),
                route=check_route(_choice(given.get("route", "auto"), "route", ROUTES)),
                kv_format=check_format(_choice(given.get("kv_format", "fp16"), "kv_format", KV_FORMATS)),
                servers=_whole(given.get("servers", 10), "servers", 1, MAX_SERVERS),
                index_dir=_path(given["index_dir"], "index_dir") if "index_dir" in given else None,
                station_id=_whole(given.get("station_id", DEFAULT_STATION_ID), "station_id", 0, MAX_STATION_ID),
                load_timeout_s=_seconds(given.get("load_timeout_s", 10.0), "load_timeout_s", MAX_TIMEOUT_S),
                seal=_flag(given.get("seal", True), "seal"),
                host_tier_bytes=_whole(given.get("host_tier_bytes", 0), "host_tier_bytes", 0, MAX_HOST_TIER_BYTES),
                parity=_whole(given["parity"], "parity", 0, MAX_STRIPE_CHUNKS - 1) if "parity" in given else None,
                orbit_index=_flag(given.get("orbit_index", True), "orbit_index"),
            )
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(f"SkyMemory connector: {exc}") from None
        try:
            found = config.manifest.is_file()
        except OSError as exc:  # a name too long for the file system, say
            raise ConfigError(f"SkyMemory connector: manifest {_shown(str(config.manifest))} cannot be looked "
                              f"up: {exc.strerror or exc}") from None
        if not found:
            raise ConfigError(f"SkyMemory connector: no constellation manifest at {config.manifest} (launch one "
                              "with tools/launch_constellation.py, or set kv_connector_extra_config['manifest'])")
        _say_if_servers_exceed(config, asked="servers" in given)
        return config


def _shown(value) -> str:
    """value's repr, cut to SHOWN characters (an error stays one short line whatever it was given)."""
    try:
        text = repr(value)
    except Exception:  # a repr that fails says nothing of the setting
        text = f"<{type(value).__name__}>"
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def _name(key) -> str:
    """An unknown setting's name as an error shows it: a string as it is (cut), anything else as its repr."""
    return (key if len(key) <= SHOWN else key[:SHOWN - 3] + "...") if isinstance(key, str) else _shown(key)


def _text(value, name: str, what: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT or "\0" in value:
        raise ConfigError(f"SkyMemory connector: {name} must be {what}, a non-empty string of at most {MAX_TEXT} "
                          f"characters (no NUL), got {_shown(value)}")
    return value


def _path(value, name: str) -> Path:
    """A path setting: a non-empty string (or os.PathLike giving one), ~ expanded."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return Path(_text(value, name, "a path")).expanduser()


def _choice(value, name: str, choices) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"SkyMemory connector: {name} must be one of {', '.join(choices)} (a string), "
                          f"got {_shown(value)}")
    return value


def _whole(value, name: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ConfigError(f"SkyMemory connector: {name} must be a whole number {minimum}..{maximum}, "
                          f"got {_shown(value)}")
    return value


def _seconds(value, name: str, maximum: float) -> float:
    # compared as given, never float()-ed first: an int past a float's range would raise OverflowError, and
    # NaN compares false, so it is refused like infinities
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= maximum:
        raise ConfigError(f"SkyMemory connector: {name} must be a number of seconds > 0 and <= {maximum:g}, "
                          f"got {_shown(value)}")
    return float(value)


def _flag(value, name: str) -> bool:
    if not isinstance(value, bool):  # not 0/1 nor "false" (a non-empty string is true to Python)
        raise ConfigError(f"SkyMemory connector: {name} must be true or false, got {_shown(value)}")
    return value


def _say_if_servers_exceed(config: ConnectorConfig, asked: bool) -> None:
    """A constellation with fewer satellites than `servers` has its blocks striped over all of them (the store's
    rule, skymemory.store.constellation.stripe_width, as `skymemory put` does): a number asked for is said not to
    be met. A manifest that does not read is the workers' to report, where they load it."""
    try:
        manifest = Manifest.load(config.manifest)
    except (ManifestError, OSError):
        return
    size = manifest.planes * manifest.sats
    if asked and config.servers > size:
        log.warning("SkyMemory connector: servers %d is more than the %d satellites of the %dx%d constellation at "
                    "%s: blocks are striped over %d", config.servers, size, manifest.planes, manifest.sats,
                    config.manifest, size)
