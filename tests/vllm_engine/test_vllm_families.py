"""Today's model families on vLLM's real engine with the connector (issue 52), on this CPU build: each that the
build serves with SkyMemory starts, stores its prompt's blocks, and a fresh engine process loads them and
generates what plain vLLM generates.

- embedded-tiny-mistral: every layer a 64-token sliding window. vLLM gives the blocks its window has passed its
  null block (no page): the connector loads into and saves from real pages only (integrations.vllm.block_table).
- embedded-tiny-gemma3: five sliding-window layers to one full layer. vLLM keeps its hybrid allocator on (the
  connector supports it): one page table per group of layers, sliding ones without pages behind their window.
- embedded-tiny-granite-hybrid: Mamba-2 layers between attention layers. With vLLM's prefix caching on, vLLM keeps
  a Mamba layer's state at block boundaries: the block that ends a stored prompt carries it, and a fresh engine
  resumes from it.

With the hybrid allocator turned off, a Mamba hybrid is refused at start, in one sentence.
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


# vLLM's prefix caching keeps recurrent states at block boundaries; its CPU build's Mamba-2 kernel needs steps of
# at most one block then (the connector says so at start otherwise)
# (family, dtype, the block vLLM's CPU build gives it): gated delta-net layers run in bf16 only there, and their
# state page (268,288 bytes) makes vLLM raise the block until an attention page is as large: 1,152 tokens
RECURRENT = [("embedded-tiny-granite-hybrid", "float32", BLOCK), ("embedded-tiny-qwen3-next", "bfloat16", 1152)]


@pytest.mark.parametrize("family, dtype, block", RECURRENT)
def test_a_fresh_engine_resumes_a_recurrent_hybrids_prefix_from_its_cached_state(family, dtype, block, sky,
                                                                                   tmp_path):
    model = save_model_dir(family, tmp_path / family)
    long = random_prompt(2 * block + 60, seed=54)  # 2 usable blocks, the state after the second
    other = long[:2 * block] + random_prompt(40, seed=55)[1:]
    engine = {"dtype": dtype, "prefix_caching": True, "max_num_batched_tokens": block}
    plain = run_job(tmp_path, model, [{"name": "plain", "connector": None, "dtype": dtype,
                                       "requests": requests(LONG=long, OTHER=other)}], "plain")["plain"]
    index = tmp_path / "index"
    settings = connector(sky, index, model=family)
    stored = run_job(tmp_path, model, [{"name": "A", "connector": settings, "requests": requests(LONG=long),
                                        **engine}], "A")["A"]
    assert stored["LONG"]["tokens"] == plain["LONG"]["tokens"]
    assert len(RadixIndex(index)) == 2  # the prompt's two whole blocks, the second with the recurrent layers' state

    found = run_job(tmp_path, model, [{"name": "B", "connector": settings, "requests": requests(OTHER=other, LONG=long),
                                       **engine}], "B")["B"]
    for name in ("OTHER", "LONG"):
        assert found[name]["num_cached_tokens"] == 2 * block, (name, found[name])
        assert found[name]["tokens"] == plain[name]["tokens"], name
    assert found["OTHER"]["kv_transfer_params"]["skymemory"]["fetched_blocks"] == 2, found["OTHER"]
    # LONG shares OTHER's two blocks: vLLM's own prefix cache took them, state included, when they loaded
    assert found["LONG"]["kv_transfer_params"] is None


def test_a_mamba_hybrid_is_refused_at_start_in_one_sentence_without_prefix_caching(sky, tmp_path):
    family = "embedded-tiny-granite-hybrid"
    model = save_model_dir(family, tmp_path / family)
    process = run_job(tmp_path, model, [{"name": "A", "connector": connector(sky, tmp_path / "index", model=family),
                                         "requests": requests(LONG=LONG)}], "A", wait=False)
    assert process.wait(JOB_TIMEOUT_S) != 0
    log = (tmp_path / "A.log").read_text()
    assert ("SkyMemory connector: a model with Mamba / gated delta-net layers needs vLLM's prefix caching on "
            "(enable_prefix_caching=True, --enable-prefix-caching)") in log, log[-3000:]
