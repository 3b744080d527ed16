"""Loading the language model the cache is for.

`load_model(spec)` understands:

* ``"TinyLlama/TinyLlama-1.1B-Chat-v1.0"`` (the paper's model) or any hub id /
  local directory: loaded with transformers' ``from_pretrained``. Only files
  already on disk are used (``local_files_only``) unless downloads are allowed
  explicitly (``allow_download=True`` or ``SKYMEMORY_ALLOW_DOWNLOAD=1``) and
  ``HF_HUB_OFFLINE`` is not set; downloads then run with bounded timeouts.
* ``"default"``: TinyLlama when it is on disk, else ``embedded-tinyllama``.
* ``"embedded-tinyllama"``: the TinyLlama-1.1B architecture (22 layers, hidden
  2048, 4 KV heads of 64) with deterministic random weights built locally, so
  every command works with no network. Built once, then cached as safetensors
  under ``$SKYMEMORY_CACHE`` (default ``~/.cache/skymemory``).
* ``"embedded-tiny"``: the same family scaled down for tests (builds in
  milliseconds, never cached on disk); ``"embedded-small"`` the same with
  32-wide heads, the smallest a serving engine takes (vLLM's CPU attention).
* ``"embedded-llama3-8b"``: the Llama-3-8B architecture (32 layers, hidden
  4096, 8 KV heads of 128; 8.0 B parameters) for big GPUs, where long prefixes
  are the regime in which fetching KV pays. Its random weights are made on the
  CUDA device, in the model dtype, and never written to disk (16 GB in fp16).

Embedded models use the byte-level tokenizer of `skymemory.kv.model.tokenizer`
(259 ids; embedded-tinyllama keeps TinyLlama's 32,000-row vocabulary so its
shapes and KV sizes are the paper's, and ids above 258 decode to nothing).
Their weights are random: the text they generate is meaningless, but every
cache property (sizes, timings, exactness) is that of the real architecture.
Weights are drawn with a fixed seed, then rounded to fp16 (the cached form),
so a fresh build and a cached load give bit-identical models.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from .device import pick_device, pick_dtype
from .tokenizer import VOCAB_SIZE, build_byte_tokenizer

log = logging.getLogger(__name__)

TINYLLAMA = "TinyLlama/TinyLlama-1.1B-Chat-v1.0"
EMBEDDED_FORMAT = 1  # bump when the construction below changes (invalidates the disk cache)


@dataclass(frozen=True)
class EmbeddedSpec:
    """How to build one embedded model: its family (a transformers model type), its configuration and its seed."""

    name: str
    config: dict
    seed: int
    init_std: float
    cache_on_disk: bool
    on_device_only: bool = False  # too big to build on a CPU and copy: made on the CUDA device directly
    family: str = "llama"  # transformers' model_type: llama, mistral, gemma3_text, granitemoehybrid, ...


EMBEDDED: dict[str, EmbeddedSpec] = {
    # TinyLlama-1.1B-Chat-v1.0's published config.
    "embedded-tinyllama": EmbeddedSpec(
        name="embedded-tinyllama",
        config=dict(
            vocab_size=32000,
            hidden_size=2048,
            intermediate_size=5632,
            num_hidden_layers=22,
            num_attention_heads=32,
            num_key_value_heads=4,
            head_dim=64,
            max_position_embeddings=2048,
            rms_norm_eps=1e-5,
            rope_theta=10000.0,
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
        ),
        seed=20240601,
        init_std=0.02,
        cache_on_disk=True,
    ),
    # Same family, small enough for unit tests. vocab covers the byte tokenizer exactly.
    "embedded-tiny": EmbeddedSpec(
        name="embedded-tiny",
        config=dict(
            vocab_size=VOCAB_SIZE,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=3,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=16,
            max_position_embeddings=4096,
            rms_norm_eps=1e-5,
            rope_theta=10000.0,
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
        ),
        seed=1234,
        # Larger than usual so the untrained model's logits depend strongly on the
        # context (otherwise greedy decoding repeats one token and tests see little).
        init_std=0.15,
        cache_on_disk=False,
    ),
    # Meta-Llama-3-8B's published shapes; positions up to 32K so 16K-token prefixes fit.
    "embedded-llama3-8b": EmbeddedSpec(
        name="embedded-llama3-8b",
        config=dict(
            vocab_size=128256,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            max_position_embeddings=32768,
            rms_norm_eps=1e-5,
            rope_theta=500000.0,
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
        ),
        seed=20240418,
        init_std=0.02,
        cache_on_disk=False,
        on_device_only=True,
    ),
}
# embedded-tiny with 32-wide heads: the smallest model serving engines take (vLLM's CPU attention wants a head
# size of 32 or more), for the tests that run one.
EMBEDDED["embedded-small"] = EmbeddedSpec(
    name="embedded-small",
    config={**EMBEDDED["embedded-tiny"].config, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32},
    seed=4321,
    init_std=0.15,
    cache_on_disk=False,
)
# Today's model families, tiny (fast enough for tests; 32-wide heads, as a serving engine wants): each keeps a
# different cache (kv.format.groups). Random weights like the others; larger than usual, so outputs depend on the
# context.
_TINY_FAMILY = dict(vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=4096, bos_token_id=1, eos_token_id=2,
                    pad_token_id=0, tie_word_embeddings=False)
for _spec in (
    # Mistral-style: every layer a sliding window (here 64 tokens)
    EmbeddedSpec("embedded-tiny-mistral", {**_TINY_FAMILY, "num_hidden_layers": 3, "head_dim": 32,
                                           "sliding_window": 64, "rope_theta": 10000.0},
                 seed=5101, init_std=0.15, cache_on_disk=False, family="mistral"),
    # Gemma-3-style: five sliding-window layers (32 tokens) to one full-attention layer
    EmbeddedSpec("embedded-tiny-gemma3", {**_TINY_FAMILY, "num_hidden_layers": 6, "head_dim": 32,
                                          "sliding_window": 32, "query_pre_attn_scalar": 32},
                 seed=5102, init_std=0.15, cache_on_disk=False, family="gemma3_text"),
    # Granite-4.0-H-style: Mamba-2 layers around one attention layer
    EmbeddedSpec("embedded-tiny-granite-hybrid", {**_TINY_FAMILY, "num_hidden_layers": 4,
                                                  "layer_types": ["mamba", "attention", "mamba", "mamba"],
                                                  "mamba_n_heads": 8, "mamba_d_head": 32, "mamba_d_state": 16,
                                                  "mamba_n_groups": 1, "mamba_expand": 2, "num_local_experts": 0,
                                                  "shared_intermediate_size": 256},
                 seed=5103, init_std=0.15, cache_on_disk=False, family="granitemoehybrid"),
    # Qwen3-Next-style: gated delta-net layers (heads of 128, as Qwen3-Next's and as vLLM's CPU kernel takes them),
    # every fourth layer full attention; a small mixture of experts
    EmbeddedSpec("embedded-tiny-qwen3-next", {**_TINY_FAMILY, "num_hidden_layers": 4, "head_dim": 32,
                                              "linear_num_value_heads": 4, "linear_num_key_heads": 2,
                                              "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                                              "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                                              "shared_expert_intermediate_size": 64},
                 seed=5104, init_std=0.15, cache_on_disk=False, family="qwen3_next"),
    # DeepSeek-V3-style multi-head latent attention: the cache keeps one latent per token (K: the compressed
    # KV, V: the rope part), widths that differ
    EmbeddedSpec("embedded-tiny-deepseek-v3", {**_TINY_FAMILY, "num_hidden_layers": 2, "num_key_value_heads": 4,
                                               "moe_intermediate_size": 64, "first_k_dense_replace": 1,
                                               "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1,
                                               "topk_group": 1, "q_lora_rank": 64, "kv_lora_rank": 64,
                                               "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32},
                 seed=5105, init_std=0.15, cache_on_disk=False, family="deepseek_v3"),
    # A Granite-4.0-H-style hybrid at the 1B scale, for benchmarks on a CPU host: 40 layers of which 4 attention
    # (12 query / 4 KV heads of 128, no positional encoding) and 36 Mamba-2 (48 heads of 64, state 128), as the
    # public descriptions of Granite-4.0-H-1B give them; hidden 1536, a 32,000-id vocabulary (not its 100K:
    # a smaller head favours no cache). 1.36 B parameters; built once (17 s), then cached on disk.
    EmbeddedSpec("embedded-granite-h-1b", dict(
        vocab_size=32000, hidden_size=1536, num_hidden_layers=40, num_attention_heads=12, num_key_value_heads=4,
        layer_types=["attention" if i in (10, 13, 17, 27) else "mamba" for i in range(40)],
        mamba_n_heads=48, mamba_d_head=64, mamba_d_state=128, mamba_n_groups=1, mamba_expand=2, mamba_d_conv=4,
        num_local_experts=0, shared_intermediate_size=4096, max_position_embeddings=32768,
        position_embedding_type="nope", tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0),
        seed=20251002, init_std=0.02, cache_on_disk=True, family="granitemoehybrid"),
    # For the GPU script (tools/cuda_bench.sh, step hybrid): published shapes, made on the CUDA device like
    # embedded-llama3-8b. Mistral-7B-v0.1 (transformers' MistralConfig defaults: 32 layers, every one a
    # 4,096-token window) and Bamba-9B (BambaConfig's defaults: 32 layers, Mamba-2 with 128 heads of 64 and a
    # 256-wide state) with its three attention layers at 9, 18 and 27.
    EmbeddedSpec("embedded-mistral-7b", dict(max_position_embeddings=65536, bos_token_id=1, eos_token_id=2),
                 seed=20231010, init_std=0.02, cache_on_disk=False, on_device_only=True, family="mistral"),
    EmbeddedSpec("embedded-bamba-9b", dict(attn_layer_indices=[9, 18, 27], max_position_embeddings=65536,
                                           bos_token_id=1, eos_token_id=2, pad_token_id=0),
                 seed=20241218, init_std=0.02, cache_on_disk=False, on_device_only=True, family="bamba"),
):
    EMBEDDED[_spec.name] = _spec
FAMILIES = {"sliding window": "embedded-tiny-mistral", "sliding window + full": "embedded-tiny-gemma3",
            "Mamba-2 hybrid": "embedded-tiny-granite-hybrid", "gated delta-net hybrid": "embedded-tiny-qwen3-next",
            "MLA": "embedded-tiny-deepseek-v3"}
ON_DEVICE_MARGIN = 2 * 1024**3  # free GPU memory wanted beyond the weights (activations, KV)


def cache_dir() -> Path:
    """Root of SkyMemory's on-disk caches ($SKYMEMORY_CACHE or ~/.cache/skymemory)."""
    return Path(os.environ.get("SKYMEMORY_CACHE") or Path.home() / ".cache" / "skymemory")


def model_config(spec: EmbeddedSpec):
    """The transformers configuration of an embedded model of any family."""
    if spec.family == "llama":
        return llama_config(spec)
    fields = dict(spec.config)
    rope_theta = fields.pop("rope_theta", None)
    if rope_theta is not None:
        fields["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta}
    config = AutoConfig.for_model(spec.family, **fields, initializer_range=spec.init_std)
    config.name_or_path = spec.name
    return config


def llama_config(spec: EmbeddedSpec) -> LlamaConfig:
    if spec.family != "llama":
        raise ValueError(f"{spec.name} is a {spec.family} model, not a Llama: use model_config")
    fields = dict(spec.config)
    rope_theta = fields.pop("rope_theta")
    config = LlamaConfig(
        **fields,
        initializer_range=spec.init_std,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        attention_bias=False,
        mlp_bias=False,
    )
    config.name_or_path = spec.name
    return config


def build_spec(spec: EmbeddedSpec):
    """Random-init a spec's model with its fixed seed, then round weights to fp16 (the canonical form), on the CPU,
    never cached (build_embedded caches the EMBEDDED ones; a spec of one's own, e.g. a few layers of one, too)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = LlamaForCausalLM(llama_config(spec)) if spec.family == "llama" else \
            AutoModelForCausalLM.from_config(model_config(spec))
    cast_parameters(model, torch.float16)
    model.config.name_or_path = spec.name
    return model.eval()


def _embedded_dir(spec: EmbeddedSpec) -> Path:
    return cache_dir() / "models" / f"{spec.name}-v{EMBEDDED_FORMAT}"


def _build_on_device(spec: EmbeddedSpec, device: torch.device, dtype: torch.dtype) -> LlamaForCausalLM:
    """Random weights made directly on a CUDA device in `dtype` (a fixed seed; never on the CPU or on disk)."""
    if device.type != "cuda":
        raise ValueError(f"{spec.name} is built on a CUDA device only (its fp16 weights are "
                         f"{parameter_bytes(spec, torch.float16) / 1e9:.0f} GB): pass --device cuda")
    need = parameter_bytes(spec, dtype) + ON_DEVICE_MARGIN
    free, _total = torch.cuda.mem_get_info(device)
    if free < need:
        raise ValueError(f"{spec.name} needs {need / 1e9:.1f} GB of free GPU memory, {device} has {free / 1e9:.1f} GB")
    with torch.random.fork_rng(devices=[device]), torch.device(device):
        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_config(model_config(spec), dtype=dtype)
    model.config.name_or_path = spec.name
    return model.eval()


def parameter_count(config) -> int:
    """Parameters of a model, from its configuration alone (a Llama's by formula, others built on the meta device)."""
    if getattr(config, "model_type", "llama") != "llama":
        with torch.device("meta"):
            return sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    h, i, n, v = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    head_dim = getattr(config, "head_dim", None) or h // config.num_attention_heads
    q = config.num_attention_heads * head_dim
    kv = config.num_key_value_heads * head_dim
    per_layer = 2 * h * q + 2 * h * kv + 3 * h * i + 2 * h  # q and o, k and v, the MLP, two norms
    embeddings = v * h * (1 if config.tie_word_embeddings else 2)
    return n * per_layer + embeddings + h


def parameter_bytes(spec: EmbeddedSpec, dtype: torch.dtype) -> int:
    """Bytes of the weights of an embedded model in `dtype` (from its shapes, nothing built)."""
    return parameter_count(model_config(spec)) * torch.empty(0, dtype=dtype).element_size()


def build_embedded(name: str, *, use_disk_cache: bool = True) -> tuple[torch.nn.Module, dict]:
    """The embedded model `name` in fp16 on CPU, and how it was obtained ({'source', 'seconds'})."""
    spec = EMBEDDED[name]
    if spec.on_device_only:
        raise ValueError(f"{name} is built on a CUDA device only: use load_model({name!r}, device='cuda')")
    directory = _embedded_dir(spec)
    started = time.perf_counter()
    if spec.cache_on_disk and use_disk_cache and (directory / "config.json").exists():
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float16, local_files_only=True)
        model.config.name_or_path = spec.name
        return model.eval(), {"source": f"disk cache {directory}", "seconds": time.perf_counter() - started}
    model = build_spec(spec)
    info = {"source": "built", "seconds": time.perf_counter() - started}
    if spec.cache_on_disk and use_disk_cache:
        _save_atomically(model, directory)
    return model, info


def save_model_dir(spec: str, directory: str | os.PathLike) -> Path:
    """An embedded model as a model folder another engine loads (vLLM): weights (fp16), config, tokenizer.

    The folder's model is load_model(spec)'s, bit for bit; a KVCManager on load_model(spec) and an engine
    serving the folder name blocks alike when the engine's side says the model is `spec` (kv.naming.identity).
    """
    spec = resolve_spec(spec)
    if spec not in EMBEDDED:
        raise ValueError(f"{spec!r} is not an embedded model: serve its own folder or hub id")
    directory = Path(directory)
    model, _ = build_embedded(spec)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    build_byte_tokenizer().save_pretrained(directory)
    (directory / "skymemory.json").write_text(json.dumps({"format": EMBEDDED_FORMAT, "spec": spec}))
    return directory


def _save_atomically(model: torch.nn.Module, directory: Path) -> None:
    """save_pretrained into a temporary sibling, then rename: readers never see half a model."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=directory.name + ".tmp-", dir=directory.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        (tmp / "skymemory.json").write_text(json.dumps({"format": EMBEDDED_FORMAT}))
        os.rename(tmp, directory)
    except OSError as exc:  # another process won the race, or the disk is full: keep going without a cache
        log.warning("could not cache %s in %s: %s", model.config.name_or_path, directory, exc)
        shutil.rmtree(tmp, ignore_errors=True)


def cast_parameters(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Convert the weights to `dtype` in place, like from_pretrained(dtype=...) does.

    Unlike `model.to(dtype)`, this leaves non-persistent buffers alone: the
    rotary `inv_freq` stays fp32 (fp16 frequencies would shift every position).
    """
    for parameter in model.parameters():
        if parameter.is_floating_point() and parameter.dtype != dtype:
            parameter.data = parameter.data.to(dtype)
    model.config.dtype = dtype


def downloads_allowed(allow_download: bool | None) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    if allow_download is None:
        return os.environ.get("SKYMEMORY_ALLOW_DOWNLOAD", "") == "1"
    return allow_download


@contextlib.contextmanager
def hub_access(allow_download: bool | None = None):
    """Yield local_files_only for from_pretrained; without downloads, the hub is switched offline.

    `local_files_only=True` alone is not enough: huggingface_hub still looks
    up huggingface.co (e.g. for its user-agent registry) unless it is in
    offline mode, and it reads HF_HUB_OFFLINE only when first imported.
    """
    if downloads_allowed(allow_download):
        # huggingface_hub reads these when it starts a request; keep every wait bounded.
        os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
        os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "30")
        yield False
        return
    from huggingface_hub import constants

    saved = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield True
    finally:
        constants.HF_HUB_OFFLINE = saved


def _load_pretrained(spec: str, dtype: torch.dtype, allow_download: bool | None):
    """from_pretrained from disk; from the hub only if allowed, with bounded network timeouts."""
    with hub_access(allow_download) as local_only:
        tokenizer = AutoTokenizer.from_pretrained(spec, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(spec, dtype=dtype, local_files_only=local_only)
    return model.eval(), tokenizer


def load_config(spec: str):
    """(resolved spec, config) of a model, without building or loading its weights."""
    from transformers import AutoConfig

    spec = resolve_spec(spec)
    if spec in EMBEDDED:
        return spec, model_config(EMBEDDED[spec])
    with hub_access() as local_only:
        return spec, AutoConfig.from_pretrained(spec, local_files_only=local_only)


def tinyllama_on_disk() -> bool:
    """True when TinyLlama can be loaded without the network."""
    try:
        from huggingface_hub import try_to_load_from_cache

        with hub_access(False):
            return isinstance(try_to_load_from_cache(TINYLLAMA, "config.json"), str)
    except Exception:  # noqa: BLE001 - any failure means "not usable offline"
        return False


def resolve_spec(spec: str) -> str:
    """'default' -> TinyLlama or embedded-tinyllama; anything that cannot be a model is a ValueError."""
    if spec == "default":
        return TINYLLAMA if tinyllama_on_disk() else "embedded-tinyllama"
    if spec not in EMBEDDED and not Path(spec).exists() and "/" not in spec:
        raise ValueError(
            f"unknown model {spec!r}: give a local directory, a hub id, 'default' or one of {sorted(EMBEDDED)}"
        )
    return spec


def load_model(
    spec: str = "default",
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    *,
    quantize: str | None = None,
    allow_download: bool | None = None,
):
    """Load (model, tokenizer) for `spec`, on `device` in `dtype` (both chosen automatically by default).

    `quantize`: None, "qint8" or "qint4" (optimum-quanto weight quantisation),
    or "hqq" (needs the hqq package). The model is in eval mode.
    """
    spec = resolve_spec(spec)
    torch_device = pick_device(device)
    torch_dtype = pick_dtype(torch_device, dtype)
    if spec in EMBEDDED and EMBEDDED[spec].on_device_only:
        started = time.perf_counter()
        model = _build_on_device(EMBEDDED[spec], torch_device, torch_dtype)
        log.info("%s: built on %s in %.2f s", spec, torch_device, time.perf_counter() - started)
        tokenizer = build_byte_tokenizer()
    elif spec in EMBEDDED:
        model, info = build_embedded(spec)
        log.info("%s: %s in %.2f s", spec, info["source"], info["seconds"])
        tokenizer = build_byte_tokenizer()
        cast_parameters(model, torch_dtype)
    else:
        model, tokenizer = _load_pretrained(spec, torch_dtype, allow_download)
    model = model.to(torch_device)
    if quantize:
        quantize_weights(model, quantize)
    return model, tokenizer


def quantize_weights(model, method: str) -> None:
    """Quantise the model's linear weights in place (activations stay in the model dtype)."""
    if method in ("qint8", "qint4"):
        from optimum.quanto import freeze, qint4, qint8, quantize

        quantize(model, weights={"qint8": qint8, "qint4": qint4}[method])
        freeze(model)
    elif method == "hqq":
        import importlib.util

        if importlib.util.find_spec("hqq") is None:
            raise RuntimeError("HQQ quantisation needs the 'hqq' package, which is not installed")
        from hqq.core.quantize import BaseQuantizeConfig, HQQLinear  # type: ignore[import-not-found]

        config = BaseQuantizeConfig(nbits=8, group_size=64)
        for name, module in list(model.named_modules()):
            for child_name, child in list(module.named_children()):
                if isinstance(child, torch.nn.Linear) and child_name != "lm_head":
                    setattr(module, child_name, HQQLinear(child, config, compute_dtype=model.dtype,
                                                                 device=str(model.device)))
    else:
        raise ValueError(f"unknown quantisation {method!r}; choose qint8, qint4 or hqq")
    model.skymemory_quantization = method  # part of the cache fingerprint
