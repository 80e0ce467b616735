/*
 * The status server: what `ccl-status` asks a running job (docs/status.md).
 *
 * One thread per process, started with its first communicator and gone
 * with its last, sleeps in poll() on one listening socket; it costs the
 * data path nothing and sends nothing until a client asks. A client
 * proves the job's secret and names a communicator; the server answers,
 * for every rank of that communicator in this process, where it is (the
 * call it is in, from the flight recorder, and the rank its wait is on,
 * which a wait publishes once it has spun past its first microseconds),
 * or since when it has been outside libccl, and the communicator's
 * failure, its last error and every rank's status address. A stranger
 * (wrong secret, unknown communicator, garbage, silence past a second) is
 * dropped without an answer.
 *
 * Each rank also writes a file saying where its server listens and with
 * what secret (mode 0600, in CCL_STATUS_DIR or a directory of the user's
 * own), which is how a client on the same machine finds the job.
 */
#ifndef CCL_STATUS_H
#define CCL_STATUS_H

#include <stdint.h>

#include "core/comm.h"
#include "core/socket.h"

struct ccl_comm;

#define CCL__STATUS_MAGIC "CCLSTQ1"
#define CCL__STATUS_ASK 1  /* where is everybody */
#define CCL__STATUS_DUMP 2 /* and write the flight recorders too */

/* What a client sends (little-endian). The answer is a 4-byte length and
 * that many bytes of JSON. */
struct ccl__status_ask {
    char magic[8];
    uint64_t comm_id;
    uint8_t secret[32];
    uint32_t what;
    uint32_t pad;
};

/* Starts the process's server (CCL_STATUS=0: none, *addr zeroed) and
 * counts comm in; *addr is where it listens. Before the bootstrap record
 * is built. Failing to listen is not fatal: the job runs, unseen. */
void ccl__status_listen(struct ccl_comm *comm, union ccl__sa *addr);
/* After init succeeded: writes comm's status file. */
void ccl__status_publish(struct ccl_comm *comm);
/* comm is going: its file goes, and the server with the last one. */
void ccl__status_release(struct ccl_comm *comm);

/* A wait publishes what it waits on once it has spun (prims/wait.c):
 * peer, or -1 for none (a flush, compute); since is ccl__now(). */
void ccl__status_waiting(struct ccl_comm *comm, int peer, double since);
void ccl__status_not_waiting(struct ccl_comm *comm);

/* A wait completed: one step further (a load and a store, no locked
 * instruction; only the thread running calls writes it). */
static inline void ccl__status_step(struct ccl_comm *comm) {
    atomic_store_explicit(&comm->wait_steps, atomic_load_explicit(&comm->wait_steps, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}
/* The steps so far, for the flight recorder's entries. */
static inline uint32_t ccl__status_steps(struct ccl_comm *comm) {
    return atomic_load_explicit(&comm->wait_steps, memory_order_relaxed);
}

#endif
