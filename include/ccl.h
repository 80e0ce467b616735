/*
 * libccl: collective communication for processes that train models together.
 *
 * The one public header. Every call returns a ccl_status_t: CCL_OK (0) on
 * success, CCL_INPROGRESS (1) from ccl_test while an operation runs, and a
 * negative value on failure. ccl_comm_last_error() says what failed and why.
 *
 * Argument order follows NCCL (buffers, count, dtype, op, root, comm), with
 * snake_case names: a blocking call returns when the buffers may be reused;
 * an _async twin returns a request at once; a _stream twin (CUDA, at the
 * end of this header) takes NCCL's stream argument and orders the call on
 * that stream.
 */
#ifndef CCL_H
#define CCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CCL_VERSION_MAJOR 0
#define CCL_VERSION_MINOR 1
#define CCL_VERSION_PATCH 0
#define CCL_VERSION_CODE (CCL_VERSION_MAJOR * 10000 + CCL_VERSION_MINOR * 100 + CCL_VERSION_PATCH)

#if defined(__GNUC__)
#define CCL_API __attribute__((visibility("default")))
#define CCL_NODISCARD __attribute__((warn_unused_result))
#else
#define CCL_API
#define CCL_NODISCARD
#endif

/* Status codes, one list (X-macro): name, value, description. */
#define CCL_STATUS_LIST(X)                                                             \
    X(CCL_OK, 0, "success")                                                            \
    X(CCL_INPROGRESS, 1, "operation in progress")                                      \
    X(CCL_ERR_INVALID_ARGUMENT, -1, "invalid argument")                                \
    X(CCL_ERR_INVALID_USAGE, -2, "invalid usage")                                      \
    X(CCL_ERR_SYSTEM, -3, "system call failed")                                        \
    X(CCL_ERR_REMOTE, -4, "a remote rank failed or disconnected")                      \
    X(CCL_ERR_TIMEOUT, -5, "operation timed out")                                      \
    X(CCL_ERR_ABORTED, -6, "communicator aborted")                                     \
    X(CCL_ERR_UNSUPPORTED, -7, "unsupported")                                          \
    X(CCL_ERR_NO_MEMORY, -8, "out of memory")                                          \
    X(CCL_ERR_INTERNAL, -9, "internal error")                                         \
    X(CCL_ERR_REVOKED, -10, "communicator revoked")

typedef enum {
#define CCL_STATUS_ENUM_(name, value, text) name = value,
    CCL_STATUS_LIST(CCL_STATUS_ENUM_)
#undef CCL_STATUS_ENUM_
} ccl_status_t;

typedef enum {
    CCL_INT8 = 0,
    CCL_UINT8 = 1,
    CCL_INT32 = 2,
    CCL_UINT32 = 3,
    CCL_INT64 = 4,
    CCL_UINT64 = 5,
    CCL_FLOAT16 = 6,
    CCL_BFLOAT16 = 7,
    CCL_FLOAT32 = 8,
    CCL_FLOAT64 = 9,
    CCL_NUM_DTYPES = 10
} ccl_dtype_t;

/* CCL_AVG is the sum divided by the number of ranks, computed in the element
 * type; on integers it truncates toward zero. CCL_BAND, CCL_BOR and CCL_BXOR
 * are bitwise and, or and exclusive or, of the integer types only (a float
 * dtype with one of them is CCL_ERR_INVALID_ARGUMENT). A premultiplied sum
 * is an op made by ccl_op_create_premul_sum; its values lie above these. */
typedef enum {
    CCL_SUM = 0,
    CCL_PROD = 1,
    CCL_MAX = 2,
    CCL_MIN = 3,
    CCL_AVG = 4,
    CCL_BAND = 5,
    CCL_BOR = 6,
    CCL_BXOR = 7,
    CCL_NUM_OPS = 8
} ccl_op_t;

#define CCL_UNIQUE_ID_BYTES 128
/* Made by ccl_get_unique_id on one process and handed to every rank out of
 * band (a file, an MPI broadcast, a key-value store). Plain bytes: copy it. */
typedef struct {
    char internal[CCL_UNIQUE_ID_BYTES];
} ccl_unique_id_t;

typedef struct ccl_comm ccl_comm_t;
typedef struct ccl_request ccl_request_t;

/* ---- status and version ---- */
CCL_API const char *ccl_status_string(ccl_status_t status);
/* The last error on this communicator, as a sentence ("" when none). With
 * NULL: why the calling thread's last communicator creation (init or
 * split) failed. */
CCL_API const char *ccl_comm_last_error(const ccl_comm_t *comm);
CCL_API int ccl_version(void);
CCL_API size_t ccl_dtype_size(ccl_dtype_t dtype);
CCL_API const char *ccl_dtype_name(ccl_dtype_t dtype);
/* "sum", "band", ...; "premul_sum" for an op of ccl_op_create_premul_sum. */
CCL_API const char *ccl_op_name(ccl_op_t op);

/* ---- communicators ---- */
/* Starts a rendezvous point in this process (a listening socket and a thread
 * that lives until every rank has joined or CCL_TIMEOUT passes). */
CCL_API CCL_NODISCARD ccl_status_t ccl_get_unique_id(ccl_unique_id_t *id);
/* Collective over nranks processes: each calls it with its own rank. */
CCL_API CCL_NODISCARD ccl_status_t ccl_comm_init_rank(ccl_comm_t **comm, int nranks, ccl_unique_id_t id,
                                                      int rank);
/* Options for one communicator. Start from CCL_CONFIG_INIT (size lets
 * later versions add fields without breaking programs built now). */
typedef struct {
    size_t size;      /* sizeof(ccl_config_t) */
    double timeout_s; /* the longest wait without progress, init included; 0: CCL_TIMEOUT */
    /* The algorithms of this communicator, in CCL_ALGO's syntax ("tree",
     * "allreduce:rhd,broadcast:ring"; "" or "auto": the planner's choice);
     * NULL: CCL_ALGO. Every rank must pass the same. */
    const char *algo;
} ccl_config_t;
#define CCL_CONFIG_INIT {sizeof(ccl_config_t), 0.0, NULL}
/* ccl_comm_init_rank with options (config NULL: none). A communicator split
 * from it inherits its timeout and its algorithms. */
CCL_API CCL_NODISCARD ccl_status_t ccl_comm_init_rank_config(ccl_comm_t **comm, int nranks, ccl_unique_id_t id,
                                                             int rank, const ccl_config_t *config);
/* Changes comm's algorithms from its next call on, in CCL_ALGO's syntax
 * ("rd", "allreduce:ring,broadcast:tree"; "" or "auto": the planner's
 * choice), as config.algo sets them at init; a split made later inherits
 * them. Every rank must make the same change between the same two calls
 * (CCL_CHECK=1 names two ranks whose calls then disagree). comm must be
 * idle: a nonblocking call still in flight or an open group gives
 * CCL_ERR_INVALID_USAGE, a name that is not an algorithm
 * CCL_ERR_INVALID_ARGUMENT; either way the algorithms stay as they were. */
CCL_API CCL_NODISCARD ccl_status_t ccl_comm_set_algo(ccl_comm_t *comm, const char *algo);
/* Changes comm's timeout (config.timeout_s at init: the longest wait
 * without progress) from its next call on, on this rank; a split made
 * later inherits it. Not collective: each rank sets its own. The same
 * rules as ccl_comm_set_algo: comm idle (CCL_ERR_INVALID_USAGE); seconds
 * above 0, up to 1e9 (CCL_ERR_INVALID_ARGUMENT). */
CCL_API CCL_NODISCARD ccl_status_t ccl_comm_set_timeout(ccl_comm_t *comm, double seconds);
/* Rank, size and root address from the launcher's environment: CCL_RANK,
 * CCL_WORLD_SIZE, CCL_ROOT_ADDR (host:port); else torchrun's RANK,
 * WORLD_SIZE, MASTER_ADDR, MASTER_PORT; else Slurm's SLURM_PROCID,
 * SLURM_NTASKS; else Open MPI's OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/SIZE
 * (the root address then comes from CCL_ROOT_ADDR or MASTER_ADDR/PORT). */
CCL_API CCL_NODISCARD ccl_status_t ccl_comm_init_env(ccl_comm_t **comm);
/* An id that every rank can make for itself, with no id to pass around:
 * its root is host_port ("host:port", "[v6]:port"), which rank 0 starts
 * when it calls ccl_comm_init_rank with the id, and the job's secret is
 * CCL_SECRET or CCL_SECRET_FILE's (as ccl_comm_init_env's; with neither,
 * one derived from the address and the launcher's job id, with the same
 * warning). Every rank passes the same address. NCCL's NCCL_COMM_ID is
 * this, in libccl-nccl. CCL_ERR_INVALID_ARGUMENT for an address that does
 * not resolve or a bad secret variable, saying why. */
CCL_API CCL_NODISCARD ccl_status_t ccl_unique_id_from_address(const char *host_port, ccl_unique_id_t *id);
/* Collective over comm: ranks with the same color form a new communicator,
 * ordered by key then by parent rank. color < 0 (CCL_SPLIT_NOCOLOR) gives
 * *newcomm = NULL. */
#define CCL_SPLIT_NOCOLOR (-1)
CCL_API CCL_NODISCARD ccl_status_t ccl_comm_split(ccl_comm_t *comm, int color, int key, ccl_comm_t **newcomm);
/* Collective over the listed ranks of comm alone (as MPI_Comm_create_group):
 * ranks[i] becomes rank i of *newcomm. Every member passes the same list, in
 * the same order; ranks that are not listed make no call, so disjoint groups
 * can be made at the same time. ranks[0] makes the new communicator's id
 * and hands it to the others over comm, which must not be used by another
 * thread meanwhile. The caller not in ranks, a repeated or out-of-range
 * rank: CCL_ERR_INVALID_ARGUMENT or CCL_ERR_INVALID_USAGE at once; members
 * given different lists: CCL_ERR_INVALID_USAGE on every member, naming one
 * that disagrees. */
CCL_API CCL_NODISCARD ccl_status_t ccl_comm_create_group(ccl_comm_t *comm, const int *ranks, int nranks,
                                                         ccl_comm_t **newcomm);
/* Waits for queued operations, then frees everything. Calls this thread's
 * open group recorded on comm do not run: their requests complete, and the
 * group's end returns, with CCL_ERR_INVALID_USAGE. Any later call on comm
 * returns CCL_ERR_INVALID_USAGE. CCL_ERR_SYSTEM: the CCL_TRACE file could
 * not be written (the communicator is freed all the same; the reason is
 * logged and left in ccl_comm_last_error(NULL)). */
CCL_API ccl_status_t ccl_comm_destroy(ccl_comm_t *comm);
/* Thread-safe: every pending and later call on comm returns CCL_ERR_ABORTED,
 * and the other ranks are told. Still call ccl_comm_destroy afterwards. */
CCL_API ccl_status_t ccl_comm_abort(ccl_comm_t *comm);
/* ---- elastic communicators (docs/elastic.md) ----
 * Revoke: from any thread of any rank; every pending and later call on
 * comm, on every rank, fails quickly with CCL_ERR_REVOKED. Unlike an
 * abort, the communicator's resources stay: it can still be shrunk (and
 * must still be destroyed). Not collective; idempotent. */
CCL_API ccl_status_t ccl_comm_revoke(ccl_comm_t *comm);
/* Collective over the ranks of comm that survive: *newcomm gets a new
 * communicator of them alone, ranked densely in comm's order. exclude
 * (nexclude ranks) names the ranks to leave out, which make no call, and
 * every survivor must pass the same list (a difference: CCL_ERR_INVALID_USAGE
 * on every survivor). exclude NULL means "the ranks that failed": the
 * survivors agree on them among themselves, and ranks that die during the
 * shrink, or stay silent for comm's timeout, are left out too; every
 * survivor gets the same new communicator. A survivor calls it once its
 * own calls on comm have ended (failed, or done); once the survivors
 * agree, comm is revoked and the ranks left out that may be alive are
 * told: their pending and later calls on it fail with CCL_ERR_REVOKED, and
 * a shrink of theirs says they were left out. comm stays to be destroyed.
 * The agreement waits comm's timeout at most for a silent rank. */
CCL_API CCL_NODISCARD ccl_status_t ccl_comm_shrink(ccl_comm_t *comm, const int *exclude, int nexclude,
                                                   ccl_comm_t **newcomm);
/* The ranks of comm known to be lost, ascending: after a shrink on comm,
 * the ones it left out (the same list on every survivor); before, those
 * this rank finds gone now (their process exited, or they cannot be
 * reached). Writes at most max of them to ranks (NULL with max 0: count
 * only); *nfailed gets how many there are. */
CCL_API ccl_status_t ccl_comm_failed_ranks(ccl_comm_t *comm, int *ranks, int max, int *nfailed);
/* Grow: new processes join comm's ranks in a larger communicator. Rank 0
 * of comm makes the newcomers' id with ccl_comm_grow_id and hands it to
 * them out of band, as ccl_get_unique_id's; then comm's ranks call
 * ccl_comm_grow(comm, nranks, id, -1, &newcomm) (id: rank 0's, NULL
 * elsewhere) and keep their ranks, and each newcomer calls
 * ccl_comm_grow(NULL, nranks, &id, rank, &newcomm) with a rank from comm's
 * size to nranks - 1. The id admits newcomers only: a process claiming one
 * of comm's ranks must prove it is that rank of comm (a secret that never
 * leaves comm), so a rank excluded earlier, or a stale process, is refused
 * and named in the log, and the others are not disturbed. comm stays
 * usable and must still be destroyed. */
CCL_API CCL_NODISCARD ccl_status_t ccl_comm_grow_id(ccl_comm_t *comm, ccl_unique_id_t *id);
CCL_API CCL_NODISCARD ccl_status_t ccl_comm_grow(ccl_comm_t *comm, int nranks, const ccl_unique_id_t *id, int rank,
                                                 ccl_comm_t **newcomm);
CCL_API ccl_status_t ccl_comm_rank(const ccl_comm_t *comm, int *rank);
CCL_API ccl_status_t ccl_comm_size(const ccl_comm_t *comm, int *size);
/* How this rank is wired, as space-separated key=value pairs, e.g.
 * "rank=0 ranks=4 hosts=2 local=2 cpus=16 spin_us=50 own_core=1
 * transports=shm:1,tcp:2 ring=0,1,2,3 algo=ring" (hosts: groups of ranks
 * that share memory; local: ranks on this rank's machine; cpus: CPUs it may
 * use, affinity and cgroup quota; own_core: the creating thread runs on a
 * core no other local rank runs on, so its waits spin without yielding;
 * transports: peers of this rank per transport; cuda_device, once the
 * communicator is bound to a CUDA device (the device current at init, else
 * its first device buffer's or stream's): that device; gpu_resident_calls, only
 * where every rank shares one GPU: the calls that ran there as one kernel,
 * docs/cuda.md; device_piece_bytes and pipelined_calls, only where a rank
 * had a CUDA context at init: the pieces large all-reduces, broadcasts and
 * reduces run in, and the calls this rank staged piece by piece).
 * Truncated to n bytes. */
CCL_API ccl_status_t ccl_comm_describe(const ccl_comm_t *comm, char *buf, size_t n);

/* Pins the calling thread to the core CCL_BIND=core pins this rank to (the
 * i-th core this process may use for the i-th rank of the machine; a
 * hardware thread each, or round robin, when there are too few), and lets
 * its waits on comm spin there. For a program whose communication runs on
 * a thread of its own while its other threads compute unpinned (the torch
 * backend's worker does this unless CCL_BIND is set). Where pinning fails
 * the thread stays unpinned, with a warning; CCL_ERR_SYSTEM only when the
 * machine's topology cannot be read. */
CCL_API ccl_status_t ccl_comm_bind_thread(ccl_comm_t *comm);

/* ---- memory registration ----
 * Registers [buf, buf + bytes) with every transport of comm that needs
 * registered memory (RDMA), once: later calls on buffers inside it use it
 * as is, and point-to-point transfers (send/recv, all-to-all) from or into
 * it go zero-copy. Not collective; a communicator whose transports need no
 * registration (shm, tcp) still returns a handle, and nothing changes.
 * Over RDMA, zero-copy transfers are pulled: the communicator's peers may
 * read registered memory (never write it) until it is deregistered.
 * The memory must stay allocated until ccl_comm_deregister (or the
 * communicator's destroy, which releases every handle left). Memory
 * passed to calls without registering is registered per call (see
 * CCL_IB_ZCOPY_BYTES and CCL_REG_CACHE in the README). */
CCL_API CCL_NODISCARD ccl_status_t ccl_comm_register(ccl_comm_t *comm, void *buf, size_t bytes, void **handle);
/* Releases a handle of ccl_comm_register (a transfer still using the
 * memory keeps it registered until it ends). */
CCL_API ccl_status_t ccl_comm_deregister(ccl_comm_t *comm, void *handle);

/* ---- shared allocations (zero-copy on one host) ----
 * ccl_mem_alloc gives this rank bytes of memory that every other rank of
 * comm on this host maps too, so that a collective whose buffers all lie
 * in such memory reads the peers' inputs where they are and writes
 * results straight into the outputs, with nothing staged (NCCL's
 * ncclMemAlloc with a symmetric window). Collective: every rank of comm
 * calls it, in the same order, with the same bytes (ranks that disagree
 * all get CCL_ERR_INVALID_USAGE and nothing is allocated). The memory is
 * zeroed, page-aligned, and usable as any memory, with any communicator;
 * only calls on comm whose buffers on every rank lie in its allocations
 * (at any offsets) take the zero-copy path, and only on one host (comm's
 * direct path) and from CCL_ZERO_COPY_MIN bytes up (README). Where the
 * peers' memory cannot be mapped (ranks in other PID namespaces), the
 * calls run as on any memory.
 * ccl_mem_free is collective too, in the same order as the allocations
 * are freed on every rank; it runs after every call issued before it on
 * comm has finished, so memory an asynchronous call still uses is never
 * unmapped under it. A pointer that ccl_mem_alloc did not return on comm,
 * or one freed already, is CCL_ERR_INVALID_ARGUMENT and changes nothing.
 * The communicator's destroy frees what is left.
 * ccl_mem_release is the free of a caller that cannot make a collective
 * call where it lets go of the memory (a tensor's deleter): this rank
 * alone says it is done with ptr, from any thread, at any time, even on a
 * failed communicator. The memory goes, collectively, at a later
 * ccl_mem_alloc once every rank has released it; that allocation reuses
 * it (zeroed again) where the sizes fit, on every rank alike, which spares
 * a new mapping on every rank. Released memory must not be used any more
 * (a call issued before the release may still run on it: the reclaim
 * waits for it). A pointer that is no allocation of comm, or one released
 * already, is CCL_ERR_INVALID_ARGUMENT. */
CCL_API CCL_NODISCARD ccl_status_t ccl_mem_alloc(ccl_comm_t *comm, size_t bytes, void **ptr);
CCL_API ccl_status_t ccl_mem_free(ccl_comm_t *comm, void *ptr);
CCL_API ccl_status_t ccl_mem_release(ccl_comm_t *comm, void *ptr);

/* ---- tracing (docs/trace-format.md) ----
 * Records every chunk movement and reduction of this rank. Call on every
 * rank between the same two operations. CCL_TRACE=FILE starts it at init and
 * writes FILE at ccl_comm_destroy. */
CCL_API ccl_status_t ccl_comm_trace_start(ccl_comm_t *comm);
/* Collective: stops recording, gathers every rank's events to rank 0, which
 * writes one Chrome trace event JSON file (path NULL: CCL_TRACE, else
 * "ccl-trace.json"; "%p" becomes the pid, "%c" the communicator id). */
CCL_API ccl_status_t ccl_comm_trace_stop(ccl_comm_t *comm, const char *path);

/* ---- reduction ops made at run time ----
 * A premultiplied sum (NCCL's ncclRedOpCreatePreMulSum): a reduction with
 * *op sums scalar * x over the ranks, each rank's product rounded to dtype
 * (as CCL_PROD rounds, on integers wrapping) before the sum. scalar points
 * at one element of dtype in host memory, read here; each rank may pass its
 * own. The op serves comm's calls of that dtype (another dtype is
 * CCL_ERR_INVALID_ARGUMENT) until ccl_op_destroy; a call issued before the
 * destroy keeps the scalar it was issued with. Thread-safe. Every rank of
 * a call must pass such an op (CCL_CHECK=1 names a rank that passed
 * another). */
CCL_API CCL_NODISCARD ccl_status_t ccl_op_create_premul_sum(ccl_comm_t *comm, ccl_dtype_t dtype, const void *scalar,
                                                            ccl_op_t *op);
/* Frees an op of ccl_op_create_premul_sum; a built-in op or one already
 * destroyed is CCL_ERR_INVALID_ARGUMENT. */
CCL_API ccl_status_t ccl_op_destroy(ccl_comm_t *comm, ccl_op_t op);

/* ---- collectives (blocking) ---- */
CCL_API CCL_NODISCARD ccl_status_t ccl_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                                  ccl_dtype_t dtype, ccl_op_t op, ccl_comm_t *comm);
/* sendbuf holds nranks * recvcount elements; in place: recvbuf ==
 * sendbuf + rank * recvcount elements. */
CCL_API CCL_NODISCARD ccl_status_t ccl_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                                      ccl_dtype_t dtype, ccl_op_t op, ccl_comm_t *comm);
/* recvbuf holds nranks * sendcount elements; in place: sendbuf ==
 * recvbuf + rank * sendcount elements. */
CCL_API CCL_NODISCARD ccl_status_t ccl_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                                  ccl_dtype_t dtype, ccl_comm_t *comm);
/* sendbuf is read on root only (it may be NULL elsewhere). */
CCL_API CCL_NODISCARD ccl_status_t ccl_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                                 ccl_dtype_t dtype, int root, ccl_comm_t *comm);
/* recvbuf is written on root only (it may be NULL elsewhere). */
CCL_API CCL_NODISCARD ccl_status_t ccl_reduce(const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype,
                                              ccl_op_t op, int root, ccl_comm_t *comm);
/* Block p of sendbuf (count_per_peer elements) goes to rank p; block p of
 * recvbuf comes from rank p. Not in place. */
CCL_API CCL_NODISCARD ccl_status_t ccl_all_to_all(const void *sendbuf, void *recvbuf, size_t count_per_peer,
                                                  ccl_dtype_t dtype, ccl_comm_t *comm);
CCL_API CCL_NODISCARD ccl_status_t ccl_barrier(ccl_comm_t *comm);
/* Rank p's sendcount elements land at block p of recvbuf on root, which
 * holds nranks * sendcount elements (written on root only; NULL elsewhere
 * is fine). In place on root: sendbuf == recvbuf + root * sendcount. */
CCL_API CCL_NODISCARD ccl_status_t ccl_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                              ccl_dtype_t dtype, int root, ccl_comm_t *comm);
/* Block p of root's sendbuf (nranks * recvcount elements, read on root
 * only) lands in rank p's recvbuf. In place on root: recvbuf == sendbuf +
 * root * recvcount. */
CCL_API CCL_NODISCARD ccl_status_t ccl_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                               ccl_dtype_t dtype, int root, ccl_comm_t *comm);
/* All-to-all with a count per pair: sendcounts[p] elements at sendbuf +
 * sdispls[p] (in elements) go to rank p; recvcounts[p] elements from rank
 * p land at recvbuf + rdispls[p]. recvcounts[p] must equal rank p's
 * sendcounts[this rank]: a difference fails on both, naming both counts.
 * The four arrays (nranks entries each) are read before the call returns.
 * Not in place. */
CCL_API CCL_NODISCARD ccl_status_t ccl_all_to_all_v(const void *sendbuf, const size_t *sendcounts,
                                                    const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                                    const size_t *rdispls, ccl_dtype_t dtype, ccl_comm_t *comm);

/* ---- point to point ---- */
CCL_API CCL_NODISCARD ccl_status_t ccl_send(const void *buf, size_t count, ccl_dtype_t dtype, int peer,
                                            ccl_comm_t *comm);
CCL_API CCL_NODISCARD ccl_status_t ccl_recv(void *buf, size_t count, ccl_dtype_t dtype, int peer, ccl_comm_t *comm);
/* A receive from whichever rank's send to this one arrives first (MPI's
 * MPI_ANY_SOURCE); *source gets that rank. The send must carry count
 * elements of dtype, as a named receive's must. Messages from one peer
 * still arrive in the order sent. Not inside a group, nor on a
 * one-rank communicator (CCL_ERR_INVALID_USAGE): its peer is known only
 * when it runs. Count 0 is CCL_ERR_INVALID_ARGUMENT: a send of nothing
 * moves nothing, so there would be no message to take. */
CCL_API CCL_NODISCARD ccl_status_t ccl_recv_any(void *buf, size_t count, ccl_dtype_t dtype, ccl_comm_t *comm,
                                                int *source);

/* ---- groups ----
 * Calls between ccl_group_start and ccl_group_end (on this thread) are only
 * recorded; ccl_group_end runs them so that all of them progress together
 * (sends and receives to many peers at once, in any order), waits for the
 * blocking ones and returns the first error. Groups nest; the outermost end
 * runs them. Gather, scatter and all_to_all_v are sends and receives
 * underneath: in a group they run with its other transfers, and the group's
 * end waits for them even when they were issued async. They are still
 * collectives: every rank calls them in the same order as the others, and
 * their transfers carry the call's identity (a root or counts that differ
 * between ranks fail the call, never the next one's data). */
CCL_API CCL_NODISCARD ccl_status_t ccl_group_start(void);
CCL_API CCL_NODISCARD ccl_status_t ccl_group_end(void);
/* Ends the outermost open group as ccl_group_end would, but runs nothing:
 * *us gets the cost model's estimate of how long the group's calls would
 * take (per communicator the sum of its calls' predicted times, for the
 * algorithm each would run; the communicators' calls would run at once,
 * so the longest of them), and the calls are dropped (an async one's
 * request completes with CCL_ERR_INVALID_USAGE). Local: no rank talks to
 * another. NCCL's ncclGroupSimulateEnd. CCL_ERR_INVALID_USAGE outside a
 * group or inside a nested one. */
CCL_API CCL_NODISCARD ccl_status_t ccl_group_simulate_end(double *us);

/* ---- non-blocking twins ----
 * Each returns at once with *req set; the operation progresses on the
 * communicator's progress thread while the caller computes. Requests on one
 * communicator complete in issue order. The buffers belong to the library
 * until the request completes. */
CCL_API CCL_NODISCARD ccl_status_t ccl_all_reduce_async(const void *sendbuf, void *recvbuf, size_t count,
                                                        ccl_dtype_t dtype, ccl_op_t op, ccl_comm_t *comm,
                                                        ccl_request_t **req);
CCL_API CCL_NODISCARD ccl_status_t ccl_reduce_scatter_async(const void *sendbuf, void *recvbuf, size_t recvcount,
                                                            ccl_dtype_t dtype, ccl_op_t op, ccl_comm_t *comm,
                                                            ccl_request_t **req);
CCL_API CCL_NODISCARD ccl_status_t ccl_all_gather_async(const void *sendbuf, void *recvbuf, size_t sendcount,
                                                        ccl_dtype_t dtype, ccl_comm_t *comm, ccl_request_t **req);
CCL_API CCL_NODISCARD ccl_status_t ccl_broadcast_async(const void *sendbuf, void *recvbuf, size_t count,
                                                       ccl_dtype_t dtype, int root, ccl_comm_t *comm,
                                                       ccl_request_t **req);
CCL_API CCL_NODISCARD ccl_status_t ccl_reduce_async(const void *sendbuf, void *recvbuf, size_t count,
                                                    ccl_dtype_t dtype, ccl_op_t op, int root, ccl_comm_t *comm,
                                                    ccl_request_t **req);
CCL_API CCL_NODISCARD ccl_status_t ccl_all_to_all_async(const void *sendbuf, void *recvbuf, size_t count_per_peer,
                                                        ccl_dtype_t dtype, ccl_comm_t *comm, ccl_request_t **req);
CCL_API CCL_NODISCARD ccl_status_t ccl_barrier_async(ccl_comm_t *comm, ccl_request_t **req);
CCL_API CCL_NODISCARD ccl_status_t ccl_gather_async(const void *sendbuf, void *recvbuf, size_t sendcount,
                                                    ccl_dtype_t dtype, int root, ccl_comm_t *comm,
                                                    ccl_request_t **req);
CCL_API CCL_NODISCARD ccl_status_t ccl_scatter_async(const void *sendbuf, void *recvbuf, size_t recvcount,
                                                     ccl_dtype_t dtype, int root, ccl_comm_t *comm,
                                                     ccl_request_t **req);
CCL_API CCL_NODISCARD ccl_status_t ccl_all_to_all_v_async(const void *sendbuf, const size_t *sendcounts,
                                                          const size_t *sdispls, void *recvbuf,
                                                          const size_t *recvcounts, const size_t *rdispls,
                                                          ccl_dtype_t dtype, ccl_comm_t *comm, ccl_request_t **req);
CCL_API CCL_NODISCARD ccl_status_t ccl_send_async(const void *buf, size_t count, ccl_dtype_t dtype, int peer,
                                                  ccl_comm_t *comm, ccl_request_t **req);
CCL_API CCL_NODISCARD ccl_status_t ccl_recv_async(void *buf, size_t count, ccl_dtype_t dtype, int peer,
                                                  ccl_comm_t *comm, ccl_request_t **req);
/* *source is written when the receive completes (read it after the wait). */
CCL_API CCL_NODISCARD ccl_status_t ccl_recv_any_async(void *buf, size_t count, ccl_dtype_t dtype, ccl_comm_t *comm,
                                                      int *source, ccl_request_t **req);

/* *done = 1 once the request finished; returns its status then (CCL_OK or an
 * error), CCL_INPROGRESS before. The request stays valid until ccl_wait. */
CCL_API ccl_status_t ccl_test(ccl_request_t *req, int *done);
/* Waits for the request, releases it and returns its status. A released
 * request is never handed back to malloc: a second ccl_wait or a ccl_test
 * on it returns CCL_ERR_INVALID_USAGE, at least until 256 newer requests
 * have been released (its memory may then serve a new request). */
CCL_API ccl_status_t ccl_wait(ccl_request_t *req);

/* ---- CUDA: device buffers and stream-ordered calls (docs/cuda.md) ----
 * Every call takes device pointers as well as host pointers (found with
 * the CUDA driver's pointer attributes; libccl loads the driver only when a
 * process uses CUDA). A blocking or async call on device buffers is ordered
 * after the work of the legacy default stream, as cudaMemcpy is; work on
 * other streams must be synchronised first, or use the calls below.
 *
 * A stream-ordered call enqueues its operation on a CUDA stream and returns
 * (NCCL's semantics): the operation starts once the work issued on the
 * stream before it has completed, and work issued on the stream after it
 * waits for it. Errors found before enqueueing are returned; later ones
 * fail the communicator (ccl_comm_get_async_error) and the stream still
 * goes on, so nothing hangs. NULL is the default stream; without CUDA in
 * the process, a call on the default stream runs at once, and one on
 * another stream returns CCL_ERR_UNSUPPORTED saying why. */
typedef struct CUstream_st *ccl_stream_t; /* the same type as CUstream and cudaStream_t */
/* Ends a group (ccl_group_start) by ordering its calls on stream: every
 * call recorded in it, blocking or async, runs in stream order (async
 * requests still complete and must still be waited). */
CCL_API CCL_NODISCARD ccl_status_t ccl_group_end_stream(ccl_stream_t stream);
/* One call ordered on stream: ccl_group_start, the call, then
 * ccl_group_end_stream(stream). Inside an open group the outermost end
 * decides. */
CCL_API CCL_NODISCARD ccl_status_t ccl_all_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                                         ccl_dtype_t dtype, ccl_op_t op, ccl_comm_t *comm,
                                                         ccl_stream_t stream);
CCL_API CCL_NODISCARD ccl_status_t ccl_reduce_scatter_stream(const void *sendbuf, void *recvbuf, size_t recvcount,
                                                             ccl_dtype_t dtype, ccl_op_t op, ccl_comm_t *comm,
                                                             ccl_stream_t stream);
CCL_API CCL_NODISCARD ccl_status_t ccl_all_gather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                                         ccl_dtype_t dtype, ccl_comm_t *comm, ccl_stream_t stream);
CCL_API CCL_NODISCARD ccl_status_t ccl_broadcast_stream(const void *sendbuf, void *recvbuf, size_t count,
                                                        ccl_dtype_t dtype, int root, ccl_comm_t *comm,
                                                        ccl_stream_t stream);
CCL_API CCL_NODISCARD ccl_status_t ccl_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                                     ccl_dtype_t dtype, ccl_op_t op, int root, ccl_comm_t *comm,
                                                     ccl_stream_t stream);
CCL_API CCL_NODISCARD ccl_status_t ccl_all_to_all_stream(const void *sendbuf, void *recvbuf, size_t count_per_peer,
                                                         ccl_dtype_t dtype, ccl_comm_t *comm, ccl_stream_t stream);
CCL_API CCL_NODISCARD ccl_status_t ccl_send_stream(const void *buf, size_t count, ccl_dtype_t dtype, int peer,
                                                   ccl_comm_t *comm, ccl_stream_t stream);
CCL_API CCL_NODISCARD ccl_status_t ccl_recv_stream(void *buf, size_t count, ccl_dtype_t dtype, int peer,
                                                   ccl_comm_t *comm, ccl_stream_t stream);
/* 1 when p is CUDA device memory (0 for host, pinned and managed memory,
 * and in a process without CUDA). */
CCL_API int ccl_is_device_pointer(const void *p);
/* The CUDA device (ordinal) comm's device buffers and streams live on:
 * the current device when it was created, or its first device buffer's or
 * stream's; while it has none of these, the calling thread's current
 * device (ccl_comm_describe names a device only once it is bound).
 * CCL_ERR_UNSUPPORTED where the process has no CUDA, or no device is
 * current. */
CCL_API ccl_status_t ccl_comm_cuda_device(const ccl_comm_t *comm, int *device);
/* *err = the error that failed comm (an operation that ran after its call
 * returned: async, stream-ordered, or a peer's failure), CCL_OK while it is
 * healthy. */
CCL_API ccl_status_t ccl_comm_get_async_error(const ccl_comm_t *comm, ccl_status_t *err);

#ifdef __cplusplus
}
#endif
#endif /* CCL_H */
