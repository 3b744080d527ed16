"""`skymemory telemetry`: decode recorded packets with ccsdspy, record HK, listen where TO_LAB sends.

decode FILE   every packet of a capture, by message ID (both apps' HK, replies, commands)
record        ask satellites for SKYMEM HK on their ground ports and append it to a file
listen        bind each satellite's telemetry address (manifest: tlm_host:tlm_port; the launcher's
              --tlm-address), optionally enable TO_LAB on cFS instances and ask for both apps' HK
              (native nodes send it only when asked); report per satellite
"""

from __future__ import annotations

import sys

from skymemory.argtypes import input_file, nonnegative_int, output_file, positive_float
from skymemory.cli._common import table
from skymemory.protocol import wire
from skymemory.protocol.errors import WireError

_HK_COLUMNS = ("TLM_SECONDS", "STATS_PLANE", "STATS_SAT", "STATS_CHUNKS", "STATS_BYTES_USED", "STATS_CMD_COUNT",
               "STATS_ERR_COUNT", "STATS_RX_PACKETS", "STATS_TX_PACKETS", "STATS_FORWARDED", "STATS_DROPPED")
_REPLY_COLUMNS = ("CCSDS_SEQUENCE_COUNT", "ROUTE_SRC_PLANE", "ROUTE_SRC_SAT", "ROUTE_REQUEST_ID", "ROUTE_HOPS",
                  "REPLY_KIND", "REPLY_CC", "REPLY_STATUS", "REPLY_CHUNK_ID", "REPLY_VALUE")
_CMD_COLUMNS = ("CCSDS_SEQUENCE_COUNT", "FUNCTION_CODE", "ROUTE_DST_PLANE", "ROUTE_DST_SAT", "ROUTE_VIA_PLANE",
                "ROUTE_VIA_SAT", "ROUTE_REQUEST_ID")
_ROUTER_COLUMNS = ("TLM_SECONDS", "ROUTER_PLANE", "ROUTER_SAT", "ROUTER_CMD_COUNT", "ROUTER_ERR_COUNT",
                   "ROUTER_RX_ISL", "ROUTER_RX_GROUND", "ROUTER_TX_ISL", "ROUTER_TX_GROUND", "ROUTER_FORWARDED",
                   "ROUTER_DELIVERED", "ROUTER_DROPPED", "ROUTER_INVALID")
COLUMNS = {wire.SKYMEM_HK_TLM_MID: _HK_COLUMNS, wire.ISL_ROUTER_HK_TLM_MID: _ROUTER_COLUMNS,
           wire.SKYMEM_REPLY_TLM_MID: _REPLY_COLUMNS, wire.SKYMEM_DATA_CMD_MID: _CMD_COLUMNS}


def register(subparsers) -> None:
    p = subparsers.add_parser("telemetry", help="decode recorded telemetry / packet captures (ccsdspy)")
    sub = p.add_subparsers(dest="telemetry_command", required=True, metavar="ACTION")
    d = sub.add_parser("decode", help="decode a file of concatenated CCSDS packets with ccsdspy")
    d.add_argument("file", type=input_file)
    d.add_argument("--limit", type=nonnegative_int, default=20, help="rows shown per message id (default 20, 0 = all)")
    d.set_defaults(func=run_decode)
    r = sub.add_parser("record", help="ask satellites for HK telemetry (SEND_HK) and append the packets to a file")
    r.add_argument("-o", "--output", type=output_file, required=True, help="file to append the HK packets to")
    r.add_argument("--sat", action="append", default=None, metavar="PLANE,SAT",
                   help="satellite to ask (repeatable; default: all)")
    r.add_argument("--timeout", type=positive_float, default=0.5, help="seconds per attempt")
    from skymemory.cli._common import add_manifest_arg

    add_manifest_arg(r)
    r.set_defaults(func=run_record)
    ln = sub.add_parser(
        "listen", help="receive both apps' housekeeping where TO_LAB (cFS) or native nodes send it",
        description="Binds every telemetry address of a launched constellation (the manifest's tlm_host:tlm_port) "
                    "and reports, per satellite, the SKYMEM and ISL_ROUTER housekeeping that arrived. cFS instances "
                    "send it through TO_LAB (--enable-output turns its output on; SCH_LAB asks once a second); "
                    "native nodes only when launched with --tlm-address, and only when asked (--request-hk): "
                    "`tools/launch_constellation.py ... --tlm-address 127.0.1.1`, then `skymemory telemetry listen "
                    "--request-hk`.")
    ln.add_argument("--duration", type=positive_float, default=10.0, help="seconds to listen (default 10)")
    ln.add_argument("--until-complete", action="store_true",
                    help="stop early once every satellite's SKYMEM and ISL_ROUTER HK arrived twice (exit 1 if not)")
    ln.add_argument("--enable-output", action="store_true",
                    help="send TO_LAB's enable-output command (with its telemetry address) to each cFS instance")
    ln.add_argument("--request-hk", action="store_true",
                    help="ask every satellite for both apps' HK once a second (else: SCH_LAB's schedule on cFS; "
                         "native nodes send none unasked)")
    ln.add_argument("-o", "--output", type=output_file, default=None,
                    help="also append every packet received to this file")
    add_manifest_arg(ln)
    ln.set_defaults(func=run_listen)


def _parse_sat(text: str, m) -> tuple[int, int]:
    try:
        p, s = (int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--sat wants PLANE,SAT, got {text!r}") from None
    m.entry(p, s)  # raises when outside the grid
    return p, s


def run_record(args) -> int:
    import asyncio

    from skymemory.cli._common import load_manifest
    from skymemory.link.client import SkyMemoryClient
    from skymemory.protocol.errors import SkyMemoryError

    try:
        m = load_manifest(args)
        sats = [_parse_sat(t, m) for t in args.sat] if args.sat else [(e.plane, e.sat) for e in m.satellites]
    except (FileNotFoundError, ValueError, KeyError) as exc:
        print(f"skymemory telemetry record: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 1

    async def collect():
        async with SkyMemoryClient(m.ground_addresses(), timeout=args.timeout, retries=2,
                                   bind=(m.ground_host, 0)) as client:
            async def one(s):
                try:
                    return (await client.housekeeping(s))[0]
                except SkyMemoryError:
                    return None
            return await asyncio.gather(*(one(s) for s in sats))

    packets = asyncio.run(collect())
    got = [p for p in packets if p is not None]
    with open(args.output, "ab") as f:
        f.write(b"".join(got))
    print(f"appended {len(got)} HK packets ({len(sats) - len(got)} satellites did not answer) to {args.output}",
          file=sys.stderr)
    return 0 if len(got) == len(sats) else 1


def run_decode(args) -> int:
    from skymemory.protocol import telemetry  # imported here: ccsdspy is slow to import for the other commands

    try:
        decoded = telemetry.decode_file(args.file)
    except FileNotFoundError:
        print(f"skymemory telemetry: no file {args.file}", file=sys.stderr)
        return 1
    except (WireError, ValueError) as exc:
        print(f"skymemory telemetry: {args.file}: {exc}", file=sys.stderr)
        return 1
    for mid, fields in decoded.items():
        name = telemetry.MID_NAMES.get(mid, "unknown")
        cols = COLUMNS.get(mid)
        if cols is None:
            print(f"{mid:#06x} {name}: {int(fields['PACKETS'][0])} packets (no ccsdspy definition)")
            continue
        n = len(fields["CCSDS_APID"])
        print(f"{mid:#06x} {name}: {n} packets")
        shown = n if args.limit == 0 else min(n, args.limit)
        rows = [tuple(c.replace("STATS_", "").replace("ROUTER_", "").replace("ROUTE_", "")
                      .replace("CCSDS_SEQUENCE_COUNT", "SEQ").lower() for c in cols)]
        rows += [tuple(int(fields[c][i]) for c in cols) for i in range(shown)]
        print(table(rows))
    return 0


def run_listen(args) -> int:
    from skymemory.cli._common import load_manifest
    from skymemory.protocol.housekeeping import APPS, HousekeepingListener

    try:
        m = load_manifest(args)
        listener = HousekeepingListener(m)
    except (FileNotFoundError, ValueError, OSError) as exc:
        print(f"skymemory telemetry listen: {exc}", file=sys.stderr)
        return 1
    with listener:
        where = ", ".join(f"{h}:{p}" for h, p in list(listener.dests)[:3]) + (" ..." if len(listener.dests) > 3 else "")
        print(f"listening on {len(listener.dests)} telemetry addresses ({where}) for up to {args.duration:g} s",
              file=sys.stderr)
        report = listener.run(args.duration, args.enable_output, args.request_hk, args.until_complete)
    if args.output:
        with open(args.output, "ab") as f:
            f.write(b"".join(report.packets))
    rows = [("plane", "sat", "telemetry to", "SKYMEM hk", "cmd/err first->last", "ISL_ROUTER hk",
             "cmd/err first->last")]
    tlm = {(e.plane, e.sat): f"{e.tlm_host}:{e.tlm_port}" for e in m.satellites}
    for (p, s), t in sorted(report.sats.items()):
        cells = []
        for app in APPS:
            first, last = t.first.get(app), t.last.get(app)
            cells += [str(t.count[app]), f"{first[0]}/{first[1]} -> {last[0]}/{last[1]}" if first else "-"]
        rows.append((str(p), str(s), tlm[(p, s)], *cells))
    print(table(rows))
    if report.other:
        print("other packets: " + ", ".join(f"{mid:#06x} x{n}" for mid, n in sorted(report.other.items())))
    got = sum(1 for t in report.sats.values() if all(t.count[a] for a in APPS))
    print(f"{len(report.packets)} packets in {report.seconds:.1f} s; both apps' housekeeping from {got} of "
          f"{len(report.sats)} satellites; command counters moved on {report.counters_moved or 'none'}; "
          f"housekeeping on another satellite's address: {report.misdelivered or 'none'}")
    native = [e for e in m.satellites if e.tlm_host and not e.command_port]
    if native and not args.request_hk and not any(report.sats[(e.plane, e.sat)].count[a] for e in native for a in APPS):
        print("skymemory telemetry listen: native nodes send housekeeping only when asked: add --request-hk",
              file=sys.stderr)
    ok = report.complete and not report.counters_moved and not report.misdelivered
    return 0 if ok or not args.until_complete else 1
