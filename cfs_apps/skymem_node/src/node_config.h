/* node_config.h -- skymem_node command line / config file (docs/CONTRACTS.md). */
#ifndef NODE_CONFIG_H
#define NODE_CONFIG_H

#include <stdint.h>

#define NODE_LOG_ERROR 0
#define NODE_LOG_WARN  1
#define NODE_LOG_INFO  2
#define NODE_LOG_DEBUG 3

typedef struct {
    uint32_t plane, sat, planes, sats;
    double altitude_km, inclination_deg;
    uint32_t walker_phase;
    char bind[64];
    int bind_given;
    uint32_t isl_port_base, ground_port_base;
    int per_satellite_addresses; /* --addresses per-satellite: satellite i on --bind + i, ports = the bases */
    char peers[512];
    uint64_t memory_budget;
    uint32_t chunk_size;
    uint64_t epoch_ms;
    int epoch_given;
    double time_scale;
    double delay_scale;
    double ground_delay_ms;
    double bandwidth_mbps;
    double loss, dup, reorder, corrupt;
    uint64_t seed;
    int log_level;
    char auth_keys[512]; /* key file ("key_id hex_key" lines); empty: SKYMEM_AUTH_KEYS env var, else auth off */
    char auth_floor[512]; /* replay floor file; empty: auth_keys + ".floor.PLANE-SAT" */
    char tlm_host[16];   /* --tlm-dest: where housekeeping goes (TO_LAB's destination on cFS); empty: to the asker */
    uint32_t tlm_port;
} node_config_t;

/* Parses argv (and any --config FILE at its position; later flags win).
 * On error writes a message to stderr and returns -1 (caller exits 2);
 * returns 1 if --help was printed (exit 0), 0 on success. */
int node_config_parse(node_config_t *cfg, int argc, char **argv);

#endif
