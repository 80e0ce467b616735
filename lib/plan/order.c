/* Where ranks sit, and the ring order that follows from it: each host's
 * ranks together, and inside a host each package's and each NUMA node's,
 * so the ring crosses every slow boundary as few times as a ring can
 * (twice per package or host it leaves and re-enters: once out, once in). */
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

/* Where CCL_BIND=core will pin the index-th of nlocal ranks of a machine
 * (the core map repeats past its end). */
static void pinned_place(const struct ccl__topo_summary *s, int index, int nlocal, struct ccl__place *p) {
    if (s->ncore_map == 0) return;
    int slot, pu, ncores = s->ncores ? s->ncores : s->ncore_map;
    int k = ccl__plan_pin_slot(index, nlocal, ncores, s->npus, &slot, &pu) % s->ncore_map;
    p->package = s->core_package[k], p->numa = s->core_numa[k], p->core = k;
}

void ccl__plan_places(int n, const struct ccl__peer_info *peers, struct ccl__place *out) {
    for (int r = 0; r < n; r++) {
        const struct ccl__topo_summary *s = &peers[r].topo;
        struct ccl__place *p = &out[r];
        *p = (struct ccl__place){.host = r, .package = -1, .numa = -1, .core = -1};
        for (int q = 0; q < r && p->host == r; q++)
            if (strcmp(peers[q].host_id, peers[r].host_id) == 0) p->host = out[q].host;
        if (s->binds) {
            int index, nlocal = ccl__plan_machine_ranks_of(n, peers, r, &index);
            pinned_place(s, index, nlocal, p);
        } else {
            p->package = s->package, p->numa = s->numa;
            /* Unbound inside one package or node: its place there is not
             * known, but it is on that side of the boundary. */
            p->core = s->core;
        }
    }
}

/* Host (by its lowest rank), package, NUMA node, core, rank. Unknown
 * places (-1) sort first and fall back to rank order. */
static int before(const struct ccl__place *places, int a, int b) {
    const struct ccl__place *p = &places[a], *q = &places[b];
    if (p->host != q->host) return p->host < q->host;
    if (p->package != q->package) return p->package < q->package;
    if (p->numa != q->numa) return p->numa < q->numa;
    if (p->core != q->core) return p->core < q->core;
    return a < b;
}

void ccl__plan_order(int n, const struct ccl__place *places, int *ring) {
    /* Insertion sort: qsort takes no context in C11, and n is a rank count. */
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && before(places, i, ring[j - 1]); j--) ring[j] = ring[j - 1];
        ring[j] = i;
    }
}

void ccl__plan_crossings(int n, const struct ccl__place *places, const int *ring, struct ccl__crossings *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < n && n > 1; i++) {
        const struct ccl__place *a = &places[ring[i]], *b = &places[ring[(i + 1) % n]];
        if (a->host != b->host) out->hosts++;
        else if (a->package != b->package) out->packages++;
        else if (a->numa != b->numa) out->numa++;
    }
}
