"""`skymemory bench transfer`: block get/set goodput over the line-of-sight satellites.

For each link profile a local constellation is booted; blocks of each size are
striped over the `--servers` nearest satellites (each reached over its own
ground link, as a ground station sees every satellite in its line of sight),
stored with `put_blocks` and read back with `get_blocks` through the C fast
path, `--repeats` times. The "kv" case is one TinyLlama prefix: 8 blocks of
128 tokens, fp16 (22 layers x 2 x 4 heads x 128 x 64 x 2 bytes + 64-byte
header = 2,883,648 bytes each, 23.1 MB), read with one `get_blocks` call.

Beside it, the C-only ceiling: `build/bench_transfer` runs the very same
C transfer functions with no Python (same satellites, same sizes).

"get" reads into fresh memory (what get_block returns); "get-into" into
preallocated buffers (what a caller that keeps its buffers, e.g. the
streaming KV cache, sees): fresh memory costs a page fault per 4 KiB.
The C ceiling reuses its buffer, like get-into.

Goodput = payload bytes / wall time of the call, in MB/s (10^6 bytes);
packets/s counts datagrams sent and received by the ground during the call.

`--routes direct,relay` measures each case over each route on the same constellation
(skymemory.store.routes): direct = every request up the server's own ground link, relay =
every request up the overhead satellite's ground link and on over the ISLs; every row
carries its `route`, and the closing table gives relay goodput as a share of direct. The
C-only ceiling is measured on the direct route only (bench_transfer has no relay).
`--placement rotation-hop` stripes over the paper's rotation-hop servers around the
overhead satellite (up to a few ISL hops away) instead of the nearest ones.

`--auth on,off` (the default) measures each profile twice in the same run: on a
constellation launched with its key (every request signed, every reply checked,
in C on both sides) and on one launched --insecure, both up at once; the closing
table gives each row's goodput with authentication as a share of the goodput
without. `--rounds N` measures every case N times, alternating between the two
(on, off, off, on, ...) so that a shared machine's drifting load hits both alike,
and reports the median over all rounds' runs.

`--seal on,off` measures each case with content sealed (the default and what every store does:
every chunk AES-128-GCM under the ground's key, sealed and opened in C, skymemory.protocol.seal)
and in the clear, on the same constellation, alternating by round like --auth; the closing
table gives sealed goodput as a share of unsealed, and the run prints `openssl speed -evp
aes-128-gcm` on this CPU (one core) as the ceiling sealing cannot beat. The C-only ceiling
(bench_transfer) moves unsealed chunks: it is measured with sealing off only.

`--parity 0,2` measures each case uncoded and in coded stripes of servers - 2 data + 2 parity chunks
(skymemory.protocol.stripes), alternating by round; the closing table gives coded goodput (of the data's
bytes: a coded set sends the parity too) as a share of uncoded. The C-only ceiling is uncoded.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import skymemory

from skymemory.argtypes import input_file, output_dir
from skymemory.launcher import keys
from skymemory.orbit import placement
from skymemory.protocol.auth import signer_for_manifest
from skymemory.protocol.stripes import MAX_STRIPE_CHUNKS
from skymemory.store.constellation import check_parity
from skymemory.store.routes import DEFAULT_ROUTE, via_for_route

from .options import positive_int, route_list
from .profiles import parse_profiles, profiles_arg
from .report import command_line, regenerate

KV_BLOCK_BYTES = 64 + 22 * 2 * 4 * 128 * 64 * 2  # TinyLlama-1.1B, 128 tokens, fp16 (kv/format/codec.py layout)
KV_BLOCKS = 8
REPO = Path(skymemory.__file__).resolve().parents[2]


def _int_list(text: str, lo: int, hi: int, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: comma-separated integers expected, got {text!r}") from None
    if not values or any(not lo <= v <= hi for v in values):
        raise argparse.ArgumentTypeError(f"{what}: every value must be in {lo}..{hi}, got {text!r}")
    return values


def bench_binary(explicit: str | None) -> Path | None:
    path = Path(explicit or os.environ.get("SKYMEM_BENCH_TRANSFER", REPO / "build" / "bench_transfer"))
    return path if path.is_file() and os.access(path, os.X_OK) else None


PLACEMENTS = ("nearest", "rotation-hop")


def _row(profile, auth, seal, parity, route, chunk, case, op, path, n_bytes, times, packets, retransmits,
         window) -> dict:
    med = statistics.median(times)
    return {"profile": profile, "auth": auth, "seal": seal, "parity": parity, "route": route, "chunk_bytes": chunk,
            "case": case,
            "op": op, "path": path,
            "bytes": n_bytes,
            "median_s": med, "min_s": min(times), "goodput_MBps": n_bytes / med / 1e6,
            "packets_per_s": packets / med if med > 0 else 0.0, "retransmits": retransmits, "runs": len(times),
            "window_bytes": window, "times_s": list(times), "packets": packets}


def merge_rounds(rows: list[dict]) -> list[dict]:
    """One row per measurement (ROW_KEY) from the rows of every round: the median over all their runs."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in ROW_KEY), []).append(r)
    merged = []
    for key, same in groups.items():
        if len(same) == 1:
            merged.append(same[0])
            continue
        times = [t for r in same for t in r["times_s"]]
        merged.append(_row(*key, same[0]["bytes"], times, statistics.median(r["packets"] for r in same),
                           sum(r["retransmits"] for r in same), same[0]["window_bytes"]))
    return merged


def measure_python(store, case: str, blocks: list[bytes], repeats: int) -> list[tuple]:
    """Set `blocks` `repeats` times (each a fresh store of the same blocks, over the last), then get them as often
    (one fast-path call for all sets; one for all gets)."""
    hashes = [hashlib.sha256(b).digest() for b in blocks]
    total = sum(len(b) for b in blocks)
    set_times, set_retx = [], 0
    for _ in range(repeats):
        started = time.perf_counter()
        records = store.put_blocks(list(zip(hashes, blocks)))
        set_times.append(time.perf_counter() - started)
        set_retx += store.last_transfer.retransmits
    t = store.last_transfer
    results = [("set", total, set_times, t.packets_rx + t.packets_tx, set_retx, t.window_bytes)]
    buffers = [bytearray(len(b)) for b in blocks]
    for op, bufs in (("get", None), ("get-into", buffers)):  # fresh memory / preallocated buffers
        get_times, get_packets, get_retx = [], 0, 0
        for _ in range(repeats):
            started = time.perf_counter()
            got = store.get_blocks(records, bufs)
            get_times.append(time.perf_counter() - started)
            if any(g != b for g, b in zip(got, blocks)):
                raise RuntimeError(f"{case}: data read back differs from what was stored")
            get_packets = store.last_transfer.packets_rx + store.last_transfer.packets_tx
            get_retx += store.last_transfer.retransmits
        results.append((op, total, get_times, get_packets, get_retx, store.last_transfer.window_bytes))
    for r in records:
        store.evict_block(r)
    return results


def measure_c(binary: Path, manifest, servers, n_bytes: int, blocks: int, chunk: int, repeats: int,
              set_window: int, get_window: int) -> list[tuple]:
    """The same transfer from C alone, with the windows the Python path used (and the key, when keyed)."""
    addresses = manifest.ground_addresses()
    # the folder of the satellites' own key files, which the ground keeps beside its own (launcher.keys)
    key_dir = keys.satellite_key_file(manifest.auth_key_file, 0, 0).parent if manifest.auth_key_file else None
    args = [str(binary)] + (["--auth-keys", str(key_dir)] if key_dir else [])
    for s in servers:
        host, port = addresses[s]
        args += ["--server", f"{s[0]},{s[1]},{host},{port}"]
    args += ["--bytes", str(n_bytes), "--blocks", str(blocks), "--chunk-bytes", str(chunk),
             "--repeats", str(repeats), "--window-bytes", str(set_window), "--get-window-bytes", str(get_window)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"bench_transfer failed ({r.returncode}): {r.stderr.strip()}")
    out = json.loads(r.stdout)
    total = n_bytes * blocks
    return [("set", total, [out["set_s"]], out["set_packets"], 0, set_window),
            ("get", total, out["get_s"], out["get_packets"], out["retransmits"], get_window)]


def pick_servers(manifest, n: int, how: str) -> list[tuple[int, int]]:
    """The n satellites a block is striped over: the nearest to the ground host, or the
    rotation-hop servers around the overhead satellite (orbit.placement)."""
    c = manifest.constellation()
    if how == "nearest":
        return c.nearest(n)
    placement.check_fits(how, n, manifest.planes, manifest.sats)
    centre = c.overhead()
    return [placement.satellite_at(centre, off, manifest.planes, manifest.sats) for off in placement.offsets(how, n)]


def measure_route(manifest, servers, route: str, chunk: int, cases, repeats: int, binary: Path | None,
                  tags: tuple[str, str, str, int], log=print) -> list[dict]:
    """Every case over one route (store.routes) with one chunk size: the Python fast path, and the
    C-only ceiling where the route goes up each server's own ground link (bench_transfer has no relay)
    and content travels unsealed and uncoded. tags = (profile, auth, seal, parity)."""
    from skymemory.protocol.seal import content_keys_for_manifest
    from skymemory.store.constellation import ConstellationBlockStore

    rows: list[dict] = []
    via = via_for_route(route, manifest)
    keys = content_keys_for_manifest(manifest) if tags[2] == "on" else None
    with ConstellationBlockStore(manifest.ground_addresses(), servers, chunk_bytes=chunk,
                                 mission_ms=manifest.constellation().mission_ms,
                                 via=via, bind_host=manifest.ground_host, content_keys=keys,
                                 client_options={"signer": signer_for_manifest(manifest)}, parity=tags[3]) as store:
        for case, blocks in cases:
            windows = {}
            for op, *measured in measure_python(store, case, blocks, repeats):
                rows.append(_row(*tags, route, chunk, case, op, "python+C", *measured))
                windows[op] = measured[-1]
                log(_line(rows[-1]))
            if binary is not None and via is None and keys is None and not tags[3]:  # direct (or auto where
                # every server has its ground link), unsealed, uncoded
                for op, *measured in measure_c(binary, manifest, servers, len(blocks[0]), len(blocks), chunk,
                                               repeats, windows["set"], windows["get"]):
                    rows.append(_row(*tags, route, chunk, case, op, "C only", *measured))
                    log(_line(rows[-1]))
    return rows


def run(args, log=print) -> list[dict]:
    from .launch import LocalConstellation, free_port_offset

    rows: list[dict] = []
    binary = None if args.no_c_ceiling else bench_binary(args.bench_binary)
    if not args.no_c_ceiling and binary is None:
        log("note: build/bench_transfer not found (cmake --build build --target bench_transfer); no C ceiling")
    # the constellations' run directories: temporary (the results go to --out, the nodes' logs do not)
    work = tempfile.TemporaryDirectory(prefix="skymemory-bench-transfer-")
    cases = [(f"{mb}MB", [os.urandom(mb * 1_000_000)]) for mb in args.sizes_mb]
    if not args.no_kv:
        cases.insert(0, (f"kv-{KV_BLOCKS}x{KV_BLOCK_BYTES}", [os.urandom(KV_BLOCK_BYTES) for _ in range(KV_BLOCKS)]))
    for profile in args.profiles:
        # one constellation per authentication mode, all up at once: the rounds alternate between them
        # (on, off, then off, on, ...), so a machine whose load drifts loads both alike
        with contextlib.ExitStack() as stack:
            manifests = {}
            for auth in args.auth:
                n = args.planes * args.sats
                sky = LocalConstellation(planes=args.planes, sats=args.sats, profile=profile,
                                         run_dir=Path(work.name) / f"sky-{profile.name}-auth-{auth}",
                                         port_offset=free_port_offset(n), node=args.node,
                                         chunk_size=max(args.chunk_sizes),
                                         memory_budget=args.memory_budget_mb * 1024 * 1024, insecure=auth == "off")
                manifests[auth] = stack.enter_context(sky).manifest
            for round_no in range(args.rounds):
                for auth in (args.auth if round_no % 2 == 0 else args.auth[::-1]):
                    manifest = manifests[auth]
                    servers = pick_servers(manifest, args.servers, args.placement)
                    overhead = manifest.constellation().overhead()
                    hops = [manifest.constellation().hops(overhead, s) for s in servers]
                    log(f"profile {profile.name} ({profile.description}), authentication {auth}, round "
                        f"{round_no + 1}/{args.rounds}: {args.planes}x{args.sats} satellites, servers {servers} "
                        f"({args.placement}; 0..{max(hops)} ISL hops from the overhead satellite {overhead})")
                    for chunk in args.chunk_sizes:
                        for route in args.routes:
                            for seal in (args.seal if round_no % 2 == 0 else args.seal[::-1]):
                                for parity in (args.parity if round_no % 2 == 0 else args.parity[::-1]):
                                    rows += measure_route(manifest, servers, route, chunk, cases, args.repeats,
                                                          binary, (profile.name, auth, seal, parity), log)
    return merge_rounds(rows)


# what one measurement is of
ROW_KEY = ("profile", "auth", "seal", "parity", "route", "chunk_bytes", "case", "op", "path")


def _pairs(rows: list[dict], field: str, base: str, other: str):
    """(row, its twin) for every row whose `field` is `other`: the twin is the same measurement with `base`."""
    same = [k for k in ROW_KEY if k != field]
    twins = {tuple(r[k] for k in same): r for r in rows if r[field] == base}
    for r in rows:
        twin = twins.get(tuple(r[k] for k in same))
        if r[field] == other and twin is not None:
            yield r, twin


def _table(header: str, align: str, lines: list[str]) -> str:
    return "\n".join([header, align, *lines]) if lines else ""


def relay_share(rows: list[dict]) -> str:
    """Each relayed measurement beside the same one direct (same run, same constellation): relay / direct."""
    return _table("| profile | auth | chunk B | case | op | direct MB/s | relay MB/s | relay retransmits | relay / direct |",
                  "| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: |",
                  [f"| {r['profile']} | {r['auth']} | {r['chunk_bytes']} | {r['case']} | {r['op']} | "
                   f"{d['goodput_MBps']:.1f} | {r['goodput_MBps']:.1f} | {r['retransmits']} | "
                   f"{r['goodput_MBps'] / d['goodput_MBps']:.2f}x |" for r, d in _pairs(rows, "route", "direct", "relay")])


def auth_cost(rows: list[dict]) -> str:
    """Each measurement with authentication on beside the same one off (same run): goodput on / off."""
    return _table("| profile | route | chunk B | case | op | path | auth off MB/s | auth on MB/s | on / off |",
                  "| --- | --- | ---: | --- | --- | --- | ---: | ---: | ---: |",
                  [f"| {r['profile']} | {r['route']} | {r['chunk_bytes']} | {r['case']} | {r['op']} | {r['path']} | "
                   f"{o['goodput_MBps']:.1f} | {r['goodput_MBps']:.1f} | "
                   f"{r['goodput_MBps'] / o['goodput_MBps'] * 100:.1f} % |" for r, o in _pairs(rows, "auth", "off", "on")])


def seal_cost(rows: list[dict]) -> str:
    """Each measurement with content sealed beside the same one in the clear (same run): goodput sealed / not."""
    return _table("| profile | auth | route | chunk B | case | op | unsealed MB/s | sealed MB/s | sealed / unsealed |",
                  "| --- | --- | --- | ---: | --- | --- | ---: | ---: | ---: |",
                  [f"| {r['profile']} | {r['auth']} | {r['route']} | {r['chunk_bytes']} | {r['case']} | {r['op']} | "
                   f"{o['goodput_MBps']:.1f} | {r['goodput_MBps']:.1f} | "
                   f"{r['goodput_MBps'] / o['goodput_MBps'] * 100:.1f} % |" for r, o in _pairs(rows, "seal", "off", "on")])


def parity_cost(rows: list[dict]) -> str:
    """Each coded measurement beside the same one uncoded (same run): goodput coded / uncoded (of the data's bytes:
    a coded set also sends the parity)."""
    coded = sorted({r["parity"] for r in rows if r["parity"]})
    lines = []
    for m in coded:
        lines += [f"| {r['profile']} | {r['auth']} | {r['seal']} | {r['chunk_bytes']} | {r['case']} | {r['op']} | "
                  f"{m} | {o['goodput_MBps']:.1f} | {r['goodput_MBps']:.1f} | "
                  f"{r['goodput_MBps'] / o['goodput_MBps'] * 100:.1f} % |" for r, o in _pairs(rows, "parity", 0, m)]
    return _table("| profile | auth | seal | chunk B | case | op | parity | uncoded MB/s | coded MB/s | "
                  "coded / uncoded |",
                  "| --- | --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: |", lines)


def openssl_speed(log=print) -> str:
    """`openssl speed -evp aes-128-gcm` on one core: the ceiling sealing cannot beat (its last lines)."""
    try:
        r = subprocess.run(["openssl", "speed", "-seconds", "1", "-evp", "aes-128-gcm"], capture_output=True,
                           text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(openssl speed could not run: {exc})"
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()][-2:]
    return "\n".join(lines) if r.returncode == 0 and lines else f"(openssl speed failed: {r.stderr.strip()[:200]})"


def _line(r: dict) -> str:
    return (f"  {r['profile']:6s} auth {r['auth']:3s} seal {r['seal']:3s} parity {r['parity']} {r['route']:6s} "
            f"chunk {r['chunk_bytes']:6d}  "
            f"{r['case']:16s} {r['op']:8s} "
            f"{r['path']:8s} "
            f"{r['goodput_MBps']:8.1f} MB/s  {r['packets_per_s']:9.0f} pkt/s  median {r['median_s'] * 1000:8.2f} ms"
            f"  retx {r['retransmits']}  window {r['window_bytes'] / 2**20:.1f} MiB")


def markdown(rows: list[dict]) -> str:
    lines = ["| profile | auth | seal | parity | route | chunk B | case | op | path | window MiB | goodput MB/s | "
             "packets/s | median ms | retransmits |",
             "| --- | --- | --- | ---: | --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['profile']} | {r['auth']} | {r['seal']} | {r['parity']} | {r['route']} | "
                     f"{r['chunk_bytes']} | {r['case']} | "
                     f"{r['op']} | {r['path']} | "
                     f"{r.get('window_bytes', 0) / 2**20:.1f} | "
                     f"{r['goodput_MBps']:.1f} | {r['packets_per_s']:.0f} | {r['median_s'] * 1000:.2f} | "
                     f"{r['retransmits']} |")
    return "\n".join(lines)


def register(subparsers) -> None:
    p = subparsers.add_parser("transfer", help="block get/set goodput over the line-of-sight satellites",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles", type=profiles_arg, default="none,laser,rf",
                   help="link profiles, comma-separated (none, laser, rf); default all three")
    p.add_argument("--sizes-mb", type=lambda t: _int_list(t, 1, 256, "--sizes-mb"), default=[1, 4, 16, 64],
                   help="single-block sizes in MB (10^6 bytes), default 1,4,16,64")
    p.add_argument("--chunk-sizes", type=lambda t: _int_list(t, 256, 60000, "--chunk-sizes"),
                   default=[6144, 60000], help="chunk data sizes to compare, default 6144,60000")
    p.add_argument("--no-kv", action="store_true", help="skip the 8-block TinyLlama KV case")
    p.add_argument("--servers", type=positive_int, default=10, help="satellites a block is striped over (10)")
    p.add_argument("--placement", choices=PLACEMENTS, default="nearest",
                   help="which satellites: the --servers nearest the ground host (default), or the rotation-hop "
                        "servers around the overhead satellite")
    p.add_argument("--routes", type=route_list, default=(DEFAULT_ROUTE,),
                   help=f"direct, relay, auto, comma-separated (default {DEFAULT_ROUTE}): each case is measured over each "
                        "route on the same constellation; with direct and relay, a closing table compares them")
    p.add_argument("--planes", type=positive_int, default=5)
    p.add_argument("--sats", type=positive_int, default=5)
    p.add_argument("--repeats", type=positive_int, default=5, help="sets and gets per case per round (median reported)")
    p.add_argument("--rounds", type=positive_int, default=1,
                   help="times every case is measured (a set and --repeats gets each time), alternating between the "
                        "--auth constellations; the median over all rounds is reported")
    p.add_argument("--memory-budget-mb", type=positive_int, default=256, help="per satellite, MiB")
    p.add_argument("--node", type=input_file, default=None, help="skymem_node binary (default: SKYMEM_NODE or build/)")
    p.add_argument("--bench-binary", default=None, help="bench_transfer binary (default build/bench_transfer)")
    p.add_argument("--no-c-ceiling", action="store_true", help="skip the C-only runs")
    p.add_argument("--auth", type=_auth_modes, default=["on", "off"],
                   help="on, off or on,off (default): constellations launched with their key and/or --insecure; "
                        "with both, the closing table compares them")
    p.add_argument("--seal", type=_auth_modes, default=["on"],
                   help="on (default), off or on,off: content sealed (AES-128-GCM, as every store seals it) and/or "
                        "in the clear; with both, the closing table compares them")
    p.add_argument("--parity", type=_parity_list, default=[0],
                   help="parity chunks per coded stripe, comma-separated (default 0: uncoded; e.g. 0,2): each case "
                        "is measured with each, and with 0 and another a closing table compares them")
    p.add_argument("--out", type=output_dir, default="out/bench-transfer", help="output directory (JSON, markdown)")
    p.set_defaults(func=_main)


def _parity_list(text: str) -> list[int]:
    values = _int_list(text, 0, MAX_STRIPE_CHUNKS - 1, "--parity")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"--parity: a value given twice in {text!r}")
    return values


def _auth_modes(text: str) -> list[str]:
    """on, off or on,off (--auth and --seal)."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if not modes or any(m not in ("on", "off") for m in modes) or len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"want on, off or on,off, got {text!r}")
    return modes


def _main(args) -> int:
    if isinstance(args.profiles, str):
        args.profiles = parse_profiles(args.profiles)
    if args.servers > args.planes * args.sats:
        raise SystemExit(f"--servers {args.servers} exceeds the {args.planes * args.sats} satellites")
    for parity in args.parity:
        try:
            check_parity(parity, args.servers, say=None)
        except ValueError as exc:
            raise SystemExit(f"--parity {parity}: {exc}") from None
    if args.placement != "nearest":
        try:
            placement.check_fits(args.placement, args.servers, args.planes, args.sats)
        except ValueError as exc:
            raise SystemExit(f"--placement {args.placement}: {exc}") from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = run(args)
    (out / "transfer.json").write_text(json.dumps(rows, indent=1))
    table = markdown(rows)
    share = relay_share(rows)
    if share:
        table += "\n\nRelay through the overhead satellite, as a share of the direct goodput (same run):\n\n" + share
    cost = auth_cost(rows)
    if cost:
        table += "\n\nAuthentication on, as a share of the goodput with it off (same run):\n\n" + cost
    sealed = seal_cost(rows)
    if sealed:
        table += ("\n\nContent sealed, as a share of the goodput in the clear (same run); `openssl speed -evp "
                  "aes-128-gcm` on one core of this CPU, the ceiling:\n\n```\n" + openssl_speed() + "\n```\n\n" + sealed)
    coded = parity_cost(rows)
    if coded:
        table += "\n\nCoded stripes, as a share of the goodput uncoded (same run):\n\n" + coded
    (out / "transfer.md").write_text(regenerate(command_line()) + table + "\n")
    print(table)
    print(f"wrote {out / 'transfer.json'} and {out / 'transfer.md'}")
    return 0
