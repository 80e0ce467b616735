/* bench/roofline: what this machine lets any collective library reach,
 * measured with no library at all (main.c says how the bounds follow). */
#ifndef BENCH_ROOFLINE_H
#define BENCH_ROOFLINE_H

#include <stddef.h>

#define ROOFLINE_MAX_CPUS 1024

/* The CPUs this process may run on, in order; their count (0 on error). */
int roofline_cpus(int *cpus, int max);

/* Pins the calling process to one cpu (left unpinned when that fails). */
void roofline_pin(int cpu);

/* k processes, each pinned to cpus[i] and copying buffers of `bytes` of
 * its own with memcpy, all started together: bytes copied per second by
 * all of them (GB/s, 10^9 bytes), the median of `reps` runs, each run timed
 * to its slowest process. 0 when a process could not be started. */
double roofline_copy_gbps(const int *cpus, int k, size_t bytes, int reps);

/* The same with the kernel's copy between processes: each of the k reads
 * the whole of the next one's buffer into its own (process_vm_readv), one
 * call a buffer. 0 when the kernel refuses it (Yama, seccomp, a container)
 * or a process could not be started. */
double roofline_cma_gbps(const int *cpus, int k, size_t bytes, int reps);

/* An all-gather's writes at their fastest: k processes, each writing a
 * buffer of `bytes` of its own as nblocks blocks, each block copied from
 * one source of a block's size, with memcpy and, in other runs, with
 * streaming stores: the bytes written per second by all of them with the
 * faster of the two (GB/s, median of `reps` runs each). 0 when a process
 * could not be started. */
double roofline_gather_gbps(const int *cpus, int k, size_t bytes, int nblocks, int reps);

struct roofline_tcp {
    double one_way_gbps; /* one process sends, the other receives */
    double both_gbps;    /* each sends to and receives from the other at once: bytes one way per second */
};

struct roofline_tcp_args {
    const int *cpus;
    int ncpus;
    const size_t *sizes;
    int nsizes;
    int blocks;         /* timed blocks per size and way; the fastest counts */
    size_t block_bytes; /* bytes one way per block (at least one iteration) */
    size_t sockbuf;     /* socket buffers tried besides autotuning (0: none) */
};

/* Two processes over a loopback TCP connection, on cpus[0] and cpus[1]
 * when there are two (ncpus >= 2): for each size, the fastest block over
 * every way tried: socket buffers autotuned and fixed at `sockbuf`, each
 * side asleep in poll() or, with two cpus, spinning, each call moving all
 * that is left or 512 KiB at most. Returns 0, or -1 with the reason on
 * stderr. */
int roofline_tcp_sweep(const struct roofline_tcp_args *a, struct roofline_tcp *out);

#endif
