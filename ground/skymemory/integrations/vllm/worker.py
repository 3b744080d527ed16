"""The connector's worker: a PagedWorker (kv.engine) on the constellation its settings name.

Two ground-station ids per rank, one for loads and one for saves (station_id + 2 * rank, and + 1): each store
has its own socket, and a satellite answers a station at the address it last heard it from.
"""

from __future__ import annotations

from skymemory.kv.engine import OrbitRecords, PagedWorker, ServedModel
from skymemory.orbit.manifest import Manifest
from skymemory.store.constellation import ConstellationBlockStore, default_parity, stripe_width

from .config import SCHEDULER_STATION, ConnectorConfig

# open_store's stores seal what they store unless the connector's "seal" is false (ConnectorConfig.seal), and
# KVCManager names a sealed store's blocks in the sealed layout: the connector's roots and index entries name them
# alike from the same setting (kv.format.codec). The default, for code that names blocks without a connector's config.
SEALED = ConnectorConfig.seal


def open_store(config: ConnectorConfig, manifest: Manifest, station_id: int) -> ConstellationBlockStore:
    """A store on the constellation of `manifest`, placing a block on the satellites nearest when it is set, in
    coded stripes of `config.parity` parity chunks, sealing what it stores unless `config.seal` is false."""
    width = stripe_width(config.servers, manifest.planes * manifest.sats)
    parity = default_parity(width) if config.parity is None else config.parity
    return ConstellationBlockStore.nearest_from_manifest(
        manifest, config.servers, route=config.route, seal=config.seal, client_options={"station_id": station_id},
        request_timeout_s=config.load_timeout_s, parity=parity)


class ConstellationWorker(PagedWorker):
    """A PagedWorker on the two constellation stores open_worker opened: closing it closes them."""

    def close(self) -> None:
        super().close()
        self.saver.store.close()
        self.load_store.close()


def open_worker(config: ConnectorConfig, model: ServedModel, index, rank: int = 0) -> ConstellationWorker:
    """The worker of tensor-parallel rank `rank` for `model`, with its load and save stores open; `index` is the
    ground index (kv.engine.open_index)."""
    manifest = Manifest.load(config.manifest)
    station = config.station_id + 2 * rank
    return ConstellationWorker(open_store(config, manifest, station), open_store(config, manifest, station + 1),
                               geometry=model.geometry, index=index, form=model.form,
                               host_tier_bytes=config.host_tier_bytes, load_timeout_s=config.load_timeout_s,
                               orbit=config.orbit_index, groups=model.groups, cache_layout=model.cache_layout)


def open_orbit(config: ConnectorConfig) -> tuple[OrbitRecords, ConstellationBlockStore] | None:
    """The scheduler's records in orbit (kv.index.orbit_records), on a store of its own (station_id + 64: its lookups
    run beside the workers' transfers), or None when the config keeps the index on this host only."""
    if not config.orbit_index:
        return None
    store = open_store(config, Manifest.load(config.manifest), config.station_id + SCHEDULER_STATION)
    return OrbitRecords(store), store
