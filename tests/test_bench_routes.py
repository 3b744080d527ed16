"""Issue 14, the routed path: `bench transfer --routes` / `bench ttft --route` options, and a
multi-chunk block relayed through the overhead satellite read back byte-exact, every JSON row
carrying its route (a small live constellation)."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os

import pytest

from skymemory.bench import transfer
from skymemory.cli import build_parser
from skymemory.orbit.manifest import Manifest
from skymemory.protocol.auth import signer_for_manifest
from skymemory.store.routes import via_for_route

from live import launched


def transfer_parser():
    p = argparse.ArgumentParser()
    transfer.register(p.add_subparsers(dest="cmd"))
    return p


@pytest.mark.parametrize("argv", [
    ["transfer", "--routes", "direct,moon"],
    ["transfer", "--routes", "relay,relay"],
    ["transfer", "--routes", ""],
    ["transfer", "--placement", "spiral"],
])
def test_bad_route_options_are_rejected(argv, capsys):
    with pytest.raises(SystemExit) as e:
        transfer_parser().parse_args(argv)
    assert e.value.code == 2 and "error" in capsys.readouterr().err


def test_route_defaults_and_lists():
    assert transfer_parser().parse_args(["transfer"]).routes == ("auto",)
    assert transfer_parser().parse_args(["transfer", "--routes", "direct,relay"]).routes == ("direct", "relay")
    parser = build_parser()
    assert parser.parse_args(["bench", "ttft"]).route == ("auto",)
    assert parser.parse_args(["bench", "ttft", "--route", "relay,direct"]).route == ("relay", "direct")
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "ttft", "--route", "sideways"])


def test_rotation_hop_that_does_not_fit_is_refused(tmp_path):
    a = transfer_parser().parse_args(["transfer", "--placement", "rotation-hop", "--servers", "16", "--planes", "6",
                                      "--sats", "3", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="rotation-hop"):
        a.func(a)


def _stats(manifest: Manifest, sat):
    from skymemory.link.client import SkyMemoryClient

    async def go():
        async with SkyMemoryClient(manifest.ground_addresses(), signer=signer_for_manifest(manifest),
                                   timeout=1.0, retries=3) as c:
            return await c.stats(sat)

    return asyncio.run(go())


def test_relayed_block_is_byte_exact_and_rows_carry_route(node_path, tmp_path):
    from skymemory.bench.profiles import parse_profiles
    from skymemory.store.constellation import ConstellationBlockStore

    with launched(tmp_path, 3, 3, "--delay-scale", "0") as path:
        manifest = Manifest.load(path)
        overhead = manifest.constellation().overhead()
        servers = [s for s in manifest.constellation().nearest(9) if s != overhead][:4]  # 1-2 ISL hops away
        block = os.urandom(200_000)  # 33 chunks of 6,144 bytes on the wire (6,112 of content each: sealed)
        before = _stats(manifest, overhead)
        with ConstellationBlockStore.from_manifest(manifest, servers, chunk_bytes=6144,
                                                   via=via_for_route("relay", manifest)) as store:
            record = store.put_block(hashlib.sha256(block).digest(), block)
            assert record.chunk_count == 33
            assert store.get_block(record) == block
        after = _stats(manifest, overhead)
        # every SET_CHUNK went over the overhead satellite's ISLs (its ground link carried the replies)
        assert after.forwarded - before.forwarded >= 33

    # the benchmark's rows: one per route, each with its route, on its own small constellation
    args = transfer_parser().parse_args(["transfer", "--profiles", "none", "--sizes-mb", "1", "--no-kv",
                                         "--chunk-sizes", "6144", "--servers", "4", "--planes", "3", "--sats", "3",
                                         "--routes", "direct,relay", "--repeats", "1", "--auth", "on", "--seal", "on,off",
                                         "--no-c-ceiling", "--memory-budget-mb", "16",
                                         "--node", str(node_path), "--out", str(tmp_path / "out")])
    args.profiles = parse_profiles("none")
    assert args.func(args) == 0
    rows = json.loads((tmp_path / "out" / "transfer.json").read_text())
    assert {r["route"] for r in rows} == {"direct", "relay"} and {r["seal"] for r in rows} == {"on", "off"}
    assert all(r["bytes"] == 1_000_000 for r in rows)
    report = (tmp_path / "out" / "transfer.md").read_text()
    assert "| relay |" in report and "sealed / unsealed" in report and "aes-128-gcm" in report


def test_ttft_rows_carry_their_route():
    from skymemory.bench import report
    from skymemory.bench.ttft import Measurement, TTFTConfig, summarise

    def m(mode, ttft, route=None):
        return Measurement(prefix_tokens=1024, mode=mode, round=0, suffix_index=0, prompt_tokens=1056, ttft_s=ttft,
                           first_token=5, cached_tokens=1024, expected_cached_tokens=1024, route=route)

    rows = summarise([m("nocache", 8.0), m("sky-laser", 0.6, "direct"), m("sky-laser@relay", 0.64, "relay")])
    assert [(r["mode"], r["route"]) for r in rows] == [("nocache", None), ("sky-laser", "direct"),
                                                       ("sky-laser@relay", "relay")]
    table = report.ttft_table({"summary": rows, "config": {"gen_tokens": 30}})
    assert "| 1024 | sky-laser@relay | relay | 640 [640-640] |" in table and "| 1024 | nocache | - |" in table
    with pytest.raises(ValueError, match="route"):
        TTFTConfig(routes=("direct", "moon")).check()
    with pytest.raises(ValueError, match="distinct"):
        TTFTConfig(routes=("relay", "relay")).check()
