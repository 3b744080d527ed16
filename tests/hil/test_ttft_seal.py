"""Hardware in the loop: `skymemory bench ttft --seal on,off`, sealed and unsealed side by side on real satellites.

One small run (embedded-tiny, a 4x4 constellation, one 256-token prefix, two rounds): every sky mode is
measured sealed and in the clear on the same constellation, each hits the whole prefix and generates the
no-cache run's tokens, the two take turns going first, and the closing table compares them. No timing is
asserted (the machine is shared).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_cli_bench_ttft_measures_sealed_and_unsealed_side_by_side(node_path, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground"), "SKYMEM_NODE": str(node_path)}
    r = subprocess.run(
        [sys.executable, "-m", "skymemory", "bench", "ttft", "--model", "embedded-tiny", "--planes", "4",
         "--sats", "4", "--prefix-tokens", "256", "--suffix-tokens", "16", "--repeats", "2", "--gen-tokens", "4",
         "--profiles", "none", "--seal", "on,off", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    result = json.loads((out / "ttft.json").read_text())
    assert result["config"]["seal"] == ["on", "off"]
    sky = [m for m in result["measurements"] if m["mode"].startswith("sky-")]
    assert {(m["mode"], m["seal"]) for m in sky} == {("sky-none", "on"), ("sky-none-auto", "on"),
                                                      ("sky-none-unsealed", "off"), ("sky-none-unsealed-auto", "off")}
    for m in sky:
        if not m["mode"].endswith("-auto"):  # fetched: the whole prefix, from the satellites
            assert m["cached_tokens"] == m["expected_cached_tokens"] == 256 and m["bytes_retrieved"] > 0, m
        assert m["first_token_equal"] is True and m["tokens_equal"] is True, m
    # sealed first in round 0, unsealed first in round 1
    for rnd, first in ((0, "on"), (1, "off")):
        assert [m["seal"] for m in sky if m["round"] == rnd][0] == first
    (c,) = [c for c in result["seal_comparison"] if c["mode"] == "sky-none"]
    assert c["unsealed_mode"] == "sky-none-unsealed" and c["runs"] == 2 and c["sealed_vs_unsealed"] > 0
    assert {c["mode"] for c in result["seal_comparison"]} == {"sky-none", "sky-none-auto"}
    for text in (r.stdout, (out / "ttft.md").read_text()):
        assert "Sealed / unsealed TTFT per profile and prefix length" in text
        assert "| 256 | sky-none | auto |" in text and "| 256 | sky-none-unsealed |" in text
