"""Prefill as a service through the constellation (issue 54): two ground sites far apart, each in a network
namespace of its own with its own ground station (launcher --sites), one constellation between them.

The prefill site runs `vllm serve` with the connector as kv_producer (it stores every prompt's full blocks and
answers with the first token), the decode site as kv_consumer (it loads what it finds in orbit, computes the
rest, decodes). Both go up through their own overhead satellite (route relay): a block the prefill site stores
goes up over its overhead and comes down over the decode site's, through the ISLs. The router (skymemory route,
t pinned at two blocks) sends the long request to the prefill site first and then to the decode site, which
loads its three full blocks from orbit; the short one goes straight to the decode site and never reaches the
prefill site, and so does the long prompt's next turn, whose uncached increment is short once the router finds
its first three blocks in orbit. Every text is plain vLLM's.
"""

from __future__ import annotations

from pathlib import Path

from skymemory.bench.openai_server import BLOCK_TOKENS as BLOCK
from skymemory.bench.openai_server import Endpoint, OpenAIServer
from skymemory.launcher.sites import from_main_ground
from skymemory.orbit.manifest import Manifest
from skymemory.route.build import open_router

from kv_support import random_prompt
from live import launched_sites

LONG = random_prompt(3 * BLOCK + 40, seed=540)  # 3 full blocks and a tail: an increment past t
SHORT = random_prompt(BLOCK + 20, seed=541)  # an increment below t
GROWN = LONG + random_prompt(100, seed=542)[1:]  # the long prompt's next turn: its 3 blocks are in orbit by then
THRESHOLD = 2 * BLOCK
NEW_TOKENS = 16
SERVED = "vllm:request_success_total"  # requests a server finished (vLLM's /metrics)


def site_settings(site, tmp_path: Path, station_id: int) -> dict:
    """A site's connector: its own manifest (its address, its overhead), up through its overhead satellite,
    its own ground index and station ids (the satellites answer each station at the address it spoke from)."""
    return {"manifest": str(site.manifest), "model": "embedded-small", "route": "relay",
            "index_dir": str(tmp_path / f"index-{site.namespace}"), "station_id": station_id}


def test_a_long_prompt_prefilled_at_one_site_is_decoded_at_the_other_from_orbit(model_dir, tmp_path):
    with OpenAIServer(model_dir, tmp_path / "plain.log") as plain:  # vLLM without the connector
        want = {name: plain.complete(prompt, NEW_TOKENS) for name, prompt in
                (("long", LONG), ("short", SHORT), ("grown", GROWN))}
    (tmp_path / "sky").mkdir()
    with launched_sites(tmp_path / "sky", 3, 3, 3, 2) as (manifest, (first, second)):
        overheads = [tuple(Manifest.load(site.manifest).ground_overhead) for site in (first, second)]
        assert overheads[0] != overheads[1], overheads
        with OpenAIServer(model_dir, tmp_path / "prefill.log", connector=site_settings(first, tmp_path, 0x0B00),
                          kv_role="kv_producer", netns=first.namespace, host=first.address) as prefill, \
                OpenAIServer(model_dir, tmp_path / "decode.log", connector=site_settings(second, tmp_path, 0x0D00),
                             kv_role="kv_consumer", netns=second.namespace, host=second.address) as decode:
            # the router stands in front of the decode site: up through its overhead, from this namespace
            router_manifest = from_main_ground(second.manifest, manifest, tmp_path / "router.json")
            connector = {"model": "embedded-small", "route": "relay", "index_dir": str(tmp_path / "index-router")}
            with open_router(prefill.url, decode.url, model_dir, router_manifest, connector=connector,
                             threshold=THRESHOLD, dtype="fp32") as router:  # the sites' engines run in fp32
                front = Endpoint("127.0.0.1", int(router.url.rsplit(":", 1)[1]), decode.model)
                short = front.complete(SHORT, NEW_TOKENS)
                prefilled_before_long = prefill.metric(SERVED)
                long = front.complete(LONG, NEW_TOKENS)
                grown = front.complete(GROWN, NEW_TOKENS)  # cached: only its increment counts, below t
                prefilled, decoded = prefill.metric(SERVED), decode.metric(SERVED)
                counters = router.status()["counters"]
    assert prefilled_before_long == 0, "the short request reached the prefill site"
    assert prefilled == 1 and decoded == 3, (prefilled, decoded)
    assert counters["requests_offloaded"] == 1 and counters["requests_straight"] == 2, counters
    assert counters["cached_tokens"] == 3 * BLOCK, counters  # the grown prompt's blocks, found in orbit
    assert short.tokens == want["short"].tokens and short.cached_tokens == 0
    for name, reply in (("long", long), ("grown", grown)):
        assert reply.tokens == want[name].tokens, name
        assert reply.cached_tokens == 3 * BLOCK and reply.said["fetched_blocks"] == 3, (name, reply.said)
        assert "failed" not in reply.said["decision"], (name, reply.said)  # loaded, not recomputed after a failure
    assert "3 blocks from a prefill site" in long.said["decision"], long.said
    print(f"overheads {overheads}; long: {long.said['decision']}; router counters {counters}")
