#include "prims/regcache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/socket.h"
#include "transports/transport.h"

struct ccl__regcache {
    struct ccl__reg **e; /* entries are allocated one by one: users hold pointers */
    int n, cap;
    uint64_t clock;
    struct ccl__regcache_stats stats;
};

/* One lock for every communicator's cache: registrations are rare (large
 * transfers, ccl_comm_register), and the cache itself is made lazily. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

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
    if (r->linger_until > 0) c->stats.lingering--;
    else c->stats.live--;
    free(r);
    c->e[i] = c->e[--c->n];
}

/* An unused registration goes: at once, or, when its transport says peers
 * may still touch it (reg_linger_s), after that long. A lingering one
 * serves no lookup: the memory may be freed and reused meanwhile. */
static void retire_at(struct ccl_comm *comm, struct ccl__regcache *c, int i) {
    struct ccl__reg *r = c->e[i];
    if (r->t->reg_linger_s <= 0) {
        drop_at(comm, c, i);
        return;
    }
    if (r->linger_until > 0) return; /* already lingering */
    r->stale = 1;
    r->linger_until = ccl__now() + r->t->reg_linger_s;
    c->stats.live--;
    c->stats.lingering++;
}

/* Deregisters lingering entries whose time is up. */
static void sweep(struct ccl_comm *comm, struct ccl__regcache *c) {
    if (!c->stats.lingering) return;
    double now = ccl__now();
    for (int i = c->n - 1; i >= 0; i--)
        if (c->e[i]->linger_until > 0 && c->e[i]->linger_until <= now) drop_at(comm, c, i);
}

/* Unused entries go at once, unless CCL_REG_CACHE keeps up to
 * CCL__REGCACHE_KEEP of them (the least recently used go first). */
static void trim(struct ccl_comm *comm, struct ccl__regcache *c) {
    int keep = comm->params.reg_cache ? CCL__REGCACHE_KEEP : 0;
    sweep(comm, c);
    for (;;) {
        int unused = 0, oldest = -1;
        for (int i = 0; i < c->n; i++) {
            if (c->e[i]->refs || c->e[i]->pinned || c->e[i]->linger_until > 0) continue;
            unused++;
            if (oldest < 0 || c->e[i]->last_use < c->e[oldest]->last_use) oldest = i;
        }
        if (unused <= keep) return;
        retire_at(comm, c, oldest);
        c->stats.evictions++;
    }
}

static ccl_status_t get_locked(struct ccl_comm *comm, const struct ccl__transport *t, const void *addr, size_t bytes,
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
    sweep(comm, c);
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

ccl_status_t ccl__reg_get(struct ccl_comm *comm, const struct ccl__transport *t, const void *addr, size_t bytes,
                          struct ccl__reg **out) {
    pthread_mutex_lock(&cache_lock);
    ccl_status_t st = get_locked(comm, t, addr, bytes, out);
    pthread_mutex_unlock(&cache_lock);
    return st;
}

static void put_locked(struct ccl_comm *comm, struct ccl__reg *r) {
    struct ccl__regcache *c = comm->regcache;
    if (!c || !r || r->refs <= 0) return;
    if (--r->refs == 0 && r->stale) {
        for (int i = 0; i < c->n; i++)
            if (c->e[i] == r) {
                if (r->revoked) drop_at(comm, c, i);
                else retire_at(comm, c, i);
                break;
            }
    }
    trim(comm, c);
}

void ccl__reg_put(struct ccl_comm *comm, struct ccl__reg *r) {
    pthread_mutex_lock(&cache_lock);
    put_locked(comm, r);
    pthread_mutex_unlock(&cache_lock);
}

void ccl__reg_put_revoked(struct ccl_comm *comm, struct ccl__reg *r) {
    pthread_mutex_lock(&cache_lock);
    if (r && !r->pinned) r->stale = r->revoked = 1;
    put_locked(comm, r);
    pthread_mutex_unlock(&cache_lock);
}

int ccl__reg_is_pinned(struct ccl_comm *comm, const struct ccl__transport *t, const void *addr, size_t bytes) {
    uintptr_t a = (uintptr_t)addr;
    int found = 0;
    pthread_mutex_lock(&cache_lock);
    struct ccl__regcache *c = comm->regcache;
    for (int i = 0; c && i < c->n && !found; i++) {
        const struct ccl__reg *r = c->e[i];
        found = r->t == t && r->pinned && !r->stale && r->lo <= a && a + bytes <= r->hi;
    }
    pthread_mutex_unlock(&cache_lock);
    return found;
}

/* A pin is a reference that only ccl__reg_unpin gives back. */
ccl_status_t ccl__reg_pin(struct ccl_comm *comm, const struct ccl__transport *t, const void *addr, size_t bytes,
                          struct ccl__reg **out) {
    pthread_mutex_lock(&cache_lock);
    ccl_status_t st = get_locked(comm, t, addr, bytes, out);
    if (st == CCL_OK) (*out)->pinned++;
    pthread_mutex_unlock(&cache_lock);
    return st;
}

void ccl__reg_unpin(struct ccl_comm *comm, struct ccl__reg *r) {
    pthread_mutex_lock(&cache_lock);
    if (r && r->pinned > 0) {
        r->pinned--;
        put_locked(comm, r);
    }
    pthread_mutex_unlock(&cache_lock);
}

void ccl__reg_forget(struct ccl_comm *comm, const void *addr, size_t bytes) {
    pthread_mutex_lock(&cache_lock);
    struct ccl__regcache *c = comm->regcache;
    uintptr_t a = (uintptr_t)addr, b = a + bytes;
    for (int i = c && bytes ? c->n - 1 : -1; i >= 0; i--) {
        struct ccl__reg *r = c->e[i];
        if (r->hi <= a || b <= r->lo) continue;
        if (r->refs) r->stale = 1;
        else retire_at(comm, c, i);
    }
    pthread_mutex_unlock(&cache_lock);
}

void ccl__reg_clear(struct ccl_comm *comm) {
    pthread_mutex_lock(&cache_lock);
    struct ccl__regcache *c = comm->regcache;
    if (c) {
        while (c->n) drop_at(comm, c, c->n - 1);
        free(c->e);
        free(c);
        comm->regcache = NULL;
    }
    pthread_mutex_unlock(&cache_lock);
}

struct ccl__regcache_stats ccl__reg_stats(const struct ccl_comm *comm) {
    pthread_mutex_lock(&cache_lock);
    struct ccl__regcache_stats s = comm->regcache ? comm->regcache->stats : (struct ccl__regcache_stats){0};
    pthread_mutex_unlock(&cache_lock);
    return s;
}
