/*
 * The job's shape as the cost model sees it (struct ccl__job_shape): which
 * link classes each algorithm's steps cross, how many ranks of a host share
 * its network adapter in each, and, where ranks share cores and each one's
 * core is known, how the busiest core's ranks receive (from another core
 * or from their own). Built once per communicator, the same on every rank.
 */
#include <string.h>

#include "algo/algo.h"
#include "plan/cost.h"

static unsigned bit(const uint8_t *cls, int n, int i, int j) { return i == j ? 0u : 1u << cls[i * n + j]; }

/* Each rank's core, as the index of the lowest rank pinned to the same
 * core of the same host; -1 when any rank's core is unknown (then no core
 * load is known: ranks could sit anywhere). */
static int core_groups(int n, const int *core_of, const int *host_of, int *group) {
    for (int r = 0; r < n; r++) {
        if (!core_of || core_of[r] < 0) return -1;
        group[r] = r;
        for (int q = 0; q < r; q++)
            if (core_of[q] == core_of[r] && host_of[q] == host_of[r]) {
                group[r] = group[q];
                break;
            }
    }
    return 0;
}

/* The busiest core's load in a step where rank r receives from from[r]
 * (-1: nothing): the most ranks of any core receiving across, and the most
 * receiving from their own core over shared memory. */
static struct ccl__core_load core_load(int n, const uint8_t *cls, const int *group, const int *from, int *count) {
    struct ccl__core_load most = {0, 0};
    if (!group) return most;
    memset(count, 0, sizeof(int) * 2 * (size_t)n);
    for (int r = 0; r < n; r++) {
        int s = from[r];
        if (s < 0 || s == r) continue;
        int same = group[s] == group[r] && ccl__link_is_shared_memory(cls[s * n + r]);
        int *c = &count[2 * group[r] + same];
        if (++*c > (same ? most.same : most.cross)) *(same ? &most.same : &most.cross) = *c;
    }
    return most;
}

void ccl__cost_shape(struct ccl__job_shape *out, int n, const uint8_t *cls, const int *ring, const int *host_of,
                     const int *core_of) {
    int nhosts = 0;
    for (int r = 0; r < n; r++)
        if (host_of[r] + 1 > nhosts) nhosts = host_of[r] + 1;
    int count[n], place[n];
    memset(count, 0, sizeof count);
    for (int r = 0; r < n; r++) place[r] = count[host_of[r]]++;
    memset(out->xor_links, 0, sizeof out->xor_links);
    memset(out->shift_links, 0, sizeof out->shift_links);
    out->n = n;
    out->nhosts = nhosts;
    out->ring_chunk = out->any_chunk = out->window_area = 0; /* the caller's to set */
    out->per_host = count[0];
    for (int h = 1; h < nhosts; h++)
        if (count[h] != count[0]) out->per_host = 0;
    out->ring_links = out->all_links = out->inside_links = out->across_links = 0;
    for (int i = 0; i < n; i++) {
        out->ring_links |= bit(cls, n, ring[i], ring[(i + 1) % n]);
        for (int j = 0; j < n; j++) {
            unsigned b = bit(cls, n, i, j);
            out->all_links |= b;
            if (host_of[i] == host_of[j]) out->inside_links |= b;
            else if (place[i] == place[j]) out->across_links |= b;
        }
    }
    out->dtree_links = out->btree_links = 0;
    out->dtree_depth = n > 1 ? ccl__dtree_depth(n) : 0;
    for (int r = 0; r < n; r++)
        for (int t = 0; t < 3; t++) {
            int up = ccl__tree_parent(n, r, t);
            if (up < 0) continue;
            if (t < 2) out->dtree_links |= bit(cls, n, r, up);
            else out->btree_links |= bit(cls, n, r, up);
        }
    int p = ccl__pow2_floor(n);
    out->per_host_max = 0;
    for (int h = 0; h < nhosts; h++)
        if (count[h] > out->per_host_max) out->per_host_max = count[h];
    /* Who each rank receives from in a step (-1: nothing), for the cores'
     * loads: the ring's predecessor; below, recursive doubling's partner
     * and Bruck's r - 2^k, filled in as each step's links are. */
    int xor_out[nhosts], shift_out[nhosts], group_of[n], ring_from[n], xor_from[n], shift_from[n], tally[2 * n];
    int *group = core_groups(n, core_of, host_of, group_of) == 0 ? group_of : NULL;
    for (int i = 0; i < n; i++) ring_from[ring[(i + 1) % n]] = ring[i];
    out->ring_core = core_load(n, cls, group, ring_from, tally);
    for (int k = 0; k < CCL__COST_MAX_STEPS; k++) {
        out->xor_share[k] = out->shift_share[k] = 1;
        out->xor_core[k] = out->shift_core[k] = (struct ccl__core_load){0, 0};
        if (k >= 30 || (1 << k) >= n) continue;
        memset(xor_out, 0, sizeof xor_out);
        memset(shift_out, 0, sizeof shift_out);
        for (int r = 0; r < n; r++) xor_from[r] = -1;
        for (int r = 0; r < n; r++) {
            int x = r ^ (1 << k), s = (r + (1 << k)) % n;
            if (r < p && (1 << k) < p) {
                out->xor_links[k] |= bit(cls, n, r, x);
                xor_out[host_of[r]] += host_of[x] != host_of[r];
                xor_from[x] = r;
            }
            out->shift_links[k] |= bit(cls, n, r, s);
            shift_out[host_of[r]] += host_of[s] != host_of[r];
            shift_from[s] = r;
        }
        out->xor_core[k] = core_load(n, cls, group, xor_from, tally);
        out->shift_core[k] = core_load(n, cls, group, shift_from, tally);
        for (int h = 0; h < nhosts; h++) {
            if (xor_out[h] > out->xor_share[k]) out->xor_share[k] = xor_out[h];
            if (shift_out[h] > out->shift_share[k]) out->shift_share[k] = shift_out[h];
        }
    }
}
