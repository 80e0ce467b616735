/* The network lab of netlab.h, built with iproute2. */
#define _GNU_SOURCE
#include "netlab.h"

#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return rc == 0 ? 0 : -1;
}

int netlab_up(struct netlab *lab, int nranks, char *why, size_t n) {
    memset(lab, 0, sizeof(*lab));
    if (nranks < 1 || nranks > NETLAB_MAX_RANKS) {
        snprintf(why, n, "netlab: %d ranks (at most %d)", nranks, NETLAB_MAX_RANKS);
        return -1;
    }
    if (geteuid() != 0) {
        snprintf(why, n, "network namespaces need root");
        return -1;
    }
    if (sh("command -v ip >/dev/null 2>&1") != 0) {
        snprintf(why, n, "iproute2's ip is not installed");
        return -1;
    }
    unsigned id = (unsigned)getpid() % 100000u;
    lab->nranks = nranks;
    snprintf(lab->ifname, sizeof lab->ifname, "cl%u", id);
    snprintf(lab->subnet, sizeof lab->subnet, "10.213.%u", id % 250u);
    for (int r = 0; r < nranks; r++) {
        snprintf(lab->ns[r], sizeof lab->ns[r], "ccl-lab-%u-%d", id, r);
        snprintf(lab->port[r], sizeof lab->port[r], "cl%up%d", id, r);
    }
    lab->up = 1;
    if (sh("ip link add %s type bridge && ip addr add %s.254/24 dev %s && ip link set %s up", lab->ifname,
           lab->subnet, lab->ifname, lab->ifname) != 0) {
        snprintf(why, n, "cannot make a bridge (ip link add type bridge failed)");
        netlab_down(lab);
        return -1;
    }
    for (int r = 0; r < nranks; r++) {
        if (sh("ip netns add %s && ip link add %s type veth peer name %s netns %s && ip link set %s master %s up && "
               "ip -n %s addr add %s.%d/24 dev %s && ip -n %s link set %s up && ip -n %s link set lo up",
               lab->ns[r], lab->port[r], lab->ifname, lab->ns[r], lab->port[r], lab->ifname, lab->ns[r], lab->subnet,
               r + 1, lab->ifname, lab->ns[r], lab->ifname, lab->ns[r]) != 0) {
            snprintf(why, n, "cannot make network namespace %s with a veth cable", lab->ns[r]);
            netlab_down(lab);
            return -1;
        }
    }
    return 0;
}

int netlab_enter(const struct netlab *lab, int rank) {
    char path[96];
    snprintf(path, sizeof path, "/var/run/netns/%s", lab->ns[rank]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = setns(fd, CLONE_NEWNET);
    close(fd);
    return rc;
}

int netlab_cable(const struct netlab *lab, int rank, int plugged) {
    return sh("ip link set %s %s", lab->port[rank], plugged ? "up" : "down");
}

void netlab_down(struct netlab *lab) {
    if (!lab->up) return;
    for (int r = 0; r < lab->nranks; r++) sh("ip netns del %s 2>/dev/null", lab->ns[r]);
    sh("ip link del %s 2>/dev/null", lab->ifname);
    lab->up = 0;
}
