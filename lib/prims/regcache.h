/*
 * The registration cache. Registering memory with a transport that needs
 * it (RDMA, device IPC) costs a system call and pinning; a trainer passes
 * the same buffers call after call. The cache keeps each registration,
 * page-aligned, until it must make room: a lookup that falls inside a
 * cached range of the same transport reuses it. Entries in use are never
 * evicted; unused ones go least recently used first.
 *
 * Memory the application frees (or unmaps) must be forgotten before it is
 * reused, or a later buffer at the same address would reuse a stale
 * registration: ccl__reg_forget drops every entry overlapping a range.
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
    uint64_t last_use;  /* the cache's clock at the last get */
};

struct ccl__regcache_stats {
    uint64_t hits, misses, evictions, live;
};

/* A registration covering [addr, addr + bytes) with transport t, from the
 * cache or made now; hold it until ccl__reg_put. A transport that needs no
 * registration (t->reg NULL) is a usage error. */
ccl_status_t ccl__reg_get(struct ccl_comm *comm, const struct ccl__transport *t, const void *addr, size_t bytes,
                          struct ccl__reg **out);
void ccl__reg_put(struct ccl_comm *comm, struct ccl__reg *r);
/* The application no longer owns [addr, addr + bytes): drop every
 * registration overlapping it (in use: at its last put). */
void ccl__reg_forget(struct ccl_comm *comm, const void *addr, size_t bytes);
/* Deregisters everything; before the transports' teardown. */
void ccl__reg_clear(struct ccl_comm *comm);
struct ccl__regcache_stats ccl__reg_stats(const struct ccl_comm *comm);

#endif
