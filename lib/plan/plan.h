/*
 * The planner: the one place that knows both transports and algorithms.
 * From the peer table (hosts, hwloc summaries, transports each rank has) it
 * picks a transport per peer and the ring order, and per call the
 * algorithm. CCL_DEBUG=INFO (subsystem PLAN) explains each choice.
 */
#ifndef CCL_PLAN_H
#define CCL_PLAN_H

#include <stdint.h>

#include "algo/algo.h"
#include "plan/cost.h"
#include "core/comm.h"
#include "transports/transport.h"

/* self->topo and self->ncores from hwloc: this machine, or the one
 * CCL_TOPO_FILE describes (a bad one fails with the reason). */
ccl_status_t ccl__plan_local_topology(struct ccl_comm *comm, struct ccl__peer_info *self);

/* What ccl__plan_local_topology reports with CCL_BIND=none, for this
 * machine ("") or the one an hwloc XML file or synthetic description
 * describes, without a communicator (tools and tests planning for a
 * machine); a failure's reason in err. */
ccl_status_t ccl__plan_machine_summary(const char *topo_file, struct ccl__peer_info *out, char *err, size_t errlen);

/* The RDMA devices of a machine (this one: "", an hwloc XML file) nearest
 * to the CPUs in cpulist ("0-3,8"; "": where this process may run) first,
 * comma-separated into out, as ccl__plan_local_topology leaves them in
 * comm->rdma_near for the ib transport; a failure's reason in err. */
ccl_status_t ccl__plan_rdma_order(const char *topo_file, const char *cpulist, char *out, size_t outlen, char *err,
                                  size_t errlen);

/* Where a rank runs, or will once CCL_BIND pins it; -1: not known. host
 * numbers hosts by their lowest rank. */
struct ccl__place {
    int host, package, numa, core;
};
void ccl__plan_places(int n, const struct ccl__peer_info *peers, struct ccl__place *out);
/* The ring: hosts in order of their lowest rank, inside a host by
 * package, NUMA node, core, then rank. */
void ccl__plan_order(int n, const struct ccl__place *places, int *ring);
/* How many ring links cross a host, a package (same host), a NUMA node
 * (same package). */
struct ccl__crossings {
    int hosts, packages, numa;
};
void ccl__plan_crossings(int n, const struct ccl__place *places, const int *ring, struct ccl__crossings *out);
/* CPUs the cgroup quota allows this process, rounded up (0: no quota). */
int ccl__plan_cpu_quota(void);

/* The transport (registry index) that connects ranks a and b, or -1; the
 * same answer on every rank. */
int ccl__plan_pair_transport(const struct ccl_comm *comm, int a, int b);

/* use[t][p] != 0 when transport t connects this rank to peer p: at init
 * (CCL__USE_AT_INIT), or where the transport can, when the pair is first
 * used (the ring's and trees' pairs connect at init, others on first use,
 * unless CCL_CONNECT=all). After ccl__plan_ring. */
ccl_status_t ccl__plan_transports(struct ccl_comm *comm, uint8_t *const *use);

/* comm->ring from the places of every rank (ccl__plan_order), hosts,
 * chunk sizes. */
ccl_status_t ccl__plan_ring(struct ccl_comm *comm);

/* comm->ring_zc_bytes: the block size from which the ring's all-gather
 * half moves whole blocks zero-copy, from its links' point-to-point
 * settings (ccl__p2p_zc_min_bytes). Once single-copy is decided. */
void ccl__plan_ring_zc(struct ccl_comm *comm);

/* The direct path: comm->windows when every rank exposes a window that
 * every other rank maps (all on one host), else left off. */
ccl_status_t ccl__plan_direct(struct ccl_comm *comm);
/* How much of each of the direct path's windows (mapped bytes, the
 * smallest of any rank's) its rounds use, the same on every rank of the
 * n (all on one host): the smallest CCL_DIRECT_WINDOW_BYTES a rank was
 * given (its record's direct_window_bytes), or what fits the caches of
 * the cores they run on (plan.c says why). */
size_t ccl__plan_direct_window(int n, const struct ccl__peer_info *peers, int rank, size_t mapped);
/* The output size (bytes) from which the direct path writes results with
 * non-temporal stores: CCL_STREAM_OUTPUT_BYTES, or twice the L2 caches of
 * the cores the n ranks run on; SIZE_MAX: never. */
size_t ccl__plan_stream_bytes(int n, const struct ccl__peer_info *peers, int rank);

/* The single-copy algorithm: comm->single_copy when the direct path is on
 * and every rank's probe read every peer's memory through cross-memory
 * attach (cma_probe.c); collective over the direct path's ranks. */
ccl_status_t ccl__plan_single_copy(struct ccl_comm *comm);

/* How many ranks run on this rank's machine (the real one, not
 * CCL_HOST_ID: ranks posing as hosts still share its cores), and in
 * *index this rank's place among them in rank order. */
int ccl__plan_machine_ranks(const struct ccl_comm *comm, int *index);
/* The same for any rank of a peer table. */
int ccl__plan_machine_ranks_of(int n, const struct ccl__peer_info *peers, int rank, int *index);
/* The CPUs the ranks of rank's machine share: the most any of them may
 * use or, where ranks are pinned to a core each (by their launcher, or by
 * CCL_BIND in an earlier communicator of the process), the distinct cores
 * they sit on, whichever is more; 0 when nobody knows. */
int ccl__plan_machine_cpus(int n, const struct ccl__peer_info *peers, int rank);
/* 1 when rank is pinned to one core (topo.core) and every other rank of
 * its machine to another one. */
int ccl__plan_alone_on_core(int n, const struct ccl__peer_info *peers, int rank);

/* Where CCL_BIND=core pins the index-th of nlocal ranks of a machine, in
 * the ncores cores and npus hardware threads a rank may use: *slot is a
 * core (*pu = 0) when every rank gets one, else a hardware thread (*pu =
 * 1), round robin when those are too few. Returns the core *slot lies in
 * (threads numbered core by core, as hwloc does). The pinning and the
 * places the ring is sorted by both follow this one rule. */
int ccl__plan_pin_slot(int index, int nlocal, int ncores, int npus, int *slot, int *pu);

/* How waits behave: spinning helps when every rank has a hardware thread
 * of its own; with more ranks than threads on a host, a spinning rank
 * steals the time of the rank it waits for, so waits yield at once. */
void ccl__plan_waiting(struct ccl_comm *comm);

/* Whether waits spin, for `local` ranks of the communicator on a machine
 * with `threads` CPUs to use, `cpu_adapter` when some link's adapter is
 * software on those CPUs (its ranks count twice), unless the user chose
 * (spin_set: CCL_SPIN_US). Crowded by ranks, never; crowded by the
 * adapters' work alone, only while no adapter works for the wait (its
 * work would run on our CPUs); otherwise always. */
enum ccl__spin_rule { CCL__SPIN_ALWAYS, CCL__SPIN_UNLESS_IN_FLIGHT, CCL__SPIN_NEVER };
enum ccl__spin_rule ccl__plan_spin_rule(long local, long threads, int cpu_adapter, int spin_set);

/* How far the yield may learn to grow, given the time one chunk takes over
 * the communicator's slowest link (chunk_us): max_s, or four such chunks
 * where that is longer (at most 50 ms). Over a slow link a wait for one
 * chunk outlasts the 2 ms a yield may otherwise reach, so every such wait
 * slept and its rank woke late. Over soft-RoCE in the test VM (128 KiB in
 * 2.9 ms, so up to 11.7 ms), 2-rank all-reduce at 1 MiB, 10 rounds
 * alternating with the 2 ms ceiling over two boots: median 21.97 ms
 * against 22.29, rounds above 23 ms 1 against 4. Where the yield does not
 * adapt (max_s == base_s) it stays fixed. */
double ccl__plan_yield_ceiling(double max_s, double base_s, double chunk_us);
/* Once the model knows the links: applies that ceiling to this rank's waits. */
void ccl__plan_waiting_links(struct ccl_comm *comm, size_t chunk_bytes, double chunk_us);

/* CCL_BIND=core: pins the calling thread to one of the cores it may use,
 * the i-th for the i-th rank of this machine (a hardware thread each when
 * cores are too few, round robin when those are too). Unpinned, the
 * scheduler can leave two spinning ranks on one core for milliseconds, and
 * every wait then costs a context switch. A value other than none or core
 * fails init. */
ccl_status_t ccl__plan_bind(struct ccl_comm *comm);
/* Pins the calling thread where CCL_BIND=core pins this rank's init
 * thread (ccl_comm_bind_thread). */
ccl_status_t ccl__plan_bind_thread(struct ccl_comm *comm);

/* The link class between two places on one host: NUMA node, package or
 * neither apart (unknown places count as one NUMA node). */
int ccl__plan_shm_class(const struct ccl__place *p, const struct ccl__place *q);

/* The model's view of n ranks (peer table, ring order): link classes
 * (pair_class(ctx, a, b): a transport's class, or -1 for shared memory,
 * whose class the ranks' places give), hosts, oversubscription. The
 * caller sets windows, ring_chunk, any_chunk and window_area. 0, or -1 out of
 * memory. */
int ccl__plan_shape(int n, const struct ccl__peer_info *peers, const int *ring, int (*pair_class)(void *, int, int),
                    void *ctx, struct ccl__job_shape *out);

/* The cost model of this job (comm->cost): its shape from the peer table
 * and the plan, its figures from the tuning file or defaults. */
ccl_status_t ccl__plan_model(struct ccl_comm *comm);
void ccl__plan_model_free(struct ccl_comm *comm);
/* The figures comm's model uses (NULL before it has one). */
struct ccl__figures;
const struct ccl__figures *ccl__plan_model_figures(const struct ccl_comm *comm);
/* The model's cheapest algorithm for a call of kind moving bytes (see
 * plan/cost.h for what bytes counts), and one algorithm's prediction. */
struct ccl__cost_pick ccl__plan_model_choose(struct ccl_comm *comm, int kind, size_t bytes);
/* The chunk the model runs algo with for such a call (CCL_CHUNK_BYTES
 * when set; a repeat of a kind's last size and algorithm skips the model),
 * and its prediction of algo at a given chunk. */
size_t ccl__plan_model_chunk(struct ccl_comm *comm, int kind, int algo, size_t bytes);
/* Whether the model finds the zero-copy path cheaper than its pick for a
 * call of kind moving bytes (the same answer on every rank). */
int ccl__plan_model_zero_copy_pays(struct ccl_comm *comm, int kind, size_t bytes);
double ccl__plan_model_predict(const struct ccl_comm *comm, int kind, int algo, size_t bytes, size_t chunk);
/* The model's time (us) for a call of kind and bytes as comm would run it
 * (its forced algorithm, or the cheapest), and for a transfer of bytes to
 * peer over their link; 0 where the model has none. For estimates that
 * run nothing (ccl_group_simulate_end). */
double ccl__plan_estimate_us(struct ccl_comm *comm, int kind, size_t bytes);
double ccl__plan_estimate_p2p_us(struct ccl_comm *comm, int peer, size_t bytes);

/* The collective (enum ccl__op_kind) a CCL_ALGO name means: NCCL's
 * spelling, underscores ignored ("all_reduce", "allreduce"); -1 if none. */
int ccl__plan_coll_by_name(const char *s, size_t len);

/* Reads comm->params.algo (CCL_ALGO's syntax) into comm->algo_forced; a
 * name that is neither an algorithm nor collective:algorithm is an error
 * that names `what` (init, set_algo). */
ccl_status_t ccl__plan_parse_algo(struct ccl_comm *comm, const char *what);

/* The algorithm for one call (a->plan filled in), or NULL with the
 * communicator's error set when the forced one cannot run it. */
ccl__algo_fn ccl__plan_call(struct ccl_comm *comm, struct ccl__coll_args *a);

#endif
