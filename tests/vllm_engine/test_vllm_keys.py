"""Blocks keyed as vLLM keys them (issue 34): tenants' cache salts and LoRA adapters, through real vLLM engines.

One tenant's prompt must never serve another: vLLM's own prefix cache keys a block by the request's cache
salt, LoRA adapter, media and prompt embeddings, and so does the connector (kv.naming.extra_keys). Here:

- vLLM's Request objects: the connector's keys sit where vLLM's own hashing puts them;
- vLLM's OpenAI server with the connector, over HTTP: tenant A stores, hits again; tenant B with the same
  prompt gets nothing from SkyMemory, in the same server; in a fresh one a new tenant gets nothing, A and B
  their own blocks; every text is plain vLLM's;
- two LoRA adapters on one base model: no hits across adapters nor with the base model; the same adapter
  under another name and folder hits (it is named by its weights); a KVCManager on a PeftModel with an
  adapter stores blocks vLLM hits with that adapter; tokens are plain vLLM's with that adapter;
- Hugging Face and vLLM with the same salt: hits both ways, the same tokens; another salt, or none: none.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from skymemory.integrations.vllm.connector import request_keys
from skymemory.kv.model.cache_arg import cache_arg
from skymemory.kv.naming.extra_keys import Unkeyable, adapter_dir_fingerprint, embeds_hashes
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.model.models import load_model
from skymemory.bench.openai_server import OpenAIServer
from skymemory.kv.index.radix import RadixIndex
from skymemory.orbit.manifest import Manifest
from skymemory.store.constellation import ConstellationBlockStore

from kv_support import random_prompt

SERVE_JOB = Path(__file__).with_name("serve_job.py")
BLOCK = 128
SERVERS = 5
JOB_TIMEOUT_S = 600  # engine starts take 5-40 s here, longer on a loaded machine; a hang is a failure
NEW_TOKENS = 16

P = random_prompt(300, seed=21)  # 2 usable blocks
S = random_prompt(290, seed=22)  # 2 usable blocks


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> dict[str, Path]:
    """Two LoRA adapters of embedded-small saved as PEFT saves them (the folders vLLM loads), and a copy of the
    first under another name."""
    from peft import LoraConfig, get_peft_model

    folder = tmp_path_factory.mktemp("adapters")
    out = {}
    for name, seed in (("a1", 1), ("a2", 2)):
        model, _ = load_model("embedded-small", "cpu", "fp32")
        torch.manual_seed(seed)  # random A and B: each adapter changes the outputs its own way
        peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                      init_lora_weights=False))
        peft_model.save_pretrained(folder / name, save_embedding_layers=False)
        out[name] = folder / name
    out["a1-copy"] = Path(shutil.copytree(folder / "a1", folder / "a1-copy"))
    return out


def lora(name: str, adapters: dict[str, Path]) -> list:
    """A request's LoRA adapter for serve_job: [name, this server's id for it, folder]."""
    return [name, {"a1": 1, "a2": 2, "a1-copy": 3}[name], str(adapters[name])]


def run_job(tmp: Path, model: Path, engines: list[dict], name: str) -> dict:
    """Run engines one after the other in a fresh process (serve_job.py); returns what they generated."""
    job = {"model": str(model), "out": str(tmp / f"{name}.out.json"), "engines": engines}
    (tmp / f"{name}.json").write_text(json.dumps(job))
    with open(tmp / f"{name}.log", "w") as log:
        process = subprocess.Popen([sys.executable, str(SERVE_JOB), str(tmp / f"{name}.json")], stdout=log,
                                   stderr=subprocess.STDOUT)
        try:
            code = process.wait(JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(f"job {name} hung; its log: {tmp / f'{name}.log'}") from None
    assert code == 0, f"job {name} failed ({code}):\n" + (tmp / f"{name}.log").read_text()[-6000:]
    return json.loads((tmp / f"{name}.out.json").read_text())


def connector(manifest: Path, index: Path, orbit_index: bool = True) -> dict:
    return {"manifest": str(manifest), "model": "embedded-small", "index_dir": str(index), "servers": SERVERS,
            "orbit_index": orbit_index}


# The tests below that count a request of no tenant and no adapter as a miss keep to their own index
# (orbit_index false, orbit=False): the OpenAI test stores P for no tenant on this module's constellation, and
# the records in orbit would rightly lead them to it.
OWN_INDEX = False


def request(name: str, ids: list[int], *, salt: str | None = None, adapter: list | None = None) -> dict:
    return {"name": name, "ids": ids, "max_tokens": NEW_TOKENS, "salt": salt, "lora": adapter}


@pytest.fixture(scope="module")
def baseline(model_dir, adapters, tmp_path_factory) -> dict:
    """vLLM without the connector, its own prefix cache off: the tokens every run with the connector must give."""
    tmp = tmp_path_factory.mktemp("baseline")
    out = run_job(tmp, model_dir, [
        {"name": "plain", "connector": None, "requests": [request("P", P), request("S", S)]},
        {"name": "lora", "connector": None, "lora": True, "requests": [
            request("P", P), request("P-a1", P, adapter=lora("a1", adapters)),
            request("P-a2", P, adapter=lora("a2", adapters)), request("S-a2", S, adapter=lora("a2", adapters))]},
    ], "baseline")
    return {engine: {name: r["tokens"] for name, r in results.items()} for engine, results in out.items()}


def wait_for_blocks(index: Path, count: int) -> None:
    """The engine saves in the background: wait (bounded) until the ground index holds `count` blocks."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while len(RadixIndex(index)) < count:
        assert time.monotonic() < deadline, f"the index holds {len(RadixIndex(index))} blocks, not {count}"
        time.sleep(0.2)


# ---- vLLM's Request objects ----------------------------------------------------------------------------------

def test_the_connectors_keys_sit_where_vllms_own_prefix_cache_puts_them(adapters):
    from vllm import SamplingParams
    from vllm.lora.request import LoRARequest
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
    from vllm.v1.core.kv_cache_utils import generate_block_hash_extra_keys
    from vllm.v1.request import Request

    def feature(name: str, offset: int, length: int, identifier: str | None = None):
        return MultiModalFeatureSpec(data=None, modality="image", identifier=identifier or name,
                                     mm_position=PlaceholderRange(offset=offset, length=length), mm_hash=name)

    tokens = random_prompt(4 * BLOCK + 9, seed=5)
    a1 = LoRARequest("a1", 1, str(adapters["a1"]))
    requests = [
        Request("salt", tokens, SamplingParams(max_tokens=4), None, cache_salt="tA"),
        Request("lora", tokens, SamplingParams(max_tokens=4), None, lora_request=a1),
        # two images: one over blocks 0-2, one inside block 3; vLLM's identifier carries the adapter's name
        Request("media", tokens, SamplingParams(max_tokens=4), None, lora_request=a1, cache_salt="tB",
                mm_features=[feature("img1", 100, 200, "a1:img1"), feature("img2", 3 * BLOCK + 5, 40, "a1:img2")]),
        Request("embeds", None, SamplingParams(max_tokens=4), None, prompt_embeds=torch.randn(4 * BLOCK + 9, 16)),
    ]
    fingerprint = adapter_dir_fingerprint(adapters["a1"])
    for req in requests:
        ours = request_keys(req, BLOCK).per_block(4, BLOCK)
        mm_index = 0
        for i in range(4):
            theirs, mm_index = generate_block_hash_extra_keys(req, i * BLOCK, (i + 1) * BLOCK, mm_index)
            # vLLM's keys, as SkyMemory names the same things: the adapter by its weights, a medium by its hash
            # without the adapter's name (the adapter is keyed anyway)
            want = []
            for key in theirs or ():
                if key[0] == "lora":
                    want.append(("adapter", fingerprint))
                elif key[0] == "mm":
                    want.append(("media", key[1].split(":")[-1], key[2]))
                elif key[0] == "prompt_embeds":
                    want.append(("prompt_embeds", embeds_hashes(req.prompt_embeds, BLOCK)[i]))
                else:
                    want.append(key)
            assert (ours[i] or ()) == tuple(want), (req.request_id, i)
    # the same adapter under another name, id and folder: the same keys; another adapter: others
    copy = Request("copy", tokens, SamplingParams(max_tokens=4), None,
                   lora_request=LoRARequest("a1-copy", 7, str(adapters["a1-copy"])))
    other = Request("other", tokens, SamplingParams(max_tokens=4), None,
                    lora_request=LoRARequest("a1", 1, str(adapters["a2"])))  # the name re-pointed at other weights
    assert request_keys(copy, BLOCK) == request_keys(requests[1], BLOCK) != request_keys(other, BLOCK)


def test_a_request_with_an_input_the_connector_does_not_key_is_refused(adapters, monkeypatch):
    from vllm import SamplingParams
    from vllm.lora.request import LoRARequest
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.request import Request

    tokens = random_prompt(2 * BLOCK + 3, seed=6)
    gone = Request("gone", tokens, SamplingParams(max_tokens=4), None,
                   lora_request=LoRARequest("gone", 1, str(adapters["a1"].parent / "nowhere")))
    with pytest.raises(Unkeyable, match="not a local folder"):
        request_keys(gone, BLOCK)
    # a kind of key a later vLLM might add: refused until the connector folds it in
    real = kv_cache_utils.generate_block_hash_extra_keys
    monkeypatch.setattr(kv_cache_utils, "generate_block_hash_extra_keys",
                        lambda req, start, end, mm: ((("hologram", "x"),), real(req, start, end, mm)[1]))
    with pytest.raises(Unkeyable, match="'hologram'"):
        request_keys(Request("new", tokens, SamplingParams(max_tokens=4), None), BLOCK)


# ---- the OpenAI server -----------------------------------------------------------------------------------------

def test_one_tenants_prompt_never_serves_another_through_the_openai_server(model_dir, sky, baseline, tmp_path):
    index = tmp_path / "index"
    want = baseline["plain"]["P"]

    def server(name: str, index: Path) -> OpenAIServer:
        return OpenAIServer(model_dir, tmp_path / f"{name}.log", connector=connector(sky, index))

    with server("server1", index) as first_server:
        first = first_server.complete(P, NEW_TOKENS, salt="tA")
        assert first.cached_tokens == 0 and first.tokens == want
        wait_for_blocks(index, 2)  # tenant A's two blocks, stored in the background
        again = first_server.complete(P, NEW_TOKENS, salt="tA")
        assert again.cached_tokens == 2 * BLOCK and again.said["fetched_blocks"] == 2, again
        assert again.tokens == want
        other = first_server.complete(P, NEW_TOKENS, salt="tB")  # the same prompt, another tenant: not A's blocks
        assert other.cached_tokens == 0 and not other.said and other.tokens == want
        wait_for_blocks(index, 4)  # B's blocks are its own chain, beside A's
    # a fresh server with an index of its own (as on another host): each tenant's blocks are found through their
    # records in orbit, each sealed under that tenant's key
    with server("server2", tmp_path / "index-2") as fresh_server:
        for salt in ("tC", None):  # a tenant that stored nothing, and no tenant
            fresh = fresh_server.complete(P, NEW_TOKENS, salt=salt)
            assert fresh.cached_tokens == 0 and fresh.tokens == want, (salt, fresh)
        for salt in ("tA", "tB"):  # each tenant finds its own blocks, stored by the first server
            own = fresh_server.complete(P, NEW_TOKENS, salt=salt)
            assert own.cached_tokens == 2 * BLOCK and own.tokens == want, (salt, own)


# ---- LoRA adapters ---------------------------------------------------------------------------------------------

def test_adapters_never_share_blocks_and_each_gives_its_own_tokens(model_dir, sky, adapters, baseline, tmp_path):
    from peft import PeftModel

    index = tmp_path / "index"
    want = baseline["lora"]
    assert len({tuple(want[name]) for name in ("P", "P-a1", "P-a2")}) == 3  # each adapter changes the tokens
    stored = run_job(tmp_path, model_dir, [{"name": "X", "lora": True, "connector": connector(sky, index, OWN_INDEX),
                                            "requests": [request("P-a1", P, adapter=lora("a1", adapters))]}], "X")
    assert stored["X"]["P-a1"]["num_cached_tokens"] == 0 and stored["X"]["P-a1"]["tokens"] == want["P-a1"]
    assert len(RadixIndex(index)) == 2
    # a KVCManager on a PeftModel with adapter a2 (loaded from its folder) stores S
    m = Manifest.load(sky)
    with ConstellationBlockStore.nearest_from_manifest(m, SERVERS, client_options={"station_id": 65}) as store:
        model, tokenizer = load_model("embedded-small", "cpu", "fp32")
        manager = KVCManager(PeftModel.from_pretrained(model, adapters["a2"]), tokenizer, store, kv_dtype="fp16",
                             index=RadixIndex(index), policy="fetch", orbit=OWN_INDEX)
        assert manager.add_blocks(S).blocks_stored == 2
    out = run_job(tmp_path, model_dir, [{"name": "Y", "lora": True, "connector": connector(sky, index, OWN_INDEX),
                                         "requests": [
        request("P-a2", P, adapter=lora("a2", adapters)),  # a1's blocks are not a2's
        request("P", P),  # nor the base model's
        request("P-a1-copy", P, adapter=lora("a1-copy", adapters)),  # a1 under another name, id and folder
        request("S-a2", S, adapter=lora("a2", adapters)),  # stored through Hugging Face with a2
    ]}], "Y")["Y"]
    assert out["P-a2"]["num_cached_tokens"] == 0 and out["P-a2"]["tokens"] == want["P-a2"]
    assert out["P"]["num_cached_tokens"] == 0 and out["P"]["tokens"] == want["P"]
    assert out["P-a1-copy"]["num_cached_tokens"] == 2 * BLOCK and out["P-a1-copy"]["tokens"] == want["P-a1"]
    assert out["S-a2"]["num_cached_tokens"] == 2 * BLOCK and out["S-a2"]["tokens"] == want["S-a2"]


# ---- both engines, one salt --------------------------------------------------------------------------------------

def test_both_engines_share_a_tenants_blocks_and_only_that_tenants(model_dir, sky, baseline, tmp_path):
    index = tmp_path / "index"
    m = Manifest.load(sky)
    # tenants of their own: the OpenAI test stored P on this constellation for its tenants, and a KVCManager
    # whose index knows nothing of this model asks the satellites (probe_block), where it would find them
    with ConstellationBlockStore.nearest_from_manifest(m, SERVERS, client_options={"station_id": 67}) as store:
        model, tokenizer = load_model("embedded-small", "cpu", "fp32")
        manager = KVCManager(model, tokenizer, store, kv_dtype="fp16", index=RadixIndex(index), policy="fetch",
                             orbit=OWN_INDEX)
        assert manager.add_blocks(P, cache_salt="hA").blocks_stored == 2  # tenant A, through Hugging Face
        out = run_job(tmp_path, model_dir, [{"name": "Z", "connector": connector(sky, index, OWN_INDEX), "requests": [
            request("P-hA", P, salt="hA"), request("P-hB", P, salt="hB"), request("P", P),
            request("S-hB", S, salt="hB")]}], "Z")["Z"]
        assert out["P-hA"]["num_cached_tokens"] == 2 * BLOCK  # hit in vLLM with the same salt
        assert out["P-hB"]["num_cached_tokens"] == 0 and out["P"]["num_cached_tokens"] == 0
        for name in ("P-hA", "P-hB", "P"):
            assert out[name]["tokens"] == baseline["plain"]["P"], name
        assert out["S-hB"]["num_cached_tokens"] == 0  # stored by vLLM for tenant B ...
        hit = manager.get_cache(S, cache_salt="hB")  # ... a hit through Hugging Face with B's salt
        assert hit.source == "index" and hit.prefix_tokens == 2 * BLOCK
        with torch.no_grad():
            tokens = model.generate(hit.input_ids, attention_mask=hit.attention_mask, **cache_arg(model, hit.cache),
                                    max_new_tokens=NEW_TOKENS, do_sample=False)[0, len(S):].tolist()
        assert tokens == baseline["plain"]["S"]
        for salt in ("hA", None):  # another tenant's lookup, or none, finds nothing of B's
            assert manager.get_cache(S, cache_salt=salt).prefix_tokens == 0, salt
