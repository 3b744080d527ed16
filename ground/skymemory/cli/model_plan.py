"""`skymemory model plan`: Prefill as a Service over a satellite link (seed 003 §3.4, kv.decide.disaggregation).

  skymemory model plan --model embedded-tinyllama,embedded-granite-h-1b --link laser,rf
  skymemory model plan --model embedded-tiny --link-mbps 100,10 --max-tokens 4096
  skymemory model plan --model embedded-llama3-8b --link laser --manifest /tmp/sky/manifest.json

For each model: Φkv(l) measured (KV bytes a prefix's full blocks fetch, from the full configuration's layout;
its prefill timed on this device), then for each link the routing threshold t and the decode site's split
N_p/N_d that maximise the throughput of eq. 6, beside the single-site baseline (no prefill site) and the
naive heterogeneous one (everything offloaded).

The link rate is always a measured one: `--link-mbps` gives it; `--link laser,rf` measures it now, by block
gets (bench.transfer's measurement, fed into the cost model's kv.decide.policy.LinkEstimate) through a small
constellation launched per profile, or through the one `--manifest` names. A model too big for this device
(an on_device_only model without CUDA, or `--slice`) has its prefill timed on 1- and 2-layer slices of its
configuration and scaled linearly to its depth per layer kind; its KV bytes still come from the full layout.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import tempfile
from pathlib import Path

from skymemory.argtypes import KV_FORMATS, positive_int
from skymemory.bench.options import token_list
from skymemory.bench.profiles import profiles_arg

LINK_SERVERS = 4  # satellites a measured block is striped over
LINK_BLOCKS = 8  # blocks per measured get: 8 x 1 MB
LINK_BLOCK_BYTES = 1_000_000


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number expected, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"a finite number > 0 expected, got {text!r}")
    return value


def _rates(text: str) -> list[float]:
    values = [_positive_float(v.strip()) for v in text.split(",") if v.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"comma-separated link rates in Mbit/s expected, got {text!r}")
    return values


def register(subparsers) -> None:
    """Nothing at the top level: `plan` is an action of `skymemory model` (cli/model.py calls register_plan); this
    module is discovered like every command module of the package, and adds no command of its own."""


def register_plan(commands, common) -> None:
    from skymemory.cli.model import _clear_errors

    p = commands.add_parser("plan", parents=[common], help="Prefill as a Service: routing threshold and prefill/decode "
                            "split that maximise throughput over a link (seed 003 §3.4)",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--link", type=profiles_arg, default=None,
                   help="link profiles (laser, rf, none), comma-separated: each rate measured now, through a "
                        "constellation launched per profile or the one --manifest names")
    p.add_argument("--link-mbps", type=_rates, default=None, help="given link rates in Mbit/s, comma-separated")
    p.add_argument("--manifest", default=None,
                   help="measure the link through this launched constellation (one --link profile, or its own)")
    p.add_argument("--planes", type=positive_int, default=3, help="planes of a constellation launched to measure (3)")
    p.add_argument("--sats", type=positive_int, default=3, help="satellites per plane of that constellation (3)")
    p.add_argument("--lengths", type=token_list, default=(512, 1024, 2048, 4096),
                   help="prompt lengths at which Φkv is measured, comma-separated (default 512,1024,2048,4096)")
    p.add_argument("--repeats", type=positive_int, default=2, help="timed prefills per length, the fastest kept (2)")
    p.add_argument("--slice", action="store_true",
                   help="time prefill on 1- and 2-layer slices and scale to the full depth, even where the model "
                        "could be built whole (an on_device_only model off CUDA always is)")
    p.add_argument("--block-tokens", type=positive_int, default=128)
    p.add_argument("--kv", default="fp16", choices=KV_FORMATS, help="KV format of the bytes sent (default fp16)")
    workload = p.add_mutually_exclusive_group()
    workload.add_argument("--workload", choices=["paper"], default="paper",
                          help="prompt lengths: the paper's truncated log-normal (μ 9.90, σ 1.00, [128, 128K])")
    workload.add_argument("--max-tokens", type=positive_int, default=None,
                          help="the paper's shape scaled to this longest prompt (LengthDistribution.scaled_to)")
    p.add_argument("--prefill-instances", type=_positive_float, default=1.0, help="N_prfaas (default 1)")
    p.add_argument("--pd-instances", type=_positive_float, default=1.0, help="N_p + N_d at the decode site (default 1)")
    p.add_argument("--decode-batch", type=positive_int, default=1, help="BS_max (default 1)")
    p.add_argument("--decode-step-s", type=_positive_float, default=0.05, help="T_decode per output token (0.05)")
    p.add_argument("--output-tokens", type=positive_int, default=64, help="L_out (default 64)")
    p.add_argument("--profile", default=None,
                   help="reuse measured profiles (JSON files, comma-separated) instead of measuring; their models")
    p.add_argument("--save-profile", default=None,
                   help="write each measured profile as JSON here ('{model}' in the name for several models)")
    p.set_defaults(func=_clear_errors(_plan))


# --------------------------------------------------------------------------------------------- the link


def measure_link(manifest, name: str, log=print) -> float:
    """Goodput (bytes/s) of block gets through a launched constellation: bench.transfer's measure_route over the
    nearest satellites, each get fed into a LinkEstimate as a KVCManager's fetches are."""
    from skymemory.bench.transfer import measure_route, pick_servers
    from skymemory.kv.decide.policy import LinkEstimate

    servers = pick_servers(manifest, min(LINK_SERVERS, manifest.planes * manifest.sats), "nearest")
    blocks = [os.urandom(LINK_BLOCK_BYTES) for _ in range(LINK_BLOCKS)]
    seal = "on" if getattr(manifest, "content_key_file", "") else "off"
    rows = measure_route(manifest, servers, "direct", 6144, [("plan", blocks)], 3, None,
                         (name, "on" if manifest.auth_key_file else "off", seal, 0), log=lambda _line: None)
    link = LinkEstimate(name)
    for row in rows:
        if row["op"] == "get":
            for seconds in row["times_s"]:
                link.observe(row["bytes"], seconds)
    model = link.model()
    if model is None:
        raise ValueError(f"link {name}: no get was measured")
    log(f"link {name}: {model.rate_Bps / 1e6:.1f} MB/s ({model.rate_Bps * 8 / 1e9:.3f} Gbit/s), measured now: "
        f"gets of {LINK_BLOCKS} x {LINK_BLOCK_BYTES / 1e6:g} MB blocks over {len(servers)} satellites of a "
        f"{manifest.planes}x{manifest.sats} constellation (sealed: {seal})")
    return model.rate_Bps


def _links(args, log=print) -> list[tuple[str, float]]:
    """(name, bytes/s) of every link to plan for: given rates, or rates measured now."""
    links: list[tuple[str, float]] = []
    for mbps in args.link_mbps or []:
        links.append((f"{mbps:g} Mbit/s", mbps * 1e6 / 8))
    if args.manifest:
        from skymemory.bench.profiles import profile_of_manifest
        from skymemory.orbit.manifest import Manifest

        manifest = Manifest.load(args.manifest)
        own = profile_of_manifest(manifest.link)
        if args.link and (len(args.link) > 1 or args.link[0].name != own.name):
            raise ValueError(f"--manifest {args.manifest} is a constellation launched with profile {own.name}: it "
                             f"measures that link only (--link {own.name}, or no --link)")
        links.append((own.name, measure_link(manifest, own.name, log)))
    elif args.link:
        from skymemory.bench.launch import LaunchFailed, boot_per_profile

        with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="skymemory-plan-") as work:
            try:
                skies = boot_per_profile(args.link, planes=args.planes, sats=args.sats, work_dir=Path(work),
                                         stack=stack, log=log)
            except (LaunchFailed, OSError) as exc:
                raise ValueError(f"could not launch a constellation to measure --link ({exc}); pass --manifest of "
                                 "a constellation launched with that profile, or --link-mbps") from None
            for profile, sky in skies:
                links.append((profile.name, measure_link(sky.manifest, profile.name, log)))
    if not links:
        raise ValueError("no link: pass --link PROFILES (measured now), --manifest of a launched constellation, "
                         "or --link-mbps RATES")
    return links


# --------------------------------------------------------------------------------------------- prefill


def _slice_spec(spec, attention: int, recurrent: int):
    """The embedded spec cut to `attention` attention and `recurrent` recurrent layers (same family, same widths)."""
    config = dict(spec.config)
    n = attention + recurrent
    if spec.family == "granitemoehybrid":
        config["layer_types"] = ["mamba"] * recurrent + ["attention"] * attention
    elif spec.family == "bamba":
        config["attn_layer_indices"] = list(range(recurrent, n))
    elif recurrent:
        raise ValueError(f"{spec.name}: cannot slice a {spec.family} model's recurrent layers")
    config["num_hidden_layers"] = n
    return dataclasses.replace(spec, config=config, name=f"{spec.name}-slice{attention}a{recurrent}r")


def measure_sliced(spec_name: str, config, lengths, *, block_tokens: int, kv_format: str, repeats: int, device,
                   dtype, log=print):
    """Prefill timed on slices of the configuration, scaled to its depth: T(a attention, r recurrent layers)
    = c0 + a*t_attn + r*t_rec (c0: embedding, head, what is not a layer), solved per length from the slices
    (1), (2) attention layers for a dense model, (1,1), (1,2), (2,1) for a hybrid (transformers' hybrids want an
    attention layer in every model). KV bytes from the full layout."""
    import gc

    import numpy as np

    from skymemory.kv.decide.disaggregation import PrefillProfile
    from skymemory.kv.decide.throughput import prefill_seconds, prefix_fetch_bytes
    from skymemory.kv.format.groups import LINEAR, CacheLayout
    from skymemory.kv.model import models

    if spec_name not in models.EMBEDDED:
        raise ValueError(f"{spec_name}: only an embedded model can be timed on a slice")
    spec = models.EMBEDDED[spec_name]
    layout = CacheLayout.of_config(config)
    n_rec = sum(1 for kind, _ in layout.kinds if kind == LINEAR)
    n_attn = len(layout.kinds) - n_rec
    slices = [(1, 0), (2, 0)] if n_rec == 0 else [(1, 1), (1, 2), (2, 1)]
    times = {}
    for a, r in slices:
        model = models.build_spec(_slice_spec(spec, a, r)).to(device=device, dtype=dtype)
        times[(a, r)] = [prefill_seconds(model, n, repeats=repeats) for n in lengths]
        log(f"  slice of {a} attention + {r} recurrent layers: " +
            ", ".join(f"{n} tokens {s:.3f} s" for n, s in zip(lengths, times[(a, r)])))
        del model
        gc.collect()
    points = []
    for i, n in enumerate(lengths):
        design = np.array([[1.0, a, r] for a, r in slices])[:, : 2 if n_rec == 0 else 3]
        coef = np.linalg.solve(design, np.array([times[s][i] for s in slices]))
        per_layer = np.maximum(coef[1:], 0.0)  # a noisy difference is no negative cost
        full = max(coef[0], 0.0) + per_layer[0] * n_attn + (per_layer[1] * n_rec if n_rec else 0.0)
        if full <= 0:  # all noise: scale the deepest slice in proportion
            deepest = max(slices, key=sum)
            full = times[deepest][i] * len(layout.kinds) / sum(deepest)
        points.append((n, prefix_fetch_bytes(layout, n, block_tokens, kv_format), float(full)))
    depth = f"{n_attn} attention" + (f" + {n_rec} recurrent" if n_rec else "")
    sizes = sorted({sum(s) for s in slices})
    note = (f"prefill measured on {len(slices)} slices of {sizes[0]}-{sizes[-1]} layers, scaled to "
            f"{len(layout.kinds)} layers ({depth})")
    return PrefillProfile(spec_name, str(device), kv_format, block_tokens, tuple(points), note), layout


def _measure(args, spec: str, log=print):
    """(profile, CacheLayout) of one model on this device: the whole model, or slices of it."""
    from skymemory.cli.model import _layout
    from skymemory.kv.decide.disaggregation import PrefillProfile
    from skymemory.kv.model import models
    from skymemory.kv.model.device import pick_device, pick_dtype

    spec, config = models.load_config(spec)
    lengths = sorted(set(args.lengths))
    if len(lengths) < 2:
        raise ValueError("--lengths: at least two prompt lengths are needed to fit the prefill time")
    device = pick_device(args.device)
    too_big = spec in models.EMBEDDED and models.EMBEDDED[spec].on_device_only and device.type != "cuda"
    if args.slice or too_big:
        log(f"{spec}: " + ("built on a CUDA device only" if too_big else "--slice") +
            f": prefill timed on slices on {device}")
        return measure_sliced(spec, config, lengths, block_tokens=args.block_tokens, kv_format=args.kv,
                              repeats=args.repeats, device=device, dtype=pick_dtype(device, args.dtype), log=log)
    args.no_measure = False
    model, layout, why = _layout(args, spec, config)
    if model is None:
        raise ValueError(f"{spec}: prefill not measured ({why})")
    profile = PrefillProfile.measure(model, layout, lengths, block_tokens=args.block_tokens, kv_format=args.kv,
                                     model_name=spec, repeats=args.repeats)
    note = f"prefill measured on the whole model ({len(layout.kinds)} layers) on {model.device}, {model.dtype}"
    return dataclasses.replace(profile, note=note), layout


def _profiles_to_plan(args, log=print):
    from skymemory.kv.decide.disaggregation import PrefillProfile

    if args.profile:
        return [PrefillProfile.load(path.strip()) for path in args.profile.split(",") if path.strip()]
    specs = [s.strip() for s in args.model.split(",") if s.strip()]
    if not specs:
        raise ValueError("--model: no model given")
    if args.save_profile and len(specs) > 1 and "{model}" not in args.save_profile:
        raise ValueError("--save-profile: put '{model}' in the file name to save several models' profiles")
    profiles = []
    for spec in specs:
        profile, _ = _measure(args, spec, log)
        if args.save_profile:
            path = args.save_profile.replace("{model}", profile.model.replace("/", "_"))
            profile.save(path)
            log(f"profile saved to {path}")
        profiles.append(profile)
    return profiles


# --------------------------------------------------------------------------------------------- output


def _gbit(bps: float) -> float:
    return bps * 8 / 1e9


def _print_profile(profile, lengths, log=print) -> None:
    log(f"model {profile.model}: {profile.note or 'prefill measured'} ({profile.device}); KV {profile.kv_format}, "
        f"blocks of {profile.block_tokens} tokens")
    log(f"  {'tokens':>8} {'KV MB':>9} {'prefill s':>10} {'Φkv Gbit/s':>11}")
    for tokens, kv, seconds in profile.points:
        log(f"  {tokens:8,d} {kv / 1e6:9.2f} {seconds:10.3f} {_gbit(kv / seconds):11.4f}")
    a, b, c = profile.fit
    log(f"  fit T_prefill(l) = {a:.3g} + {b:.3g} l + {c:.3g} l^2 s; at the workload's mean "
        f"({lengths.mean():,.0f} tokens) {profile.prefill_s(lengths.mean()):.2f} s, Φkv "
        f"{_gbit(profile.phi_Bps(lengths.mean())):.4f} Gbit/s (past the measured lengths: extrapolated)")


def _print_plans(name: str, link_Bps: float, best, single, naive, log=print) -> None:
    log(f"  link {name}: {link_Bps / 1e6:.2f} MB/s ({_gbit(link_Bps):.4f} Gbit/s)")
    log(f"    {'plan':14} {'t tokens':>9} {'p':>6} {'l_long':>8} {'l_short':>8} {'N_p':>6} {'N_d':>6} "
        f"{'Λmax req/s':>11} {'egress Gbit/s':>14}  binds")
    for label, plan in (("optimal", best), ("single site", single), ("all offloaded", naive)):
        log(f"    {label:14} {plan.threshold:9,.0f} {plan.share_offloaded:6.3f} {plan.long_tokens:8,.0f} "
            f"{plan.short_tokens:8,.0f} {plan.np:6.2f} {plan.nd:6.2f} {plan.throughput:11.4g} "
            f"{_gbit(plan.egress_Bps):14.4g}  {plan.bound}")
    log(f"    gain: {(best.throughput / single.throughput - 1) * 100:+.1f} % vs single site, "
        f"{(best.throughput / naive.throughput - 1) * 100:+.1f} % vs all offloaded")


def _plan(args) -> int:
    from skymemory.kv.decide import disaggregation as d

    lengths = d.PAPER if args.max_tokens is None else d.PAPER.scaled_to(args.max_tokens)
    deployment = d.Deployment(args.prefill_instances, args.pd_instances, args.decode_batch, args.decode_step_s,
                              args.output_tokens)
    links = _links(args)  # first: a constellation launched to measure is up for seconds, not for the prefills
    profiles = _profiles_to_plan(args)
    print(f"workload: truncated log-normal μ {lengths.mu:.2f}, σ {lengths.sigma:.2f} on [{lengths.low:,d}, "
          f"{lengths.high:,d}] (mean {lengths.mean():,.0f} tokens); N_prfaas {deployment.prefill_instances:g}, "
          f"N_p + N_d {deployment.pd_instances:g}, BS_max {deployment.decode_batch}, T_decode "
          f"{deployment.decode_step_s:g} s, L_out {deployment.output_tokens}")
    for profile in profiles:
        _print_profile(profile, lengths)
        single = d.single_site(profile, lengths, deployment)
        for name, rate in links:
            _print_plans(name, rate, d.plan(profile, lengths, rate, deployment), single,
                         d.all_offloaded(profile, lengths, rate, deployment))
    return 0
