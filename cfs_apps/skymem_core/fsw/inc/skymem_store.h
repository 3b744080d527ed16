/*
 * skymem_store.h -- the chunk store: (block hash, chunk id) -> chunk data.
 *
 * Flight style: one arena allocated at init, carved into fixed slots (header +
 * chunk_size bytes), plus two bucket arrays. The whole footprint (struct,
 * buckets, slots) is sized at init to fit the memory budget, so the budget can
 * never be exceeded; every operation is O(1) (short hash chains) and nothing
 * is allocated afterwards. Pages of the arena are touched only when a slot is
 * first used, so an idle store costs almost no resident memory.
 *
 * When every slot is taken, a set evicts the least recently used chunk and,
 * because a block missing one chunk is useless, purges every other chunk of
 * that block too, then reports the block through the eviction callback.
 *
 * Not thread-safe: one owner (one satellite's main loop).
 */
#ifndef SKYMEM_STORE_H
#define SKYMEM_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "skymem_codec.h"
#include "skymem_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKYMEM_STORE_OK           0
#define SKYMEM_STORE_E_NULL      -1
#define SKYMEM_STORE_E_TOO_LARGE -2 /* data longer than the configured chunk size */
#define SKYMEM_STORE_E_NO_SPACE  -3 /* budget too small for a single slot */
#define SKYMEM_STORE_E_NOMEM     -4 /* allocation failed at init */
#define SKYMEM_STORE_E_NOT_FOUND -5
#define SKYMEM_STORE_E_PARAM     -6

/* Per-chunk metadata kept next to the data. */
typedef struct {
    uint32_t chunk_count;   /* chunks in the block */
    uint64_t created_ms;    /* mission time the block was set */
    uint32_t crc32c;        /* CRC32C of the data */
    uint8_t gossip_radius;  /* hops an eviction of this block is gossiped */
    uint8_t flags;          /* chunk descriptor flags */
    uint16_t origin_ground; /* ground station id that set it, SKYMEM_NO_SAT if none */
    uint16_t ingress_plane; /* satellite holding that ground link (route "via") */
    uint16_t ingress_sat;
} skymem_chunk_meta_t;

typedef struct skymem_store skymem_store_t;

/* Called after an LRU eviction purged a whole block. `victim` is the metadata
 * of the least recently used chunk that triggered it; `purged` is how many
 * chunks of the block were dropped (>= 1). */
typedef void (*skymem_evict_cb_t)(void *ctx, const uint8_t *block_hash,
                                  const skymem_chunk_meta_t *victim, uint32_t purged);

typedef struct {
    uint64_t budget_bytes;   /* configured budget */
    uint64_t footprint;      /* bytes allocated (<= budget) */
    uint64_t bytes_used;     /* index + used slots, accounted against the budget */
    uint32_t capacity;       /* number of slots */
    uint32_t chunks;         /* slots in use */
    uint32_t chunk_size;     /* max data bytes per chunk */
    uint32_t slot_bytes;     /* bytes one chunk costs (header + chunk_size, aligned) */
    uint32_t lru_evictions;  /* chunks dropped for space (LRU victims and the rest of their blocks) */
    uint32_t blocks_purged;  /* blocks purged (LRU or explicit) */
    uint64_t index_bytes;    /* bucket arrays (part of footprint and bytes_used) */
} skymem_store_info_t;

/* Bytes one slot costs for this chunk size (header + data, 8-byte aligned). */
size_t skymem_store_slot_bytes(size_t chunk_size);

/* Creates a store using at most budget_bytes in total. chunk_size 1..SKYMEM_MAX_CHUNK_DATA.
 * Returns SKYMEM_STORE_OK and *out, or an error (E_NO_SPACE if not even one slot fits). */
int skymem_store_create(skymem_store_t **out, uint64_t budget_bytes, uint32_t chunk_size,
                        skymem_evict_cb_t on_evict, void *cb_ctx);
void skymem_store_destroy(skymem_store_t *s);

/* Inserts or overwrites (hash, chunk_id); makes it most recently used.
 * May evict LRU blocks (callback fires before it returns). */
int skymem_store_set(skymem_store_t *s, const uint8_t *hash, uint32_t chunk_id,
                     const skymem_chunk_meta_t *meta, const uint8_t *data, size_t len);

/* Looks up a chunk and makes it most recently used. On success *data and *len
 * point into the store (valid until the next set/delete/purge) and *meta is
 * filled if meta != NULL. */
int skymem_store_get(skymem_store_t *s, const uint8_t *hash, uint32_t chunk_id,
                     skymem_chunk_meta_t *meta, const uint8_t **data, size_t *len);

/* Like get but does not change the LRU order. */
int skymem_store_peek(const skymem_store_t *s, const uint8_t *hash, uint32_t chunk_id,
                      skymem_chunk_meta_t *meta, const uint8_t **data, size_t *len);

/* Removes one chunk (migration); does not purge the rest of the block. */
int skymem_store_delete(skymem_store_t *s, const uint8_t *hash, uint32_t chunk_id);

/* Removes every chunk of the block; returns how many (0 if none). No callback. */
uint32_t skymem_store_purge_block(skymem_store_t *s, const uint8_t *hash);
/* Removes the chunks of the block set with a gossip radius (meta.gossip_radius >= 1), leaving the others; returns
 * how many, and the largest radius among them in *radius (0 if none; radius may be NULL). No callback. */
uint32_t skymem_store_purge_gossiped(skymem_store_t *s, const uint8_t *hash, uint8_t *radius);

/* Removes everything. */
void skymem_store_clear(skymem_store_t *s);

void skymem_store_info(const skymem_store_t *s, skymem_store_info_t *info);

/* Chunk ids are visited from least to most recently used; stops when fn returns non-zero.
 * fn must not modify the store. */
typedef int (*skymem_store_visit_fn)(void *ctx, const uint8_t *hash, uint32_t chunk_id,
                                     const skymem_chunk_meta_t *meta, const uint8_t *data, size_t len);
void skymem_store_visit_lru(const skymem_store_t *s, skymem_store_visit_fn fn, void *ctx);

/* Builds a new store with a new budget / chunk size and moves the contents
 * over, oldest first (so the newest survive if the new budget is smaller;
 * chunks longer than the new chunk size are dropped). The callback of the new
 * store fires for evictions during the move. On failure the old store is kept. */
int skymem_store_resize(skymem_store_t **s, uint64_t budget_bytes, uint32_t chunk_size);

/* What to keep for a chunk arriving in a SET_CHUNK with descriptor `desc` along `route`: the
 * descriptor's fields, and whom to tell if LRU later purges the block (the ground station that
 * set it and the satellite holding that ground link): from `origin` when the SET_CHUNK carried an
 * origin record (a migration), else from the route when a ground station sent it, else nobody.
 * Shared by the cFS app and the native node. */
void skymem_chunk_meta_from_set(skymem_chunk_meta_t *meta, const skymem_chunk_desc_t *desc,
                                const skymem_route_t *route, const skymem_origin_t *origin);

/* The origin record a migration of this chunk carries: 1 and *origin when the chunk knows its
 * ground station, else 0 (nothing to carry). */
int skymem_chunk_origin(const skymem_chunk_meta_t *meta, skymem_origin_t *origin);

/* The wire descriptor of a stored chunk (a GET reply, a migration's SET_CHUNK). */
void skymem_chunk_desc_from_meta(skymem_chunk_desc_t *desc, const uint8_t *block_hash, uint32_t chunk_id,
                                 const skymem_chunk_meta_t *meta, size_t data_len);

#ifdef __cplusplus
}
#endif
#endif
