/*
 * skymem_stations.h -- the ground stations a satellite has heard from, for both runtimes.
 *
 * A reply to a station goes to the address of its request (skymem_returns.h) or, failing that, to the
 * address the station was last verified at: a station is learned only from a command that verified
 * (keys on) or from any command (keys off), never from what an attacker can send. The runtime keeps the
 * addresses (a sockaddr on the native node, an OS_SockAddr_t on cFS) in an array parallel to these
 * entries; this is the choice of the entry. A full table gives the entry heard from longest ago.
 */
#ifndef SKYMEM_STATIONS_H
#define SKYMEM_STATIONS_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef struct {
    uint8_t used;
    uint16_t id;
    uint64_t heard_ms; /* the runtime's monotonic milliseconds */
} skymem_station_t;

/* The entry to write station id's address in (its own, else a free one, else the one heard from longest
 * ago), marked heard at now_ms; *is_new set to 1 when it was not known. -1 only for n == 0. */
int skymem_station_learn(skymem_station_t *t, uint32_t n, uint16_t id, uint64_t now_ms, int *is_new);
/* The entry of station id, or -1. */
int skymem_station_find(const skymem_station_t *t, uint32_t n, uint16_t id);
/* How many stations are known. */
uint32_t skymem_station_count(const skymem_station_t *t, uint32_t n);
#ifdef __cplusplus
}
#endif
#endif /* SKYMEM_STATIONS_H */
