/* skymem_store.c -- fixed-slot chunk store with LRU eviction and whole-block purge.
 *
 * Layout: one zeroed arena = [chunk buckets | block buckets | slot 0 | slot 1 | ...].
 * Links are slot index + 1 so that 0 means "none" and a freshly zeroed (never
 * touched) arena is already a valid empty index. Each slot is on:
 *   - a chunk-bucket chain keyed by (hash, chunk_id)        -> get/set O(1)
 *   - a doubly linked LRU list (head = most recently used)   -> eviction O(1)
 *   - a ring of the slots holding chunks of the same block; one member of the
 *     ring (the "head") is on a block-bucket chain keyed by hash -> purge O(chunks of block)
 * Free slots: first the never-used ones in order (high-water mark, so pages are
 * touched only when needed), then a free list of released slots.
 */
#include "skymem_store.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN];
    uint32_t chunk_id;
    uint32_t cnext;        /* chunk-bucket chain; free-list link when free */
    uint32_t bnext;        /* block-bucket chain (ring heads only) */
    uint32_t mprev, mnext; /* ring of the same block */
    uint32_t lprev, lnext; /* LRU list */
    uint32_t data_len;
    uint8_t is_head;
    uint8_t in_use;
    skymem_chunk_meta_t meta;
} slot_t;

struct skymem_store {
    uint64_t budget;
    uint64_t footprint;
    uint32_t chunk_size;
    uint32_t slot_bytes;
    uint32_t capacity;
    uint32_t used;
    uint32_t high_water; /* slots [0, high_water) have been handed out at least once */
    uint32_t free_head;
    uint32_t mask; /* buckets - 1 */
    uint32_t lru_head, lru_tail;
    uint32_t lru_evictions, blocks_purged;
    uint32_t *cbuckets, *bbuckets;
    uint8_t *slots;
    void *arena;
    skymem_evict_cb_t on_evict;
    void *cb_ctx;
};

#define HDR_BYTES ((sizeof(slot_t) + 7u) & ~(size_t)7u)

static slot_t *slot_at(const skymem_store_t *s, uint32_t link)
{
    return (slot_t *)(void *)(s->slots + (size_t)(link - 1u) * s->slot_bytes);
}
static uint8_t *slot_data(slot_t *sl) { return (uint8_t *)sl + HDR_BYTES; }

/* splitmix64 finaliser over the hash words: good spread even for patterned test hashes. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static uint64_t block_key(const uint8_t *hash)
{
    return mix64(load64(hash) ^ mix64(load64(hash + 8) ^ mix64(load64(hash + 16) ^ load64(hash + 24))));
}
static uint32_t cbucket(const skymem_store_t *s, const uint8_t *hash, uint32_t id)
{
    return (uint32_t)(mix64(block_key(hash) + 0x9E3779B97F4A7C15ull * ((uint64_t)id + 1u)) & s->mask);
}
static uint32_t bbucket(const skymem_store_t *s, const uint8_t *hash) { return (uint32_t)(block_key(hash) & s->mask); }

size_t skymem_store_slot_bytes(size_t chunk_size) { return (HDR_BYTES + chunk_size + 7u) & ~(size_t)7u; }

int skymem_store_create(skymem_store_t **out, uint64_t budget_bytes, uint32_t chunk_size, skymem_evict_cb_t on_evict,
                        void *cb_ctx)
{
    skymem_store_t *s;
    uint64_t avail, n, slot_bytes, nb, arena_bytes;
    if (out == NULL) return SKYMEM_STORE_E_NULL;
    *out = NULL;
    if (chunk_size == 0 || chunk_size > SKYMEM_MAX_CHUNK_DATA) return SKYMEM_STORE_E_PARAM;
    slot_bytes = skymem_store_slot_bytes(chunk_size);
    if (budget_bytes <= sizeof(skymem_store_t)) return SKYMEM_STORE_E_NO_SPACE;
    avail = budget_bytes - sizeof(skymem_store_t);
    /* Buckets come in powers of two (two u32 arrays = 8 bytes per bucket) and there
     * are at least as many buckets as slots: try every power of two, keep the most slots. */
    n = 0;
    nb = 1;
    {
        uint64_t b;
        for (b = 1; b <= 0x80000000ull && b * 8u <= avail; b <<= 1) {
            uint64_t k = (avail - b * 8u) / slot_bytes;
            if (k > b) k = b;
            if (k > 0x7FFFFFFEull) k = 0x7FFFFFFEull;
            if (k > n) {
                n = k;
                nb = b;
            }
        }
    }
    if (n == 0) return SKYMEM_STORE_E_NO_SPACE;
    arena_bytes = nb * 8u + n * slot_bytes;
    if (arena_bytes != (size_t)arena_bytes) return SKYMEM_STORE_E_NOMEM;
    s = (skymem_store_t *)calloc(1, sizeof(*s));
    if (s == NULL) return SKYMEM_STORE_E_NOMEM;
    /* calloc of a large block maps fresh zero pages: untouched slots cost no RSS. */
    s->arena = calloc(1, (size_t)arena_bytes);
    if (s->arena == NULL) {
        free(s);
        return SKYMEM_STORE_E_NOMEM;
    }
    s->budget = budget_bytes;
    s->footprint = sizeof(*s) + arena_bytes;
    s->chunk_size = chunk_size;
    s->slot_bytes = (uint32_t)slot_bytes;
    s->capacity = (uint32_t)n;
    s->mask = (uint32_t)(nb - 1u);
    s->cbuckets = (uint32_t *)s->arena;
    s->bbuckets = s->cbuckets + nb;
    s->slots = (uint8_t *)(s->bbuckets + nb);
    s->on_evict = on_evict;
    s->cb_ctx = cb_ctx;
    *out = s;
    return SKYMEM_STORE_OK;
}

void skymem_store_destroy(skymem_store_t *s)
{
    if (s == NULL) return;
    free(s->arena);
    free(s);
}

static uint32_t find(const skymem_store_t *s, const uint8_t *hash, uint32_t id)
{
    uint32_t l = s->cbuckets[cbucket(s, hash, id)];
    while (l) {
        slot_t *sl = slot_at(s, l);
        if (sl->chunk_id == id && memcmp(sl->hash, hash, SKYMEM_BLOCK_HASH_LEN) == 0) return l;
        l = sl->cnext;
    }
    return 0;
}

static uint32_t find_block_head(const skymem_store_t *s, const uint8_t *hash)
{
    uint32_t l = s->bbuckets[bbucket(s, hash)];
    while (l) {
        slot_t *sl = slot_at(s, l);
        if (memcmp(sl->hash, hash, SKYMEM_BLOCK_HASH_LEN) == 0) return l;
        l = sl->bnext;
    }
    return 0;
}

static void lru_unlink(skymem_store_t *s, uint32_t l)
{
    slot_t *sl = slot_at(s, l);
    if (sl->lprev) slot_at(s, sl->lprev)->lnext = sl->lnext;
    else s->lru_head = sl->lnext;
    if (sl->lnext) slot_at(s, sl->lnext)->lprev = sl->lprev;
    else s->lru_tail = sl->lprev;
    sl->lprev = sl->lnext = 0;
}

static void lru_push_front(skymem_store_t *s, uint32_t l)
{
    slot_t *sl = slot_at(s, l);
    sl->lprev = 0;
    sl->lnext = s->lru_head;
    if (s->lru_head) slot_at(s, s->lru_head)->lprev = l;
    s->lru_head = l;
    if (!s->lru_tail) s->lru_tail = l;
}

/* Replaces `from` by `to` in a singly linked chain (to may be 0 = unlink). */
static void chain_replace(skymem_store_t *s, uint32_t *head, uint32_t from, uint32_t to, int block_chain)
{
    uint32_t *link = head;
    while (*link && *link != from) link = block_chain ? &slot_at(s, *link)->bnext : &slot_at(s, *link)->cnext;
    if (*link == from) *link = to;
}

static void remove_slot(skymem_store_t *s, uint32_t l)
{
    slot_t *sl = slot_at(s, l);
    chain_replace(s, &s->cbuckets[cbucket(s, sl->hash, sl->chunk_id)], l, sl->cnext, 0);
    lru_unlink(s, l);
    if (sl->mnext == l) {
        chain_replace(s, &s->bbuckets[bbucket(s, sl->hash)], l, sl->bnext, 1);
    } else {
        uint32_t succ = sl->mnext;
        slot_at(s, sl->mprev)->mnext = sl->mnext;
        slot_at(s, sl->mnext)->mprev = sl->mprev;
        if (sl->is_head) {
            slot_t *ss = slot_at(s, succ);
            ss->bnext = sl->bnext;
            ss->is_head = 1;
            chain_replace(s, &s->bbuckets[bbucket(s, sl->hash)], l, succ, 1);
        }
    }
    sl->in_use = 0;
    sl->is_head = 0;
    sl->bnext = 0;
    sl->cnext = s->free_head;
    s->free_head = l;
    s->used--;
}

static uint32_t purge(skymem_store_t *s, const uint8_t *hash)
{
    uint32_t n = 0, head = find_block_head(s, hash);
    if (!head) return 0;
    while (slot_at(s, head)->mnext != head) {
        remove_slot(s, slot_at(s, head)->mnext);
        n++;
    }
    remove_slot(s, head);
    return n + 1u;
}

uint32_t skymem_store_purge_block(skymem_store_t *s, const uint8_t *hash)
{
    uint32_t n;
    if (s == NULL || hash == NULL) return 0;
    n = purge(s, hash);
    if (n) s->blocks_purged++;
    return n;
}

uint32_t skymem_store_purge_gossiped(skymem_store_t *s, const uint8_t *hash, uint8_t *radius)
{
    uint32_t l, members = 0, n = 0, i;
    uint8_t top = 0;
    if (radius) *radius = 0;
    if (s == NULL || hash == NULL || (l = find_block_head(s, hash)) == 0) return 0;
    i = l;
    do { /* the ring's size, before removing from it */
        members++;
        i = slot_at(s, i)->mnext;
    } while (i != l);
    for (i = 0; i < members; i++) { /* each member once: a removed one's successor stays on the ring */
        slot_t *sl = slot_at(s, l);
        uint32_t next = sl->mnext;
        if (sl->meta.gossip_radius > 0) {
            if (sl->meta.gossip_radius > top) top = sl->meta.gossip_radius;
            remove_slot(s, l);
            n++;
        }
        l = next;
    }
    if (n) s->blocks_purged++;
    if (radius) *radius = top;
    return n;
}

int skymem_store_set(skymem_store_t *s, const uint8_t *hash, uint32_t chunk_id, const skymem_chunk_meta_t *meta,
                     const uint8_t *data, size_t len)
{
    uint32_t l, head, purged = 0;
    slot_t *sl;
    uint8_t victim_hash[SKYMEM_BLOCK_HASH_LEN];
    skymem_chunk_meta_t victim_meta;
    if (s == NULL || hash == NULL || meta == NULL || (data == NULL && len)) return SKYMEM_STORE_E_NULL;
    if (len > s->chunk_size) return SKYMEM_STORE_E_TOO_LARGE;

    l = find(s, hash, chunk_id);
    if (l) { /* overwrite in place */
        sl = slot_at(s, l);
        sl->meta = *meta;
        sl->data_len = (uint32_t)len;
        if (len) memmove(slot_data(sl), data, len); /* data may point into this very slot */
        lru_unlink(s, l);
        lru_push_front(s, l);
        return SKYMEM_STORE_OK;
    }

    if (s->free_head) {
        l = s->free_head;
        s->free_head = slot_at(s, l)->cnext;
    } else if (s->high_water < s->capacity) {
        l = ++s->high_water;
    } else { /* full: evict the LRU chunk's whole block */
        slot_t *v = slot_at(s, s->lru_tail);
        memcpy(victim_hash, v->hash, SKYMEM_BLOCK_HASH_LEN);
        victim_meta = v->meta;
        purged = purge(s, victim_hash);
        s->lru_evictions += purged;
        s->blocks_purged++;
        l = s->free_head;
        s->free_head = slot_at(s, l)->cnext;
    }

    sl = slot_at(s, l);
    memcpy(sl->hash, hash, SKYMEM_BLOCK_HASH_LEN);
    sl->chunk_id = chunk_id;
    sl->meta = *meta;
    sl->data_len = (uint32_t)len;
    sl->in_use = 1;
    if (len) memmove(slot_data(sl), data, len); /* data may live in a slot just freed */
    /* chunk chain */
    {
        uint32_t b = cbucket(s, hash, chunk_id);
        sl->cnext = s->cbuckets[b];
        s->cbuckets[b] = l;
    }
    /* block ring */
    head = find_block_head(s, hash);
    if (head) {
        slot_t *h = slot_at(s, head);
        sl->is_head = 0;
        sl->bnext = 0;
        sl->mprev = head;
        sl->mnext = h->mnext;
        slot_at(s, h->mnext)->mprev = l;
        h->mnext = l;
    } else {
        uint32_t b = bbucket(s, hash);
        sl->is_head = 1;
        sl->mprev = sl->mnext = l;
        sl->bnext = s->bbuckets[b];
        s->bbuckets[b] = l;
    }
    lru_push_front(s, l);
    s->used++;
    if (purged && s->on_evict) s->on_evict(s->cb_ctx, victim_hash, &victim_meta, purged);
    return SKYMEM_STORE_OK;
}

static void output(const skymem_store_t *s, uint32_t l, skymem_chunk_meta_t *meta, const uint8_t **data, size_t *len)
{
    slot_t *sl = slot_at(s, l);
    if (meta) *meta = sl->meta;
    if (data) *data = slot_data(sl);
    if (len) *len = sl->data_len;
}

int skymem_store_peek(const skymem_store_t *s, const uint8_t *hash, uint32_t chunk_id, skymem_chunk_meta_t *meta,
                      const uint8_t **data, size_t *len)
{
    uint32_t l;
    if (s == NULL || hash == NULL) return SKYMEM_STORE_E_NULL;
    l = find(s, hash, chunk_id);
    if (!l) return SKYMEM_STORE_E_NOT_FOUND;
    output(s, l, meta, data, len);
    return SKYMEM_STORE_OK;
}

int skymem_store_get(skymem_store_t *s, const uint8_t *hash, uint32_t chunk_id, skymem_chunk_meta_t *meta,
                     const uint8_t **data, size_t *len)
{
    uint32_t l;
    if (s == NULL || hash == NULL) return SKYMEM_STORE_E_NULL;
    l = find(s, hash, chunk_id);
    if (!l) return SKYMEM_STORE_E_NOT_FOUND;
    if (s->lru_head != l) {
        lru_unlink(s, l);
        lru_push_front(s, l);
    }
    output(s, l, meta, data, len);
    return SKYMEM_STORE_OK;
}

int skymem_store_delete(skymem_store_t *s, const uint8_t *hash, uint32_t chunk_id)
{
    uint32_t l;
    if (s == NULL || hash == NULL) return SKYMEM_STORE_E_NULL;
    l = find(s, hash, chunk_id);
    if (!l) return SKYMEM_STORE_E_NOT_FOUND;
    remove_slot(s, l);
    return SKYMEM_STORE_OK;
}

void skymem_store_clear(skymem_store_t *s)
{
    if (s == NULL) return;
    while (s->lru_tail) purge(s, slot_at(s, s->lru_tail)->hash);
}

void skymem_store_info(const skymem_store_t *s, skymem_store_info_t *info)
{
    if (s == NULL || info == NULL) return;
    memset(info, 0, sizeof(*info));
    info->budget_bytes = s->budget;
    info->footprint = s->footprint;
    info->bytes_used = sizeof(*s) + (uint64_t)(s->mask + 1u) * 8u + (uint64_t)s->used * s->slot_bytes;
    info->capacity = s->capacity;
    info->chunks = s->used;
    info->chunk_size = s->chunk_size;
    info->slot_bytes = s->slot_bytes;
    info->lru_evictions = s->lru_evictions;
    info->blocks_purged = s->blocks_purged;
    info->index_bytes = (uint64_t)(s->mask + 1u) * 8u;
}

void skymem_store_visit_lru(const skymem_store_t *s, skymem_store_visit_fn fn, void *ctx)
{
    uint32_t l;
    if (s == NULL || fn == NULL) return;
    for (l = s->lru_tail; l; l = slot_at(s, l)->lprev) {
        slot_t *sl = slot_at(s, l);
        if (fn(ctx, sl->hash, sl->chunk_id, &sl->meta, slot_data(sl), sl->data_len)) break;
    }
}

int skymem_store_resize(skymem_store_t **sp, uint64_t budget_bytes, uint32_t chunk_size)
{
    skymem_store_t *old, *ns;
    uint32_t l;
    int rc;
    if (sp == NULL || *sp == NULL) return SKYMEM_STORE_E_NULL;
    old = *sp;
    rc = skymem_store_create(&ns, budget_bytes, chunk_size, old->on_evict, old->cb_ctx);
    if (rc != SKYMEM_STORE_OK) return rc;
    ns->lru_evictions = old->lru_evictions;
    ns->blocks_purged = old->blocks_purged;
    for (l = old->lru_tail; l; l = slot_at(old, l)->lprev) { /* oldest first: newest end up most recent */
        slot_t *sl = slot_at(old, l);
        if (sl->data_len <= chunk_size)
            skymem_store_set(ns, sl->hash, sl->chunk_id, &sl->meta, slot_data(sl), sl->data_len);
    }
    skymem_store_destroy(old);
    *sp = ns;
    return SKYMEM_STORE_OK;
}

void skymem_chunk_meta_from_set(skymem_chunk_meta_t *meta, const skymem_chunk_desc_t *desc,
                                const skymem_route_t *route, const skymem_origin_t *origin)
{
    memset(meta, 0, sizeof(*meta));
    meta->chunk_count = desc->chunk_count;
    meta->created_ms = desc->created_ms;
    meta->crc32c = desc->crc32c;
    meta->gossip_radius = desc->gossip_radius;
    meta->flags = (uint8_t)(desc->flags & ~SKYMEM_CDF_ORIGIN); /* a wire-only flag: the record is kept below */
    if (origin != NULL) {
        meta->origin_ground = origin->ground;
        meta->ingress_plane = origin->via_plane;
        meta->ingress_sat = origin->via_sat;
        return;
    }
    meta->origin_ground = route->src_plane == SKYMEM_GROUND_PLANE ? route->src_sat : SKYMEM_NO_SAT;
    meta->ingress_plane = route->via_plane;
    meta->ingress_sat = route->via_sat;
}

int skymem_chunk_origin(const skymem_chunk_meta_t *meta, skymem_origin_t *origin)
{
    if (meta->origin_ground == SKYMEM_NO_SAT || meta->ingress_plane == SKYMEM_NO_SAT) return 0;
    origin->ground = meta->origin_ground;
    origin->via_plane = meta->ingress_plane;
    origin->via_sat = meta->ingress_sat;
    return 1;
}

void skymem_chunk_desc_from_meta(skymem_chunk_desc_t *desc, const uint8_t *block_hash, uint32_t chunk_id,
                                 const skymem_chunk_meta_t *meta, size_t data_len)
{
    memset(desc, 0, sizeof(*desc));
    memcpy(desc->block_hash, block_hash, SKYMEM_BLOCK_HASH_LEN);
    desc->chunk_id = chunk_id;
    desc->chunk_count = meta->chunk_count;
    desc->created_ms = meta->created_ms;
    desc->crc32c = meta->crc32c;
    desc->data_len = (uint16_t)data_len;
    desc->gossip_radius = meta->gossip_radius;
    desc->flags = meta->flags;
}
