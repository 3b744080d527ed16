"""`skymemory telemetry decode FILE`: decode recorded packets (HK, replies, commands) with ccsdspy."""

from __future__ import annotations

import sys
from pathlib import Path

from skymemory import wire
from skymemory.cli._common import table
from skymemory.errors import WireError

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
    d.add_argument("file", type=Path)
    d.add_argument("--limit", type=int, default=20, help="rows shown per message id (default 20, 0 = all)")
    d.set_defaults(func=run_decode)
    r = sub.add_parser("record", help="ask satellites for HK telemetry (SEND_HK) and append the packets to a file")
    r.add_argument("-o", "--output", type=Path, required=True, help="file to append the HK packets to")
    r.add_argument("--sat", action="append", default=None, metavar="PLANE,SAT",
                   help="satellite to ask (repeatable; default: all)")
    r.add_argument("--timeout", type=float, default=0.5, help="seconds per attempt")
    from skymemory.cli._common import add_manifest_arg

    add_manifest_arg(r)
    r.set_defaults(func=run_record)


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
    from skymemory.client import SkyMemoryClient
    from skymemory.errors import SkyMemoryError

    if not args.timeout > 0:
        print("skymemory telemetry record: --timeout must be > 0", file=sys.stderr)
        return 2
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
    if args.limit < 0:
        print("skymemory telemetry: --limit must be >= 0", file=sys.stderr)
        return 2
    from skymemory import telemetry  # imported here: ccsdspy is slow to import for the other commands

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
