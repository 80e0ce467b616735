#include "prims/regcache.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transports/transport.h"

struct ccl__regcache {
    struct ccl__reg **e; /* entries are allocated one by one: users hold pointers */
    int n, cap;
    uint64_t clock;
    struct ccl__regcache_stats stats;
};

static uintptr_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uintptr_t)p : 4096u;
}

static struct ccl__regcache *cache_of(struct ccl_comm *comm) {
    if (!comm->regcache) comm->regcache = calloc(1, sizeof(*comm->regcache));
    return comm->regcache;
}

static void drop_at(struct ccl_comm *comm, struct ccl__regcache *c, int i) {
    struct ccl__reg *r = c->e[i];
    r->t->dereg(comm, r->handle);
    free(r);
    c->e[i] = c->e[--c->n];
    c->stats.live--;
}

/* Keeps at most CCL__REGCACHE_KEEP unused entries: the least recently used go. */
static void trim(struct ccl_comm *comm, struct ccl__regcache *c) {
    for (;;) {
        int unused = 0, oldest = -1;
        for (int i = 0; i < c->n; i++) {
            if (c->e[i]->refs) continue;
            unused++;
            if (oldest < 0 || c->e[i]->last_use < c->e[oldest]->last_use) oldest = i;
        }
        if (unused <= CCL__REGCACHE_KEEP) return;
        drop_at(comm, c, oldest);
        c->stats.evictions++;
    }
}

ccl_status_t ccl__reg_get(struct ccl_comm *comm, const struct ccl__transport *t, const void *addr, size_t bytes,
                          struct ccl__reg **out) {
    *out = NULL;
    if (!t->reg || !t->dereg)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "register: transport %s needs no registration", t->name);
    uintptr_t a = (uintptr_t)addr, ps = page_size();
    if (!addr || bytes == 0 || a + bytes < a)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "register: %zu bytes at %p is not a buffer", bytes,
                              addr);
    struct ccl__regcache *c = cache_of(comm);
    if (!c) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "register: out of memory");
    c->clock++;
    for (int i = 0; i < c->n; i++) {
        struct ccl__reg *r = c->e[i];
        if (r->t == t && !r->stale && r->lo <= a && a + bytes <= r->hi) {
            r->refs++;
            r->last_use = c->clock;
            c->stats.hits++;
            *out = r;
            return CCL_OK;
        }
    }
    uintptr_t lo = a & ~(ps - 1), hi = (a + bytes + ps - 1) & ~(ps - 1);
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        struct ccl__reg **grown = realloc(c->e, sizeof(*grown) * (size_t)cap);
        if (!grown) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "register: out of memory");
        c->e = grown;
        c->cap = cap;
    }
    struct ccl__reg *r = calloc(1, sizeof(*r));
    if (!r) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "register: out of memory");
    *r = (struct ccl__reg){.t = t, .lo = lo, .hi = hi, .refs = 1, .last_use = c->clock};
    ccl_status_t st = t->reg(comm, (void *)lo, hi - lo, &r->handle);
    if (st != CCL_OK) {
        free(r);
        return st; /* the transport said why */
    }
    c->e[c->n++] = r;
    c->stats.misses++;
    c->stats.live++;
    *out = r;
    return CCL_OK;
}

void ccl__reg_put(struct ccl_comm *comm, struct ccl__reg *r) {
    struct ccl__regcache *c = comm->regcache;
    if (!c || !r || r->refs <= 0) return;
    if (--r->refs == 0 && r->stale) {
        for (int i = 0; i < c->n; i++)
            if (c->e[i] == r) {
                drop_at(comm, c, i);
                return;
            }
    }
    trim(comm, c);
}

void ccl__reg_forget(struct ccl_comm *comm, const void *addr, size_t bytes) {
    struct ccl__regcache *c = comm->regcache;
    uintptr_t a = (uintptr_t)addr, b = a + bytes;
    if (!c || bytes == 0) return;
    for (int i = c->n - 1; i >= 0; i--) {
        struct ccl__reg *r = c->e[i];
        if (r->hi <= a || b <= r->lo) continue;
        if (r->refs) r->stale = 1;
        else drop_at(comm, c, i);
    }
}

void ccl__reg_clear(struct ccl_comm *comm) {
    struct ccl__regcache *c = comm->regcache;
    if (!c) return;
    while (c->n) drop_at(comm, c, c->n - 1);
    free(c->e);
    free(c);
    comm->regcache = NULL;
}

struct ccl__regcache_stats ccl__reg_stats(const struct ccl_comm *comm) {
    return comm->regcache ? comm->regcache->stats : (struct ccl__regcache_stats){0};
}
