/* skymem_auth.c -- sign and verify the command authentication trailer, with
 * per-(key, source) replay windows. See skymem_auth.h for what is covered. */
#include <stddef.h>
#include <string.h>

#include "skymem_auth.h"
#include "skymem_codec.h"

#define OFF_CHECKSUM 7u /* commands only: a reply's byte 7 is part of its time stamp */

size_t skymem_auth_route_at(const uint8_t *pkt, size_t len)
{
    uint16_t mid;
    size_t at;
    if (pkt == NULL || len < SKYMEM_PRI_HDR_LEN) return 0;
    mid = skymem_get_u16(pkt);
    if (mid == SKYMEM_DATA_CMD_MID) at = SKYMEM_CMD_HDR_LEN;
    else if (mid == SKYMEM_REPLY_TLM_MID) at = SKYMEM_TLM_HDR_LEN;
    else return 0;
    return len >= at + SKYMEM_ROUTE_HDR_LEN ? at : 0;
}

const char *skymem_auth_strerror(int rc)
{
    switch (rc) {
    case SKYMEM_AUTH_OK: return "ok";
    case SKYMEM_AUTH_E_NO_TRAILER: return "no auth trailer";
    case SKYMEM_AUTH_E_UNKNOWN_KEY: return "unknown key id";
    case SKYMEM_AUTH_E_KEY_SCOPE: return "key not valid for this source";
    case SKYMEM_AUTH_E_BAD_MAC: return "bad MAC";
    case SKYMEM_AUTH_E_REPLAY: return "replayed or stale sequence";
    case SKYMEM_AUTH_E_ARG: return "bad argument";
    case SKYMEM_AUTH_E_AHEAD: return "sequence too far ahead of this clock";
    default: return "unknown";
    }
}

void skymem_auth_init(skymem_auth_t *a, uint64_t floor)
{
    memset(a, 0, offsetof(skymem_auth_t, keys)); /* keys are written as added, bitmaps as windows are taken */
    a->floor = floor;
}

uint64_t skymem_auth_high(const skymem_auth_t *a) { return a->high > a->floor ? a->high : a->floor; }

void skymem_auth_set_clock(skymem_auth_t *a, uint64_t now_us)
{
    a->ahead_limit = skymem_auth_seq_at(now_us) + SKYMEM_AUTH_AHEAD_US / SKYMEM_AUTH_SEQ_US;
}

uint32_t skymem_auth_link_id(uint16_t plane, uint16_t sat)
{
    return SKYMEM_AUTH_LINK_BIT | ((uint32_t)(plane & 0x7FFFu) << 16) | sat;
}

int skymem_auth_link_of(uint32_t key_id, uint16_t *plane, uint16_t *sat)
{
    if (!(key_id & SKYMEM_AUTH_LINK_BIT)) return 0;
    if (plane != NULL) *plane = (uint16_t)((key_id >> 16) & 0x7FFFu);
    if (sat != NULL) *sat = (uint16_t)(key_id & 0xFFFFu);
    return 1;
}

int skymem_auth_add_key_for(skymem_auth_t *a, uint32_t id, uint8_t uses, const uint8_t *key, size_t len)
{
    uint32_t i;
    if (a == NULL || key == NULL || len < SKYMEM_AUTH_KEY_MIN || len > SKYMEM_AUTH_KEY_MAX || uses == 0 ||
        (uses & ~SKYMEM_KEY_ANY))
        return SKYMEM_AUTH_E_ARG;
    for (i = 0; i < a->n_keys; i++)
        if (a->keys[i].id == id && (a->keys[i].uses & uses)) return SKYMEM_AUTH_E_ARG; /* duplicate */
    if (a->n_keys >= SKYMEM_AUTH_MAX_KEYS) return SKYMEM_AUTH_E_ARG;
    a->keys[a->n_keys].id = id;
    a->keys[a->n_keys].uses = uses;
    skymem_mac_key_init(&a->keys[a->n_keys].mac, key, len);
    a->n_keys++;
    return SKYMEM_AUTH_OK;
}

int skymem_auth_add_key(skymem_auth_t *a, uint32_t id, const uint8_t *key, size_t len)
{
    return skymem_auth_add_key_for(a, id, SKYMEM_KEY_ANY, key, len);
}

const skymem_auth_key_t *skymem_auth_find_key_for(const skymem_auth_t *a, uint32_t id, uint8_t use)
{
    uint32_t i;
    for (i = 0; i < a->n_keys; i++)
        if (a->keys[i].id == id && (a->keys[i].uses & use)) return &a->keys[i];
    return NULL;
}

const skymem_auth_key_t *skymem_auth_find_key(const skymem_auth_t *a, uint32_t id)
{
    return skymem_auth_find_key_for(a, id, SKYMEM_KEY_ANY);
}

uint8_t skymem_auth_key_use(const uint8_t *pkt, size_t len)
{
    size_t r = skymem_auth_route_at(pkt, len);
    if (r == SKYMEM_CMD_HDR_LEN)
        return skymem_get_u16(pkt + r + SKYMEM_ROUTE_SRC_PLANE) == SKYMEM_GROUND_PLANE ? SKYMEM_KEY_UP
                                                                                        : SKYMEM_KEY_LINK_IN;
    if (r == SKYMEM_TLM_HDR_LEN)
        return skymem_get_u16(pkt + r + SKYMEM_ROUTE_DST_PLANE) == SKYMEM_GROUND_PLANE ? SKYMEM_KEY_DOWN
                                                                                        : SKYMEM_KEY_LINK_IN;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int fail(char *err, size_t err_len, unsigned line, const char *why)
{
    size_t i = 0;
    const char *p = why;
    char num[16];
    int k = 0;
    unsigned v = line;
    if (err == NULL || err_len == 0) return SKYMEM_AUTH_E_ARG;
    do { num[k++] = (char)('0' + v % 10u); v /= 10u; } while (v && k < 15);
    for (p = "line "; *p && i + 1 < err_len; p++) err[i++] = *p;
    while (k > 0 && i + 1 < err_len) err[i++] = num[--k];
    for (p = ": "; *p && i + 1 < err_len; p++) err[i++] = *p;
    for (p = why; *p && i + 1 < err_len; p++) err[i++] = *p;
    err[i] = '\0';
    return SKYMEM_AUTH_E_ARG;
}

/* The next word of text[*p, end) (spaces and tabs around it skipped) into w; its length (0: none). */
static size_t word(const char *text, size_t *p, size_t end, const char **w)
{
    size_t n = 0;
    while (*p < end && (text[*p] == ' ' || text[*p] == '\t' || text[*p] == '\r')) (*p)++;
    *w = text + *p;
    while (*p < end && text[*p] != ' ' && text[*p] != '\t' && text[*p] != '\r' && text[*p] != '#') (*p)++, n++;
    return n;
}

static int word_is(const char *w, size_t n, const char *s) { return strlen(s) == n && !memcmp(w, s, n); }

/* A decimal word up to max into *v; 0 when it is not one. */
static int number(const char *w, size_t n, uint64_t max, uint64_t *v)
{
    size_t i;
    *v = 0;
    if (n == 0 || n > 10) return 0;
    for (i = 0; i < n; i++) {
        if (w[i] < '0' || w[i] > '9') return 0;
        *v = *v * 10u + (uint64_t)(w[i] - '0');
    }
    return *v <= max;
}

#define EXPECTED_HEADER "expected \"skymem-keys 4 satellite PLANE SAT\""

/* One "skymem-keys 4 satellite PLANE SAT" header into a's owner; 0, or fail()'s code with err set. */
static int header_line(skymem_auth_t *a, const char *text, size_t p, size_t end, const char *w, size_t n, unsigned line,
                       char *err, size_t err_len)
{
    uint64_t plane, sat;
    /* the first line says what the file is: an old one, or the ground's, is refused saying what to do */
    if (w[0] >= '0' && w[0] <= '9')
        return fail(err, err_len, line, "an old key file (one key for both directions, no "
                    "\"skymem-keys 4\" header): launch again to make per-link keys");
    if (!word_is(w, n, "skymem-keys")) return fail(err, err_len, line, EXPECTED_HEADER);
    n = word(text, &p, end, &w);
    if (word_is(w, n, "3"))
        return fail(err, err_len, line, "a version 3 key file (one ISL key shared by every satellite): launch "
                    "again to make per-link keys");
    if (!word_is(w, n, "4")) return fail(err, err_len, line, "key file version is not 4: launch again to make new keys");
    n = word(text, &p, end, &w);
    if (word_is(w, n, "ground"))
        return fail(err, err_len, line, "the ground's key file (its master keys): a satellite is given only "
                    "its own keys (the launcher writes them)");
    if (!word_is(w, n, "satellite")) return fail(err, err_len, line, EXPECTED_HEADER);
    n = word(text, &p, end, &w);
    if (!number(w, n, 0x7FFFu, &plane)) return fail(err, err_len, line, "PLANE is not a number below 32768");
    n = word(text, &p, end, &w);
    if (!number(w, n, 0xFFFEu, &sat)) return fail(err, err_len, line, "SAT is not a number");
    if (word(text, &p, end, &w) != 0) return fail(err, err_len, line, "unexpected text after the header");
    a->owner_plane = (uint16_t)plane;
    a->owner_sat = (uint16_t)sat;
    return 0;
}

int skymem_auth_load_text(skymem_auth_t *a, const char *text, size_t len, char *err, size_t err_len)
{
    size_t pos = 0;
    unsigned line = 0;
    int added = 0, header = 0;
    if (a == NULL || (text == NULL && len)) return SKYMEM_AUTH_E_ARG;
    while (pos < len) {
        size_t end = pos, p, n, nkey = 0, i;
        const char *w;
        uint64_t id = 0, plane, sat;
        uint8_t key[SKYMEM_AUTH_KEY_MAX], uses;
        line++;
        while (end < len && text[end] != '\n') end++;
        p = pos;
        pos = end + 1;
        n = word(text, &p, end, &w);
        if (n == 0) continue; /* blank, or a comment */
        if (!header) {
            int rc = header_line(a, text, p, end, w, n, line, err, err_len);
            if (rc != 0) return rc;
            header = 1;
            continue;
        }
        if (word_is(w, n, "link-in")) uses = SKYMEM_KEY_LINK_IN;
        else if (word_is(w, n, "link-out")) uses = SKYMEM_KEY_LINK_OUT;
        else if (word_is(w, n, "up")) uses = SKYMEM_KEY_UP;
        else if (word_is(w, n, "down")) uses = SKYMEM_KEY_DOWN;
        else if (word_is(w, n, "master") || word_is(w, n, "link-master"))
            return fail(err, err_len, line, "a ground master key: a satellite is given only its own keys");
        else return fail(err, err_len, line, "expected \"link-in|link-out PLANE SAT HEX\" or \"up|down KEY_ID HEX\"");
        n = word(text, &p, end, &w);
        if (uses & (SKYMEM_KEY_LINK_IN | SKYMEM_KEY_LINK_OUT)) { /* the neighbour at the link's other end */
            if (!number(w, n, 0x7FFFu, &plane)) return fail(err, err_len, line, "link PLANE is not a number below 32768");
            n = word(text, &p, end, &w);
            if (!number(w, n, 0xFFFEu, &sat)) return fail(err, err_len, line, "link SAT is not a number");
            if (plane == a->owner_plane && sat == a->owner_sat)
                return fail(err, err_len, line, "a link from this satellite to itself");
            id = skymem_auth_link_id((uint16_t)plane, (uint16_t)sat);
        } else {
            if (!number(w, n, 0xFFFFFFFFu, &id) || id == 0 || (id & SKYMEM_AUTH_LINK_BIT))
                return fail(err, err_len, line, "a ground key id is 1..2147483647");
        }
        n = word(text, &p, end, &w);
        for (i = 0; i < n; i += 2) {
            int hi = hexval(w[i]), lo = i + 1 < n ? hexval(w[i + 1]) : -1;
            if (hi < 0 || lo < 0) return fail(err, err_len, line, "key is not an even number of hex digits");
            if (nkey >= SKYMEM_AUTH_KEY_MAX) return fail(err, err_len, line, "key longer than 64 bytes");
            key[nkey++] = (uint8_t)(hi * 16 + lo);
        }
        if (nkey < SKYMEM_AUTH_KEY_MIN) return fail(err, err_len, line, "key shorter than 16 bytes");
        if (skymem_auth_find_key_for(a, (uint32_t)id, uses)) return fail(err, err_len, line, "duplicate key");
        if (skymem_auth_add_key_for(a, (uint32_t)id, uses, key, nkey) != SKYMEM_AUTH_OK)
            return fail(err, err_len, line, "too many keys");
        memset(key, 0, sizeof key);
        added++;
        if (word(text, &p, end, &w) != 0) return fail(err, err_len, line, "unexpected text after the key");
    }
    return added;
}

int skymem_auth_required(uint8_t cc)
{
    (void)cc; /* every data-plane command: reads move the LRU order and the counters too */
    return 1;
}

void skymem_mac_key_init(skymem_mac_key_t *k, const uint8_t *key, size_t key_len)
{
    static const char hash_label[] = "skymem auth v2 polyval", tag_label[] = "skymem auth v2 tag";
    uint8_t d[SKYMEM_SHA256_LEN];
    skymem_hmac_sha256(key, key_len, (const uint8_t *)hash_label, sizeof hash_label - 1, d);
    d[0] |= (uint8_t)(d[0] == 0 && !memcmp(d, d + 1, SKYMEM_POLYVAL_BLOCK - 1)); /* H = 0 would hash all to 0 */
    skymem_polyval_init(&k->hash, d);
    skymem_hmac_sha256(key, key_len, (const uint8_t *)tag_label, sizeof tag_label - 1, d);
    skymem_aes128_init(&k->tag[0], d);
    skymem_aes128_init(&k->tag[1], d + SKYMEM_AES128_KEY);
    memset(d, 0, sizeof d);
}

#define HEAD_LEN 48u /* three blocks: past every byte the MAC takes as zero (a reply's hops end at byte 34) */

/* The tag; with crc != NULL also CRC32C of pkt[crc_off, crc_off + crc_len) in the same pass
 * (the caller keeps that range inside the packet). */
static void mac_and_crc(const skymem_mac_key_t *k, const uint8_t *pkt, size_t len_before_tag, size_t crc_off,
                        size_t crc_len, uint32_t *crc, uint8_t out[SKYMEM_AUTH_TAG_LEN])
{
    size_t r = skymem_auth_route_at(pkt, len_before_tag), n = len_before_tag, head = n < HEAD_LEN ? n : HEAD_LEN;
    size_t body = n > HEAD_LEN ? (n - HEAD_LEN) / SKYMEM_POLYVAL_BLOCK : 0, rest = n - head - SKYMEM_POLYVAL_BLOCK * body;
    uint8_t first[HEAD_LEN], last[2 * SKYMEM_POLYVAL_BLOCK], s[SKYMEM_POLYVAL_BLOCK];
    uint64_t bits = (uint64_t)n * 8u;
    int i;
    /* the head with the rewritten bytes zeroed (and zero padding when the packet is shorter) */
    memset(first, 0, sizeof first);
    memcpy(first, pkt, head);
    if (r == SKYMEM_CMD_HDR_LEN) first[OFF_CHECKSUM] = 0; /* a command's checksum changes with every rewrite */
    memset(first + r + SKYMEM_ROUTE_VIA_PLANE, 0, 4);
    memset(first + r + SKYMEM_ROUTE_TTL, 0, 2);
    /* the last partial block, zero-padded, then the length block */
    memset(last, 0, sizeof last);
    memcpy(last, pkt + head + SKYMEM_POLYVAL_BLOCK * body, rest);
    for (i = 0; i < 8; i++) last[(rest ? SKYMEM_POLYVAL_BLOCK : 0) + i] = (uint8_t)(bits >> (8 * i));
    memset(s, 0, sizeof s);
    skymem_polyval_blocks(&k->hash, s, first, (head + SKYMEM_POLYVAL_BLOCK - 1) / SKYMEM_POLYVAL_BLOCK);
    if (crc != NULL) {
        *crc = 0;
        skymem_polyval_blocks_crc32c(&k->hash, s, pkt + head, body, pkt + crc_off, crc_len, crc);
    } else {
        skymem_polyval_blocks(&k->hash, s, pkt + head, body);
    }
    skymem_polyval_blocks(&k->hash, s, last, rest ? 2 : 1);
    skymem_aes128_encrypt(&k->tag[0], s, out);
    skymem_aes128_encrypt(&k->tag[1], s, out + SKYMEM_AES_BLOCK);
}

void skymem_auth_mac(const skymem_mac_key_t *k, const uint8_t *pkt, size_t len_before_tag,
                     uint8_t out[SKYMEM_AUTH_TAG_LEN])
{
    mac_and_crc(k, pkt, len_before_tag, 0, 0, NULL, out);
}

uint64_t skymem_auth_seq_at(uint64_t unix_us) { return unix_us / SKYMEM_AUTH_SEQ_US; }

uint64_t skymem_auth_next_seq(skymem_auth_t *a, uint64_t now_us)
{
    uint64_t now = skymem_auth_seq_at(now_us);
    a->last_seq = now > a->last_seq ? now : a->last_seq + 1u;
    return a->last_seq;
}

/* The AUTH flag set (on) or cleared and the length field made total_len, for a trailer added or removed; returns
 * the XOR of the three bytes as they were, for fix_checksum. */
static uint8_t mark_trailer(uint8_t *pkt, size_t r, size_t total_len, int on)
{
    uint8_t before = (uint8_t)(pkt[4] ^ pkt[5] ^ pkt[r + SKYMEM_ROUTE_FLAGS]);
    if (on) pkt[r + SKYMEM_ROUTE_FLAGS] |= SKYMEM_RF_AUTH;
    else pkt[r + SKYMEM_ROUTE_FLAGS] &= (uint8_t)~SKYMEM_RF_AUTH;
    skymem_put_u16(pkt + 4, (uint16_t)(total_len - 7u));
    return before;
}

/* A command's XOR checksum updated for what changed -- the three header bytes mark_trailer rewrote and the trailer
 * bytes pkt[from..to) that came or are about to go -- not recomputed over the whole command: a command comes here
 * with its checksum, as every skymem_build_* leaves it, and leaves with it. Replies have none. */
static void fix_checksum(uint8_t *pkt, size_t r, uint8_t before, size_t from, size_t to)
{
    uint8_t ck;
    size_t i;
    if (r != SKYMEM_CMD_HDR_LEN) return;
    ck = (uint8_t)(pkt[OFF_CHECKSUM] ^ before ^ pkt[4] ^ pkt[5] ^ pkt[r + SKYMEM_ROUTE_FLAGS]);
    for (i = from; i < to; i++) ck ^= pkt[i];
    pkt[OFF_CHECKSUM] = ck;
}

int skymem_auth_sign_with(const skymem_mac_key_t *k, uint32_t key_id, uint64_t seq, uint8_t *pkt, size_t len,
                          size_t cap)
{
    size_t out_len = len + SKYMEM_AUTH_TRAILER_LEN, r = skymem_auth_route_at(pkt, len);
    uint8_t before;
    if (k == NULL || r == 0 || out_len > cap || out_len > SKYMEM_MAX_PACKET ||
        (pkt[r + SKYMEM_ROUTE_FLAGS] & SKYMEM_RF_AUTH))
        return SKYMEM_AUTH_E_ARG;
    before = mark_trailer(pkt, r, out_len, 1); /* before the tag: it covers them */
    skymem_put_u32(pkt + len + SKYMEM_AT_KEY_ID, key_id);
    skymem_put_u64(pkt + len + SKYMEM_AT_SEQ, seq);
    skymem_auth_mac(k, pkt, len + SKYMEM_AT_TAG, pkt + len + SKYMEM_AT_TAG);
    fix_checksum(pkt, r, before, len, out_len);
    return (int)out_len;
}

int skymem_auth_strip(uint8_t *pkt, size_t len)
{
    size_t r = skymem_auth_route_at(pkt, len), out_len;
    uint8_t before;
    if (r == 0 || len < r + SKYMEM_ROUTE_HDR_LEN + SKYMEM_AUTH_TRAILER_LEN || !(pkt[r + SKYMEM_ROUTE_FLAGS] & SKYMEM_RF_AUTH))
        return SKYMEM_AUTH_E_NO_TRAILER;
    out_len = len - SKYMEM_AUTH_TRAILER_LEN;
    before = mark_trailer(pkt, r, out_len, 0);
    fix_checksum(pkt, r, before, out_len, len);
    memset(pkt + out_len, 0, SKYMEM_AUTH_TRAILER_LEN);
    return (int)out_len;
}

int skymem_auth_sign(const skymem_auth_t *a, uint32_t key_id, uint64_t seq, uint8_t *pkt, size_t len, size_t cap)
{
    const skymem_auth_key_t *k;
    if (a == NULL) return SKYMEM_AUTH_E_ARG;
    k = skymem_auth_find_key_for(a, key_id, skymem_auth_key_use(pkt, len));
    if (k == NULL) return SKYMEM_AUTH_E_UNKNOWN_KEY;
    return skymem_auth_sign_with(&k->mac, key_id, seq, pkt, len, cap);
}

/* The trailer's tag, checked in constant time; SKYMEM_AUTH_OK or E_BAD_MAC. With crc, as mac_and_crc. */
static int tag_ok(const skymem_mac_key_t *k, const uint8_t *pkt, size_t len, size_t crc_off, size_t crc_len,
                  uint32_t *crc)
{
    uint8_t tag[SKYMEM_AUTH_TAG_LEN], diff = 0;
    const uint8_t *theirs = pkt + len - SKYMEM_AUTH_TAG_LEN;
    size_t i;
    mac_and_crc(k, pkt, len - SKYMEM_AUTH_TAG_LEN, crc_off, crc_len, crc, tag);
    for (i = 0; i < SKYMEM_AUTH_TAG_LEN; i++) diff |= (uint8_t)(tag[i] ^ theirs[i]);
    return diff ? SKYMEM_AUTH_E_BAD_MAC : SKYMEM_AUTH_OK;
}

/* The signed packet's trailer, or NULL when it has none (no AUTH flag, no room). */
static const uint8_t *trailer_of(const uint8_t *pkt, size_t len, size_t *r)
{
    *r = skymem_auth_route_at(pkt, len);
    if (*r == 0 || len < *r + SKYMEM_ROUTE_HDR_LEN + SKYMEM_AUTH_TRAILER_LEN ||
        !(pkt[*r + SKYMEM_ROUTE_FLAGS] & SKYMEM_RF_AUTH))
        return NULL;
    return pkt + len - SKYMEM_AUTH_TRAILER_LEN;
}

int skymem_auth_check_reply(const skymem_mac_key_t *k, uint32_t key_id, const uint8_t *pkt, size_t len)
{
    size_t r;
    const uint8_t *trailer = trailer_of(pkt, len, &r);
    if (k == NULL || trailer == NULL || r != SKYMEM_TLM_HDR_LEN) return SKYMEM_AUTH_E_NO_TRAILER;
    if (skymem_get_u32(trailer + SKYMEM_AT_KEY_ID) != key_id) return SKYMEM_AUTH_E_UNKNOWN_KEY;
    return tag_ok(k, pkt, len, 0, 0, NULL);
}

int skymem_auth_check_reply_crc(const skymem_mac_key_t *k, uint32_t key_id, const uint8_t *pkt, size_t len,
                                size_t crc_off, size_t crc_len, uint32_t *crc)
{
    size_t r;
    const uint8_t *trailer = trailer_of(pkt, len, &r);
    if (crc == NULL || crc_off < HEAD_LEN || crc_off > len || crc_len > len - crc_off) return SKYMEM_AUTH_E_ARG;
    if (k == NULL || trailer == NULL || r != SKYMEM_TLM_HDR_LEN) return SKYMEM_AUTH_E_NO_TRAILER;
    if (skymem_get_u32(trailer + SKYMEM_AT_KEY_ID) != key_id) return SKYMEM_AUTH_E_UNKNOWN_KEY;
    return tag_ok(k, pkt, len, crc_off, crc_len, crc);
}

/* ---- replay windows -------------------------------------------------------- */
static skymem_replay_t *find_window(skymem_auth_t *a, uint32_t key_id, uint16_t plane, uint16_t sat, int create)
{
    uint32_t i, victim = 0;
    for (i = 0; i < SKYMEM_AUTH_SOURCES; i++) {
        skymem_replay_t *w = &a->windows[i];
        if (w->used && w->key_id == key_id && w->src_plane == plane && w->src_sat == sat) return w;
    }
    if (!create) return NULL;
    for (i = 0; i < SKYMEM_AUTH_SOURCES; i++) {
        if (!a->windows[i].used) {
            victim = i;
            break;
        }
        if (a->windows[i].last_use < a->windows[victim].last_use) victim = i;
    }
    /* recycling a window forgets what it saw: refuse everything up to its top from now on */
    if (a->windows[victim].used && a->windows[victim].top > a->floor) a->floor = a->windows[victim].top;
    memset(&a->windows[victim], 0, sizeof a->windows[victim]);
    a->windows[victim].key_id = key_id;
    a->windows[victim].src_plane = plane;
    a->windows[victim].src_sat = sat;
    return &a->windows[victim];
}

/* The bitmap of window w (a->windows + i). */
static uint64_t *bits_of(skymem_auth_t *a, const skymem_replay_t *w) { return a->bits[w - a->windows]; }

static int window_seen(skymem_auth_t *a, const skymem_replay_t *w, uint64_t seq)
{
    uint64_t pos = seq % SKYMEM_AUTH_WINDOW;
    if (!w->used || seq > w->top) return 0;
    if (w->top - seq >= SKYMEM_AUTH_WINDOW) return 1; /* too old to tell: refuse */
    return (int)((bits_of(a, w)[pos / 64u] >> (pos % 64u)) & 1u);
}

/* Records seq; moving the top forward forgets the sequences that fall out of the window. */
static void window_record(skymem_auth_t *a, skymem_replay_t *w, uint64_t seq)
{
    uint64_t pos, *bits = bits_of(a, w);
    if (!w->used) {
        w->used = 1;
        w->top = seq;
        memset(bits, 0, sizeof a->bits[0]);
    } else if (seq > w->top) {
        if (seq - w->top >= SKYMEM_AUTH_WINDOW) {
            memset(bits, 0, sizeof a->bits[0]);
        } else { /* clear the ring positions of top+1 .. seq, a word at a time where whole */
            uint64_t s = w->top + 1u;
            while (s <= seq) {
                uint64_t p = s % SKYMEM_AUTH_WINDOW;
                if (p % 64u == 0 && seq - s >= 63u) {
                    bits[p / 64u] = 0;
                    s += 64u;
                } else {
                    bits[p / 64u] &= ~((uint64_t)1u << (p % 64u));
                    s++;
                }
            }
        }
        w->top = seq;
    }
    pos = seq % SKYMEM_AUTH_WINDOW;
    bits[pos / 64u] |= (uint64_t)1u << (pos % 64u);
}

int skymem_auth_window_of(const uint8_t *pkt, size_t len, uint32_t *key_id, uint16_t *plane, uint16_t *sat)
{
    size_t r;
    const uint8_t *trailer = trailer_of(pkt, len, &r);
    uint16_t p, s;
    if (trailer == NULL) return -1;
    p = skymem_get_u16(pkt + r + SKYMEM_ROUTE_SRC_PLANE);
    s = skymem_get_u16(pkt + r + SKYMEM_ROUTE_SRC_SAT);
    (void)skymem_auth_link_of(skymem_get_u32(trailer + SKYMEM_AT_KEY_ID), &p, &s); /* a link key: its satellite's */
    if (key_id) *key_id = skymem_get_u32(trailer + SKYMEM_AT_KEY_ID);
    if (plane) *plane = p;
    if (sat) *sat = s;
    return 0;
}

void skymem_auth_refuse_through(skymem_auth_t *a, uint32_t key_id, uint16_t plane, uint16_t sat, uint64_t seq)
{
    skymem_replay_t *w;
    uint64_t s, lo, *bits;
    if (a == NULL || seq <= a->floor) return; /* refused already */
    w = find_window(a, key_id, plane, sat, 1);
    if (seq <= a->floor) return; /* taking the window raised the floor past it */
    window_record(a, w, seq);    /* the top at seq at least: anything a window's width below it is too old */
    bits = bits_of(a, w);
    lo = w->top >= SKYMEM_AUTH_WINDOW ? w->top - SKYMEM_AUTH_WINDOW + 1u : 0;
    for (s = lo; s <= seq; s++) { /* and everything within the window up to seq seen */
        uint64_t pos = s % SKYMEM_AUTH_WINDOW;
        bits[pos / 64u] |= (uint64_t)1u << (pos % 64u);
        if (s == seq) break; /* (seq may be the largest sequence there is) */
    }
    w->last_use = ++a->tick;
}

/* skymem_auth_verify; with crc != NULL, also the CRC of pkt[crc_off, crc_off + crc_len) in the tag's pass
 * (*crc is then set whenever the tag was computed: OK, E_BAD_MAC, E_REPLAY). given: the key to check with
 * (the trailer must name given_id), else the ring's key of the trailer's id for the packet's direction. */
static int verify(skymem_auth_t *a, const skymem_mac_key_t *given, uint32_t given_id, const uint8_t *pkt, size_t len,
                  size_t crc_off, size_t crc_len, uint32_t *crc)
{
    const uint8_t *trailer;
    const skymem_mac_key_t *k;
    uint32_t key_id;
    uint64_t seq;
    uint16_t src_plane, src_sat, ground_end;
    uint8_t use;
    skymem_replay_t *w;
    size_t r;
    int rc;
    if (a == NULL) return SKYMEM_AUTH_E_NO_TRAILER;
    trailer = trailer_of(pkt, len, &r);
    if (trailer == NULL) return SKYMEM_AUTH_E_NO_TRAILER;
    key_id = skymem_get_u32(trailer + SKYMEM_AT_KEY_ID);
    seq = skymem_get_u64(trailer + SKYMEM_AT_SEQ);
    src_plane = skymem_get_u16(pkt + r + SKYMEM_ROUTE_SRC_PLANE);
    src_sat = skymem_get_u16(pkt + r + SKYMEM_ROUTE_SRC_SAT);
    /* the end a ground station would be at: a command's source, a reply's destination */
    ground_end = skymem_get_u16(pkt + r + (r == SKYMEM_CMD_HDR_LEN ? SKYMEM_ROUTE_SRC_PLANE : SKYMEM_ROUTE_DST_PLANE));
    use = skymem_auth_key_use(pkt, len);
    if (given != NULL) {
        k = key_id == given_id ? given : NULL;
    } else {
        const skymem_auth_key_t *ring_key = skymem_auth_find_key_for(a, key_id, use);
        k = ring_key ? &ring_key->mac : NULL;
    }
    if (k == NULL) return SKYMEM_AUTH_E_UNKNOWN_KEY;
    /* a link key only between satellites, a ground key only with a ground station at one end */
    if (skymem_auth_link_of(key_id, &src_plane, &src_sat) != (ground_end != SKYMEM_GROUND_PLANE))
        return SKYMEM_AUTH_E_KEY_SCOPE;
    /* (a link key's replay window is its neighbour's -- the satellite that signed it, whoever the packet is
     * from: one window per link, so traffic relayed through a neighbour cannot open windows of its own) */
    rc = tag_ok(k, pkt, len, crc_off, crc_len, crc);
    if (rc != SKYMEM_AUTH_OK) return rc;
    if (seq <= a->floor) return SKYMEM_AUTH_E_REPLAY;
    w = find_window(a, key_id, src_plane, src_sat, 0);
    if (w && window_seen(a, w, seq)) return SKYMEM_AUTH_E_REPLAY;
    if (w == NULL) w = find_window(a, key_id, src_plane, src_sat, 1);
    if (seq <= a->floor) return SKYMEM_AUTH_E_REPLAY; /* creating the window may have raised the floor */
    window_record(a, w, seq);
    w->last_use = ++a->tick;
    /* too far ahead: refused, and seen -- so it is refused again once this clock has caught up with it */
    if (a->ahead_limit != 0 && seq > a->ahead_limit) return SKYMEM_AUTH_E_AHEAD;
    if (seq > a->high) a->high = seq;
    return SKYMEM_AUTH_OK;
}

int skymem_auth_verify(skymem_auth_t *a, const uint8_t *pkt, size_t len)
{
    return verify(a, NULL, 0, pkt, len, 0, 0, NULL);
}

int skymem_auth_verify_crc(skymem_auth_t *a, const uint8_t *pkt, size_t len, size_t crc_off, size_t crc_len,
                           uint32_t *crc)
{
    if (crc == NULL || crc_off < HEAD_LEN || crc_off > len || crc_len > len - crc_off) return SKYMEM_AUTH_E_ARG;
    return verify(a, NULL, 0, pkt, len, crc_off, crc_len, crc);
}

int skymem_auth_verify_with(skymem_auth_t *a, const skymem_mac_key_t *k, uint32_t key_id, const uint8_t *pkt,
                            size_t len, size_t crc_off, size_t crc_len, uint32_t *crc)
{
    if (k == NULL) return SKYMEM_AUTH_E_UNKNOWN_KEY;
    if (crc != NULL && (crc_off < HEAD_LEN || crc_off > len || crc_len > len - crc_off)) return SKYMEM_AUTH_E_ARG;
    return verify(a, k, key_id, pkt, len, crc_off, crc_len, crc);
}
