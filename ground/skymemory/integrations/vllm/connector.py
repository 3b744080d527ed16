"""SkyMemoryConnector: the constellation as a vLLM KV connector (KVConnectorBase_V1, tested with vLLM 0.32.0).

vLLM marks this API experimental, so this class stays a thin adapter: it
translates vLLM's calls and objects into the two engine-neutral sides
(kv.engine's PagedScheduler and PagedWorker) and back. One class serves both
roles; vLLM makes one object per role, in the engine-core process (scheduler)
and in the worker process.

What a user passes (README, "Serve with vLLM"):

    KVTransferConfig(kv_connector="SkyMemoryConnector", kv_connector_module_path="skymemory.integrations.vllm",
                     kv_role="kv_both", kv_load_failure_policy="recompute",
                     kv_connector_extra_config={"manifest": "run/manifest.json"})

kv_role says what the server does with the cache (Prefill-as-a-Service, seed 003): kv_both loads and stores (a
shared cache); kv_producer, a prefill site, stores every prompt's full blocks and loads nothing; kv_consumer, a
decode site, loads and stores nothing. A request the router (skymemory route) had prefilled at a prefill site
carries kv_transfer_params {"skymemory_prefilled_blocks": n}: the decode site asks the orbit again while fewer of
those n blocks are found (their uploads may still be under way), for no longer than recomputing the prompt would
take there (kv.paged.paged_scheduler).

with the engine's block_size equal to SkyMemory's block (128 tokens), and a
request may ask its own policy: SamplingParams(extra_args={"kv_transfer_params":
{"skymemory_policy": "recompute"}}). Every finished request that had cached
blocks says what was decided in RequestOutput.kv_transfer_params["skymemory"].

Models whose layers keep different state (sliding windows beside full attention, Mamba / gated delta-net
layers) run with vLLM's hybrid allocator on (SupportsHMA): one page table per group of layers
(kv_groups). Their blocks carry each attention layer's K/V and, in the block ending a stored prompt, the
recurrent layers' state; they load whole before the request runs (vLLM waits for them: an asynchronous
load), and a failed load is named by its request. A model with recurrent layers needs vLLM's prefix
caching on, which keeps their state at block boundaries.

A request's blocks are keyed as vLLM's own prefix cache keys them (kv.naming.extra_keys):
its cache salt, LoRA adapter (by a fingerprint of the adapter folder's weights),
media and prompt embeddings; `request_keys` reads them off vLLM's Request.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from vllm.config import get_layers_from_vllm_config
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    KVConnectorWorkerMetadata,
    SupportsHMA,
)
from vllm.model_executor.layers.attention.attention import Attention
from vllm.model_executor.models.utils import extract_layer_index

from skymemory.kv.engine import (
    Media,
    PageGroups,
    PagedLayout,
    PagedScheduler,
    PagedWorker,
    RequestKeys,
    ServedModel,
    StepPlan,
    Unkeyable,
    WorkerReport,
    adapter_dir_fingerprint,
    check_servable,
    embeds_hashes,
    open_index,
)

from .block_table import pages
from .config import PREFILLED_PARAM, ConfigError, ConnectorConfig
from .kv_groups import check_recurrent_serving, engine_groups
from .worker import open_orbit, open_worker

log = logging.getLogger(__name__)

TESTED_VLLM = "0.32.0"
POLICY_PARAM = "skymemory_policy"  # a request's own policy, in its kv_transfer_params
# what each of vLLM's kv_role values does with the cache: (loads, saves)
ROLES = {"kv_both": (True, True), "kv_producer": (False, True), "kv_consumer": (True, False)}
# the kinds of extra keys vLLM's prefix cache gives blocks (generate_block_hash_extra_keys), each folded in by
# request_keys; a kind not here is one SkyMemory does not key: such a request is not cached
KEYED_KINDS = ("lora", "mm", "cache_salt", "prompt_embeds")


def request_keys(request, block_tokens: int) -> RequestKeys:
    """What a vLLM Request's blocks are keyed by besides their tokens, as SkyMemory keys them; raises Unkeyable."""
    _check_kinds(request, block_tokens)
    lora = request.lora_request
    # by the adapter's weights, not the name or id this server gave it (another server's may differ)
    adapter = adapter_dir_fingerprint(lora.lora_path) if lora is not None else None
    media = []
    for feature in request.mm_features or ():
        # mm_hash: vLLM's hash of the processed input, without the LoRA prefix `identifier` may carry
        identifier = feature.mm_hash or feature.identifier
        if not identifier:
            raise Unkeyable("a medium without an identifier", f"a {feature.modality} input vLLM gave no hash")
        media.append(Media(str(identifier), int(feature.mm_position.offset), int(feature.mm_position.length)))
    embeds = request.prompt_embeds
    return RequestKeys(cache_salt=request.cache_salt or None, adapter=adapter, media=tuple(media),
                       embeds=embeds_hashes(embeds, block_tokens) if embeds is not None else ())


def _check_kinds(request, block_tokens: int) -> None:
    """Every kind of key vLLM's own prefix cache gives this request's blocks is one that request_keys folds in."""
    from vllm.v1.core.kv_cache_utils import generate_block_hash_extra_keys

    mm_index = 0
    for start in range(0, request.num_prompt_tokens - block_tokens + 1, block_tokens):
        try:
            keys, mm_index = generate_block_hash_extra_keys(request, start, start + block_tokens, mm_index)
        except Exception as exc:  # noqa: BLE001 - an input vLLM itself cannot key (a medium without its hash)
            raise Unkeyable("an input vLLM's prefix cache cannot key", repr(exc)) from None
        for key in keys or ():
            kind = key[0] if isinstance(key, tuple) and key and isinstance(key[0], str) else type(key).__name__
            if kind not in KEYED_KINDS:
                raise Unkeyable(f"a {kind!r} input", "vLLM keys blocks by it; SkyMemory does not know it")


def prompt_of(request) -> list[int]:
    """The prompt's token ids as vLLM hashes them (zeros where the prompt came as embeddings)."""
    return list(request.all_token_ids[:request.num_prompt_tokens])


def _prefilled(request, params: dict) -> int:
    """The blocks a prefill site stored for this request (its kv_transfer_params say), 0 when none or not a
    whole number (logged: it is then matched as any other request)."""
    value = params.get(PREFILLED_PARAM, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        log.warning("SkyMemory: request %s: %s must be a whole number >= 0, got %r: not waited on",
                    request.request_id, PREFILLED_PARAM, value)
        return 0
    return value


@dataclass
class SkyMemoryMetadata(KVConnectorMetadata):
    plan: StepPlan


@dataclass
class SkyMemoryWorkerMetadata(KVConnectorWorkerMetadata):
    report: WorkerReport

    def aggregate(self, other: "SkyMemoryWorkerMetadata") -> "SkyMemoryWorkerMetadata":
        return SkyMemoryWorkerMetadata(self.report.merged(other.report))


class SkyMemoryConnector(KVConnectorBase_V1, SupportsHMA):
    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        transfer = vllm_config.kv_transfer_config
        if transfer.kv_load_failure_policy != "recompute":
            raise ConfigError("SkyMemory connector: set KVTransferConfig(kv_load_failure_policy='recompute') (with "
                              f"{transfer.kv_load_failure_policy!r} a request whose cached blocks cannot be fetched "
                              "ends in an error instead of being recomputed)")
        if transfer.kv_role not in ROLES:
            raise ConfigError(f"SkyMemory connector: kv_role must be one of {', '.join(ROLES)}, got "
                              f"{transfer.kv_role!r}")
        self.loads, self.saves = ROLES[transfer.kv_role]
        parallel = vllm_config.parallel_config
        if parallel.tensor_parallel_size * parallel.pipeline_parallel_size != 1:
            raise ConfigError("SkyMemory connector: one worker only (tensor and pipeline parallel size 1): a block "
                              "holds every KV head of every layer")
        model = vllm_config.model_config
        self.config = ConnectorConfig.from_extra(transfer.kv_connector_extra_config, served_model=model.model)
        self.block_tokens = vllm_config.cache_config.block_size
        groups, layout, self._attention_names, self._recurrent_names = None, None, [], []
        if kv_cache_config is not None:
            check_recurrent_serving(vllm_config, kv_cache_config)
            groups, layout, self._attention_names, self._recurrent_names = engine_groups(kv_cache_config,
                                                                                         self.config.model)
        served = ServedModel.of(self.config.model, model.hf_text_config, block_tokens=self.block_tokens,
                                kv_format=self.config.kv_format, sealed=self.config.seal, groups=groups,
                                cache_layout=layout)
        self.geometry = served.geometry
        self.groups = served.groups or PageGroups.one_table(served.geometry.layers)
        index = open_index(self.config.index_dir)
        self._scheduler: PagedScheduler | None = None
        self._worker: PagedWorker | None = None
        self._layer_of: dict[str, int] = {}  # worker: vLLM's layer names -> layer numbers
        self._layer_names: list[str] = []
        self._caches: list = []
        self._state_caches: list = []  # hybrid: the recurrent layers' caches, in layer order
        self._loaded: set[str] = set()  # hybrid: requests whose load ended since vLLM last asked (get_transfer_results)
        self._failed: set[str] = set()
        self._orbit_store = None  # the scheduler's store for its orbit lookups (open_orbit), closed at shutdown
        if role == KVConnectorRole.SCHEDULER:
            orbit = open_orbit(self.config)
            if orbit is not None:
                orbit, self._orbit_store = orbit
            self._scheduler = served.scheduler(model.dtype, index, self.config.policy, orbit, loads=self.loads,
                                               saves=self.saves, prefilled_wait_s=self.config.load_timeout_s)
        else:
            self._worker = open_worker(self.config, served, index)
        log.info("SkyMemory connector (%s, %s): constellation %s, model %s, policy %s, KV %s, index %s", role.name,
                 transfer.kv_role, self.config.manifest, self.config.model, self.config.policy, self.config.kv_format,
                 index.path)

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config) -> str | None:
        """No layout of its own (the pages' is probed: kv.paged.paged). Asked while vLLM sets its attention up, before
        it sizes its caches: a model the connector cannot serve is refused here, in one sentence (check_servable:
        a layer kind the cache does not carry, or recurrent layers with vLLM's hybrid allocator turned off),
        before vLLM fails on it in words of its own."""
        model = vllm_config.model_config
        extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
        check_servable(extra.get("model") or model.model, model.hf_text_config,
                       hybrid_allocator=not vllm_config.scheduler_config.disable_hybrid_kv_cache_manager)
        return None

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a cache: a block that is not saved is recomputed later, nothing waits for it

    # ---- scheduler side -----------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int) -> tuple[int | None, bool]:
        params = request.kv_transfer_params or {}
        tokens = self._scheduler.match(request.request_id, prompt_of(request), num_computed_tokens,
                                       policy=params.get(POLICY_PARAM), prefilled_blocks=_prefilled(request, params),
                                       keys=lambda: request_keys(request, self.block_tokens))
        # a dense model's blocks load during the step's forward, layer by layer; a hybrid one's whole, before
        # the request runs (vLLM copies a recurrent layer's state before any layer runs)
        return tokens, bool(tokens) and self.groups.hybrid

    def _rows(self, tables) -> list:
        """vLLM's per-group block tables as rows of pages (kv.paged.page_groups; None for its null block)."""
        return self.groups.rows([pages(table) for table in tables])

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        self._scheduler.allocated(request.request_id, self._rows(blocks.get_block_ids()), num_external_tokens)

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        # prompt None: each new request is saved under the hashes it was matched with (its salt is not in r)
        new = [(r.req_id, None, self._rows(r.block_ids), r.num_computed_tokens)
               for r in scheduler_output.scheduled_new_reqs]
        cached = scheduler_output.scheduled_cached_reqs
        running = [(req_id, self._rows(cached.new_block_ids[i]) if cached.new_block_ids[i] else None,
                    req_id in cached.resumed_req_ids, cached.num_computed_tokens[i])
                   for i, req_id in enumerate(cached.req_ids)]
        # the recurrent layers' states this step leaves at block boundaries, in the pages vLLM names (its
        # prefix caching's): the one after a prompt's last whole block is saved with that block
        block_state = getattr(scheduler_output, "kv_connector_block_state", None)
        offered = block_state.boundary_state_offloads if block_state is not None else None
        return SkyMemoryMetadata(self._scheduler.step(new, running, dict(scheduler_output.num_scheduled_tokens),
                                                      offered))

    def update_connector_output(self, connector_output) -> None:
        meta = connector_output.kv_connector_worker_meta
        if isinstance(meta, SkyMemoryWorkerMetadata):
            self._scheduler.observe(meta.report)

    def request_finished(self, request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        said = self._scheduler.finished(request.request_id)
        return False, ({"skymemory": said} if said else None)

    def request_finished_all_groups(self, request, block_ids: tuple[list[int], ...]) -> tuple[bool, dict | None]:
        return self.request_finished(request, [])  # its pages were copied out when its blocks were complete

    # ---- worker side --------------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict) -> None:
        names = self._attention_names or sorted(kv_caches, key=extract_layer_index)
        self._layer_of = {name: layer for layer, name in enumerate(names)}
        self._caches = [kv_caches[name] for name in names]
        self._state_caches = [kv_caches[name] for name in self._recurrent_names]
        self._layer_names = names

    def _ready_worker(self) -> PagedWorker:
        """The worker with the engine's caches and their page layout (probed once, with a layer's own write)."""
        worker = self._worker
        if worker.layout is None:
            first = self._caches[0]
            if any(c.shape != first.shape or c.dtype != first.dtype for c in self._caches):
                raise ConfigError("SkyMemory connector: the layers' KV caches differ in shape or dtype")
            layer = get_layers_from_vllm_config(self._vllm_config, Attention, self._layer_names[:1])[
                self._layer_names[0]]
            layout = PagedLayout.probe(
                lambda keys, values, cache, slots: layer.impl.do_kv_cache_update(layer, keys, values, cache, slots),
                tuple(first.shape[1:]), first.dtype, kv_heads=self.geometry.kv_heads, block_tokens=self.block_tokens,
                head_dim=self.geometry.head_dim, device=first.device)
            worker.register(self._caches, layout, self._state_caches)
        return worker

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        if self._worker is not None:
            self._worker.begin_step()

    def start_load_kv(self, forward_context, **kwargs) -> None:
        plan = self._get_connector_metadata().plan
        if plan.loads and self.groups.hybrid:  # vLLM calls this after the forward for such loads: they wait
            outcome = self._ready_worker().load_whole(plan.loads)
            self._loaded |= outcome.loaded
            self._failed |= {req_id for req_id, _ in outcome.failed}
        elif plan.loads:
            self._ready_worker().start_loads(plan.loads)

    def wait_for_layer_load(self, layer_name: str) -> None:
        layer = self._layer_of.get(layer_name)
        if layer is not None:
            self._worker.wait_layer(layer)

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs) -> None:
        pass  # the step's new blocks are copied out once the forward is over (wait_for_save)

    def wait_for_save(self) -> None:
        plan = self._get_connector_metadata().plan
        worker = self._ready_worker() if plan.saves else self._worker
        worker.end_step(plan)

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """A hybrid model's loads that ended: loaded, or failed (vLLM recomputes those requests)."""
        loaded, failed = self._loaded | self._failed, self._failed
        self._loaded, self._failed = set(), set()
        return KVConnectorTransferResults(finished_recving=loaded, failed_recving=failed)

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._worker.take_load_errors() if self._worker is not None else set()

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        report = self._worker.take_report() if self._worker is not None else None
        return SkyMemoryWorkerMetadata(report) if report else None

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.close()
        if self._orbit_store is not None:
            self._orbit_store.close()
