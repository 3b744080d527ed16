/* skymem_link.c -- per-link signing of satellite-to-satellite traffic (skymem_link.h). */
#include "skymem_codec.h"
#include "skymem_link.h"
#include "skymem_router.h"

int skymem_link_is_isl(const uint8_t *pkt, size_t len)
{
    uint8_t use = skymem_auth_key_use(pkt, len);
    if (use == 0) return -1;
    return use == SKYMEM_KEY_LINK_IN;
}

int skymem_link_sign(const skymem_auth_t *a, uint16_t next_plane, uint16_t next_sat, uint64_t seq, uint8_t *pkt,
                     size_t len, size_t cap)
{
    const skymem_auth_key_t *k;
    if (a == NULL || skymem_link_is_isl(pkt, len) != 1) return SKYMEM_AUTH_E_ARG;
    k = skymem_auth_find_key_for(a, skymem_auth_link_id(next_plane, next_sat), SKYMEM_KEY_LINK_OUT);
    if (k == NULL) return SKYMEM_AUTH_E_UNKNOWN_KEY; /* not a neighbour of ours */
    return skymem_auth_sign_with(&k->mac, skymem_auth_link_id(a->owner_plane, a->owner_sat), seq, pkt, len, cap);
}

int skymem_link_prepare(skymem_auth_t *a, int relayed, uint16_t next_plane, uint16_t next_sat, uint64_t now_us,
                        uint8_t *pkt, size_t len, size_t cap)
{
    int isl = skymem_link_is_isl(pkt, len), rc;
    size_t r = skymem_auth_route_at(pkt, len);
    if (a == NULL || isl < 0) return SKYMEM_AUTH_E_ARG;
    if (!isl) {
        /* end to end: only its destination (or the ground) can check it, but unsigned it goes nowhere */
        if (len < r + SKYMEM_ROUTE_HDR_LEN + SKYMEM_AUTH_TRAILER_LEN || !(pkt[r + SKYMEM_ROUTE_FLAGS] & SKYMEM_RF_AUTH) ||
            (skymem_get_u32(pkt + len - SKYMEM_AUTH_TRAILER_LEN + SKYMEM_AT_KEY_ID) & SKYMEM_AUTH_LINK_BIT))
            return SKYMEM_AUTH_E_NO_TRAILER;
        return (int)len;
    }
    if (relayed) { /* the last hop's tag, checked before anything of it goes on */
        skymem_auth_set_clock(a, now_us);
        rc = skymem_auth_verify(a, pkt, len);
        if (rc != SKYMEM_AUTH_OK) return rc;
        rc = skymem_auth_strip(pkt, len);
        if (rc < 0) return rc;
        len = (size_t)rc;
    } else if (pkt[r + SKYMEM_ROUTE_FLAGS] & SKYMEM_RF_AUTH) {
        return SKYMEM_AUTH_E_ARG; /* our own packets come unsigned: the link signs them */
    }
    return skymem_link_sign(a, next_plane, next_sat, skymem_auth_next_seq(a, now_us), pkt, len, cap);
}

int skymem_link_keys_complete(const skymem_auth_t *a, uint16_t planes, uint16_t sats)
{
    int d, has_up = 0, has_down = 0;
    uint32_t i;
    if (a == NULL) return 0;
    for (i = 0; i < a->n_keys; i++) {
        has_up |= (a->keys[i].uses & SKYMEM_KEY_UP) != 0;
        has_down |= (a->keys[i].uses & SKYMEM_KEY_DOWN) != 0;
    }
    if (!has_up || !has_down) return 0;
    for (d = SKYMEM_DIR_NORTH; d <= SKYMEM_DIR_EAST; d++) {
        uint32_t np, ns, id;
        skymem_neighbour(planes, sats, a->owner_plane, a->owner_sat, (skymem_dir_t)d, &np, &ns);
        if (np == a->owner_plane && ns == a->owner_sat) continue; /* a ring one wide */
        id = skymem_auth_link_id((uint16_t)np, (uint16_t)ns);
        if (!skymem_auth_find_key_for(a, id, SKYMEM_KEY_LINK_IN) || !skymem_auth_find_key_for(a, id, SKYMEM_KEY_LINK_OUT))
            return 0;
    }
    return 1;
}
