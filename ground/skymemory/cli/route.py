"""`skymemory route`: the router of Prefill-as-a-Service, an OpenAI-compatible front for two `vllm serve` sites.

    skymemory route --prefill http://10.0.0.2:8000 --decode http://127.0.0.1:8000 --model models/tinyllama \\
                    --manifest run/manifest.json --profile out/profile.json [--max-tokens 8192] [--port 8100]
    skymemory route ... --threshold 1024          # t pinned: no probing, no planning

Clients talk to it as to `vllm serve` (POST /v1/completions, GET /v1/models, /health). A prompt whose uncached
increment (its tokens less those whose blocks the decode site would find in orbit) is longer than t is
prefilled at the prefill site (its connector a kv_producer: it stores the prompt's blocks in orbit), then
decoded at the decode site, which loads them; a shorter one goes straight to the decode site. t is planned
(skymemory.kv.decide.disaggregation) from the measured prefill profile (`skymemory model plan --save-profile`),
the workload's lengths (the paper's, scaled to --max-tokens) and the link rate the router measures itself,
every --probe-s seconds, by timed reads of a probe block through the constellation. GET /router says t, the
link, the plan, the history of t and what was routed where. See skymemory.route.

The blocks are named as the decode site's connector names them: give its kv_connector_extra_config with
--connector-config when it sets more than the manifest (seal, kv_format, index_dir, route, servers ...), and
--dtype when the decode site runs another dtype than the model's own. Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from pathlib import Path

from skymemory.argtypes import float_range, input_file, int_range, nonnegative_int, positive_float, positive_int

DEFAULT_PORT = 8100
MAX_TOKENS = 1 << 24


def site_url(text: str) -> str:
    from skymemory.route.sites import check_url

    try:
        return check_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def model_dir(text: str) -> Path:
    path = Path(text)
    if not (path / "config.json").is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a model folder (no config.json in it)")
    return path


def connector_settings(text: str) -> dict:
    """--connector-config: a JSON object, given inline or as @FILE."""
    try:
        raw = Path(text[1:]).read_text() if text.startswith("@") else text
        value = json.loads(raw)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {text[1:]}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object (the decode site's kv_connector_extra_config)")
    return value


def register(subparsers) -> None:
    p = subparsers.add_parser("route", help="Prefill-as-a-Service router: an OpenAI front over a prefill and a "
                              "decode site", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prefill", type=site_url, required=True, metavar="URL", help="the prefill site's vllm serve")
    p.add_argument("--decode", type=site_url, required=True, metavar="URL", help="the decode site's vllm serve")
    p.add_argument("--model", type=model_dir, required=True, metavar="DIR", help="the model folder the sites serve")
    p.add_argument("--manifest", type=input_file, required=True, metavar="PATH", help="the constellation's manifest")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--profile", type=input_file, metavar="FILE",
                        help="the model's prefill profile (JSON, `skymemory model plan --save-profile`): t planned")
    source.add_argument("--threshold", type=nonnegative_int, metavar="N", help="t pinned at N tokens (no planning)")
    p.add_argument("--max-tokens", type=int_range(2, MAX_TOKENS), default=4096, metavar="N",
                   help="the workload's longest prompt: the paper's lengths scaled to it (default 4096)")
    p.add_argument("--prefill-instances", type=positive_float, default=1.0, metavar="N",
                   help="instances at the prefill site (default 1)")
    p.add_argument("--pd-instances", type=positive_float, default=1.0, metavar="N",
                   help="prefill + decode instances at the decode site (default 1)")
    p.add_argument("--decode-batch", type=positive_int, default=1, metavar="N", help="decode batch (default 1)")
    p.add_argument("--decode-step-s", type=positive_float, default=0.05, metavar="S",
                   help="seconds per decode step (default 0.05)")
    p.add_argument("--output-tokens", type=positive_int, default=64, metavar="N",
                   help="tokens a request generates (default 64)")
    p.add_argument("--probe-s", type=float_range(0.0, 3600.0, open_minimum=True), default=5.0, metavar="S",
                   help="seconds between link probes (default 5)")
    p.add_argument("--connector-config", type=connector_settings, default=None, metavar="JSON|@FILE",
                   help="the decode site's kv_connector_extra_config (its manifest is --manifest)")
    p.add_argument("--dtype", choices=("fp16", "bf16", "fp32"), default=None,
                   help="the decode site's dtype (default: the model's own)")
    p.add_argument("--station-id", type=int_range(0, 0xFFFF - 1), default=None, metavar="N",
                   help="the router's ground-station ids: N (lookups) and N + 1 (probes); default 3072")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int_range(0, 65535), default=DEFAULT_PORT,
                   help=f"port to listen on (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--site-timeout-s", type=float_range(0.0, 3600.0, open_minimum=True), default=300.0,
                   metavar="S", help="a site that sends nothing for this long is a 504 (default 300)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every routing decision")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from skymemory.kv.decide.disaggregation import Deployment
    from skymemory.route.build import ROUTER_STATION, open_router

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    if not args.verbose:
        for noisy in ("skymemory.kv", "skymemory.store", "skymemory.link", "skymemory.integrations"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    deployment = Deployment(args.prefill_instances, args.pd_instances, args.decode_batch, args.decode_step_s,
                            args.output_tokens)
    router = open_router(args.prefill, args.decode, args.model, args.manifest, connector=args.connector_config,
                         profile=args.profile, threshold=args.threshold, max_tokens=args.max_tokens,
                         deployment=deployment, probe_s=args.probe_s, dtype=args.dtype,
                         station_id=ROUTER_STATION if args.station_id is None else args.station_id,
                         host=args.host, port=args.port, site_timeout_s=args.site_timeout_s)
    try:
        router.start()
        t = router.threshold.value
        print(f"skymemory route: listening on {router.url} (prefill {args.prefill}, decode {args.decode}, "
              f"threshold {t} tokens{' pinned' if args.threshold is not None else ''})", flush=True)
        threading.Event().wait()  # until Ctrl-C
    except KeyboardInterrupt:
        print("skymemory route: stopped", file=sys.stderr)
    finally:
        router.close()
    return 0
