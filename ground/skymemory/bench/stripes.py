"""`skymemory bench stripes`: what coding a stripe costs on this CPU, beside sealing the same bytes.

For each chunk size and stripe (k data + m parity chunks), timed in one run, one core:
  encode     the m parity chunks of a stripe (protocol.stripes.encode: Intel ISA-L), in data GB/s
  decode     the same stripe's data back with m of its data chunks lost (the most a get decodes)
  seal       AES-128-GCM over the same data bytes (cryptography's AESGCM: OpenSSL, as the ground
             seals every chunk), the cost every stored byte pays already
Each figure is the median of --rounds rounds of --repeats stripes; the last column is the share of a
sealed put's per-byte work that coding adds (encode time over seal time).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

from . import options

CHUNK_SIZES = (6144, 60000)  # the default chunk, and the largest a packet carries
STRIPES = ((8, 2), (4, 1), (8, 4))


def _rate(work, n_bytes: int, repeats: int, rounds: int) -> float:
    """Median GB/s of `work` over `rounds` rounds of `repeats` calls, each over n_bytes of data."""
    work()  # first-call costs out of the figure
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(repeats):
            work()
        rates.append(n_bytes * repeats / (time.perf_counter() - started) / 1e9)
    return statistics.median(rates)


def measure(chunk_bytes: int, k: int, m: int, repeats: int, rounds: int) -> dict:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from skymemory.protocol.stripes import decode, encode

    rng = np.random.default_rng(chunk_bytes + 100 * k + m)
    data = [rng.integers(0, 256, chunk_bytes, dtype=np.uint8) for _ in range(k)]
    parity = encode(data, m)
    chunks = [d.copy() for d in data] + parity
    present = [i >= min(m, k) for i in range(k + m)]  # the first m data chunks lost
    aead, nonce = AESGCM(os.urandom(16)), os.urandom(12)
    plain = [d.tobytes() for d in data]
    n_bytes = k * chunk_bytes
    row = {"chunk_bytes": chunk_bytes, "k": k, "m": m,
           "encode_GBps": _rate(lambda: encode(data, m), n_bytes, repeats, rounds),
           "decode_GBps": _rate(lambda: decode(chunks, present, k), n_bytes, repeats, rounds),
           "seal_GBps": _rate(lambda: [aead.encrypt(nonce, p, None) for p in plain], n_bytes, repeats, rounds)}
    if not all(np.array_equal(a, b) for a, b in zip(chunks[:k], data)):
        raise RuntimeError(f"a stripe of {k} + {m} decoded to other bytes")
    row["coding_vs_seal"] = row["seal_GBps"] / row["encode_GBps"]
    return row


def table(rows: list[dict]) -> str:
    lines = ["| chunk bytes | k + m | encode GB/s | decode GB/s (m lost) | seal GB/s | encode / seal time |",
             "|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {r['chunk_bytes']:,} | {r['k']} + {r['m']} | {r['encode_GBps']:.2f} | {r['decode_GBps']:.2f} | "
              f"{r['seal_GBps']:.2f} | {r['coding_vs_seal']:.2f} |" for r in rows]
    return "\n".join(lines)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "stripes", help="what coding a stripe (Reed-Solomon, ISA-L) costs on this CPU, beside sealing its bytes",
        description=__doc__, formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=options.positive_int, default=200, help="stripes per round (default 200)")
    parser.add_argument("--rounds", type=options.positive_int, default=5, help="rounds per figure (default 5)")
    parser.set_defaults(func=_main)


def _main(args) -> int:
    rows = []
    for chunk_bytes in CHUNK_SIZES:
        for k, m in STRIPES:
            rows.append(measure(chunk_bytes, k, m, args.repeats, args.rounds))
            print(f"  {chunk_bytes} B, {k} + {m}: encode {rows[-1]['encode_GBps']:.2f} GB/s", file=sys.stderr)
    print(table(rows))
    return 0
