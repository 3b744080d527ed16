"""Output of a TTFT run: the JSON file, markdown tables, PNG plots.

    write_all(result, out_dir)  -> ttft.json, ttft.md, ttft_by_prefix.png, ttft_breakdown.png
    markdown(result)            -> the tables printed to stdout (and copied into BENCHMARKS.md)
    command_line()              -> the running command, as typed; every benchmark's result file starts with it
    combined(steps, gpu)        -> several runs' markdown in one file, a heading per step (tools/cuda_bench.sh:
                                   `python -m skymemory.bench.report combine --gpu LINE --out FILE --step ...`)

Timings are medians over the measured rounds, with [min-max] after them.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from .ttft import DEVICE_RAM, DEVICE_RAM_NAMES

# The paper's Jetson Nano testbed (Table 3): 30-token generation, seconds.
PAPER_TABLE3 = (
    ("optimum-quanto", 6.2, 4.9),
    ("HQQ", 10.2, 7.8),
)


def _ms(cell: dict | None) -> str:
    if not cell:
        return "-"
    return f"{cell['median'] * 1000:.0f} [{cell['min'] * 1000:.0f}-{cell['max'] * 1000:.0f}]"


def _ms_short(cell: dict | None) -> str:
    return "-" if not cell else f"{cell['median'] * 1000:.1f}"


def _s(cell: dict | None) -> str:
    if not cell:
        return "-"
    if cell["n"] == 1:
        return f"{cell['median']:.2f}"
    return f"{cell['median']:.2f} [{cell['min']:.2f}-{cell['max']:.2f}]"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _tokens(row: dict) -> str:
    """The "tokens equal" cell: vs the no-cache run; where they differ, whether they equal device-ram's."""
    if row["mode"] == "nocache":
        return "reference"
    if row["tokens_equal"] and row["first_token_equal"]:
        return f"yes ({row['runs']}/{row['runs']} runs)"
    if row["mode"] in DEVICE_RAM_NAMES:
        return "NO (two forwards; see below)"
    compared = row.get("tokens_compared_device_ram")  # absent from results saved before the comparison
    if compared and row["tokens_equal_device_ram"]:
        return f"no; = {DEVICE_RAM} ({compared}/{row['runs']} runs)"
    return "NO"


def tokens_note(result: dict) -> str:
    """Why tokens can differ from the no-cache run with the KV delivered exactly: said under the table where
    device-ram (the no-cache run's own prefix KV, never moved) differs from it too; "" where it does not."""
    if not any(r["mode"] in DEVICE_RAM_NAMES and not (r["tokens_equal"] and r["first_token_equal"])
               for r in result["summary"]):
        return ""
    quantize = (result.get("config") or {}).get("quantize")
    weights = f" with {quantize}-quantised weights" if quantize else ""
    return (f"Tokens: {DEVICE_RAM} holds the no-cache run's own prefix KV and computes only the suffix, yet its "
            f"tokens differ from the no-cache run's{weights}: computing a prompt in two forwards (prefix, then "
            "suffix) runs kernels of other shapes, which round differently, and greedy decoding amplifies that. "
            f"This is numerical, not the cache: a mode marked \"= {DEVICE_RAM}\" generated exactly the tokens of "
            f"{DEVICE_RAM} in the same rounds, so it differs from no cache only by that split.")


def _decision(row: dict) -> str:
    return ", ".join(row.get("decisions") or []) or "-"


def _cached(row: dict) -> str:
    if row["mode"] == "nocache":
        return "0"
    got = "/".join(str(c) for c in row["cached_tokens"])
    return got if row["cached_tokens"] == [row["expected_cached_tokens"]] else f"{got} (expected {row['expected_cached_tokens']})"


def header(result: dict) -> str:
    env, cfg = result["environment"], result["config"]
    profiles = "; ".join(f"{p['name']}: {p['description']}" for p in result["profiles"].values())
    return (
        f"Model {env['model']} ({env['model_name']}, {env['params'] / 1e6:,.0f} M parameters, {env['layers']} layers, "
        f"{env['model_dtype']}) on {env['device']} ({env['cpu']}, {env['torch_threads']} torch threads); "
        f"client CRC32C in {'C (skymemory._native)' if env.get('native_codec') else 'pure Python (no _native!)'}; "
        f"KV {cfg['kv_dtype']}, {result['block_tokens']}-token blocks, chunks of {cfg['chunk_size']} B striped over "
        f"{cfg['servers']} satellites of a {cfg['planes']}x{cfg['sats']} constellation. "
        f"Suffix {cfg['suffix_tokens']} tokens, {cfg['suffixes']} different suffixes, {cfg['repeats']} measured "
        f"rounds per prefix length (warm-up excluded); {cfg['gen_tokens']}-token generation in the first "
        f"{cfg['gen_repeats']} round(s). Link profiles: {profiles}."
    )


def _vs_device_ram(row: dict) -> float | None:
    return row.get("ratio_vs_device_ram", row.get("ratio_vs_gpu_ram"))  # the second: results saved before the rename


def ttft_table(result: dict) -> str:
    lines = [
        "| prefix tokens | mode | route | TTFT ms, median [min-max] | lookup ms | retrieval ms | KV rebuild ms | "
        f"prefill ms | cached tokens | speedup vs no cache | vs {DEVICE_RAM} | vs local RAM | decision | tokens equal |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in result["summary"]:
        fetched = r["mode"] not in ("nocache", *DEVICE_RAM_NAMES)  # a mode that lands and rebuilds KV
        retrieval = _ms_short(r["retrieval_s"]) if fetched else "-"
        if r.get("stream_waited_s"):  # streamed: the transfer overlaps the prefill, which includes the wait
            retrieval += f" (overlapped; waited {_ms_short(r['stream_waited_s'])})"
        lines.append(
            f"| {r['prefix_tokens']} | {r['mode']} | {r.get('route') or '-'} | {_ms(r['ttft_s'])} | "
            f"{_ms_short(r['lookup_s'])} | "
            f"{retrieval} | "
            f"{_ms_short(r['rebuild_s']) if fetched else '-'} | "
            f"{_ms_short(r['prefill_s'])} | "
            f"{_cached(r)} | {_x(r['speedup_vs_nocache'])} | {_x(_vs_device_ram(r))} | "
            f"{_x(r['ratio_vs_local'])} | {_decision(r)} | {_tokens(r)} |"
        )
    note = tokens_note(result)
    return "\n".join(lines) + (f"\n\n{note}" if note else "")


def generation_table(result: dict) -> str:
    n = result["config"]["gen_tokens"]
    rows = [r for r in result["summary"] if r["gen_total_s"]]
    if not rows:
        return ""
    lines = [
        f"| prefix tokens | mode | {n}-token generation s | speedup | faster by |",
        "|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        faster = "-" if r["mode"] == "nocache" or not r["gen_speedup"] else f"{(1 - 1 / r['gen_speedup']) * 100:.0f}%"
        lines.append(f"| {r['prefix_tokens']} | {r['mode']} | {_s(r['gen_total_s'])} | {_x(r['gen_speedup'])} | "
                     f"{faster} |")
    for name, without, with_cache in PAPER_TABLE3:
        lines.append(f"| paper Table 3 (4 blocks = 512, Jetson Nano, {name}) | no KVC / KVC | {without} / {with_cache} | "
                     f"{without / with_cache:.2f}x | {(1 - with_cache / without) * 100:.0f}% |")
    return "\n".join(lines)


def command_line() -> str:
    """The command that is running, as a user would type it."""
    return shlex.join(["skymemory", *sys.argv[1:]])


def regenerate(command: str | None) -> str:
    """The first line of a result file: how to make it again."""
    return f"Regenerate: `{command}`\n\n" if command else ""


def run_and_write(args, name: str, run, table) -> int:
    """A benchmark's command: run(args, log) with progress on stderr, its errors one line (exit 1), then its
    figures written (write_results, table(result) as the markdown); the exit status."""
    try:
        result = run(args, log=lambda message: print(message, file=sys.stderr, flush=True))
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"skymemory bench {name}: {exc}", file=sys.stderr)
        return 1
    write_results(args.out, name, result, table(result))
    return 0


def write_results(out: Path, stem: str, result: dict, table: str) -> None:
    """A benchmark's figures as <stem>.json and its table as <stem>.md (first line: how to make it again) in
    `out`; the table and where both went are printed."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (out / f"{stem}.md").write_text(regenerate(command_line()) + table + "\n")
    print(table)
    print(f"wrote {out / f'{stem}.json'} and {out / f'{stem}.md'}")


def markdown(result: dict) -> str:
    parts = [regenerate(result.get("command")) + header(result), "", ttft_table(result)]
    gen = generation_table(result)
    if gen:
        parts += ["", gen]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------- several runs in one file


def combined(steps: list[tuple[str, str, int, Path | None]], gpu: str) -> str:
    """One markdown file from several benchmark runs: steps of (title, command, exit status, the run's markdown).

    Each step is a heading, the command that ran it (environment included: the run's own "Regenerate:" line
    cannot show an MPS thread percentage, so it is dropped) and the GPU, then the run's tables; a step that
    failed or wrote no markdown says so instead of its tables.
    """
    parts = ["# CUDA host benchmarks"]
    for title, command, status, path in steps:
        parts += ["", f"## {title}", "", f"`{command.strip()}`", "", f"GPU (nvidia-smi): {gpu}", ""]
        text = path.read_text() if path is not None and path.is_file() else None
        if status != 0 or text is None:
            parts.append(f"FAILED (exit status {status}" + (")" if text is not None else "; no markdown written)"))
            if text is None:
                continue
            parts.append("")
        lines = text.splitlines()
        if lines and lines[0].startswith("Regenerate: "):
            lines = lines[1:]
        parts.append("\n".join(lines).strip())
    return "\n".join(parts) + "\n"


def combine_main(argv: list[str] | None = None) -> int:
    """`python -m skymemory.bench.report combine`: write combined() of the --step runs to --out."""
    parser = argparse.ArgumentParser(prog="python -m skymemory.bench.report combine",
                                     description="several benchmark runs' markdown in one file")
    parser.add_argument("--gpu", required=True, help="the GPU as nvidia-smi names it (name, memory, driver)")
    parser.add_argument("--out", type=Path, required=True, help="the markdown file to write")
    parser.add_argument("--step", nargs=4, action="append", required=True,
                        metavar=("TITLE", "COMMAND", "STATUS", "MARKDOWN"),
                        help="a run: its heading, command line, exit status and markdown file ('' if none)")
    args = parser.parse_args(argv)
    steps = []
    for title, command, status, path in args.step:
        try:
            steps.append((title, command, int(status), Path(path) if path else None))
        except ValueError:
            parser.error(f"step {title!r}: exit status {status!r} is not an integer")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(combined(steps, args.gpu))
    print(f"wrote {args.out} ({len(steps)} step(s))")
    return 0


# ---------------------------------------------------------------------------- plots


def plot_ttft(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    modes = []
    for r in result["summary"]:
        if r["mode"] not in modes:
            modes.append(r["mode"])
    for mode in modes:
        rows = [r for r in result["summary"] if r["mode"] == mode]
        x = [r["prefix_tokens"] for r in rows]
        med = [r["ttft_s"]["median"] for r in rows]
        lo = [r["ttft_s"]["median"] - r["ttft_s"]["min"] for r in rows]
        hi = [r["ttft_s"]["max"] - r["ttft_s"]["median"] for r in rows]
        ax.errorbar(x, med, yerr=[lo, hi], marker="o", capsize=3, label=mode)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("shared prefix (tokens)")
    ax.set_ylabel("TTFT (s), median, bars min-max")
    ax.set_title(f"TTFT by prefix length and link ({result['environment']['model']}, "
                 f"+{result['config']['suffix_tokens']}-token suffix)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_breakdown(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["summary"] if r["mode"] != "nocache"]
    labels = [f"{r['prefix_tokens']}\n{r['mode']}" for r in rows]
    parts = (("lookup_s", "lookup (tokenise, hash, index)"), ("retrieval_s", "retrieval (network / RAM)"),
             ("rebuild_s", "KV rebuild"), ("prefill_s", "suffix prefill + argmax"))
    fig, ax = plt.subplots(figsize=(max(7, 0.8 * len(rows)), 4.5))
    bottom = [0.0] * len(rows)
    for key, name in parts:
        # a streamed row's transfer overlaps its prefill (which holds the wait): not stacked twice
        values = [r[key]["median"] * 1000 if r[key] and not (key == "retrieval_s" and r.get("stream_waited_s"))
                  else 0.0 for r in rows]
        ax.bar(range(len(rows)), values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("ms (medians)")
    ax.set_title("Where a cached TTFT goes")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_all(result: dict, out_dir: Path, name: str = "ttft") -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / f"{name}.json",
        "markdown": out_dir / f"{name}.md",
        "ttft_plot": out_dir / f"{name}_by_prefix.png",
        "breakdown_plot": out_dir / f"{name}_breakdown.png",
    }
    paths["json"].write_text(json.dumps(result, indent=1))
    paths["markdown"].write_text(markdown(result))
    plot_ttft(result, paths["ttft_plot"])
    plot_breakdown(result, paths["breakdown_plot"])
    return paths


if __name__ == "__main__":
    if sys.argv[1:2] != ["combine"]:
        sys.exit("usage: python -m skymemory.bench.report combine --gpu LINE --out FILE --step TITLE COMMAND "
                 "STATUS MARKDOWN ...")
    sys.exit(combine_main(sys.argv[2:]))
