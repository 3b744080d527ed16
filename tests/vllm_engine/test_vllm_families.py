"""Today's model families on vLLM's real engine with the connector (issue 52), on this CPU build: each that the
build serves with SkyMemory starts, stores its prompt's blocks, and a fresh engine process loads them and
generates what plain vLLM generates.

- embedded-tiny-mistral: every layer a 64-token sliding window. vLLM gives the blocks its window has passed its
  null block (no page): the connector loads into and saves from real pages only (integrations.vllm.block_table).
- embedded-tiny-gemma3: five sliding-window layers to one full layer. Without the connector's hybrid support
  (SupportsHMA, not yet) vLLM turns its hybrid allocator off and keeps every layer's pages as full attention.

The Mamba-2 and gated delta-net hybrids need that support: the connector refuses them at start, in one sentence.
"""

from __future__ import annotations

import pytest

from skymemory.kv.model.models import save_model_dir
from skymemory.kv.index.radix import RadixIndex

from kv_support import random_prompt
from test_vllm_connector import BLOCK, JOB_TIMEOUT_S, connector, requests, run_job

LONG = random_prompt(2 * BLOCK + 60, seed=52)  # 2 usable blocks; the window of its last token is far past block 0
OTHER = LONG[:2 * BLOCK] + random_prompt(40, seed=53)[1:]  # the same two blocks, then its own tokens


@pytest.mark.parametrize("family", ["embedded-tiny-mistral", "embedded-tiny-gemma3"])
def test_a_fresh_engine_loads_a_sliding_window_models_prefix_and_generates_what_plain_vllm_does(
        family, sky, tmp_path):
    model = save_model_dir(family, tmp_path / family)
    plain = run_job(tmp_path, model, [{"name": "plain", "connector": None,
                                       "requests": requests(LONG=LONG, OTHER=OTHER)}], "plain")["plain"]
    index = tmp_path / "index"
    settings = connector(sky, index, model=family)
    stored = run_job(tmp_path, model, [{"name": "A", "connector": settings, "requests": requests(LONG=LONG)}],
                     "A")["A"]
    assert stored["LONG"]["num_cached_tokens"] == 0 and stored["LONG"]["tokens"] == plain["LONG"]["tokens"]
    assert len(RadixIndex(index)) == 2  # both full blocks saved: the pages still held them when the step ended

    found = run_job(tmp_path, model, [{"name": "B", "connector": settings,
                                       "requests": requests(OTHER=OTHER, LONG=LONG)}], "B")["B"]
    for name in ("OTHER", "LONG"):
        assert found[name]["num_cached_tokens"] == 2 * BLOCK, name
        assert found[name]["tokens"] == plain[name]["tokens"], name
    # what crossed the link: a window of 64 tokens reads block 1 only (vLLM gave block 0 no page); the full
    # layer of the Gemma-3-style model reads both
    fetched = found["LONG"]["kv_transfer_params"]["skymemory"]["fetched_blocks"]
    assert fetched == (1 if family == "embedded-tiny-mistral" else 2), found["LONG"]["kv_transfer_params"]


def test_a_mamba_hybrid_is_refused_at_start_in_one_sentence(sky, tmp_path):
    family = "embedded-tiny-granite-hybrid"
    model = save_model_dir(family, tmp_path / family)
    process = run_job(tmp_path, model, [{"name": "A", "connector": connector(sky, tmp_path / "index", model=family),
                                         "requests": requests(LONG=LONG)}], "A", wait=False)
    assert process.wait(JOB_TIMEOUT_S) != 0
    log = (tmp_path / "A.log").read_text()
    assert (f"SkyMemory cannot cache {family} on a paged engine yet: 3 of its layers keep recurrent state (Mamba / "
            "gated delta-net), which needs the engine's hybrid KV cache allocator (vLLM: SupportsHMA)") in log, log[-3000:]
