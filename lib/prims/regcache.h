/*
 * The registration cache. Registering memory with a transport that needs
 * it (RDMA, device IPC) costs a system call and pinning; a trainer passes
 * the same buffers call after call. The cache keeps each registration,
 * page-aligned: a lookup that falls inside a cached range of the same
 * transport reuses it. Entries in use are never evicted.
 *
 * Memory the application frees (or unmaps) must be forgotten before it is
 * reused, or a later buffer at the same address would reuse a stale
 * registration (it pins the old pages): ccl__reg_forget drops every entry
 * overlapping a range. libccl cannot see a free(), so by default an
 * automatic registration lasts only while in use (the call that made it);
 * the application either says which memory stays (ccl_comm_register:
 * pinned entries, kept until ccl_comm_deregister) or promises never to
 * free and reuse (CCL_REG_CACHE=1: unused entries are kept, least recently
 * used going first past CCL__REGCACHE_KEEP).
 *
 * Some transports need a registration to outlive its last use a little
 * (reg_linger_s: an RDMA peer's late duplicate read); such an entry stops
 * serving lookups at once and is deregistered when its time is up.
 *
 * Thread-safe: async calls register on their progress thread while the
 * application registers on its own.
 */
#ifndef CCL_REGCACHE_H
#define CCL_REGCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "ccl.h"
#include "core/comm.h"

struct ccl__transport;

/* Unused registrations kept per communicator before the oldest goes. */
#define CCL__REGCACHE_KEEP 64

struct ccl__reg {
    const struct ccl__transport *t;
    uintptr_t lo, hi;   /* the registered range, page-aligned: [lo, hi) */
    void *handle;       /* the transport's key */
    int refs;           /* users between get and put */
    int stale;          /* forgotten while in use: deregistered at the last put */
    int revoked;        /* stale, and deregistered at the last put without lingering */
    int pinned;         /* pins held by ccl_comm_register handles (each also a ref) */
    uint64_t last_use;  /* the cache's clock at the last get */
    double linger_until; /* > 0: unused, deregistered at this ccl__now() */
};

/* live: registrations that serve lookups; lingering: unused ones that
 * wait out their transport's reg_linger_s (swept at each get and put). */
struct ccl__regcache_stats {
    uint64_t hits, misses, evictions, live, lingering;
};

/* Is [addr, addr + bytes) inside a pinned registration of transport t? */
int ccl__reg_is_pinned(struct ccl_comm *comm, const struct ccl__transport *t, const void *addr, size_t bytes);
/* Pins a registration of [addr, addr + bytes) with t (made now or found);
 * ccl__reg_unpin lets it go (deregistered at once when unused). */
ccl_status_t ccl__reg_pin(struct ccl_comm *comm, const struct ccl__transport *t, const void *addr, size_t bytes,
                          struct ccl__reg **out);
void ccl__reg_unpin(struct ccl_comm *comm, struct ccl__reg *r);

/* A registration covering [addr, addr + bytes) with transport t, from the
 * cache or made now; hold it until ccl__reg_put. A transport that needs no
 * registration (t->reg NULL) is a usage error. */
ccl_status_t ccl__reg_get(struct ccl_comm *comm, const struct ccl__transport *t, const void *addr, size_t bytes,
                          struct ccl__reg **out);
void ccl__reg_put(struct ccl_comm *comm, struct ccl__reg *r);
/* The put of a call that failed with r the destination of a zero-copy
 * transfer: the adapter may still place bytes in it (a read of this rank's
 * still in flight), into memory the application now owns again. Unless
 * the application pinned it, r is deregistered as soon as no one uses it,
 * without lingering: those bytes then fail to land instead. */
void ccl__reg_put_revoked(struct ccl_comm *comm, struct ccl__reg *r);
/* The application no longer owns [addr, addr + bytes): drop every
 * registration overlapping it (in use: at its last put). */
void ccl__reg_forget(struct ccl_comm *comm, const void *addr, size_t bytes);
/* Deregisters everything; before the transports' teardown. */
void ccl__reg_clear(struct ccl_comm *comm);
struct ccl__regcache_stats ccl__reg_stats(const struct ccl_comm *comm);

#endif
