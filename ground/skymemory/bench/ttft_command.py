"""`skymemory bench ttft` and the body of `skymemory demo`: options -> TTFTConfig -> run -> outputs.

`main(args, title=...)` turns parsed options into a TTFTConfig (exit 2 on a bad
combination) and `execute` runs it (bench.ttft) while printing progress on
stderr, then writes JSON, markdown and PNG plots under --out and prints the
table; the command line that produced the run is kept in the result and
printed at the top of the markdown, so a result file says how to regenerate it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from skymemory.store.routes import DEFAULT_ROUTE

from . import options, report
from .ttft import DEVICE_RAM, DEVICE_RAM_NAMES, STREAMING_CHOICES, TTFTConfig, run, seal_table


def config_from_args(args: argparse.Namespace):
    cfg = TTFTConfig(
        model=args.model, device=args.device, dtype=args.dtype, quantize=args.quantize, kv_dtype=args.kv_dtype,
        prefix_tokens=args.prefix_tokens, suffix_tokens=args.suffix_tokens, suffixes=args.suffixes,
        repeats=args.repeats, gen_tokens=args.gen_tokens, gen_repeats=args.gen_repeats,
        profiles=args.profiles, planes=args.planes, sats=args.sats, servers=args.servers, chunk_size=args.chunk_size,
        manifest=getattr(args, "manifest", None), node=args.node, work_dir=args.work_dir,
        streaming=getattr(args, "streaming", "off"), events=getattr(args, "events", None),
        routes=getattr(args, "route", (DEFAULT_ROUTE,)), seal=getattr(args, "seal", ("on",)),
    )
    if cfg.manifest is None and cfg.servers > cfg.planes * cfg.sats:
        raise ValueError(f"--servers {cfg.servers} is more than the {cfg.planes}x{cfg.sats} satellites")
    return cfg


def main(args: argparse.Namespace, *, title: str) -> int:
    """A command's body: the options as a TTFTConfig (exit 2 on a bad combination), then execute."""
    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        print(f"{title}: {exc}", file=sys.stderr)
        return 2
    return execute(cfg, args.out, title=title)


def execute(cfg, out_dir: Path, *, title: str) -> int:
    """Run the benchmark with progress on stderr; the table on stdout; outputs under out_dir."""
    import torch  # noqa: F401 - first: without the kv extra, that is the one line to read (cli.main names it)

    from skymemory.kv.model.device import pick_device

    try:  # before any satellite boots: `--device cuda` on a CPU host is refused at once, not after the boot
        pick_device(cfg.device)
    except ValueError as exc:
        print(f"{title}: {exc}", file=sys.stderr)
        return 2

    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:7.1f} s] {message}", file=sys.stderr, flush=True)

    if cfg.manifest is None:
        from skymemory.launcher.nodes import find_node

        try:
            find_node(cfg.node)
        except FileNotFoundError as exc:
            print(f"{title}: {exc}", file=sys.stderr)
            return 2

    def stop_on_signal(signum, _frame):  # SIGTERM / SIGHUP end the run like Ctrl-C: through the teardown
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop_on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        cfg.check()
        result = run(cfg, log)
    except KeyboardInterrupt:
        log("interrupted; the constellation has been torn down")
        return 130
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        log(f"failed: {exc}")
        print(f"{title}: {exc}", file=sys.stderr)
        return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    result["command"] = report.command_line()
    paths = report.write_all(result, out_dir)
    log(f"done in {result['wall_s']:.0f} s; constellation torn down")
    print(report.markdown(result))
    sealed = seal_table(result.get("seal_comparison") or [])
    if sealed:  # --seal on,off: the closing comparison, under the tables in the markdown file too
        with open(paths["markdown"], "a", encoding="utf-8") as f:
            f.write("\n" + sealed + "\n")
        print(sealed + "\n")
    print("outputs: " + ", ".join(str(p) for p in paths.values()))
    bad = [r for r in result["summary"] if r["mode"] != "nocache" and not (r["tokens_equal"] and r["first_token_equal"])]
    short = [r for r in result["summary"] if r["mode"] != "nocache" and r["cached_tokens"] != [r["expected_cached_tokens"]]]
    if bad:
        # device-ram itself, and modes generating its tokens, differ by the two-forward arithmetic (report.tokens_note)
        split = [r for r in bad if r["mode"] in DEVICE_RAM_NAMES
                 or (r.get("tokens_compared_device_ram") and r["tokens_equal_device_ram"])]
        print(f"{title}: generated tokens differ from the no-cache run in {len(bad)} cell(s)"
              + (f", {len(split)} of them as {DEVICE_RAM}'s do (numerical: see the note under the table)"
                 if split else ""), file=sys.stderr)
    if short:
        print(f"{title}: the cache did not cover the expected prefix in {len(short)} cell(s)", file=sys.stderr)
    return 0


def register(subparsers) -> None:
    """`skymemory bench ttft` (found by skymemory/cli/bench.py)."""
    parser = subparsers.add_parser(
        "ttft", help="time to first token: no cache vs SkyMemory vs local RAM, per prefix length and link",
        description="Boots one constellation per link profile (or attaches to one with --manifest), runs "
                    "prompts sharing a long prefix with different suffixes, and measures TTFT and the "
                    "30-token generation time with no cache, with the KV from the constellation, and with "
                    "the same KV from local RAM. Writes JSON, markdown and PNG plots under --out.")
    options.add_workload_args(parser, prefixes=(256, 512, 1024), repeats=3, gen_repeats=1, profiles="none,laser,rf")
    options.add_model_args(parser, "embedded-tinyllama")
    options.add_constellation_args(parser, 19, 5)
    parser.add_argument("--manifest", type=options.existing_file, default=None,
                        help="attach to a running constellation (its link profile is read from the manifest) "
                             "instead of booting one per --profiles")
    parser.add_argument("--streaming", choices=STREAMING_CHOICES, default="off",
                        help="constellation modes: fetch the prefix then compute (off, the default), stream it "
                             "layer by layer into the forward pass (on), or both side by side")
    parser.add_argument("--route", type=options.route_list, default=(DEFAULT_ROUTE,),
                        help="how the ground reaches the servers: direct (each over its own ground link), relay "
                             "(up the overhead satellite, then over the ISLs) or auto (direct where a satellite "
                             "has a ground link, relay for the rest; the default); "
                             "comma-separated for several side by side on the same constellation (sky-<profile> "
                             "is the first, the others sky-<profile>@<route>)")
    options.add_seal_arg(parser, "each constellation mode both sealed (sky-<profile>...) and in the clear "
                                 "(sky-<profile>-unsealed...) on the same constellation, taking turns going first "
                                 "round by round, and a closing table of sealed / unsealed TTFT")
    parser.add_argument("--out", type=Path, default=Path("out/ttft"), help="output directory (default out/ttft)")
    options.add_events_arg(parser)
    parser.set_defaults(func=_main)


def _main(args) -> int:
    return main(args, title="skymemory bench ttft")
