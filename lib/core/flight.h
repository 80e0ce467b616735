/*
 * The flight recorder: every communicator keeps its last N calls (what,
 * how big, which algorithm, when they started and ended, how they ended)
 * in a ring of fixed records, and writes them to a file when something
 * goes wrong (the communicator fails: a timeout, a dead peer, an abort),
 * when the user sends the signal (CCL_FLIGHT_SIGNAL, SIGUSR2 by default)
 * and when ccl-status asks. `ccl-trace flight DIR` reads every rank's
 * file and says which rank went apart first (docs/flight-recorder.md).
 *
 * Recording costs a few stores and two reads of the time-stamp counter per
 * call, no lock and no system call: the calls run on one thread at a time
 * per communicator, and a slot is claimed with one atomic add. Dumping
 * uses async-signal-safe calls only (open, write, close), with the file's
 * path made at init, so the signal handler can do it.
 */
#ifndef CCL_FLIGHT_H
#define CCL_FLIGHT_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

struct ccl_comm;

#define CCL__FLIGHT_MAGIC "CCLFLT1"
#define CCL__FLIGHT_VERSION 1

enum ccl__flight_state {
    CCL__FLIGHT_ISSUED = 1,  /* recorded in an open group, or queued */
    CCL__FLIGHT_RUNNING = 2,
    CCL__FLIGHT_DONE = 3,
    CCL__FLIGHT_FAILED = 4,
};

enum ccl__flight_reason {
    CCL__FLIGHT_FAILURE = 1, /* the communicator failed (timeout, peer, abort) */
    CCL__FLIGHT_SIGNAL = 2,  /* the user's signal */
    CCL__FLIGHT_ASKED = 3,   /* ccl-status --dump */
};

/* One call, as written to the file (little-endian, 56 bytes). In memory
 * the two times are ticks (ccl__flight_ticks, t_end 0 until it ends); the
 * dump writes them as seconds since the epoch (CLOCK_REALTIME). */
struct ccl__flight_entry {
    uint64_t index;   /* the recorder's count of calls before it: which slot version this is */
    uint64_t count;   /* elements (a transfer's, for send/recv) */
    union { uint64_t ticks; double s; } t_start, t_end;
    uint32_t seq;     /* the collective's number, the same on every rank (send/recv: per peer) */
    int32_t peer;     /* root of a rooted collective, the peer of send/recv, else -1 */
    int32_t status;   /* how it ended (ccl_status_t) */
    uint8_t kind;     /* the collective (lib/prims/prims.h's enum ccl__op_kind; send/recv: 8) */
    uint8_t state;    /* enum ccl__flight_state */
    uint8_t algo;     /* lib/algo/algo.h's index, 255 unknown */
    uint8_t is_send;  /* send/recv: 1 send, 0 receive */
    int8_t dtype;
    int8_t op;
    uint8_t pad[2];
    uint32_t steps0;  /* the rank's completed waits when the call began (comm->wait_steps): how far it got since */
};

/* The file's header; entries follow (capacity of them, oldest first). */
struct ccl__flight_header {
    char magic[8];
    uint32_t version, header_bytes, entry_bytes, capacity;
    int32_t rank, nranks;
    uint64_t comm_id;
    uint64_t recorded;     /* calls recorded so far: the valid entries are the last min(capacity, recorded) */
    int32_t pid, reason;   /* enum ccl__flight_reason */
    int32_t failed_status; /* the communicator's first failure, 0 healthy */
    int32_t culprit;       /* rank + 1 that failure blames, 0 none */
    double dumped_at;      /* CLOCK_REALTIME seconds */
    double timeout_s;
    char host[64];
    char last_error[512];
};

struct ccl__flight {
    uint32_t capacity; /* a power of two */
    _Atomic uint64_t next;
    uint64_t tick0;    /* ticks at init, */
    double real0;      /* and the wall clock then (what dumps convert ticks by) */
    char dir[400];     /* where dumps go (made at the first) */
    char path[512];    /* this communicator's file in it */
    char tmp[4][520];  /* written first, one per enum ccl__flight_reason, then renamed onto path: a reader
                        * never sees half a file, and two dumps at once do not mix */
    char host[64];
    struct ccl__flight_entry *e;
};

/* Ticks for the recorder's times: the time-stamp counter where there is
 * one (a tenth of a clock read's cost), else the monotonic clock in ns. */
static inline uint64_t ccl__flight_ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

/* comm's recorder from CCL_FLIGHT_RECORDER (0: none, comm->flight NULL)
 * and CCL_FLIGHT_DIR; also installs the signal handler once per process.
 * After the communicator's id and rank are known. */
int ccl__flight_init(struct ccl_comm *comm);
void ccl__flight_free(struct ccl_comm *comm);

/* Entries are written by the thread running calls and read by a dump
 * from any thread (a failure found elsewhere, an abort, the signal): each
 * field is one relaxed atomic access (a plain move on x86), so a dump
 * sees every field whole, and a sanitizer sees no race. These run on
 * every call: inline, and no locked instruction (the slot counter is
 * read and written, not added to: calls on one communicator from two
 * threads at once could share a slot, which costs the record, nothing
 * else). */
#define CCL__FLIGHT_PUT(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)

/* A call begins (state ISSUED or RUNNING); returns its ticket for the
 * calls below, 0 when the recorder is off. */
static inline uint64_t ccl__flight_begin(struct ccl__flight *f, int kind, uint32_t seq, uint64_t count, int dtype,
                                         int op, int peer, int is_send, int state, uint32_t steps) {
    if (!f) return 0;
    uint64_t i = atomic_load_explicit(&f->next, memory_order_relaxed);
    atomic_store_explicit(&f->next, i + 1, memory_order_relaxed);
    struct ccl__flight_entry *e = &f->e[i & (f->capacity - 1)];
    CCL__FLIGHT_PUT(e->state, 0); /* a dump in between sees no half-written entry as valid */
    CCL__FLIGHT_PUT(e->index, i);
    CCL__FLIGHT_PUT(e->count, count);
    CCL__FLIGHT_PUT(e->t_start.ticks, ccl__flight_ticks());
    CCL__FLIGHT_PUT(e->t_end.ticks, 0);
    CCL__FLIGHT_PUT(e->seq, seq);
    CCL__FLIGHT_PUT(e->peer, peer);
    CCL__FLIGHT_PUT(e->status, 0);
    CCL__FLIGHT_PUT(e->kind, (uint8_t)kind);
    CCL__FLIGHT_PUT(e->algo, 255);
    CCL__FLIGHT_PUT(e->is_send, (uint8_t)is_send);
    CCL__FLIGHT_PUT(e->dtype, (int8_t)dtype);
    CCL__FLIGHT_PUT(e->op, (int8_t)op);
    CCL__FLIGHT_PUT(e->steps0, steps);
    __atomic_store_n(&e->state, (uint8_t)state, __ATOMIC_RELEASE);
    return i + 1;
}

/* The ticket's entry, unless newer calls took its slot since. */
static inline struct ccl__flight_entry *ccl__flight_entry_of(struct ccl__flight *f, uint64_t ticket) {
    if (!f || !ticket) return NULL;
    struct ccl__flight_entry *e = &f->e[(ticket - 1) & (f->capacity - 1)];
    return __atomic_load_n(&e->index, __ATOMIC_RELAXED) == ticket - 1 ? e : NULL;
}

static inline void ccl__flight_running(struct ccl__flight *f, uint64_t ticket, uint32_t steps) {
    struct ccl__flight_entry *e = ccl__flight_entry_of(f, ticket);
    if (!e) return;
    CCL__FLIGHT_PUT(e->t_start.ticks, ccl__flight_ticks());
    CCL__FLIGHT_PUT(e->steps0, steps);
    CCL__FLIGHT_PUT(e->state, (uint8_t)CCL__FLIGHT_RUNNING);
}

static inline void ccl__flight_end(struct ccl__flight *f, uint64_t ticket, int status, int algo) {
    struct ccl__flight_entry *e = ccl__flight_entry_of(f, ticket);
    if (!e) return;
    CCL__FLIGHT_PUT(e->t_end.ticks, ccl__flight_ticks());
    CCL__FLIGHT_PUT(e->status, status);
    if (algo >= 0) CCL__FLIGHT_PUT(e->algo, (uint8_t)algo);
    CCL__FLIGHT_PUT(e->state, (uint8_t)(status < 0 ? CCL__FLIGHT_FAILED : CCL__FLIGHT_DONE));
}

/* The newest call (its times in seconds since the epoch, t_end 0 while
 * it runs): 1, or 0 when nothing is recorded. From any thread. */
int ccl__flight_newest(struct ccl_comm *comm, struct ccl__flight_entry *out);

/* Writes comm's recorder to its file (async-signal-safe for
 * CCL__FLIGHT_SIGNAL; the others take comm's error lock). 0, or -1 (the
 * file could not be written, errno set). */
int ccl__flight_dump(struct ccl_comm *comm, int reason);

#endif
