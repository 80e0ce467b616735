/*
 * A small network lab for multi-rank tests: one network namespace per rank,
 * each with one interface cabled to a bridge (the switch) in the test's own
 * namespace, which also holds the bootstrap root. Every interface, inside
 * or out, has the same name, so one CCL_SOCKET_IFNAME fits every rank.
 * Needs root and iproute2; netlab_up says why when it cannot.
 */
#ifndef CCL_TESTS_NETLAB_H
#define CCL_TESTS_NETLAB_H

#include <stddef.h>

#define NETLAB_MAX_RANKS 8

struct netlab {
    int nranks;
    char ifname[16];                      /* the bridge, and each rank's interface */
    char ns[NETLAB_MAX_RANKS][32];        /* rank r's namespace */
    char port[NETLAB_MAX_RANKS][16];      /* rank r's cable, at the switch */
    char subnet[16];                      /* "10.213.N" */
    int up;
};

/* Builds the lab; 0, or -1 with a sentence in why. */
int netlab_up(struct netlab *lab, int nranks, char *why, size_t n);
/* Moves the calling process into rank r's namespace (a child, before init). */
int netlab_enter(const struct netlab *lab, int rank);
/* Unplugs or replugs rank r's cable at the switch. */
int netlab_cable(const struct netlab *lab, int rank, int plugged);
/* Removes everything netlab_up made (also safe on a half-built lab). */
void netlab_down(struct netlab *lab);

#endif
