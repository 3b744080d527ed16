"""`skymemory put FILE`, `get KEY`, `delete KEY` and `repair KEY...`: the general key-value store (paper §3.10).

See skymemory.store.objects for where objects and their metadata live: the chunks on the
nearest satellites, the metadata on three home satellites in different planes (and hosts), so a
get succeeds while any one of them answers. --timeout is the whole operation's deadline;
--route picks the ground links (skymemory.store.routes); chunks are paced to the links'
rate (--pace-mbps, default the manifest's emulated bandwidth); a failed put evicts what it
stored and says so; -v tells progress and the reason of every failure.

Sealed by default: the data and the metadata travel and rest as AES-GCM ciphertext under the ground's
content key (the manifest's content_key_file), bound to the object's name and version, so a get
returns the bytes the ground put or fails in one line naming the satellite whose chunk or metadata did
not open (and writes nothing). --no-seal stores and reads in the clear, as before sealing (for
benchmarks that compare): a satellite could then read and rewrite the object and its SHA-256 alike.

Coded by default (--parity, default 2): the data is stored in stripes of servers - parity data chunks and
parity parity chunks, each on a satellite of its own, so a get rebuilds what up to `parity` dead, emptied,
slow or lying satellites of a stripe no longer give, and says so. `repair` stores those chunks again (a dead
satellite's on the nearest live one the object does not use, the metadata then naming it), so that as many
more may be lost; `repair --every SECONDS` keeps doing it.

Fresh: a get never returns an older version of a name than the newest this ground host (or one sharing its
ledger of versions, beside the content key file) has written or read, and a deleted name stays deleted; an
older copy is refused in one line ("stale", "deleted") naming the home satellite it came from.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from pathlib import Path

from skymemory.argtypes import float_range, int_range, output_file, positive_float, positive_int
from skymemory.cli._common import add_manifest_arg, load_manifest
from skymemory.protocol.errors import SkyMemoryError
from skymemory.protocol.stripes import DEFAULT_PARITY, MAX_STRIPE_CHUNKS
from skymemory.store.contract import BlockMiss
from skymemory.store.objects import DEFAULT_TIMEOUT_S, ObjectStore, PutFailed, parse_key
from skymemory.store.constellation import stripe_width
from skymemory.store.routes import add_route_arg

DEFAULT_SERVERS = 10  # satellites a file is striped over unless --servers says


def register(subparsers) -> None:
    p = subparsers.add_parser("put", help="store a file on the N nearest line-of-sight satellites")
    p.add_argument("file", type=Path, help="file to store")
    p.add_argument("--name", default=None, help="object name (default: the file name); key = SHA-256(name)")
    p.add_argument("--servers", type=positive_int, default=None,
                   help=f"satellites to stripe over (default {DEFAULT_SERVERS}, or every satellite of a smaller "
                        "constellation; at most the constellation's satellites)")
    p.add_argument("--parity", type=int_range(0, MAX_STRIPE_CHUNKS - 1), default=None,
                   help=f"parity chunks per coded stripe (default {DEFAULT_PARITY}: stripes of servers - parity data "
                        f"chunks, any that many of a stripe give its data back, so parity satellites may die, be slow "
                        f"or lie; 0: every chunk stored once)")
    _add_client_args(p)
    p.set_defaults(func=run_put)

    g = subparsers.add_parser("get", help="read an object back by name or 64-hex key")
    g.add_argument("key", help="object name, or its key as 64 hex digits")
    g.add_argument("-o", "--output", type=output_file, default=None,
                   help="write here (checked before the transfer; default: stdout)")
    _add_client_args(g)
    g.set_defaults(func=run_get)

    d = subparsers.add_parser("delete", help="delete an object: a sealed tombstone on its homes, its data evicted")
    d.add_argument("key", help="object name, or its key as 64 hex digits")
    _add_client_args(d)
    d.set_defaults(func=run_delete)

    r = subparsers.add_parser("repair", help="store again what dead or emptied satellites lost of coded objects")
    r.add_argument("keys", nargs="+", metavar="key", help="object names, or keys as 64 hex digits")
    r.add_argument("--every", type=positive_float, default=None, metavar="SECONDS",
                   help="keep repairing, a round every SECONDS, until interrupted (in the background: with &, or "
                        "as a service); without it, one round")
    _add_client_args(r)
    r.set_defaults(func=run_repair)


def _add_client_args(p: argparse.ArgumentParser) -> None:
    """What put and get share: how the client talks to the constellation."""
    p.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT_S,
                   help=f"deadline of the whole operation, seconds (default {DEFAULT_TIMEOUT_S:g}): it ends by "
                        "then, with the data or with a message naming the satellites that did not answer")
    add_route_arg(p)
    p.add_argument("--no-seal", action="store_true",
                   help="store / read the object in the clear, as before sealing (for benchmarks that compare): "
                        "nothing then stops a satellite from reading or rewriting it; by default data and "
                        "metadata are sealed (AES-GCM) under the ground's content key")
    p.add_argument("--pace-mbps", type=float_range(0, 1e6), default=None,
                   help="each ground link's rate, Mbit/s: chunks move no faster than the links used carry them "
                        "(default: the manifest's emulated --bandwidth-mbps, if any; 0: unpaced)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print progress, the reason of every failure, and the client's packet counters (the C "
                        "fast path's packets included)")
    p.add_argument("--capture", type=output_file, default=None,
                   help="write the packets the Python client sends and receives (requests, probes, metadata) to "
                        "this file (decode: skymemory telemetry decode); the C fast path's bulk chunk packets "
                        "bypass it and are not captured (-v counts them)")
    add_manifest_arg(p)


def run_put(args) -> int:
    if not args.file.is_file():
        why = "is not a file" if args.file.exists() else "does not exist"
        print(f"skymemory put: {args.file} {why} (any file will do; make one with e.g. "
              f"head -c 10000000 /dev/urandom > {args.file})", file=sys.stderr)
        return 2
    try:
        m = load_manifest(args)
        # the store's rule (stripe_width); asked for explicitly, it is said
        say = (lambda text: print(f"skymemory put: {text}", file=sys.stderr)) if args.servers is not None else None
        servers = stripe_width(args.servers or DEFAULT_SERVERS, m.planes * m.sats, say)
        kv = _object_store(args, m, servers)
        data = args.file.read_bytes()
        t0 = time.perf_counter()
        meta = kv.put(args.name or args.file.name, data)
    except PutFailed as exc:
        print(f"skymemory put: {exc}", file=sys.stderr)
        _counters(args, kv)
        return 1
    except (FileNotFoundError, ValueError, BlockMiss, SkyMemoryError) as exc:
        print(f"skymemory put: {exc}", file=sys.stderr)
        return 1
    dt = time.perf_counter() - t0
    coded = (f" (stripes of {len(meta['servers']) - meta['parity']} data + {meta['parity']} parity)"
             if meta["parity"] else "")
    print(f"stored {meta['name']!r}: {meta['size']} bytes in {meta['chunk_count']} chunks{coded} on "
          f"{len(meta['servers'])} satellites in {dt:.2f} s ({meta['size'] / dt / 1e6:.1f} MB/s), "
          f"{'sealed' if meta['sealed'] else 'unsealed (--no-seal)'}; "
          f"metadata on {', '.join(str(tuple(h)) for h in meta['homes'])}", file=sys.stderr)
    if meta["homes_failed"]:
        print(f"skymemory put: note: home satellite(s) {', '.join(str(tuple(h)) for h in meta['homes_failed'])} "
              f"did not take their copy of the metadata; the others did", file=sys.stderr)
    _counters(args, kv)
    print(meta["key"])
    return 0


def _object_store(args, m, n_servers: int) -> ObjectStore:
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if args.verbose else None
    return ObjectStore(m, n_servers, capture=[] if args.capture else None, route=args.route, timeout_s=args.timeout,
                       pace_mbps=args.pace_mbps, say=say, seal=not args.no_seal, parity=getattr(args, "parity", None))


def _counters(args, kv: ObjectStore) -> None:
    if args.capture and kv.capture is not None:
        args.capture.write_bytes(b"".join(kv.capture))
        bulk = kv.counters["fastpath_packets_tx"] + kv.counters["fastpath_packets_rx"]
        print(f"captured {len(kv.capture)} packets of the Python client to {args.capture}"
              + (f"; the C fast path's {bulk} bulk packets are not captured" if bulk else ""), file=sys.stderr)
    if args.verbose:
        print("client counters: " + ", ".join(f"{k} {v}" for k, v in sorted(kv.counters.items())), file=sys.stderr)


def run_repair(args) -> int:
    """Each object: its chunks on satellites that no longer answer are stored again on live ones, those on
    satellites that answer without them (restarted) on the same; exit 1 if any object could not be repaired."""
    keys = [(text, parse_key(text)) for text in args.keys]
    try:
        m = load_manifest(args)
        kv = _object_store(args, m, 1)
    except (FileNotFoundError, ValueError, SkyMemoryError) as exc:
        print(f"skymemory repair: {exc}", file=sys.stderr)
        return 1
    while True:
        failed = 0
        for text, key in keys:
            t0 = time.perf_counter()
            try:
                with _seal_failures_said_once():
                    report = kv.repair(key)
            except (BlockMiss, SkyMemoryError, ValueError, OSError) as exc:
                failed += 1
                reason = f"miss ({exc.reason}): " if isinstance(exc, BlockMiss) else ""
                print(f"skymemory repair: {text}: {reason}{exc}", file=sys.stderr)
                continue
            done = [f"{tuple(a)} -> {tuple(b)}" for a, b in report["moved"]] + \
                   [f"{tuple(s)} refilled" for s in report["refilled"]]
            print(f"{report['name']!r}: " + (f"{report['chunks']} chunks stored again ({', '.join(done)}) in "
                                             f"{time.perf_counter() - t0:.2f} s" if done else "nothing lost"),
                  file=sys.stderr, flush=True)
        if args.every is None:
            _counters(args, kv)
            return 1 if failed else 0
        try:
            time.sleep(args.every)
        except KeyboardInterrupt:
            return 1 if failed else 0


@contextlib.contextmanager
def _seal_failures_said_once():
    """The block store logs chunks that do not open (a warning, for the hosts that keep running); here the miss
    says the same, naming the satellite, in get's one line."""
    logger = logging.getLogger("skymemory.store.constellation")

    def not_a_seal_failure(record: logging.LogRecord) -> bool:
        return "do not open" not in record.getMessage()

    logger.addFilter(not_a_seal_failure)
    try:
        yield
    finally:
        logger.removeFilter(not_a_seal_failure)


def run_delete(args) -> int:
    key = parse_key(args.key)
    try:
        m = load_manifest(args)
        kv = _object_store(args, m, 1)
        report = kv.delete(key)
    except BlockMiss as exc:
        print(f"skymemory delete: miss ({exc.reason}): {exc}", file=sys.stderr)
        _counters(args, kv)
        return 1
    except (FileNotFoundError, ValueError, SkyMemoryError) as exc:
        print(f"skymemory delete: {exc}", file=sys.stderr)
        return 1
    evicted = report["evicted"] or {}
    print(f"deleted {report['name']!r}: tombstone on {', '.join(str(tuple(h)) for h in report['homes'])}; "
          f"{evicted.get('evicted', 0)} chunks of its data evicted", file=sys.stderr)
    if report["homes_failed"]:
        print(f"skymemory delete: note: home satellite(s) {', '.join(str(tuple(h)) for h in report['homes_failed'])} "
              "did not take the tombstone; this ground refuses their older copy all the same", file=sys.stderr)
    _counters(args, kv)
    return 0


def run_get(args) -> int:
    key = parse_key(args.key)
    try:
        m = load_manifest(args)
        kv = _object_store(args, m, 1)
        t0 = time.perf_counter()
        with _seal_failures_said_once():
            data, meta = kv.get(key)
    except BlockMiss as exc:
        why = str(exc)
        if exc.reason == "not-found" and key.hex() != args.key.lower():  # a name: the one typed first, then its key
            why = (f"nothing is stored under the name {args.key!r} (put stores a file under its file name, or "
                   f"--name): {why}")
        print(f"skymemory get: miss ({exc.reason}): {why}", file=sys.stderr)
        _counters(args, kv)
        return 1
    except (FileNotFoundError, ValueError, SkyMemoryError) as exc:
        print(f"skymemory get: {exc}", file=sys.stderr)
        return 1
    dt = time.perf_counter() - t0
    # written only now, once every chunk and the metadata opened: a failed get writes nothing
    if args.output:
        try:
            args.output.write_bytes(data)
        except OSError as exc:
            args.output.unlink(missing_ok=True)  # no partial file
            print(f"skymemory get: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
            return 1
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    check = ("sealed and verified (every chunk and the metadata opened under the ground's content key)"
             if meta["sealed"] else "unsealed (--no-seal): its SHA-256 matches metadata the satellites hold, which "
             "proves nothing against a satellite that rewrote both")
    print(f"read {meta['name']!r}: {len(data)} bytes from {len(meta['servers'])} satellites in {dt:.2f} s "
          f"({len(data) / dt / 1e6:.1f} MB/s), {check}; metadata from {tuple(meta['answered_by'])}",
          file=sys.stderr)
    if meta.get("seal_failed_chunks_at"):
        print(f"skymemory get: warning: chunks from satellite(s) "
              f"{', '.join(str(tuple(h)) for h in meta['seal_failed_chunks_at'])} do not open (altered on the "
              "satellite, or not this object's): not used, rebuilt from the rest of their stripes", file=sys.stderr)
    if meta.get("rebuilt"):
        print(f"skymemory get: note: {meta['rebuilt']} chunks rebuilt from parity (their satellites dead, emptied, "
              f"slow or lying): `skymemory repair {meta['name']}` stores them again", file=sys.stderr)
    if meta.get("seal_failed_at"):
        print(f"skymemory get: warning: the metadata at home satellite(s) "
              f"{', '.join(str(tuple(h)) for h in meta['seal_failed_at'])} does not open (altered on the satellite, "
              "or not this object's) and was not used", file=sys.stderr)
    _counters(args, kv)
    return 0
