/*
 * skymem_floor.h -- the replay floor file's text, for both runtimes.
 *
 * A keyed satellite keeps its replay high-water mark in a file (skymem_sat.h's persist_floor) and reads it
 * back at start, so a command taken before a restart is refused after it. The file is the mark in decimal
 * and a newline, nothing else. Both runtimes write it beside the real name and rename it over (a crash
 * leaves the old mark or the new one), and read it with skymem_floor_parse, which refuses anything else --
 * in particular a file cut short, which would otherwise read as a smaller mark and lower the floor.
 */
#ifndef SKYMEM_FLOOR_H
#define SKYMEM_FLOOR_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#define SKYMEM_FLOOR_TEXT_MAX 22 /* 20 digits, a newline, a NUL */

/* Writes mark's text ("123\n", NUL-terminated) into buf; returns its length without the NUL, or -1 when cap is
 * less than SKYMEM_FLOOR_TEXT_MAX. */
int skymem_floor_format(uint64_t mark, char *buf, size_t cap);
/* The mark in text[0..len): 0 and *mark set when it is 1-20 digits and a newline (a value that fits 64 bits),
 * -1 for anything else. */
int skymem_floor_parse(const char *text, size_t len, uint64_t *mark);
#ifdef __cplusplus
}
#endif
#endif /* SKYMEM_FLOOR_H */
