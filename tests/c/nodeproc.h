/* nodeproc.h -- start/stop skymem_node processes and talk to them over loopback UDP.
 * Shared by the integration test and the node benchmark. Every wait is bounded. */
#ifndef NODEPROC_H
#define NODEPROC_H

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "skymem_codec.h"

#define NP_MAX 64

typedef struct {
    pid_t pid[NP_MAX];
    int count;
    uint32_t planes, sats;
    uint32_t isl_base, ground_base;
} np_grid_t;

static np_grid_t *np_active; /* for the atexit / signal cleanup */

static uint64_t np_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void np_kill_all(void)
{
    int i;
    if (np_active == NULL) return;
    for (i = 0; i < np_active->count; i++)
        if (np_active->pid[i] > 0) kill(np_active->pid[i], SIGKILL);
    for (i = 0; i < np_active->count; i++)
        if (np_active->pid[i] > 0) waitpid(np_active->pid[i], NULL, 0);
    np_active->count = 0;
}

static void np_on_signal(int sig)
{
    np_kill_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* 1 if every UDP port in [base, base+n) can be bound on loopback right now. */
static int np_ports_free(uint32_t base, uint32_t n)
{
    uint32_t i;
    int ok = 1;
    for (i = 0; i < n && ok; i++) {
        struct sockaddr_in a;
        int fd = socket(AF_INET, SOCK_DGRAM, 0);
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)(base + i));
        ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        if (fd >= 0) close(fd);
    }
    return ok;
}

/* Port bases for up to 20 satellites: ISL 10000-14999, ground 15000-19999 (below
 * the 20000/40000 defaults and the ephemeral range that launched constellations
 * and clients use). The first slot is derived from the process id; slots whose
 * ports are taken are skipped. */
static void np_pick_ports(np_grid_t *g)
{
    uint32_t start = (uint32_t)getpid() % 250u, k;
    for (k = 0; k < 250u; k++) {
        uint32_t slot = (start + k) % 250u;
        g->isl_base = 10000u + slot * 20u;
        g->ground_base = 15000u + slot * 20u;
        if (np_ports_free(g->isl_base, 20) && np_ports_free(g->ground_base, 20)) return;
    }
}

/* Starts one node with extra arguments (NULL-terminated list). */
static pid_t np_spawn(np_grid_t *g, const char *exe, uint32_t plane, uint32_t sat, const char **extra)
{
    char a[8][24];
    const char *argv[64];
    int k = 0, i;
    pid_t pid;
    snprintf(a[0], sizeof a[0], "%u", plane);
    snprintf(a[1], sizeof a[1], "%u", sat);
    snprintf(a[2], sizeof a[2], "%u", g->planes);
    snprintf(a[3], sizeof a[3], "%u", g->sats);
    snprintf(a[4], sizeof a[4], "%u", g->isl_base);
    snprintf(a[5], sizeof a[5], "%u", g->ground_base);
    argv[k++] = exe;
    argv[k++] = "--plane"; argv[k++] = a[0];
    argv[k++] = "--sat"; argv[k++] = a[1];
    argv[k++] = "--planes"; argv[k++] = a[2];
    argv[k++] = "--sats"; argv[k++] = a[3];
    argv[k++] = "--isl-port-base"; argv[k++] = a[4];
    argv[k++] = "--ground-port-base"; argv[k++] = a[5];
    for (i = 0; extra && extra[i] && k < 62; i++) argv[k++] = extra[i];
    argv[k] = NULL;
    pid = fork();
    if (pid == 0) {
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    if (pid > 0 && g->count < NP_MAX) g->pid[g->count++] = pid;
    return pid;
}

static void np_addr(uint32_t port, struct sockaddr_in *a)
{
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->sin_port = htons((uint16_t)port);
}

static struct sockaddr_in np_ground_addr(const np_grid_t *g, uint32_t plane, uint32_t sat)
{
    struct sockaddr_in a;
    np_addr(g->ground_base + plane * g->sats + sat, &a);
    return a;
}

static int np_client_socket(void)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_DGRAM, 0), sz = 8 << 20;
    np_addr(0, &a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("client socket");
        exit(1);
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    return fd;
}

/* Waits up to timeout_ms for one datagram. Returns its length or -1. */
static int np_recv(int fd, uint8_t *buf, size_t cap, int timeout_ms)
{
    struct pollfd p;
    p.fd = fd;
    p.events = POLLIN;
    if (poll(&p, 1, timeout_ms) <= 0) return -1;
    return (int)recv(fd, buf, cap, 0);
}

/* SIGTERM every node; returns the number that did not exit 0 within timeout_ms. */
static int np_stop_all(np_grid_t *g, int timeout_ms)
{
    int i, bad = 0;
    uint64_t deadline = np_now_ms() + (uint64_t)timeout_ms;
    for (i = 0; i < g->count; i++) kill(g->pid[i], SIGTERM);
    for (i = 0; i < g->count; i++) {
        int st = 0;
        pid_t r = 0;
        while ((r = waitpid(g->pid[i], &st, WNOHANG)) == 0 && np_now_ms() < deadline) usleep(2000);
        if (r != g->pid[i]) {
            kill(g->pid[i], SIGKILL);
            waitpid(g->pid[i], NULL, 0);
            bad++;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            bad++;
        }
        g->pid[i] = 0;
    }
    g->count = 0;
    return bad;
}

#endif
