"""The vLLM connector's settings (kv_connector_extra_config), without vLLM: every setting bounded, and a bad
value refused in one line that names the setting, what it may be and the value it got (N9).

config.py imports nothing of vLLM (only the connector module does), as tests/test_vllm_connector_parts.py
relies on too.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from pathlib import Path

import pytest

from skymemory.integrations.vllm.config import (DEFAULT_STATION_ID, MAX_HOST_TIER_BYTES, MAX_STATION_ID, MAX_TEXT,
                                                MAX_TIMEOUT_S, ConfigError, ConnectorConfig)
from skymemory.orbit.manifest import Manifest, SatelliteEntry
from skymemory.orbit.placement import MAX_SERVERS

PLANES, SATS = 4, 5  # the constellation of the readable manifest: 20 satellites


@pytest.fixture
def manifest(tmp_path) -> Path:
    """A manifest file that reads (a 4x5 constellation)."""
    sats = [SatelliteEntry(p, s, "127.0.0.1", 20000 + p * SATS + s, 40000 + p * SATS + s)
            for p in range(PLANES) for s in range(SATS)]
    return Manifest(planes=PLANES, sats=SATS, satellites=sats).save(tmp_path / "manifest.json")


@pytest.fixture
def opaque_manifest(tmp_path) -> Path:
    """A manifest file that exists but does not read: the workers report it, not the settings."""
    path = tmp_path / "opaque.json"
    path.write_text("{}")
    return path


def config(manifest: Path, **extra) -> ConnectorConfig:
    return ConnectorConfig.from_extra({"manifest": str(manifest), **extra}, served_model="/models/served")


def refused(manifest: Path, extra: dict) -> str:
    """The one-line ConfigError of the settings manifest (the file's path) and `extra` (which may replace it)."""
    with pytest.raises(ConfigError) as err:
        ConnectorConfig.from_extra({"manifest": str(manifest), **extra}, served_model="/models/served")
    message = str(err.value)
    assert "\n" not in message and len(message) < 400, message
    return message


# ---- good values -------------------------------------------------------------------------------------------

def test_defaults(manifest):
    c = config(manifest)
    assert (c.manifest, c.model, c.policy, c.route, c.kv_format, c.servers, c.index_dir, c.station_id,
            c.load_timeout_s, c.seal, c.orbit_index) == (manifest, "/models/served", "auto", "auto", "fp16", 10, None,
                                                         DEFAULT_STATION_ID, 10.0, True, True)


def test_every_setting_at_its_bounds_is_taken(manifest, tmp_path):
    c = config(manifest, model="embedded-tinyllama", policy="recompute", route="relay", kv_format="int8",
               servers=PLANES * SATS, index_dir=str(tmp_path / "index"), station_id=MAX_STATION_ID,
               load_timeout_s=MAX_TIMEOUT_S, seal=False, host_tier_bytes=MAX_HOST_TIER_BYTES, orbit_index=False)
    assert c.orbit_index is False
    assert c.host_tier_bytes == MAX_HOST_TIER_BYTES and config(manifest).host_tier_bytes == 0
    assert (c.model, c.policy, c.route, c.kv_format, c.servers, c.index_dir, c.station_id, c.load_timeout_s,
            c.seal) == ("embedded-tinyllama", "recompute", "relay", "int8", 20, tmp_path / "index",
                        MAX_STATION_ID, MAX_TIMEOUT_S, False)
    low = config(manifest, servers=1, station_id=0, load_timeout_s=1)
    assert (low.servers, low.station_id, low.load_timeout_s) == (1, 0, 1.0)
    assert isinstance(low.load_timeout_s, float)
    assert config(manifest, model="m" * MAX_TEXT).model == "m" * MAX_TEXT


def test_paths_expand_and_may_be_path_objects(manifest, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    c = ConnectorConfig.from_extra({"manifest": manifest, "index_dir": "~/idx"}, served_model="m")
    assert (c.manifest, c.index_dir) == (manifest, tmp_path / "idx")


def test_null_is_the_default_for_the_optional_settings(manifest, monkeypatch):
    monkeypatch.setenv("SKYMEM_MANIFEST", str(manifest))
    c = ConnectorConfig.from_extra({"manifest": None, "model": None, "index_dir": None}, served_model="served")
    assert (c.manifest, c.model, c.index_dir) == (manifest, "served", None)


@pytest.mark.parametrize("extra", [None, {}, OrderedDict()])
def test_no_config_or_any_mapping_is_a_config(manifest, monkeypatch, extra):
    monkeypatch.setenv("SKYMEM_MANIFEST", str(manifest))
    assert ConnectorConfig.from_extra(extra, served_model="m").manifest == manifest


def test_servers_is_checked_against_the_constellation_only_when_its_manifest_reads(opaque_manifest, caplog):
    assert config(opaque_manifest, servers=MAX_SERVERS).servers == MAX_SERVERS
    assert not caplog.records


def test_more_servers_than_satellites_stripe_over_them_all_and_an_asked_number_is_said(manifest, caplog):
    # the store's rule (stripe_width), as `skymemory put` does: a small constellation serves, never an error
    with caplog.at_level(logging.WARNING, logger="skymemory.integrations.vllm.config"):
        assert config(manifest, servers=MAX_SERVERS).servers == MAX_SERVERS
    assert [r.getMessage() for r in caplog.records] == [
        f"SkyMemory connector: servers {MAX_SERVERS} is more than the {PLANES * SATS} satellites of the "
        f"{PLANES}x{SATS} constellation at {manifest}: blocks are striped over {PLANES * SATS}"]
    caplog.clear()
    small = Manifest(planes=1, sats=3, satellites=[SatelliteEntry(0, s, "127.0.0.1", 20000 + s, 40000 + s)
                                                   for s in range(3)]).save(manifest.with_name("small.json"))
    with caplog.at_level(logging.WARNING, logger="skymemory.integrations.vllm.config"):
        assert config(small).servers == 10  # the default, not asked for: nothing said
    assert not caplog.records


# ---- the config itself -----------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, shown", [
    ([("manifest", "m.json")], "list [('manifest', 'm.json')]"),
    ("manifest=m.json", "str 'manifest=m.json'"),
    (b"{}", "bytes b'{}'"),
    (7, "int 7"),
    (True, "bool True"),
    ({"manifest"}, "set {'manifest'}"),
    (list(range(1000)), "list [0, 1, 2,"),
])
def test_a_config_that_is_not_a_mapping_is_refused_saying_what_it_got(extra, shown):
    with pytest.raises(ConfigError) as err:
        ConnectorConfig.from_extra(extra, served_model="m")
    message = str(err.value)
    assert message.startswith("SkyMemory connector: kv_connector_extra_config must be a mapping (JSON object)")
    assert f"got {shown}" in message and len(message) < 200, message


@pytest.mark.parametrize("key, named", [("polcy", "polcy"), ("Servers", "Servers"), (3, "3"), (None, "None"),
                                        ("x" * 500, "xxx...")])
def test_an_unknown_setting_is_refused_by_name(manifest, key, named):
    with pytest.raises(ConfigError) as err:
        ConnectorConfig.from_extra({"manifest": str(manifest), key: 1}, served_model="m")
    message = str(err.value)
    assert message.startswith("unknown SkyMemory connector setting(s) ") and named in message
    assert "known: host_tier_bytes, index_dir, kv_format, load_timeout_s, manifest, model, orbit_index, parity, " \
           "policy, route, seal, servers, station_id" in message and len(message) < 300, message


# ---- every setting's bad values ------------------------------------------------------------------------------

NAN, INF = math.nan, math.inf
TEXT_BAD = ["", 7, 1.5, True, b"bytes", ["a"], {"name": "a"}, "a\0b", "p" * (MAX_TEXT + 1)]

BAD = [
    # (setting, value, what the message says it may be)
    *[("manifest", v, f"manifest must be a path, a non-empty string of at most {MAX_TEXT} characters")
      for v in TEXT_BAD],
    *[("index_dir", v, f"index_dir must be a path, a non-empty string of at most {MAX_TEXT} characters")
      for v in TEXT_BAD],
    *[("model", v, f"model must be a model name or path, a non-empty string of at most {MAX_TEXT} characters")
      for v in TEXT_BAD],
    *[("policy", v, "policy must be one of auto, fetch, recompute (a string)")
      for v in (None, 1, True, ["auto"], {"auto": 1}, b"auto")],
    *[("policy", v, "unknown fetch policy") for v in ("", "often", "AUTO", "auto ")],
    *[("route", v, "route must be one of direct, relay, auto (a string)") for v in (None, 0, False, ["relay"], b"relay")],
    *[("route", v, "route must be one of direct, relay, auto") for v in ("", "up", "Relay")],
    *[("kv_format", v, "kv_format must be one of fp16, bf16, fp32, int8 (a string)")
      for v in (None, 16, 1.0, ["fp16"], {"fp16"})],
    *[("kv_format", v, "unknown KV format") for v in ("", "fp8", "FP16")],
    *[("servers", v, f"servers must be a whole number 1..{MAX_SERVERS}")
      for v in (0, -1, MAX_SERVERS + 1, 10**12, 10**400, True, False, 4.0, 1.5, NAN, INF, "4", None, [4])],
    *[("host_tier_bytes", v, f"host_tier_bytes must be a whole number 0..{MAX_HOST_TIER_BYTES}")
      for v in (-1, MAX_HOST_TIER_BYTES + 1, 1.5, True, "1000", None)],
    *[("station_id", v, f"station_id must be a whole number 0..{MAX_STATION_ID}")
      for v in (-1, MAX_STATION_ID + 1, 0xFFFF, 70000, 10**30, True, 2816.0, NAN, "2816", None)],
    *[("load_timeout_s", v, f"load_timeout_s must be a number of seconds > 0 and <= {MAX_TIMEOUT_S:g}")
      for v in (0, 0.0, -1, -0.5, MAX_TIMEOUT_S + 0.001, 3601, 1e308, 10**400, NAN, INF, -INF, True, False, "10",
                None, [10])],
    *[("seal", v, "seal must be true or false") for v in ("false", "true", "no", 0, 1, 0.0, None, [True], NAN)],
    *[("orbit_index", v, "orbit_index must be true or false") for v in ("true", 1, None)],
    *[("parity", v, "parity must be a whole number 0..31") for v in (-1, 32, 1.5, True, "2", [2], NAN)],
]


@pytest.mark.parametrize("setting, value, says", BAD, ids=[f"{s}={str(v)[:20]!r}" for s, v, _ in BAD])
def test_a_bad_value_is_refused_naming_the_setting_its_range_and_the_value(manifest, setting, value, says):
    message = refused(manifest, {setting: value})
    assert message.startswith("SkyMemory connector: "), message
    assert says in message, message
    assert setting in message.replace("fetch policy", "policy").replace("KV format", "kv_format"), message
    shown = repr(value)
    assert (shown if len(shown) <= 60 else shown[:57] + "...") in message, message  # the value, cut when long


def test_a_huge_value_is_shown_cut(manifest):
    message = refused(manifest, {"model": "x" * 100_000 + "\n"})
    assert len(message) < 300 and "..." in message


def test_the_manifest_must_exist(tmp_path):
    message = refused(tmp_path / "none.json", {})
    assert "no constellation manifest at" in message


def test_a_manifest_name_the_file_system_refuses_is_a_config_error(tmp_path):
    message = refused(tmp_path, {"manifest": str(tmp_path / ("m" * 1000))})  # one name past NAME_MAX
    assert message.startswith("SkyMemory connector: manifest ") and "cannot be looked up" in message, message
