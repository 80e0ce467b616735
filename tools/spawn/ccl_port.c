/* ccl_spawn_pick_port (ccl_spawn.h): a loopback port for a local job's
 * rendezvous, chosen where no other process lands by chance. Its own file,
 * so that cclrun, which links no libccl, takes this and nothing else of
 * the spawn library. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ccl_spawn.h"

/* Ports the kernel hands out to connect() and bind(0) are the ones other
 * processes take unasked; ours come from below (or above) that range, so
 * only another explicit choice can collide with them. */
static void unassigned_range(int *lo, int *hi) {
    int eph_lo = 32768, eph_hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &eph_lo, &eph_hi) != 2) eph_lo = 32768, eph_hi = 60999;
        fclose(f);
    }
    if (eph_lo > 11024) *lo = 10000, *hi = eph_lo - 1;
    else if (eph_hi < 64535) *lo = eph_hi + 1, *hi = 65535;
    else *lo = *hi = 0; /* the kernel's range covers everything: let it choose */
}

static int bind_loopback(int port, int fd) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    return ntohs(a.sin_port);
}

int ccl_spawn_pick_port(int *listen_fd) {
    int lo, hi;
    unassigned_range(&lo, &hi);
    unsigned seed = 0;
    if (getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed)) seed = (unsigned)getpid();
    for (int tries = 0; tries < 64; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -1;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        int want = (hi > lo && tries < 63) ? lo + (int)(rand_r(&seed) % (unsigned)(hi - lo + 1)) : 0;
        int port = bind_loopback(want, fd);
        if (port > 0 && listen_fd && listen(fd, SOMAXCONN) != 0) port = -1;
        if (port > 0) {
            if (listen_fd) *listen_fd = fd;
            else close(fd);
            return port;
        }
        close(fd);
    }
    errno = EADDRINUSE;
    return -1;
}
