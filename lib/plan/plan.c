/* Transport per peer, ring order, algorithm per call. */
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo/algo.h"
#include "core/log.h"
#include "core/params.h"

/* The transport for the pair (a, b), or -1: the forced one if it can
 * connect them, else the highest score among those both ranks initialised.
 * Every rank computes the same answer for every pair, which is what lets
 * the ring agree on its chunk size. */
static int choose(const struct ccl_comm *comm, const struct ccl__transport *forced, int a, int b) {
    int best = -1, best_score = 0;
    uint32_t both = comm->peers[a].transport_mask & comm->peers[b].transport_mask;
    for (int t = 0; t < ccl__ntransports; t++) {
        const struct ccl__transport *tr = ccl__transports[t];
        if ((forced && tr != forced) || !(both & (1u << t))) continue;
        int s = tr->can_connect(&comm->peers[a], &comm->peers[b]);
        if (s > best_score) best = t, best_score = s;
    }
    return best;
}

static const struct ccl__transport *forced_transport(const struct ccl_comm *comm) {
    return comm->params.transport[0] ? ccl__transport_by_name(comm->params.transport) : NULL;
}

int ccl__plan_pair_transport(const struct ccl_comm *comm, int a, int b) {
    return choose(comm, forced_transport(comm), a, b);
}

/* The transport of the ring's link from position i to the next (-1: none). */
static int ring_link(const struct ccl_comm *comm, const struct ccl__transport *forced, int i) {
    return choose(comm, forced, comm->ring[i], comm->ring[(i + 1) % comm->nranks]);
}

/* Pairs the common algorithms use on every call, connected at init: the
 * ring's neighbours, the hierarchical ring's across hosts, and the edges
 * of the trees (both double-binary trees and the binomial tree rooted at
 * 0). The same answer on both ranks of a pair. */
static int eager_pair(const struct ccl_comm *comm, int p) {
    int n = comm->nranks, me = comm->rank;
    if (comm->ring && n > 1) {
        int next = comm->ring[(comm->ring_pos + 1) % n], prev = comm->ring[(comm->ring_pos + n - 1) % n];
        if (p == next || p == prev) return 1;
    }
    if (comm->across) {
        int h = comm->nhosts, next = comm->across[(comm->host + 1) % h], prev = comm->across[(comm->host + h - 1) % h];
        if (p == next || p == prev) return 1;
    }
    for (int t = 0; t < 3; t++)
        if (ccl__tree_parent(n, me, t) == p || ccl__tree_parent(n, p, t) == me) return 1;
    return 0;
}

ccl_status_t ccl__plan_transports(struct ccl_comm *comm, uint8_t *const *use) {
    const struct ccl__transport *forced = forced_transport(comm);
    if (comm->params.transport[0] && !forced) {
        char names[128];
        ccl__transport_names(names, sizeof(names));
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "init: CCL_TRANSPORT=%s is not a transport (%s)%s",
                              comm->params.transport, names, ccl__transport_missing_why(comm->params.transport));
    }
    const struct ccl__peer_info *me = &comm->peers[comm->rank];
    for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank) continue;
        const struct ccl__peer_info *peer = &comm->peers[p];
        int best = choose(comm, forced, comm->rank, p);
        if (best < 0) {
            if (forced) {
                /* Most often the transport did not start on one side (no
                 * device, no driver): its INFO line there says why. */
                uint32_t bit = 1u << ccl__transport_index(forced);
                int down = !(me->transport_mask & bit) ? comm->rank : !(peer->transport_mask & bit) ? p : -1;
                char why[96] = "";
                if (down >= 0)
                    snprintf(why, sizeof(why), ": %s is not available on rank %d (CCL_DEBUG=INFO there says why)",
                             forced->name, down);
                return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                                      "init: CCL_TRANSPORT=%s cannot connect rank %d (%s) to rank %d (%s)%s",
                                      forced->name, comm->rank, me->hostname, p, peer->hostname, why);
            }
            return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "init: no transport connects rank %d (%s) to rank %d (%s)",
                                  comm->rank, me->hostname, p, peer->hostname);
        }
        use[best][p] = comm->params.connect_all || eager_pair(comm, p) ? CCL__USE_AT_INIT : CCL__USE_ON_FIRST_USE;
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "rank %d -> rank %d (%s) via %s%s", comm->rank, p, peer->hostname,
                 ccl__transports[best]->name, use[best][p] == CCL__USE_AT_INIT ? "" : ", on first use where it can");
    }
    return CCL_OK;
}

/* Ring steps on different links must cut the data the same way: the chunk
 * is the smallest slot of any link on the ring, the same on every rank. */
static void plan_ring_chunk(struct ccl_comm *comm) {
    const struct ccl__transport *forced = forced_transport(comm);
    size_t chunk = SIZE_MAX;
    for (int i = 0; i < comm->nranks && comm->nranks > 1; i++) {
        int t = ring_link(comm, forced, i);
        size_t slot = t >= 0 ? ccl__transports[t]->slot_bytes(ccl__tknobs(comm, ccl__transports[t])) : SIZE_MAX;
        if (slot < chunk) chunk = slot;
    }
    /* One rank: no ring links, and no slices either (nothing is copied
     * through a slot), so any size does; the first transport's keeps the
     * local copies in pieces of a familiar size. */
    comm->ring_chunk_bytes = chunk == SIZE_MAX ? ccl__transports[0]->slot_bytes(ccl__tknobs(comm, ccl__transports[0])) : chunk;
    /* Other algorithms may use any pair. */
    size_t any = comm->ring_chunk_bytes;
    for (int a = 0; a < comm->nranks; a++)
        for (int b = a + 1; b < comm->nranks; b++) {
            int t = choose(comm, forced, a, b);
            size_t slot = t >= 0 ? ccl__transports[t]->slot_bytes(ccl__tknobs(comm, ccl__transports[t])) : SIZE_MAX;
            if (slot < any) any = slot;
        }
    comm->chunk_bytes = any;
}

/* Hosts as runs of ring positions, and the ranks at this rank's place on
 * every host (the hierarchical algorithm's ring across hosts). */
static ccl_status_t plan_hosts(struct ccl_comm *comm) {
    int n = comm->nranks;
    comm->host_first = malloc(sizeof(int) * (size_t)(n + 1));
    comm->identity = malloc(sizeof(int) * (size_t)n);
    if (!comm->host_first || !comm->identity) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    int h = 0;
    for (int i = 0; i < n; i++) {
        comm->identity[i] = i;
        if (i == 0 || strcmp(comm->peers[comm->ring[i]].host_id, comm->peers[comm->ring[i - 1]].host_id) != 0)
            comm->host_first[h++] = i;
        if (i == comm->ring_pos) comm->host = h - 1;
    }
    comm->nhosts = h;
    comm->host_first[h] = n;
    int size = comm->host_first[1] - comm->host_first[0];
    for (int k = 1; k < h; k++)
        if (comm->host_first[k + 1] - comm->host_first[k] != size) return CCL_OK;
    comm->across = malloc(sizeof(int) * (size_t)h);
    if (!comm->across) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    int place = comm->ring_pos - comm->host_first[comm->host];
    for (int k = 0; k < h; k++) comm->across[k] = comm->ring[comm->host_first[k] + place];
    return CCL_OK;
}

ccl_status_t ccl__plan_ring(struct ccl_comm *comm) {
    int n = comm->nranks;
    comm->ring = malloc(sizeof(int) * (size_t)n);
    if (!comm->ring) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    struct ccl__place *places = malloc(sizeof(*places) * (size_t)n);
    if (!places) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    ccl__plan_places(n, comm->peers, places);
    ccl__plan_order(n, places, comm->ring);
    struct ccl__crossings x;
    ccl__plan_crossings(n, places, comm->ring, &x);
    free(places);
    for (int i = 0; i < n; i++)
        if (comm->ring[i] == comm->rank) comm->ring_pos = i;
    CCL_CHECK(plan_hosts(comm));
    plan_ring_chunk(comm);
    if (CCL__LOG_ON(CCL__LOG_INFO, CCL__SUB_PLAN) && comm->rank == 0) {
        char line[512];
        size_t o = 0;
        for (int i = 0; i < n && o + 16 < sizeof(line); i++)
            o += (size_t)snprintf(line + o, sizeof(line) - o, "%s%d", i ? " -> " : "", comm->ring[i]);
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "ring: %s%s, chunk %zu bytes; it crosses %d host, %d package and %d NUMA "
                 "boundaries", line, o + 16 >= sizeof(line) ? " ..." : "", comm->ring_chunk_bytes, x.hosts, x.packages,
                 x.numa);
    }
    return CCL_OK;
}

void ccl__plan_ring_zc(struct ccl_comm *comm) {
    /* Where a link of the ring moves large messages zero-copy, the ring's
     * all-gather half moves whole blocks as messages once they are large
     * enough for it (the smallest such size of any such link); every rank
     * decides alike. */
    const struct ccl__transport *forced = forced_transport(comm);
    size_t zc = SIZE_MAX;
    for (int i = 0; i < comm->nranks && comm->nranks > 1; i++) {
        int t = ring_link(comm, forced, i);
        size_t min = t >= 0 ? ccl__p2p_zc_min_bytes(comm, ccl__transports[t]) : 0;
        if (min && min < zc) zc = min;
    }
    comm->ring_zc_bytes = zc == SIZE_MAX ? 0 : zc;
    if (comm->ring_zc_bytes && comm->rank == 0)
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "ring: all-gather halves move whole blocks zero-copy once blocks reach "
                 "%zu bytes", comm->ring_zc_bytes);
}

/* Bytes of second-level cache on the cores the host's ranks run on (the
 * smallest any rank reports, times the cores), 0 where a rank's is
 * unknown: what the direct path's windows and outputs are sized by. */
static uint32_t smallest_l2_kib(int n, const struct ccl__peer_info *peers) {
    uint32_t l2_kib = UINT32_MAX;
    for (int r = 0; r < n; r++)
        if (peers[r].topo.l2_kib < l2_kib) l2_kib = peers[r].topo.l2_kib;
    return l2_kib;
}

static size_t host_l2_bytes(int n, const struct ccl__peer_info *peers, int rank) {
    uint32_t l2_kib = smallest_l2_kib(n, peers);
    int cores = ccl__plan_machine_cpus(n, peers, rank);
    return l2_kib == UINT32_MAX || cores <= 0 ? 0 : (size_t)cores * l2_kib * 1024;
}

/* The smallest CCL_DIRECT_WINDOW_BYTES any rank was given (its record's
 * direct_window_bytes), 0 when none was: every rank reads the same
 * records, so the areas agree even where the ranks' environments do not. */
static size_t told_window_bytes(int n, const struct ccl__peer_info *peers) {
    size_t told = 0;
    for (int r = 0; r < n; r++)
        if (peers[r].direct_window_bytes && (!told || peers[r].direct_window_bytes < told))
            told = peers[r].direct_window_bytes;
    return told;
}

/* How much of each window the direct path's rounds use (all of it at
 * most). A round keeps about every rank's window in flight on the host
 * (two buffers of an in and an out area each); while that stays within
 * half the second-level caches of the cores the ranks run on (the other
 * half holds the user buffers streaming through), peers read one
 * another's areas from those caches, not from memory. Measured on the
 * 2-core development machine (2 MiB L2 a core; all_reduce_perf -A direct
 * in place, busbw, medians of 3 alternating runs; bench/NOTES.md): on 3,
 * 4 and 8 ranks 512 KiB windows against 2 MiB gave 1.05-1.25x from
 * 1 MiB to 64 MiB (reduce-scatter 1.1-1.2x), 256 KiB lost to 512 KiB
 * everywhere (the waits of four times the rounds), and on 2 ranks the
 * window size made no difference. Hence the floor of 512 KiB. Where not
 * even that fits, nothing is fitted and the fewest rounds win: the whole
 * window. Measured on a later development machine (1 MiB L2 a core, 32 MiB
 * L3; the same runs, 4-8 alternations), where 3, 4 and 8 ranks fit less
 * than 512 KiB: 1 MiB windows against 512 KiB gave 1.05-1.4x at 256 KiB to
 * 16 MiB, and on 4 ranks 2 MiB against 1 MiB up to 1.4x more (level at
 * worst); on the first machine 8 ranks (256 KiB would have fitted) ran
 * alike with 512 KiB, 1 MiB and 2 MiB windows. Two ranks use the whole
 * window too: on the first machine its size made no difference to them,
 * and on the later one 2 MiB ran 1.1-1.6x faster than 512 KiB (which
 * fitted). */
size_t ccl__plan_direct_window(int n, const struct ccl__peer_info *peers, int rank, size_t mapped) {
    size_t fixed = told_window_bytes(n, peers);
    if (fixed) {
        fixed = fixed < (64 << 10) ? 64 << 10 : fixed & ~(size_t)4095; /* four areas and the control page */
        return fixed < mapped ? fixed : mapped;
    }
    size_t l2 = host_l2_bytes(n, peers, rank);
    if (!l2) return mapped; /* caches unknown */
    size_t fits = l2 / (2 * (size_t)n), used = 512 << 10;
    if (fits < used || n <= 2) return mapped;
    while (used * 2 <= fits) used *= 2;
    return used < mapped ? used : mapped;
}

/* The output size from which the direct path and the ring write results
 * past the caches (non-temporal stores), where the output leaves them
 * anyway and a normal store would first read each line from memory: when
 * the host's ranks' outputs together reach 16 times the second-level
 * caches of the cores they run on. The last-level cache a machine reports
 * may be shared with others (the 2-core development machine, 2 MiB L2 a
 * core, reports 480 MiB), so the rule is fitted there. Measured out of
 * place, streamed against normal stores, 3 alternations (bench/NOTES.md):
 * 2 ranks, all-gather 0.85-0.9x at 16 MiB, level (ring) and 1.2-1.4x
 * (direct) at 32 MiB, 1.2-1.3x at 64 MiB; all-reduce level at 16 MiB,
 * 1.13x (ring) at 32 MiB; 4 ranks, all-gather and all-reduce level at
 * 8 MiB, 1.1-1.5x from 16 MiB. Hence 32 MiB outputs on 2 ranks, 16 MiB on
 * 4 (twice the L2s, the rule before, cost 2-rank 16 MiB calls 10%). */
size_t ccl__plan_stream_bytes(int n, const struct ccl__peer_info *peers, int rank) {
    long fixed = ccl__params_get()->stream_output_bytes;
    if (fixed == 0) return SIZE_MAX;
    if (fixed > 0) return (size_t)fixed;
    uint32_t l2_kib = smallest_l2_kib(n, peers);
    int index, ranks = ccl__plan_machine_ranks_of(n, peers, rank, &index);
    int cpus = ccl__plan_machine_cpus(n, peers, rank), cores = ranks < cpus ? ranks : cpus;
    if (l2_kib == UINT32_MAX || l2_kib == 0 || cores <= 0) return SIZE_MAX; /* caches unknown: never */
    return 16 * (size_t)cores * l2_kib * 1024 / (size_t)ranks;
}

ccl_status_t ccl__plan_direct(struct ccl_comm *comm) {
    int n = comm->nranks;
    comm->stream_bytes = ccl__plan_stream_bytes(n, comm->peers, comm->rank);
    if (n < 2) return CCL_OK;
    /* One transport must give every window: the one connecting us to rank
     * (rank + 1) % n; every peer's connection must be of that transport. */
    const struct ccl__conn *any = comm->conns[(comm->rank + 1) % n];
    const struct ccl__transport *t = any ? any->t : NULL;
    if (!t || !t->window) return CCL_OK;
    for (int p = 0; p < n; p++)
        if (p != comm->rank && (!comm->conns[p] || comm->conns[p]->t != t)) return CCL_OK;
    uint8_t **w = calloc((size_t)n, sizeof(*w));
    if (!w) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    size_t smallest = SIZE_MAX;
    for (int p = 0; p < n; p++) {
        size_t bytes = 0;
        w[p] = t->window(comm, p, &bytes);
        if (!w[p] || bytes == 0) {
            free(w);
            return CCL_OK;
        }
        if (bytes < smallest) smallest = bytes;
    }
    /* Every rank read the same n window headers and peer records: the
     * same decision and the same size everywhere. */
    comm->windows = w;
    comm->window_bytes = ccl__plan_direct_window(n, comm->peers, comm->rank, smallest);
    char from[32] = "never";
    if (comm->stream_bytes != SIZE_MAX) snprintf(from, sizeof from, "from %zu bytes", comm->stream_bytes);
    CCL_INFO(CCL__SUB_PLAN, comm->rank, "direct path: %d windows of %zu bytes via %s, rounds use %zu bytes of each (%s); "
             "outputs written past the caches %s", n, smallest, t->name, comm->window_bytes,
             told_window_bytes(n, comm->peers) ? "CCL_DIRECT_WINDOW_BYTES" : "fitted to the caches", from);
    return CCL_OK;
}

int ccl__plan_machine_ranks_of(int n, const struct ccl__peer_info *peers, int rank, int *index) {
    const char *mine = peers[rank].machine_id;
    int count = 0;
    *index = 0;
    for (int r = 0; r < n; r++) {
        if (strcmp(peers[r].machine_id, mine) != 0) continue;
        *index += r < rank;
        count++;
    }
    return count;
}

int ccl__plan_machine_cpus(int n, const struct ccl__peer_info *peers, int rank) {
    const char *mine = peers[rank].machine_id;
    uint8_t pinned_at[(INT16_MAX + 1) / 8] = {0}; /* a bit per core: topo.core is an int16_t */
    int cpus = 0, pinned = 0;
    for (int r = 0; r < n; r++) {
        if (strcmp(peers[r].machine_id, mine) != 0) continue;
        if (peers[r].ncores > cpus) cpus = peers[r].ncores;
        int core = peers[r].topo.core;
        if (core < 0 || (pinned_at[core / 8] >> (core % 8) & 1)) continue;
        pinned_at[core / 8] |= (uint8_t)(1u << (core % 8));
        pinned++;
    }
    return pinned > cpus ? pinned : cpus;
}

int ccl__plan_alone_on_core(int n, const struct ccl__peer_info *peers, int rank) {
    const struct ccl__peer_info *me = &peers[rank];
    if (me->topo.core < 0) return 0;
    for (int r = 0; r < n; r++) {
        if (r == rank || strcmp(peers[r].machine_id, me->machine_id) != 0) continue;
        if (peers[r].topo.core < 0 || peers[r].topo.core == me->topo.core) return 0;
    }
    return 1;
}

int ccl__plan_machine_ranks(const struct ccl_comm *comm, int *index) {
    return ccl__plan_machine_ranks_of(comm->nranks, comm->peers, comm->rank, index);
}

int ccl__plan_pin_slot(int index, int nlocal, int ncores, int npus, int *slot, int *pu) {
    if (ncores < 1) ncores = 1;
    if (npus < ncores) npus = ncores;
    /* A core each when there are enough, else a hardware thread each, else
     * round robin over the hardware threads: a fixed share of a core hands
     * it over at each yield, where the scheduler would now and then stack
     * three ranks on one core and leave another idle (measured: 4 ranks on
     * 2 threads, 20 runs of the 8 B..64 KiB sweep, slowest/fastest run up
     * to 5.5x unpinned, under 2.5x pinned). */
    *pu = ncores < nlocal;
    *slot = npus < nlocal ? index % npus : index;
    return *pu ? *slot / (npus / ncores) : *slot;
}

enum ccl__spin_rule ccl__plan_spin_rule(long local, long threads, int cpu_adapter, int spin_set) {
    if (spin_set || threads <= 0) return CCL__SPIN_ALWAYS;
    /* More ranks than CPUs: a spinning rank holds the core of the rank it
     * waits for. Yielding stays: it hands the core over without the cost
     * of a sleep and wake-up (measured: 4 ranks on 2 threads, 8 B
     * all-reduce 7 us with yield, 80 us sleeping at once). */
    if (local > threads) return CCL__SPIN_NEVER;
    /* A link over a software RDMA device (soft-RoCE, siw) has this
     * machine's CPUs do its adapter's packets, checksums and copies: each
     * rank's traffic wants a CPU beside the rank's own, and a rank that
     * spins or yields through a long transfer takes it from the adapter
     * it waits for. Measured in the soft-RoCE VM (2 ranks, 2 vCPUs,
     * rounds in turn, against the default's spin and growing yield): 4 MiB
     * all-reduce 1.07x as fast (6 rounds), 0.98x (5) and 1.08x (5) in
     * three boots, 1 MiB 0.95x and 1.00x, 8-byte latency even. A wait
     * whose adapter has nothing of its to do still spins: what it waits
     * for is the peer's work, and a spin sees it land where a yield loop
     * sees it a system call late (bench/NOTES.md: 8-byte latency 1.04x
     * and 1.07x as fast in two boots, all-reduce and send/recv even). */
    if (local * (1 + (cpu_adapter != 0)) > threads) return CCL__SPIN_UNLESS_IN_FLIGHT;
    return CCL__SPIN_ALWAYS;
}

void ccl__plan_waiting(struct ccl_comm *comm) {
    int index, local = ccl__plan_machine_ranks(comm, &index);
    /* The machine's CPUs, not this rank's: ranks a launcher bound to a CPU
     * each may each use one, and are not crowded for it. */
    long threads = ccl__plan_machine_cpus(comm->nranks, comm->peers, comm->rank);
    if (threads <= 0) threads = sysconf(_SC_NPROCESSORS_ONLN);
    /* crowded: too few CPUs for the ranks, or for their adapters' work too */
    int crowded = ccl__plan_spin_rule(local, threads, comm->cpu_adapter, 0) != CCL__SPIN_ALWAYS;
    enum ccl__spin_rule rule = ccl__plan_spin_rule(local, threads, comm->cpu_adapter, comm->params.spin_us_set);
    comm->spin_s = rule == CCL__SPIN_NEVER ? 0 : comm->params.spin_us * 1e-6;
    comm->spin_unless_in_flight = rule == CCL__SPIN_UNLESS_IN_FLIGHT;
    comm->yield_s = comm->yield_base_s = 200e-6;
    /* A wait that slept and was woken soon after would have done better
     * yielding a little longer: it lengthens the yield, up to 2 ms (the
     * wait routine's waiter_learn). Not when CCL_SPIN_US was set: a user
     * who chose how long waits burn a core keeps that choice. Nor on a
     * crowded machine: there a sleeping rank hands its core to one with
     * work, where yielding ones queue in front of it (measured: 8 ranks
     * on 2 cores, 6 alternating runs each, 4 KiB all-reduce median
     * 1221 us adapting, 283 us not; adapting did end the runs where the
     * smallest sizes sat at 350 us, a slow state this leaves open). */
    comm->yield_max_s = comm->params.spin_us_set || crowded ? comm->yield_s : 2e-3;
    comm->machine_ranks = local;
    comm->machine_cpus = (int)threads;
    CCL_INFO(CCL__SUB_PLAN, comm->rank,
             "%d ranks on this machine%s, %ld CPUs to use: waits spin %.0f us%s, yield %.0f us (up to %.0f as waits "
             "teach)", local, comm->cpu_adapter ? " and as many software RDMA adapters' work" : "", threads,
             comm->spin_s * 1e6, comm->spin_unless_in_flight ? " (none while an adapter works for them)" : "",
             comm->yield_s * 1e6, comm->yield_max_s * 1e6);
    if (local > threads && index == 0)
        CCL_INFO(CCL__SUB_INIT, comm->rank,
                 "oversubscribed: %d ranks of this communicator on this machine share %ld CPUs, so they take turns "
                 "on the cores: expect calls slower than with a CPU per rank", local, threads);
}

#define YIELD_CEILING_CHUNKS 4   /* chunks of the slowest link a learnt yield may cover */
#define YIELD_CEILING_MAX_S 50e-3 /* and never more: past it, sleeping costs little in comparison */

double ccl__plan_yield_ceiling(double max_s, double base_s, double chunk_us) {
    if (max_s <= base_s || !(chunk_us > 0)) return max_s;
    return fmax(max_s, fmin(YIELD_CEILING_CHUNKS * chunk_us * 1e-6, YIELD_CEILING_MAX_S));
}

void ccl__plan_waiting_links(struct ccl_comm *comm, size_t chunk_bytes, double chunk_us) {
    double was = comm->yield_max_s;
    comm->yield_max_s = ccl__plan_yield_ceiling(was, comm->yield_base_s, chunk_us);
    if (comm->yield_max_s > was)
        CCL_INFO(CCL__SUB_PLAN, comm->rank,
                 "a %zu-byte chunk takes %.0f us over the slowest link: waits may learn to yield up to %.0f us",
                 chunk_bytes, chunk_us, comm->yield_max_s * 1e6);
}
