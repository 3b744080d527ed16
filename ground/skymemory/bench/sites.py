"""`skymemory bench sites`: Prefill-as-a-Service between two ground sites, through the constellation (issue 54).

    skymemory bench sites --model embedded-small --requests 24 --concurrency 4 --max-tokens 2048

One constellation with two ground sites far apart (launcher --netns 3 --sites 2), each in a network namespace of its
own: a prefill site (`vllm serve`, connector kv_producer) and a decode site (kv_consumer); the KV goes up over the
one's overhead satellite and comes down over the other's. The workload is the paper's (seed 003, §4.1): prompt
lengths from a truncated log-normal (μ 9.90, σ 1.00 on [128, 128K]) scaled to --max-tokens, random tokens, a fixed
number of output tokens, --concurrency clients at a time. It runs three ways, each under a cache salt of its own:

  one site        every request straight to the decode site, which prefills it itself
  all offloaded   through the router with t = 0: every request prefilled at the prefill site first
  routed by t     through the router planning t from the served model's profile measured here (prefill time by
                  length on the decode site's engine, KV bytes by length: kv.decide.disaggregation.PrefillProfile)
                  and the link its probe measures; halfway,
                  every satellite's ISL light time is multiplied by --slow-isl (SET_PARAM, as a link that
                  degrades), and the router's t follows the rate it measures

Per way: requests/s, output tokens/s, TTFT p50/p99 (streamed, as a client sees it), requests offloaded and the
KV bytes that crossed (blocks the decode site loaded x the block's bytes). On this machine the two sites share the
same cores, so disaggregating cannot add compute here: the table also gives the throughput model's prediction
(§3.4, eqs. 3-8) for two real sites, one instance each, from the measured profile and link rates.
Outputs: sites.json (every request, the router's history) and sites.md (the tables; its first line is the command)
under --out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from skymemory.argtypes import float_range, int_range, output_dir, positive_int

from .openai_server import BLOCK_TOKENS, Endpoint, OpenAIServer
from .profiles import parse_profiles
from .report import command_line
from .serve import percentile

PREFILL_STATION, DECODE_STATION = 0x0B00, 0x0D00  # the sites' connectors (the router's is 0x0C00)
MODES = ("one site", "all offloaded", "routed by t")


def register(subparsers) -> None:
    p = subparsers.add_parser("sites", help="prefill at one ground site, decode at another, the KV through orbit: "
                                            "one site vs all offloaded vs routed by t (Prefill-as-a-Service)")
    p.add_argument("--model", default="embedded-small", help="an embedded model served by both sites")
    p.add_argument("--requests", type=int_range(2, 10000), default=24, help="requests per way (default 24)")
    p.add_argument("--concurrency", type=int_range(1, 256), default=4)
    p.add_argument("--max-tokens", type=int_range(BLOCK_TOKENS * 2, 32768), default=2048,
                   help="the longest prompt: the paper's lengths scaled to it (default 2048)")
    p.add_argument("--output-tokens", type=int_range(1, 4096), default=16)
    p.add_argument("--profile", default="laser", help="link profile the constellation boots with (default laser)")
    p.add_argument("--planes", type=int_range(2, 64), default=3)
    p.add_argument("--sats", type=int_range(2, 64), default=4)
    p.add_argument("--slow-isl", type=float_range(1.0, 10000.0), default=10.0,
                   help="ISL light time multiplier set on every satellite halfway through the routed run")
    p.add_argument("--probe-s", type=float_range(0.2, 600.0), default=2.0, help="the router's link probe period")
    p.add_argument("--lengths", default="256,512,1024,2048",
                   help="prompt lengths the profile's prefill is timed at (default 256,512,1024,2048)")
    p.add_argument("--seed", type=int_range(0, 2**31 - 1), default=54)
    p.add_argument("--out", type=output_dir, default=Path("docs/results/sites"))
    p.set_defaults(func=_main)


def _main(a) -> int:
    from .options import token_list

    try:
        lengths = sorted(set(token_list(a.lengths)))
        (link,) = parse_profiles(a.profile)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise SystemExit(f"skymemory bench sites: {exc}") from None
    if a.max_tokens + a.output_tokens > 4096 or max(lengths) > 4096:
        raise SystemExit("skymemory bench sites: --max-tokens + --output-tokens, and --lengths, must fit the "
                         "servers' 4096 tokens")
    result = run(a, lengths, link)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "sites.json").write_text(json.dumps(result, indent=1))
    text = markdown(result)
    (a.out / "sites.md").write_text(text)
    print(text)
    return 0


def say(line: str) -> None:
    print(line, flush=True)


# ---- the parts ----------------------------------------------------------------------------------------------------

def engine_profile(server: OpenAIServer, model_dir: Path, model_name: str, lengths: list[int], salt: str):
    """The served model's prefill time by length as the decode site's engine computes it (a request of one output
    token, the fastest of two, each prompt new and under a salt nothing else uses: nothing cached), and the KV
    bytes its full blocks fetch (kv.decide.throughput, from the model's layout)."""
    import random

    from transformers import AutoConfig

    from skymemory.kv.decide.disaggregation import PrefillProfile
    from skymemory.kv.decide.throughput import prefix_fetch_bytes
    from skymemory.kv.format.groups import CacheLayout

    layout = CacheLayout.of_config(AutoConfig.from_pretrained(model_dir))
    rng, points = random.Random(len(lengths)), []
    for n in lengths:
        seconds = min(server.complete([1] + [rng.randrange(3, 259) for _ in range(n - 1)], 1, salt=salt).total_s
                      for _ in range(2))
        points.append((n, prefix_fetch_bytes(layout, n, BLOCK_TOKENS, "fp16"), seconds))
    return PrefillProfile(model_name, "vLLM (CPU), the decode site's engine", "fp16", BLOCK_TOKENS, tuple(points),
                          note="prefill timed as one-token requests to the decode site's vllm serve")


def context_of(model_dir: Path) -> int:
    """The longest sequence the served model takes (its max_position_embeddings), at most 4096 here."""
    config = json.loads((model_dir / "config.json").read_text())
    return min(4096, int(config.get("max_position_embeddings") or 4096))


def workload(a) -> list[list[int]]:
    """The paper's prompt lengths scaled to --max-tokens, random tokens, seeded."""
    import random

    from skymemory.kv.decide.disaggregation import PAPER

    lengths = PAPER.scaled_to(a.max_tokens).sample(a.requests, a.seed)  # as the router plans t (route.build)
    rng = random.Random(a.seed)
    return [[1] + [rng.randrange(3, 259) for _ in range(n - 1)] for n in lengths]


def site_connector(site, index_dir: Path, station_id: int, model: str) -> dict:
    return {"manifest": str(site.manifest), "model": model, "route": "relay", "index_dir": str(index_dir),
            "station_id": station_id}


def set_isl_scale(main_manifest: Path, scale: float) -> None:
    """Every satellite's ISL light-time multiplier (SET_PARAM delay scale), from the main ground station."""
    from skymemory.link.client import SkyMemoryClient
    from skymemory.orbit.manifest import Manifest
    from skymemory.protocol import auth, wire

    m = Manifest.load(main_manifest)

    async def everywhere() -> None:
        async with SkyMemoryClient(m.ground_addresses(), mission_ms=m.constellation().mission_ms,
                                   bind=(m.ground_host, 0), signer=auth.signer_for_manifest(m),
                                   station_id=m.ground_station, timeout=1.0, retries=5) as client:
            await asyncio.gather(*(client.set_param((e.plane, e.sat), wire.SKYMEM_PARAM_DELAY_SCALE_PPM,
                                                    int(round(scale * 1e6))) for e in m.satellites))

    asyncio.run(everywhere())


def replay(front: Endpoint, prompts: list[list[int]], a, salt: str, halfway=None) -> tuple[list[dict], float]:
    """Every prompt, --concurrency clients at a time, streamed; (per request, wall seconds). halfway(): called once
    when half the requests have been sent."""
    results: list[dict | None] = [None] * len(prompts)
    lock, sent = threading.Lock(), [0]

    def one(i: int) -> None:
        with lock:
            sent[0] += 1
            if halfway is not None and sent[0] == len(prompts) // 2 + 1:
                halfway()
        reply = front.stream(prompts[i], a.output_tokens, salt)
        results[i] = {"prompt_tokens": reply.prompt_tokens, "cached_tokens": reply.cached_tokens,
                      "ttft_s": reply.ttft_s, "total_s": reply.total_s, "output_tokens": len(reply.tokens),
                      "said": reply.said, "ended": time.time()}

    started = time.perf_counter()
    with ThreadPoolExecutor(a.concurrency) as clients:
        list(clients.map(one, range(len(prompts))))
    return [r for r in results if r is not None], time.perf_counter() - started


def summary(name: str, requests: list[dict], wall_s: float, block_bytes: int, counters: dict | None) -> dict:
    ttft = [r["ttft_s"] for r in requests]
    # the decode site has no prefix cache of its own (vLLM's is off): every cached token it reports was loaded from
    # orbit (a streamed answer carries no kv_transfer_params to say it otherwise)
    loaded = sum(r["cached_tokens"] // BLOCK_TOKENS for r in requests)
    return {"mode": name, "requests": len(requests), "wall_s": wall_s, "requests_per_s": len(requests) / wall_s,
            "output_tokens_per_s": sum(r["output_tokens"] for r in requests) / wall_s,
            "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
            "offloaded": (counters or {}).get("requests_offloaded", 0), "blocks_loaded": loaded,
            "bytes_crossed": loaded * block_bytes}


def predictions(profile, a, links: list[tuple[str, float]], decode_step_s: float) -> list[dict]:
    """The throughput model (seed 003 §3.4) for two real sites, one instance each, at each measured link rate."""
    from skymemory.kv.decide.disaggregation import PAPER, Deployment, all_offloaded, plan, single_site

    lengths = PAPER.scaled_to(a.max_tokens)  # the workload's, as the router plans t (route.build)
    deployment = Deployment(prefill_instances=1.0, pd_instances=1.0, decode_batch=a.concurrency,
                            decode_step_s=decode_step_s, output_tokens=a.output_tokens)
    rows = []
    for name, rate in links:
        routed, alone, naive = (plan(profile, lengths, rate, deployment), single_site(profile, lengths, deployment),
                                all_offloaded(profile, lengths, rate, deployment))
        rows.append({"link": name, "link_Bps": rate, "threshold": routed.threshold, "offloaded": routed.share_offloaded,
                     "one_site": alone.throughput, "all_offloaded": naive.throughput, "routed": routed.throughput,
                     "egress_Bps": routed.egress_Bps, "bound": routed.bound})
    return rows


# ---- the run ------------------------------------------------------------------------------------------------------

def run(a, lengths: list[int], link) -> dict:
    from skymemory.kv.model.models import save_model_dir
    from skymemory.launcher.sites import from_main_ground, sites_of
    from skymemory.orbit.manifest import Manifest
    from skymemory.route.build import open_router

    from .launch import boot

    prompts = workload(a)
    say(f"workload: {len(prompts)} prompts, {min(map(len, prompts))}..{max(map(len, prompts))} tokens "
        f"(mean {statistics.mean(map(len, prompts)):.0f}), {a.output_tokens} output tokens, {a.concurrency} at a time")
    # the sites' engines run in fp32 (OpenAIServer), so the router names blocks with an fp32 root, as they do
    with tempfile.TemporaryDirectory(prefix="skymemory-sites-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        model_dir = save_model_dir(a.model, work / a.model)
        context = context_of(model_dir)
        if a.max_tokens + a.output_tokens > context or max(lengths) >= context:
            raise SystemExit(f"skymemory bench sites: {a.model} takes {context} tokens: --max-tokens + "
                             "--output-tokens, and --lengths, must fit")
        say(f"booting a {a.planes}x{a.sats} constellation ({link.name}) with two ground sites in namespaces")
        sky = boot(planes=a.planes, sats=a.sats, profile=link, run_dir=work / "sky",
                   extra_args=("--netns", "3", "--sites", "2"))
        stack.callback(sky.stop)
        main = sky.manifest_path
        first, second = sites_of(Manifest.load(main))
        say(f"  prefill site {first.namespace} ({first.address}), overhead "
            f"{Manifest.load(first.manifest).ground_overhead}; decode site {second.namespace} ({second.address}), "
            f"overhead {Manifest.load(second.manifest).ground_overhead}")
        prefill = stack.enter_context(OpenAIServer(
            model_dir, work / "prefill.log", kv_role="kv_producer", netns=first.namespace, host=first.address,
            max_model_len=context, connector=site_connector(first, work / "index-prefill", PREFILL_STATION, a.model)))
        decode = stack.enter_context(OpenAIServer(
            model_dir, work / "decode.log", kv_role="kv_consumer", netns=second.namespace, host=second.address,
            max_model_len=context, connector=site_connector(second, work / "index-decode", DECODE_STATION, a.model)))
        for server in (prefill, decode):  # first-request costs, and forwards the decode site times
            for n in (BLOCK_TOKENS // 2, BLOCK_TOKENS + 10):
                server.complete(prompts[0][:n], 2, salt="warm-up")
        decode_step_s = decode.complete(prompts[0][:64], 32, salt="warm-up-decode").total_s / 32
        say(f"profile of {a.model}: prefill timed at {lengths} tokens on the decode site's engine")
        profile = engine_profile(decode, model_dir, a.model, lengths, salt="profile")
        for tokens, kv, seconds in profile.points:
            say(f"  {tokens:6d} tokens: KV {kv / 1e6:7.2f} MB, prefill {seconds:.3f} s, "
                f"Φkv {kv / seconds / 1e6:.1f} MB/s")
        block_bytes = int(profile.kv_bytes(BLOCK_TOKENS * 2) - profile.kv_bytes(BLOCK_TOKENS))
        connector = {"model": a.model, "route": "relay", "index_dir": str(work / "index-router")}
        routed_manifest = from_main_ground(second.manifest, main, work / "router.json")
        rows, requests, history = [], {}, []

        say(f"{MODES[0]}: every request prefilled and decoded at the decode site")
        got, wall = replay(decode, prompts, a, salt="one-site")
        rows.append(summary(MODES[0], got, wall, block_bytes, None))
        requests[MODES[0]] = got

        say(f"{MODES[1]}: the router with t = 0")
        with open_router(prefill.url, decode.url, model_dir, routed_manifest, connector=connector, dtype="fp32",
                         threshold=0) as router:
            got, wall = replay(Endpoint("127.0.0.1", _port(router.url), decode.model), prompts, a, "all-offloaded")
            rows.append(summary(MODES[1], got, wall, block_bytes, router.status()["counters"]))
        requests[MODES[1]] = got

        say(f"{MODES[2]}: the router planning t from the profile and its link probe (every {a.probe_s:g} s); "
            f"halfway, ISL light time x{a.slow_isl:g}")
        from skymemory.kv.decide.disaggregation import Deployment

        deployment = Deployment(decode_batch=a.concurrency, decode_step_s=decode_step_s, output_tokens=a.output_tokens)
        with open_router(prefill.url, decode.url, model_dir, routed_manifest, connector=connector, dtype="fp32",
                         profile=profile, max_tokens=a.max_tokens, deployment=deployment,
                         probe_s=a.probe_s) as router:
            first_rate = router.status()["link_Bps"]
            changed_at = []

            def slow_down() -> None:
                changed_at.append(time.time())
                set_isl_scale(main, link.delay_scale * a.slow_isl)
                say(f"  ISL light time x{a.slow_isl:g} on every satellite")

            got, wall = replay(Endpoint("127.0.0.1", _port(router.url), decode.model), prompts, a, "routed",
                               halfway=slow_down)
            deadline = time.monotonic() + 20 * a.probe_s  # the router's estimate follows the slower link
            while time.monotonic() < deadline and router.status()["link_Bps"] > 0.8 * first_rate:
                time.sleep(a.probe_s)
            status = router.status()
            rows.append(summary(MODES[2], got, wall, block_bytes, status["counters"]))
            history = status["history"]
        requests[MODES[2]] = got
        set_isl_scale(main, link.delay_scale)
        last_rate = status["link_Bps"]
    return {"command": command_line(), "model": a.model, "link_profile": link.name, "planes": a.planes,
            "sats": a.sats, "concurrency": a.concurrency, "output_tokens": a.output_tokens,
            "max_tokens": a.max_tokens, "slow_isl": a.slow_isl, "profile": profile.as_dict(),
            "decode_step_s": decode_step_s, "block_bytes": block_bytes, "rows": rows, "requests": requests,
            "router_history": history, "link_changed_at": changed_at[0] if changed_at else None,
            "predictions": predictions(profile, a, [("measured at start", first_rate),
                                                    (f"measured after ISL x{a.slow_isl:g}", last_rate)],
                                       decode_step_s)}


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


# ---- the report ---------------------------------------------------------------------------------------------------

def markdown(r: dict) -> str:
    lines = [f"`{r['command']}`", "",
             f"{r['model']} on vLLM (CPU), {r['planes']}x{r['sats']} constellation ({r['link_profile']}), two ground "
             f"sites in network namespaces sharing this machine's cores; {r['concurrency']} clients, "
             f"{r['output_tokens']} output tokens, prompts up to {r['max_tokens']} tokens (the paper's lengths "
             "scaled).", "",
             "| way | requests | req/s | output tok/s | TTFT p50 s | TTFT p99 s | offloaded | blocks loaded "
             "| KV crossed MB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in r["rows"]:
        lines.append(f"| {row['mode']} | {row['requests']} | {row['requests_per_s']:.3f} | "
                     f"{row['output_tokens_per_s']:.1f} | {row['ttft_p50_s']:.2f} | {row['ttft_p99_s']:.2f} | "
                     f"{row['offloaded']} | {row['blocks_loaded']} | {row['bytes_crossed'] / 1e6:.2f} |")
    lines += ["", "The router's threshold t as it measured the link (the ISLs slowed halfway through the routed "
              "run" + (f", at +{r['link_changed_at'] - r['router_history'][0]['time']:.1f} s" if r["link_changed_at"]
                       and r["router_history"] else "") + "):", "",
              "| at s | link MB/s | t tokens |", "| ---: | ---: | ---: |"]
    start = r["router_history"][0]["time"] if r["router_history"] else 0
    for h in r["router_history"]:
        rate = "-" if h["link_Bps"] is None else f"{h['link_Bps'] / 1e6:.2f}"
        lines.append(f"| {h['time'] - start:.1f} | {rate} | {h['threshold']} |")
    lines += ["", "The throughput model (seed 003 §3.4) for two real sites, one instance each, from the measured "
              f"profile (decode {r['decode_step_s'] * 1000:.1f} ms per token here), requests/s:", "",
              "| link | MB/s | t tokens | offloaded | one site | all offloaded | routed by t | egress MB/s | bound |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for p in r["predictions"]:
        lines.append(f"| {p['link']} | {p['link_Bps'] / 1e6:.2f} | {p['threshold']:.0f} | {p['offloaded']:.0%} | "
                     f"{p['one_site']:.4g} | {p['all_offloaded']:.4g} | {p['routed']:.4g} | "
                     f"{p['egress_Bps'] / 1e6:.3g} | {p['bound']} |")
    return "\n".join(lines) + "\n"
