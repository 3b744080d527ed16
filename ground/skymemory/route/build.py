"""A Router from what `skymemory route` is told: the sites, the model folder, the constellation, and t's source.

The router names blocks as the decode site's connector does, so it takes that connector's settings
(`connector`: the decode site's kv_connector_extra_config, the manifest given apart) and the model folder
the sites serve. Its own ground-station ids are `station_id` (prefix lookups) and station_id + 1 (link
probes), apart from the connectors' (integrations.vllm.config: 0x0B00 + up to 65) and the dashboard's.
"""

from __future__ import annotations

from pathlib import Path

from skymemory.integrations.vllm.config import ConnectorConfig
from skymemory.orbit.manifest import Manifest

from .front import SITE_TIMEOUT_S, Router
from .threshold import Threshold

ROUTER_STATION = 0x0C00
MAX_STATION_ID = 0xFFFF - 1
DEFAULT_MAX_TOKENS = 4096


def open_router(prefill: str, decode: str, model_dir: str | Path, manifest: str | Path, *,
                connector: dict | None = None, profile=None, threshold: int | None = None,
                max_tokens: int = DEFAULT_MAX_TOKENS, deployment=None, probe_s: float = 5.0,
                dtype: str | None = None, station_id: int = ROUTER_STATION, host: str = "127.0.0.1", port: int = 0,
                site_timeout_s: float = SITE_TIMEOUT_S) -> Router:
    """The router, not started (start() probes the link and plans t, unless `threshold` pins it).

    profile: a PrefillProfile (or the path of one) to plan t from, with the lengths PAPER.scaled_to(max_tokens)
    and `deployment` (Deployment() by default); threshold: t pinned instead. dtype: the decode site's
    (fp16 | bf16 | fp32; None: the model's own)."""
    from skymemory.kv.decide.disaggregation import PAPER, PrefillProfile

    from .prefix import OrbitPrefix
    from .probe import LinkProbe
    from .prompt import model_tokenizer

    if (profile is None) == (threshold is None):
        raise ValueError("give a profile to plan the threshold from, or a threshold, not both")
    if not 0 <= station_id <= MAX_STATION_ID:
        raise ValueError(f"station_id must be 0..{MAX_STATION_ID}, got {station_id}")
    if profile is not None and not isinstance(profile, PrefillProfile):
        profile = PrefillProfile.load(profile)
    config = ConnectorConfig.from_extra({**(connector or {}), "manifest": str(manifest)},
                                        served_model=str(model_dir))
    Manifest.load(config.manifest)  # a bad manifest is said now, before the model's fingerprint is taken
    prefix = OrbitPrefix(model_dir, config, dtype=dtype, station_id=station_id)
    probe = None
    try:
        if threshold is None:
            probe = LinkProbe(config, block_bytes=prefix.block_bytes, station_id=station_id + 1,
                              manifest=prefix.manifest)
            chosen = Threshold(profile=profile, lengths=PAPER.scaled_to(max_tokens), deployment=deployment,
                               probe=probe, probe_s=probe_s)
        else:
            chosen = Threshold(pinned=threshold)
        return Router(prefill, decode, threshold=chosen, prefix=prefix, tokenizer=model_tokenizer(model_dir),
                      host=host, port=port, site_timeout_s=site_timeout_s, profile=profile)
    except BaseException:
        if probe is not None:
            probe.close()
        prefix.close()
        raise
