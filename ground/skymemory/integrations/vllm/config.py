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
        "index_dir": "~/.cache/skymemory/index",   # the ground index shared with every other process
        "station_id": 2816,                # this engine's ground-station ids: station_id + 2 * rank (loads)
                                           #   and + 1 (saves); apart from other clients' (0, the dashboard's)
        "load_timeout_s": 10.0,            # a load not in by then is a load error: vLLM recomputes
        "seal": true,                      # content sealed per tenant (AES-128-GCM, skymemory.protocol.seal);
                                           #   false keeps it in the clear, only so benchmarks can compare
                                           #   (its blocks are named apart: never mixed with sealed ones)
    }
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from skymemory.kv import codec
from skymemory.kv.policy import check_policy
from skymemory.orbit.manifest import default_manifest_path
from skymemory.store.routes import check_route

DEFAULT_STATION_ID = 0x0B00  # away from the default client's 0 and the dashboard's 0x0DA5


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
    index_dir: Path | None = None  # None: KVCManager's default (kv.models.cache_dir() / "index")
    station_id: int = DEFAULT_STATION_ID
    load_timeout_s: float = 10.0
    seal: bool = True  # both roles read it: the workers' stores seal, the roots and index entries say so

    @classmethod
    def from_extra(cls, extra: dict | None, *, served_model: str) -> "ConnectorConfig":
        extra = dict(extra or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ConfigError(f"unknown SkyMemory connector setting(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(known))}")
        try:
            config = cls(
                manifest=Path(extra.get("manifest") or default_manifest_path()).expanduser(),
                model=str(extra.get("model") or served_model),
                policy=check_policy(str(extra.get("policy", "auto"))),
                route=check_route(str(extra.get("route", "auto"))),
                kv_format=codec.check_format(str(extra.get("kv_format", "fp16"))),
                servers=_whole(extra.get("servers", 10), "servers", 1),
                index_dir=Path(extra["index_dir"]).expanduser() if extra.get("index_dir") else None,
                station_id=_whole(extra.get("station_id", DEFAULT_STATION_ID), "station_id", 0, 0xFFFF - 64),
                load_timeout_s=_seconds(extra.get("load_timeout_s", 10.0), "load_timeout_s"),
                seal=_flag(extra.get("seal", True), "seal"),
            )
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(f"SkyMemory connector: {exc}") from None
        if not config.manifest.is_file():
            raise ConfigError(f"SkyMemory connector: no constellation manifest at {config.manifest} (launch one "
                              "with tools/launch_constellation.py, or set kv_connector_extra_config['manifest'])")
        return config


def _whole(value, name: str, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum and value > maximum):
        bound = f"{minimum}..{maximum}" if maximum else f">= {minimum}"
        raise ConfigError(f"SkyMemory connector: {name} must be a whole number {bound}, got {value!r}")
    return value


def _seconds(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"SkyMemory connector: {name} must be a number of seconds > 0, got {value!r}")
    return float(value)


def _flag(value, name: str) -> bool:
    if not isinstance(value, bool):  # not 0/1 nor "false" (a non-empty string is true to Python)
        raise ConfigError(f"SkyMemory connector: {name} must be true or false, got {value!r}")
    return value
