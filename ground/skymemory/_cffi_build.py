"""cffi build script (API mode) for `skymemory._native`: the flight codec, CRC32C and geometry.

setup.py names this file in `cffi_modules`, so `pip install .` / `pip install -e .`
compile the core C sources (cfs_apps/skymem_core/fsw/src) into the Python
package: the ground then encodes and checks packets with the very code the
satellites run. `SKYMEM_CORE_DIR` may point at another skymem_core tree for a
manual build (`python _cffi_build.py`); setuptools builds need it inside the repo.
"""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

REPO = Path(__file__).resolve().parents[2]
CORE = Path(os.environ.get("SKYMEM_CORE_DIR", REPO / "cfs_apps" / "skymem_core"))
# skymem_auth + skymem_sha256 + skymem_polyval + skymem_aes: the fast path signs SET_CHUNK like the satellites verify it
SOURCES = ["skymem_codec.c", "skymem_crc32c.c", "skymem_geometry.c", "skymem_auth.c", "skymem_sha256.c",
           "skymem_polyval.c", "skymem_aes.c"]
# the ground's batched transfer (POSIX sockets: not part of the portable flight core)
CSRC = Path(__file__).resolve().parent / "csrc"
GROUND_SOURCES = ["skymem_bulk.c"]


def core_sources() -> list[Path]:
    return [CORE / "fsw" / "src" / name for name in SOURCES] + [CSRC / name for name in GROUND_SOURCES]


def sources_present() -> bool:
    return all(p.is_file() for p in core_sources()) and all(
        (CORE / "fsw" / "inc" / h).is_file() for h in ("skymem_codec.h", "skymem_crc32c.h", "skymem_geometry.h",
                                                 "skymem_auth.h", "skymem_sha256.h", "skymem_polyval.h",
                                                 "skymem_aes.h")) \
        and (CSRC / "skymem_bulk.h").is_file()


CDEF = """
typedef struct { uint16_t dst_plane, dst_sat; uint16_t src_plane, src_sat; uint16_t via_plane, via_sat;
                 uint32_t request_id; uint8_t ttl, hops, flags, reserved; } skymem_route_t;
typedef struct { uint8_t block_hash[32]; uint32_t chunk_id; uint32_t chunk_count; uint64_t created_ms;
                 uint32_t crc32c; uint16_t data_len; uint8_t gossip_radius; uint8_t flags; } skymem_chunk_desc_t;
typedef struct { uint16_t ground; uint16_t via_plane, via_sat; } skymem_origin_t;
typedef struct { uint16_t plane, sat; uint32_t cmd_count, err_count, chunks; uint64_t bytes_used, bytes_budget;
                 uint32_t lru_evictions, blocks_purged; uint32_t rx_packets, tx_packets, forwarded, dropped,
                 invalid, auth_failures; uint32_t migrated_out, migrated_in; uint64_t mission_time_ms;
                 uint32_t uptime_s; ...; } skymem_stats_t;
typedef struct { uint16_t mid; uint8_t version; uint8_t is_cmd; uint8_t has_sec_hdr; uint16_t apid;
                 uint8_t seq_flags; uint16_t seq_count; size_t total_len; } skymem_pri_hdr_t;
typedef struct {
    skymem_pri_hdr_t pri; uint16_t mid; uint8_t is_cmd; uint8_t cc; uint32_t tlm_seconds; uint16_t tlm_subsecs;
    uint8_t has_route; skymem_route_t route; const uint8_t *payload; size_t payload_len; const uint8_t *auth;
    uint8_t block_hash[32]; uint8_t has_block_hash; uint32_t chunk_id; uint32_t first, count, stride;
    uint32_t evict_id; uint8_t radius; uint16_t target_plane, target_sat; uint16_t param_id;
    uint32_t param_value; skymem_chunk_desc_t desc; const uint8_t *data; uint8_t has_origin; skymem_origin_t origin;
    uint8_t reply_kind, reply_cc, reply_status; uint32_t reply_chunk_id, reply_value; skymem_stats_t stats;
    ...;
} skymem_msg_t;

const char *skymem_strerror(int err);
double skymem_orbital_period_s(double altitude_m);
double skymem_intra_plane_distance_m(double altitude_m, unsigned sats_per_plane);
double skymem_inter_plane_distance_max_m(double altitude_m, unsigned planes);
double skymem_inter_plane_distance_m(double altitude_m, unsigned planes, unsigned sats_per_plane,
                                     double inclination_rad, double t_s, int walker_phase);
double skymem_grid_distance_m(double d_m, double d_n, int along_plane_hops, int across_plane_hops);
double skymem_slant_range_m(double ground_distance_m, double altitude_m);
double skymem_light_time_s(double distance_m);
uint32_t skymem_crc32c(const uint8_t *data, size_t len);
uint32_t skymem_crc32c_update(uint32_t crc, const uint8_t *data, size_t len);
uint32_t skymem_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
uint32_t skymem_crc32c_fold(const uint32_t *chunk_crcs, uint32_t count, uint32_t chunk_bytes, uint64_t total_len);
uint8_t skymem_cmd_checksum(const uint8_t *pkt, size_t len);
int skymem_parse(const uint8_t *buf, size_t len, skymem_msg_t *out);
int skymem_build_cmd(uint8_t *buf, size_t cap, uint16_t mid, uint8_t cc, uint16_t seq,
                     const uint8_t *payload, size_t payload_len);
int skymem_build_data_cmd(uint8_t *buf, size_t cap, uint8_t cc, uint16_t seq, const skymem_route_t *route,
                          const uint8_t *body, size_t body_len);
int skymem_build_set_param(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                           uint16_t param_id, uint32_t value);
int skymem_build_set_chunk(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                           const skymem_chunk_desc_t *desc, const uint8_t *data);
int skymem_build_set_chunk_origin(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                                  const skymem_chunk_desc_t *desc, const skymem_origin_t *origin,
                                  const uint8_t *data);
int skymem_build_get_chunk(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                           const uint8_t *hash, uint32_t chunk_id);
int skymem_build_probe(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                       const uint8_t *hash, uint32_t chunk_id);
int skymem_build_get_chunks(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                            const uint8_t *hash, uint32_t first, uint32_t count, uint32_t stride);
int skymem_build_evict(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                       const uint8_t *hash, uint32_t evict_id, uint8_t radius);
int skymem_build_migrate(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                         const uint8_t *hash, uint32_t first, uint32_t count, uint32_t stride,
                         uint16_t target_plane, uint16_t target_sat);
int skymem_build_tlm(uint8_t *buf, size_t cap, uint16_t mid, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                     const uint8_t *payload, size_t payload_len);
int skymem_build_reply(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                       const skymem_route_t *route, uint8_t kind, uint8_t cc, uint8_t status, uint32_t chunk_id,
                       uint32_t value, const uint8_t *body, size_t body_len);
int skymem_build_reply_data(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                            const skymem_route_t *route, uint8_t cc, const skymem_chunk_desc_t *desc,
                            const uint8_t *data);
int skymem_build_reply_stats(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                             const skymem_route_t *route, const skymem_stats_t *stats);
typedef struct { ...; } skymem_mac_key_t;
void skymem_mac_key_init(skymem_mac_key_t *k, const uint8_t *key, size_t key_len);
void skymem_auth_mac(const skymem_mac_key_t *k, const uint8_t *pkt, size_t len_before_tag, uint8_t out[32]);
int skymem_auth_sign_with(const skymem_mac_key_t *k, uint32_t key_id, uint64_t seq, uint8_t *pkt, size_t len,
                          size_t cap);
int skymem_auth_check_reply(const skymem_mac_key_t *k, uint32_t key_id, const uint8_t *pkt, size_t len);
const char *skymem_polyval_impl(void);
int skymem_polyval_use_accel(int level);
const char *skymem_aes_impl(void);
int skymem_aes_use_accel(int on);
typedef struct { uint16_t plane, sat; uint16_t via_plane, via_sat; uint32_t ipv4; uint16_t port; }
    skymem_bulk_server_t;
typedef struct { const uint8_t *hash; uint8_t *buf; uint64_t n_bytes; uint32_t chunk_bytes; uint32_t chunk_count;
                 uint32_t server0; uint32_t n_servers; uint64_t created_ms; uint8_t *status; uint32_t *prefix;
                 uint32_t *chunk_crcs; }
    skymem_bulk_block_t;
typedef struct { int fd; uint16_t station_id; uint32_t request_id; uint32_t window_bytes; uint32_t wave_chunks;
                 double rto_s; double deadline_s; uint32_t max_retries; double pace_Bps;
                 uint64_t packets_rx, packets_tx, bytes_rx; uint64_t crc_failures, retransmits, ignored;
                 const skymem_mac_key_t *auth_key; uint32_t auth_key_id;
                 uint64_t auth_seq_first, auth_seq_count; uint64_t auth_seq_used; uint64_t auth_failures;
                 uint8_t nak_status;
                 double first_reply_s; }
    skymem_bulk_opts_t;
const char *skymem_sha256_impl(void);
int skymem_sha256_use_accel(int on);
void skymem_hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *data, size_t len, uint8_t out[32]);
uint32_t skymem_bulk_get_requests(const skymem_bulk_block_t *blocks, uint32_t n_blocks, uint32_t wave_chunks);
int skymem_bulk_get(const skymem_bulk_server_t *servers, uint32_t n_servers_total,
                    skymem_bulk_block_t *blocks, uint32_t n_blocks, skymem_bulk_opts_t *opts);
int skymem_bulk_set(const skymem_bulk_server_t *servers, uint32_t n_servers_total,
                    skymem_bulk_block_t *blocks, uint32_t n_blocks, skymem_bulk_opts_t *opts);
uint32_t skymem_bulk_crc32c(const uint8_t *data, size_t len);
int skymem_build_hk(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                    const skymem_stats_t *stats);
"""

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "skymemory._native",
    '#include "skymem_codec.h"\n#include "skymem_crc32c.h"\n#include "skymem_geometry.h"\n#include "skymem_bulk.h"\n'
    '#include "skymem_sha256.h"\n#include "skymem_auth.h"\n#include "skymem_polyval.h"\n#include "skymem_aes.h"\n',
    # setuptools refuses absolute source paths: give them relative to where the build runs
    sources=[os.path.relpath(p) for p in core_sources()],
    include_dirs=[str(CORE / "fsw" / "inc"), str(CORE / "fsw" / "src"), str(CSRC)],
    extra_compile_args=["-O2", "-std=c99"],
    libraries=["m"],  # the geometry uses libm
)

if __name__ == "__main__":  # manual build into the current directory: python _cffi_build.py
    ffibuilder.compile(verbose=True)
