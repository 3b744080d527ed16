"""The launch manifest's schema: every field's type and range, checked before anything uses it.

A manifest is a JSON file a user can edit, copy or truncate. Each rule below
names a field and what it may hold; `check_manifest(data, known_fields,
known_entry_fields)` walks a decoded manifest and raises `ManifestError` with
one line naming the first field that breaks its rule ("satellites[3].ground_port
must be an integer in 1..65535, got 99999"). Fields without a rule must still
have the JSON type of their default. Unknown fields are refused (a typo would
otherwise be ignored silently).
"""

from __future__ import annotations

import ipaddress
import math
from typing import Any, Callable

FORMAT_VERSION = 1
MAX_GRID = 1024  # planes or sats per plane (the launcher's limit)
RUNTIMES = ("native", "cfs", "docker", "swarm")


class ManifestError(ValueError):
    """The manifest cannot be used; the message is one line naming the field and what is wrong."""


Rule = Callable[[str, Any], None]  # (field path, value) -> None, or raises ManifestError


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")


def integer(lo: int, hi: int) -> Rule:
    def rule(where: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ManifestError(f"{where} must be an integer in {lo}..{hi}, got {_type_name(value)} {value!r}")
        if not lo <= value <= hi:
            raise ManifestError(f"{where} must be an integer in {lo}..{hi}, got {value}")
    return rule


def number(lo: float, hi: float, *, open_lo: bool = False) -> Rule:
    def rule(where: str, value: Any) -> None:
        bound = f"{'(' if open_lo else '['}{lo:g}, {hi:g}]"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ManifestError(f"{where} must be a number in {bound}, got {value!r}")
        if value < lo or value > hi or (open_lo and value == lo):
            raise ManifestError(f"{where} must be a number in {bound}, got {value:g}")
    return rule


def text(*, non_empty: bool = False, choices: tuple[str, ...] = ()) -> Rule:
    def rule(where: str, value: Any) -> None:
        if not isinstance(value, str):
            raise ManifestError(f"{where} must be a string, got {_type_name(value)} {value!r}")
        if non_empty and not value:
            raise ManifestError(f"{where} must not be empty")
        if choices and value not in choices:
            raise ManifestError(f"{where} must be one of {', '.join(choices)}, got {value!r}")
    return rule


def json_object(where: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise ManifestError(f"{where} must be an object, got {_type_name(value)} {value!r}")


def grid_pair(where: str, value: Any) -> None:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) for v in value)):
        raise ManifestError(f"{where} must be [plane, sat], got {value!r}")


def ipv4(where: str, value: Any) -> None:
    text(non_empty=True)(where, value)
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        raise ManifestError(f"{where} must be an IPv4 address, got {value!r}") from None


MAX_SITES = 8  # the launcher's --sites
STATION = integer(0, 0xFFFE)
SITE_RULES: dict[str, Callable[[str, Any], None]] = {
    "site": integer(0, MAX_SITES - 1),
    "namespace": text(non_empty=True),
    "address": ipv4,
    "ground_station": STATION,
    "ground_overhead": grid_pair,
    "manifest": text(non_empty=True),
}

PORT = integer(1, 65535)
OPTIONAL_PORT = integer(0, 65535)  # 0: not used
PID = integer(0, 2**31 - 1)

RULES: dict[str, Rule] = {
    "format_version": integer(FORMAT_VERSION, FORMAT_VERSION),
    "planes": integer(1, MAX_GRID),
    "sats": integer(1, MAX_GRID),
    "altitude_km": number(100, 40000),
    "inclination_deg": number(0, 180),
    "walker_phase": integer(0, MAX_GRID - 1),
    "epoch_ms": integer(0, 2**63 - 1),
    "time_scale": number(0, 1e6, open_lo=True),
    "runtime": text(choices=RUNTIMES),
    "ground_station": STATION,
    "ground_overhead": grid_pair,
    "ground_host": text(non_empty=True),
    "ground_netns": text(),
    "sites": lambda where, v: None,  # checked site by site below
    "site_of": text(),
    "chunk_size": integer(1, 60000),
    "memory_budget": integer(4096, 1 << 40),
    "link": json_object,
    "satellites": lambda where, v: None,  # checked entry by entry below
    "backend": json_object,
    "run_dir": text(),
    "launcher_pid": PID,
    "process_group": PID,
    "created_unix": number(0, 1e12),
    "auth_key_file": text(),
    "content_key_file": text(),
}

ENTRY_RULES: dict[str, Rule] = {
    "plane": integer(0, MAX_GRID - 1),
    "sat": integer(0, MAX_GRID - 1),
    "host": text(non_empty=True),
    "isl_port": PORT,
    "ground_port": PORT,
    "pid": PID,
    "netns": text(),
    "remote": text(),
    "cpuid": integer(0, 65535),
    "command_port": OPTIONAL_PORT,
    "tlm_host": text(),
    "tlm_port": OPTIONAL_PORT,
}

REQUIRED = ("format_version", "planes", "sats", "satellites")
ENTRY_REQUIRED = ("plane", "sat", "host", "isl_port", "ground_port")


def _like_default(default: Any) -> Rule:
    """For a field without a rule: the JSON type of its default."""
    def rule(where: str, value: Any) -> None:
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, (int, float)):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif isinstance(default, (list, tuple)):
            ok = isinstance(value, list)
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise ManifestError(f"{where} must be {_type_name(default)}, got {_type_name(value)} {value!r}")
    return rule


def _check_fields(data: dict, where: str, rules: dict[str, Rule], defaults: dict[str, Any],
                  required: tuple[str, ...], kind: str = "manifest") -> None:
    for name in required:
        if name not in data:
            raise ManifestError(f"{where}{name} is missing")
    for name, value in data.items():
        if name not in defaults:
            raise ManifestError(f"{where}{name} is not a {kind} field")
        (rules.get(name) or _like_default(defaults[name]))(f"{where}{name}", value)


def check_manifest(data: Any, defaults: dict[str, Any], entry_defaults: dict[str, Any]) -> None:
    """Raise ManifestError (one line) unless `data` is a usable manifest.

    `defaults` / `entry_defaults`: every field the Manifest / SatelliteEntry classes have, with its
    default (None for required ones): the classes stay the one list of fields.
    """
    if not isinstance(data, dict):
        raise ManifestError(f"must be a JSON object, got {_type_name(data)}")
    if data.get("format_version") != FORMAT_VERSION and "format_version" in data:
        raise ManifestError(f"format_version {data['format_version']!r} is not {FORMAT_VERSION} "
                            "(written by another version of the launcher)")
    _check_fields(data, "", RULES, defaults, REQUIRED)
    planes, sats, entries = data["planes"], data["sats"], data["satellites"]
    if not isinstance(entries, list):
        raise ManifestError(f"satellites must be a list, got {_type_name(entries)} {entries!r}")
    if len(entries) != planes * sats:
        raise ManifestError(f"satellites lists {len(entries)} satellites for a {planes}x{sats} grid")
    if "ground_overhead" in data:
        p, s = data["ground_overhead"]
        if not (0 <= p < planes and 0 <= s < sats):
            raise ManifestError(f"ground_overhead {[p, s]} is outside the {planes}x{sats} grid")
    _check_sites(data.get("sites", []), planes, sats, data.get("ground_station", 0))
    ground_ports: dict[tuple[str, str, str, int], int] = {}  # the ground tells satellites apart by them
    for i, entry in enumerate(entries):
        where = f"satellites[{i}]."
        if not isinstance(entry, dict):
            raise ManifestError(f"satellites[{i}] must be an object, got {_type_name(entry)} {entry!r}")
        _check_fields(entry, where, ENTRY_RULES, entry_defaults, ENTRY_REQUIRED)
        if (entry["plane"], entry["sat"]) != divmod(i, sats):
            raise ManifestError(f"{where[:-1]} is ({entry['plane']}, {entry['sat']}); entry {i} of a "
                                f"{planes}x{sats} grid must be {divmod(i, sats)} (plane-major order)")
        key = (entry.get("netns", ""), entry.get("remote", ""), entry["host"], entry["ground_port"])
        if key in ground_ports:
            raise ManifestError(f"{where}ground_port {entry['ground_port']} on {entry['host']} is also "
                                f"satellites[{ground_ports[key]}]'s ground port")
        ground_ports[key] = i


def _check_sites(sites: Any, planes: int, sats: int, station: Any) -> None:
    """The ground sites of a --sites launch: site k at index k, every field there and valid, each with its
    own station id (the satellites learn one address per station id) other than the main ground's."""
    if not isinstance(sites, list):
        raise ManifestError(f"sites must be a list, got {_type_name(sites)} {sites!r}")
    if len(sites) > MAX_SITES:
        raise ManifestError(f"sites lists {len(sites)} ground sites, more than {MAX_SITES}")
    stations: dict[int, str] = {station: "the main ground"}
    for k, site in enumerate(sites):
        where = f"sites[{k}]."
        if not isinstance(site, dict):
            raise ManifestError(f"sites[{k}] must be an object, got {_type_name(site)} {site!r}")
        _check_fields(site, where, SITE_RULES, SITE_RULES, tuple(SITE_RULES), kind="site")
        if site["site"] != k:
            raise ManifestError(f"{where}site is {site['site']}; entry {k} must be site {k}")
        p, s = site["ground_overhead"]
        if not (0 <= p < planes and 0 <= s < sats):
            raise ManifestError(f"{where}ground_overhead {[p, s]} is outside the {planes}x{sats} grid")
        if site["ground_station"] in stations:
            raise ManifestError(f"{where}ground_station {site['ground_station']} is also "
                                f"{stations[site['ground_station']]}'s (each ground site needs its own)")
        stations[site["ground_station"]] = f"sites[{k}]"
