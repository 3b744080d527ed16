"""Model loading (embedded, local directory, offline hub id, quantised) and `skymemory model`."""

import pytest
import torch

from kv_support import MemoryBlockStore, random_prompt, tiny
from skymemory.cli import main
from skymemory.kv.naming import blocks
from skymemory.kv.model import models
from skymemory.kv.model.device import parse_dtype, pick_device, pick_dtype
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.hf.report import compare_generation


def test_embedded_tiny_is_deterministic_and_the_tinyllama_family():
    a, _ = models.load_model("embedded-tiny", device="cpu", dtype="fp32")
    b, _ = models.load_model("embedded-tiny", device="cpu", dtype="fp32")
    assert blocks.weights_digest(a) == blocks.weights_digest(b)
    assert a.config.model_type == "llama" and a.config.num_key_value_heads == 4


def test_embedded_tinyllama_config_matches_the_paper_model():
    config = models.llama_config(models.EMBEDDED["embedded-tinyllama"])
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size) == (22, 2048, 5632)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (32, 4, 64)
    assert (config.vocab_size, config.max_position_embeddings) == (32000, 2048)
    assert config.rope_parameters["rope_theta"] == 10000.0


def test_device_and_dtype_defaults_and_overrides(monkeypatch):
    monkeypatch.delenv("SKYMEMORY_DEVICE", raising=False)
    monkeypatch.delenv("SKYMEMORY_DTYPE", raising=False)
    cpu = torch.device("cpu")
    assert pick_dtype(cpu) == torch.float32
    assert pick_dtype(torch.device("cuda")) == torch.float16
    assert pick_dtype(cpu, "bf16") == torch.bfloat16
    monkeypatch.setenv("SKYMEMORY_DTYPE", "fp16")
    assert pick_dtype(cpu) == torch.float16
    with pytest.raises(ValueError):
        parse_dtype("int3")
    if not torch.cuda.is_available():
        assert pick_device() == cpu
        with pytest.raises(ValueError):
            pick_device("cuda")


def test_unknown_and_offline_specs_fail_clearly(monkeypatch, tmp_path):
    with pytest.raises(ValueError):
        models.load_model("no-such-model")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not models.downloads_allowed(True)


def test_a_hub_id_not_on_disk_fails_without_touching_the_network(monkeypatch, tmp_path):
    import socket

    lookups = []

    def no_network(host, *args, **kwargs):
        lookups.append(host)
        raise OSError("network use in a test")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("SKYMEMORY_ALLOW_DOWNLOAD", raising=False)
    with pytest.raises(OSError):
        models.load_model("someone/not-downloaded-model", device="cpu")
    assert lookups == []


def test_a_saved_model_directory_loads_with_its_tokenizer(tmp_path):
    model, tokenizer = tiny()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = models.load_model(str(tmp_path), device="cpu", dtype="fp32")
    assert loaded_tokenizer("abc").input_ids == tokenizer("abc").input_ids
    ids = torch.tensor([random_prompt(20, seed=1)])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


@pytest.mark.parametrize("method", ["qint8", "hqq"])  # the paper's two quantisers (Table 3)
def test_quantised_weights_work_with_the_cache(tmp_path, method):
    quantised, tokenizer = models.load_model("embedded-tiny", device="cpu", dtype="fp32", quantize=method)
    plain, _ = tiny()
    assert blocks.model_fingerprint(quantised) != blocks.model_fingerprint(plain)
    assert blocks.model_fingerprint(quantised) == blocks.model_fingerprint(quantised)  # HQQ: no version counters
    manager = KVCManager(quantised, tokenizer, MemoryBlockStore(), block_tokens=16, kv_dtype="fp32", index_dir=tmp_path,
                         policy="fetch")
    prompt = random_prompt(3 * 16 + 4, seed=2)
    manager.add_blocks(prompt)
    comparison = compare_generation(manager, prompt, new_tokens=6)
    assert comparison.prefix_tokens == 48 and comparison.cached == comparison.reference


def test_model_info_prints_the_tinyllama_block_sizes(capsys):
    assert main(["model", "info", "--model", "embedded-tinyllama", "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert "22 layers" in out and "1.100 B" in out
    assert "2,883,648" in out  # fp16 block of 128 tokens: the paper's ~2.9 MB
    assert "1,475,648" in out  # int8


def test_model_verify_runs_on_the_small_model(capsys):
    code = main(["model", "verify", "--model", "embedded-tiny", "--block-tokens", "16", "--blocks", "2",
                 "--prompts", "2", "--new-tokens", "4", "--formats", "fp32,int8"])
    assert code == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert rows["fp32"][1] == "2/2"  # fp32 transport of an fp32 model: identical tokens
    assert set(rows) == {"fp32", "int8"}


@pytest.mark.parametrize("argv", [["model", "info", "--block-tokens", "0"], ["model", "bench", "--prefill-tokens", "x"],
                                  ["model", "verify", "--dtype", "fp8"], ["model", "verify", "--formats", "fp16,fp9"],
                                  ["model", "bench", "--kv", "int4"], ["model"]])
def test_bad_arguments_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


def test_unknown_model_is_one_clear_line(capsys):
    assert main(["model", "info", "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("skymemory model info: error:") and len(err.splitlines()) == 1


def test_missing_hub_model_is_one_clear_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert main(["model", "info", "--model", "someone/not-downloaded"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_hqq_without_the_package_is_a_clear_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "hqq" else real(name, *a))
    model, _ = models.load_model("embedded-tiny", device="cpu")
    with pytest.raises(RuntimeError, match="hqq"):
        models.quantize_weights(model, "hqq")
    with pytest.raises(ValueError):
        models.quantize_weights(model, "int3")


def test_model_bench_runs_on_the_small_model(capsys):
    assert main(["model", "bench", "--model", "embedded-tiny", "--prefill-tokens", "300", "--block-tokens", "64"]) == 0
    out = capsys.readouterr().out
    assert "get_cache 256 tokens" in out and "prefill the 44 uncached tokens" in out


def test_the_big_gpu_architecture_is_described_without_building_it(capsys):
    """embedded-llama3-8b: Llama-3-8B's shapes (its KV is what long prefixes cost); built on CUDA only."""
    assert main(["model", "info", "--model", "embedded-llama3-8b"]) == 0
    out = capsys.readouterr().out
    assert "not measured (embedded-llama3-8b is built on a CUDA device only: pass --device cuda)" in out
    assert "32 layers" in out and "8.030 B" in out and "16,777,280" in out  # a 128-token fp16 block: 16.8 MB
    with pytest.raises(ValueError, match="CUDA device only"):
        models.load_model("embedded-llama3-8b", device="cpu")
    assert main(["model", "bench", "--model", "embedded-llama3-8b", "--device", "cpu"]) == 2
    assert "CUDA device only" in capsys.readouterr().err


def test_model_info_prints_each_group_and_the_break_even_link_rate(capsys):
    """A Mamba-2 hybrid: its attention layer's K/V per token, its recurrent layers' state per snapshot, and Φkv
    (the bytes a prefix fetches ÷ its prefill time here) at each prefix length."""
    assert main(["model", "info", "--model", "embedded-tiny-granite-hybrid", "--prefill-tokens", "256,512"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    assert lines["linear"][1:] == ["3", "-", "62,976"]  # conv + SSM state of three Mamba-2 layers, fp32
    assert lines["full"][1:] == ["1", "256", "-"]  # 2 KV heads x 32 x (K + V) x fp16
    assert "the block that ends a stored prompt also carries the state: 95,824" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("256 ", "512 "))]
    assert [row[0] for row in rows] == ["256", "512"]
    assert all(float(row[2]) > 0 and float(row[3]) > 0 for row in rows)  # prefill timed, Φkv from it
    assert float(rows[0][1]) == round((2 * 32_848 + 95_824 - 32_848) / 1e6, 2)  # 2 blocks, the last with the state


def test_model_info_puts_several_models_side_by_side(capsys):
    assert main(["model", "info", "--model", "embedded-tiny,embedded-tiny-mistral", "--prefill-tokens", "256"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert set(rows) == {"embedded-tiny", "embedded-tiny-mistral"}
    assert "3 full" in rows["embedded-tiny"] and "3 window 64" in rows["embedded-tiny-mistral"]


def test_the_gpu_hybrid_shapes_are_described_without_building_them(capsys):
    """embedded-bamba-9b (tools/cuda_bench.sh, step hybrid): its groups from the meta device, no weights."""
    assert main(["model", "info", "--model", "embedded-bamba-9b"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    assert lines["linear"][1] == "29" and lines["full"][1:3] == ["3", "12,288"]  # 3 x 8 KV heads x 128 x 2 x fp16
    assert "not measured (embedded-bamba-9b is built on a CUDA device only" in out
