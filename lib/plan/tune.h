/*
 * Where the cost model's figures come from: the machine's tuning file
 * (CCL_TUNING_FILE, written by ccl-tune or by an earlier init), a short
 * probe at init for what the file lacks, defaults for the rest. Every rank
 * ends with the same figures: each brings its own in its bootstrap record,
 * and the probe's results are gathered and combined the same way.
 */
#ifndef CCL_PLAN_TUNE_H
#define CCL_PLAN_TUNE_H

#include "core/comm.h"
#include "plan/cost.h"

/* Before bootstrap: self->tuned from this machine's tuning file, and copy
 * and reduce speed measured when it has none (a fraction of a
 * millisecond). A file that is corrupt or from another machine is ignored
 * with a warning. */
void ccl__tune_local(struct ccl_comm *comm, struct ccl__peer_info *self);

/* After the plan, on every rank: the figures of the job. A link class the
 * ring uses that no rank brought is probed (a few ring all-gathers, all
 * ranks at once); the lowest rank of each machine then updates its tuning
 * file. */
ccl_status_t ccl__tune_figures(struct ccl_comm *comm, const struct ccl__job_shape *shape, struct ccl__figures *out);

/* "numa 0.6 us 4.4 GB/s (measured), tcp ...; copy ..., reduce ..." for
 * the classes in links. */
void ccl__tune_describe(const struct ccl__figures *f, unsigned links, char *buf, size_t n);

/* ---- the file ---- */

/* This machine, as a tuning file names it: hostname, machine id, CPUs. */
void ccl__tune_machine_key(char *key, size_t n);
/* Reads path into f (classes and copy/reduce it has; measured says which).
 * Returns 1 when read, 0 when there is no file, -1 when it was rejected
 * (corrupt, another machine's, unreadable), with the reason in why. A NULL
 * key takes any machine's file (planning for that machine). */
int ccl__tune_file_read(const char *path, const char *key, struct ccl__figures *f, char *why, size_t whylen);
/* 1 when the file at path (read into file) no longer describes this
 * machine as it is: measured by another libccl or under another kernel,
 * without its conditions (an older libccl's), or with copy or reduce
 * speeds more than twice or half of what this core does now (copy_now,
 * reduce_now); the reason in why. A file that says "check no" (figures
 * given by hand) is never stale. */
int ccl__tune_file_stale(const char *path, const struct ccl__figures *file, double copy_now, double reduce_now,
                         char *why, size_t whylen);
/* Writes f's measured figures to path atomically (a temporary file, then
 * rename), creating its directory. 0, or -1 with the reason in why. */
int ccl__tune_file_write(const char *path, const char *key, const struct ccl__figures *f, char *why, size_t whylen);

/* ---- measuring ---- */

/* The median of v[0..n-1] (n >= 1), which it sorts. */
double ccl__tune_median(double *v, int n);

/* Bytes per microsecond of memcpy and of a float32 sum on this core. */
void ccl__tune_measure_local(double *copy_bytes_per_us, double *reduce_bytes_per_us);

/* The ring's step: alpha (a 1-byte all-gather), bandwidth (CCL__PROBE_BYTES
 * per rank) and, when large_bytes is not 0, the large point's bandwidth
 * (large_bytes per rank), the median over repetitions and then over ranks;
 * every rank gets the same figure. Bandwidths are read back through the
 * model of the job's shape, with fig's copy speed: that of unshared cores. */
ccl_status_t ccl__tune_probe_ring(struct ccl_comm *comm, const struct ccl__job_shape *shape,
                                  const struct ccl__figures *fig, size_t large_bytes, struct ccl__link_figure *out);

/* Whether a tuning file's figure for a link (file) still holds, against
 * quick probes of it: probe(arg, &now) is called until one agrees with the
 * file (3x for alpha, 2x for bandwidth; where ranks share cores, crowded,
 * only a file slower than the probe disagrees) or CCL__TUNE_STALE_PROBES
 * have run. Returns 1 when none agreed: the file is stale, and *best holds
 * the best of what they saw, each figure on its own (the least alpha, the
 * most bandwidth), since what else runs on a machine only slows a probe.
 * 0 when one agreed or a probe failed (*st). */
#define CCL__TUNE_STALE_PROBES 3
/* Speeds further apart than this factor are another machine's state. */
#define CCL__TUNE_STALE_FACTOR 2.0
typedef ccl_status_t (*ccl__tune_link_probe_fn)(void *arg, struct ccl__link_figure *now);
/* Folds a probe's figures into *best, each on its own: the least alpha,
 * the most bandwidth (what else runs on the machine only slows a probe). */
void ccl__tune_link_keep_best(struct ccl__link_figure *best, const struct ccl__link_figure *now);
int ccl__tune_link_stale(const struct ccl__link_figure *file, int crowded, ccl__tune_link_probe_fn probe, void *arg,
                         struct ccl__link_figure *best, ccl_status_t *st);

#endif
