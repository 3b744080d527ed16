/* test_store.c -- budget never exceeded, LRU order, whole-block purge + callback, overwrite, resize. */
#include <string.h>

#include "check.h"
#include "skymem_store.h"

typedef struct {
    int calls;
    uint8_t last_hash[32];
    uint32_t last_purged;
    uint16_t last_origin;
} evlog_t;

static void on_evict(void *ctx, const uint8_t *hash, const skymem_chunk_meta_t *victim, uint32_t purged)
{
    evlog_t *e = (evlog_t *)ctx;
    e->calls++;
    memcpy(e->last_hash, hash, 32);
    e->last_purged = purged;
    e->last_origin = victim->origin_ground;
}

static void mkhash(uint8_t *h, uint32_t block)
{
    memset(h, 0, 32);
    h[0] = (uint8_t)block; /* patterned on purpose: the store must still spread them */
    h[1] = (uint8_t)(block >> 8);
    h[31] = 0x5A;
}

static skymem_chunk_meta_t meta_for(uint32_t count, uint16_t origin)
{
    skymem_chunk_meta_t m;
    memset(&m, 0, sizeof m);
    m.chunk_count = count;
    m.origin_ground = origin;
    m.gossip_radius = 1;
    return m;
}

int main(void)
{
    skymem_store_t *s = NULL;
    skymem_store_info_t info;
    evlog_t ev;
    uint8_t h[32], data[256];
    const uint8_t *p;
    size_t len;
    skymem_chunk_meta_t m = meta_for(4, 1), got;
    uint32_t i, cap;
    uint64_t budget = 64 * 1024;

    memset(&ev, 0, sizeof ev);
    for (i = 0; i < sizeof data; i++) data[i] = (uint8_t)i;

    CHECK_EQ_INT(skymem_store_create(&s, 100, 256, NULL, NULL), SKYMEM_STORE_E_NO_SPACE);
    CHECK_EQ_INT(skymem_store_create(&s, budget, 0, NULL, NULL), SKYMEM_STORE_E_PARAM);
    CHECK_EQ_INT(skymem_store_create(&s, budget, SKYMEM_MAX_CHUNK_DATA + 1, NULL, NULL), SKYMEM_STORE_E_PARAM);
    CHECK_EQ_INT(skymem_store_create(&s, budget, 256, on_evict, &ev), SKYMEM_STORE_OK);
    skymem_store_info(s, &info);
    cap = info.capacity;
    CHECK(cap > 10);
    CHECK(info.footprint <= budget);
    /* the capacity is tight: one more slot would not fit */
    CHECK(info.footprint + info.slot_bytes > budget || info.capacity == 0);
    CHECK(info.slot_bytes >= 256 + 64);

    /* set / get / overwrite */
    mkhash(h, 1);
    CHECK_EQ_INT(skymem_store_set(s, h, 0, &m, data, 100), SKYMEM_STORE_OK);
    CHECK_EQ_INT(skymem_store_get(s, h, 0, &got, &p, &len), SKYMEM_STORE_OK);
    CHECK(len == 100 && memcmp(p, data, 100) == 0 && got.chunk_count == 4);
    CHECK_EQ_INT(skymem_store_get(s, h, 1, NULL, &p, &len), SKYMEM_STORE_E_NOT_FOUND);
    m.chunk_count = 5;
    CHECK_EQ_INT(skymem_store_set(s, h, 0, &m, data + 10, 50), SKYMEM_STORE_OK);
    CHECK_EQ_INT(skymem_store_get(s, h, 0, &got, &p, &len), SKYMEM_STORE_OK);
    CHECK(len == 50 && memcmp(p, data + 10, 50) == 0 && got.chunk_count == 5);
    skymem_store_info(s, &info);
    CHECK_EQ_INT(info.chunks, 1);
    CHECK_EQ_INT(skymem_store_set(s, h, 1, &m, data, 257), SKYMEM_STORE_E_TOO_LARGE);
    CHECK_EQ_INT(skymem_store_set(s, h, 1, &m, NULL, 0), SKYMEM_STORE_OK); /* empty chunk is legal */

    /* whole-block purge */
    for (i = 0; i < 4; i++) CHECK_EQ_INT(skymem_store_set(s, h, i, &m, data, 10), SKYMEM_STORE_OK);
    mkhash(h, 2);
    CHECK_EQ_INT(skymem_store_set(s, h, 0, &m, data, 10), SKYMEM_STORE_OK);
    mkhash(h, 1);
    CHECK_EQ_INT(skymem_store_purge_block(s, h), 4);
    CHECK_EQ_INT(skymem_store_purge_block(s, h), 0);
    for (i = 0; i < 4; i++) CHECK_EQ_INT(skymem_store_peek(s, h, i, NULL, NULL, NULL), SKYMEM_STORE_E_NOT_FOUND);
    mkhash(h, 2);
    CHECK_EQ_INT(skymem_store_peek(s, h, 0, NULL, NULL, NULL), SKYMEM_STORE_OK);
    CHECK_EQ_INT(ev.calls, 0); /* explicit purges do not call back */

    /* delete one chunk (migration): head of ring removed, rest still purgeable */
    mkhash(h, 3);
    for (i = 0; i < 5; i++) CHECK_EQ_INT(skymem_store_set(s, h, i, &m, data, 10), SKYMEM_STORE_OK);
    CHECK_EQ_INT(skymem_store_delete(s, h, 0), SKYMEM_STORE_OK);
    CHECK_EQ_INT(skymem_store_delete(s, h, 0), SKYMEM_STORE_E_NOT_FOUND);
    CHECK_EQ_INT(skymem_store_delete(s, h, 3), SKYMEM_STORE_OK);
    CHECK_EQ_INT(skymem_store_purge_block(s, h), 3);

    /* a gossip's purge (D1 of issue 53): only the chunks set with a gossip radius, whichever the ring's head;
     * the largest radius among them comes back */
    {
        skymem_chunk_meta_t g = m;
        uint8_t radius = 9;
        mkhash(h, 4);
        for (i = 0; i < 6; i++) {
            g.gossip_radius = (uint8_t)(i % 3 == 0 ? 0 : i); /* 0, 1, 2, 0, 4, 5 */
            CHECK_EQ_INT(skymem_store_set(s, h, i, &g, data, 10), SKYMEM_STORE_OK);
        }
        CHECK_EQ_INT(skymem_store_purge_gossiped(s, h, &radius), 4);
        CHECK_EQ_INT(radius, 5);
        for (i = 0; i < 6; i++)
            CHECK_EQ_INT(skymem_store_peek(s, h, i, NULL, NULL, NULL),
                         i % 3 == 0 ? SKYMEM_STORE_OK : SKYMEM_STORE_E_NOT_FOUND);
        CHECK_EQ_INT(skymem_store_purge_gossiped(s, h, &radius), 0); /* radius 0 only: nothing */
        CHECK_EQ_INT(radius, 0);
        CHECK_EQ_INT(skymem_store_purge_block(s, h), 2); /* the rest still one ring */
        CHECK_EQ_INT(skymem_store_purge_gossiped(s, h, NULL), 0);
    }
    skymem_store_clear(s);
    skymem_store_info(s, &info);
    CHECK_EQ_INT(info.chunks, 0);

    /* LRU: fill with single-chunk blocks 0..cap-1, touch block 0, add one more -> block 1 goes */
    for (i = 0; i < cap; i++) {
        mkhash(h, 100 + i);
        CHECK_EQ_INT(skymem_store_set(s, h, 0, &m, data, 200), SKYMEM_STORE_OK);
    }
    CHECK_EQ_INT(ev.calls, 0);
    mkhash(h, 100);
    CHECK_EQ_INT(skymem_store_get(s, h, 0, NULL, &p, &len), SKYMEM_STORE_OK);
    mkhash(h, 100 + cap);
    CHECK_EQ_INT(skymem_store_set(s, h, 0, &m, data, 200), SKYMEM_STORE_OK);
    CHECK_EQ_INT(ev.calls, 1);
    mkhash(h, 101);
    CHECK(memcmp(ev.last_hash, h, 32) == 0 && ev.last_purged == 1 && ev.last_origin == 1);
    CHECK_EQ_INT(skymem_store_peek(s, h, 0, NULL, NULL, NULL), SKYMEM_STORE_E_NOT_FOUND);
    mkhash(h, 100);
    CHECK_EQ_INT(skymem_store_peek(s, h, 0, NULL, NULL, NULL), SKYMEM_STORE_OK);

    /* an eviction purges the victim's whole block: block 7 chunks spread through the LRU order */
    skymem_store_clear(s);
    memset(&ev, 0, sizeof ev);
    for (i = 0; i < cap; i++) {
        if (i % 3 == 0) {
            mkhash(h, 7);
            CHECK_EQ_INT(skymem_store_set(s, h, i, &m, data, 8), SKYMEM_STORE_OK);
        } else {
            mkhash(h, 1000 + i);
            CHECK_EQ_INT(skymem_store_set(s, h, 0, &m, data, 8), SKYMEM_STORE_OK);
        }
    }
    mkhash(h, 9999);
    CHECK_EQ_INT(skymem_store_set(s, h, 0, &m, data, 8), SKYMEM_STORE_OK); /* LRU tail is block 7 chunk 0 */
    CHECK_EQ_INT(ev.calls, 1);
    CHECK_EQ_INT(ev.last_purged, (cap + 2) / 3);
    skymem_store_info(s, &info);
    CHECK_EQ_INT(info.chunks, cap - (cap + 2) / 3 + 1);
    mkhash(h, 7);
    CHECK_EQ_INT(skymem_store_purge_block(s, h), 0);

    /* random churn: budget never exceeded, index consistent */
    {
        uint32_t x = 12345, n_ok = 0;
        for (i = 0; i < 200000; i++) {
            uint32_t blk, id, op;
            x = x * 1103515245u + 12345u;
            blk = (x >> 8) % 300;
            id = (x >> 20) % 6;
            op = (x >> 28) % 8;
            mkhash(h, blk);
            if (op < 5) {
                if (skymem_store_set(s, h, id, &m, data, (x >> 3) % 257) == SKYMEM_STORE_OK) n_ok++;
            } else if (op < 7) {
                skymem_store_get(s, h, id, NULL, &p, &len);
            } else if (op == 7 && (x & 1)) {
                skymem_store_purge_block(s, h);
            } else {
                skymem_store_delete(s, h, id);
            }
            skymem_store_info(s, &info);
            if (info.bytes_used > budget || info.chunks > cap) break;
        }
        CHECK_EQ_INT(i, 200000);
        CHECK(n_ok > 0);
        CHECK(info.footprint <= budget);
    }
    /* resize: shrink keeps the newest */
    skymem_store_clear(s);
    for (i = 0; i < 20; i++) {
        mkhash(h, 5000 + i);
        skymem_store_set(s, h, 0, &m, data, 100);
    }
    CHECK_EQ_INT(skymem_store_resize(&s, 4096, 256), SKYMEM_STORE_OK);
    skymem_store_info(s, &info);
    CHECK(info.footprint <= 4096 && info.chunks == info.capacity && info.chunks < 20);
    mkhash(h, 5019);
    CHECK_EQ_INT(skymem_store_peek(s, h, 0, NULL, NULL, NULL), SKYMEM_STORE_OK);
    mkhash(h, 5000);
    CHECK_EQ_INT(skymem_store_peek(s, h, 0, NULL, NULL, NULL), SKYMEM_STORE_E_NOT_FOUND);
    CHECK_EQ_INT(skymem_store_resize(&s, 10, 256), SKYMEM_STORE_E_NO_SPACE); /* old store kept */
    mkhash(h, 5019);
    CHECK_EQ_INT(skymem_store_peek(s, h, 0, NULL, NULL, NULL), SKYMEM_STORE_OK);
    skymem_store_destroy(s);

    /* many budgets and chunk sizes: never over budget, and not one slot more would fit */
    {
        uint32_t x = 99, k, bad = 0;
        for (k = 0; k < 300; k++) {
            uint64_t b, fixed, need, nb = 1;
            uint32_t c;
            x = x * 1664525u + 1013904223u;
            b = 4096u + (uint64_t)(x % 20000000u);
            x = x * 1664525u + 1013904223u;
            c = 1u + x % SKYMEM_MAX_CHUNK_DATA;
            if (skymem_store_create(&s, b, c, NULL, NULL) != SKYMEM_STORE_OK) {
                if (b >= skymem_store_slot_bytes(c) + 8u + 1024u) bad++; /* room for a slot, yet refused */
                continue;
            }
            skymem_store_info(s, &info);
            fixed = info.footprint - info.index_bytes - (uint64_t)info.capacity * info.slot_bytes;
            while (nb < (uint64_t)info.capacity + 1u) nb <<= 1;
            need = fixed + nb * 8u + ((uint64_t)info.capacity + 1u) * info.slot_bytes;
            if (info.footprint > b || need <= b || info.index_bytes < (uint64_t)info.capacity * 8u) bad++;
            skymem_store_destroy(s);
        }
        CHECK_EQ_INT(bad, 0);
    }
    /* a SET's descriptor and route -> the kept metadata -> the descriptor of a GET reply: round trip */
    {
        skymem_chunk_desc_t in, out;
        skymem_route_t route;
        skymem_chunk_meta_t kept;
        memset(&in, 0, sizeof in);
        memset(&route, 0, sizeof route);
        mkhash(in.block_hash, 7);
        in.chunk_id = 3;
        in.chunk_count = 9;
        in.created_ms = 123456789012ull;
        in.crc32c = 0xDEADBEEFu;
        in.data_len = 200;
        in.gossip_radius = 2;
        in.flags = 1;
        route.src_plane = SKYMEM_GROUND_PLANE;
        route.src_sat = 4;
        route.via_plane = 5;
        route.via_sat = 6;
        skymem_chunk_meta_from_set(&kept, &in, &route, NULL);
        CHECK(kept.origin_ground == 4 && kept.ingress_plane == 5 && kept.ingress_sat == 6);
        CHECK_EQ_INT(kept.flags, 0); /* ORIGIN is a wire flag, not kept */
        skymem_chunk_desc_from_meta(&out, in.block_hash, 3, &kept, 200);
        in.flags = 0;
        CHECK(memcmp(&in, &out, sizeof in) == 0);
        {
            skymem_origin_t o, carried = {4, 5, 6};
            CHECK(skymem_chunk_origin(&kept, &o) && o.ground == 4 && o.via_plane == 5 && o.via_sat == 6);
            route.src_plane = 1; /* set by a satellite: a migration, which carries the origin record */
            skymem_chunk_meta_from_set(&kept, &in, &route, &carried);
            CHECK(kept.origin_ground == 4 && kept.ingress_plane == 5 && kept.ingress_sat == 6);
            skymem_chunk_meta_from_set(&kept, &in, &route, NULL); /* an old satellite: nobody to tell */
            CHECK_EQ_INT(kept.origin_ground, SKYMEM_NO_SAT);
            CHECK(!skymem_chunk_origin(&kept, &o));
        }
    }
    /* default config: 64 MiB / 6144-byte chunks */
    CHECK_EQ_INT(skymem_store_create(&s, 64ull << 20, 6144, NULL, NULL), SKYMEM_STORE_OK);
    skymem_store_info(s, &info);
    CHECK(info.footprint <= (64ull << 20) && info.capacity > 10000);
    skymem_store_destroy(s);
    return check_report("store");
}
