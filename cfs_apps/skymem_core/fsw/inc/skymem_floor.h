/*
 * skymem_floor.h -- the replay floor file's text, for both runtimes.
 *
 * A keyed satellite keeps what a restart must not forget of its replay state in a file (skymem_sat.h's
 * persist_floor) and reads it back at start:
 *  - the high-water mark, so a command taken before a restart is refused after it;
 *  - what it refused for being signed too far ahead of its clock, per replay window (key id and source),
 *    so such a command is refused when its time comes even across a restart (issue 53, M3 residual): at
 *    most SKYMEM_FLOOR_AHEAD_MAX windows, each with the sequence up to which that window refuses.
 * The text is the mark in decimal and a newline, then one line per window, "ahead KEY PLANE SAT SEQ" (decimal,
 * single spaces, a newline), nothing else. Both runtimes write it beside the real name and rename it over (a
 * crash leaves the old state or the new one), and read it with skymem_floor_parse, which refuses anything
 * else -- in particular a file cut short, which would otherwise read as a smaller mark or fewer windows.
 */
#ifndef SKYMEM_FLOOR_H
#define SKYMEM_FLOOR_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#define SKYMEM_FLOOR_AHEAD_MAX 16u /* windows kept for sequences refused ahead (more: skymem_sat.c folds them) */
#define SKYMEM_FLOOR_LINE_MAX 50   /* "ahead " + u32 + ' ' + u16 + ' ' + u16 + ' ' + u64 + '\n' */
#define SKYMEM_FLOOR_TEXT_MAX (22 + SKYMEM_FLOOR_AHEAD_MAX * SKYMEM_FLOOR_LINE_MAX) /* with the NUL */

/* One replay window's refusal: every sequence of (key_id, source) at or below seq is refused. */
typedef struct {
    uint32_t key_id;
    uint16_t src_plane, src_sat; /* the source the window is kept for (skymem_auth_window_of) */
    uint64_t seq;
} skymem_floor_ahead_t;

typedef struct {
    uint64_t mark; /* the high-water mark: every sequence at or below it is refused */
    uint32_t n_ahead;
    skymem_floor_ahead_t ahead[SKYMEM_FLOOR_AHEAD_MAX];
} skymem_floor_t;

/* Writes f's text (NUL-terminated) into buf; returns its length without the NUL, or -1 when cap is less than
 * SKYMEM_FLOOR_TEXT_MAX or f holds more than SKYMEM_FLOOR_AHEAD_MAX windows. */
int skymem_floor_format(const skymem_floor_t *f, char *buf, size_t cap);
/* The state in text[0..len): 0 and *f set when it is exactly what skymem_floor_format writes (numbers that fit
 * their fields), -1 for anything else (*f untouched). */
int skymem_floor_parse(const char *text, size_t len, skymem_floor_t *f);
#ifdef __cplusplus
}
#endif
#endif /* SKYMEM_FLOOR_H */
