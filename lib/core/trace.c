/* Growable per-rank event buffer. */
#include "core/trace.h"

#include <stdlib.h>

struct ccl__trace *ccl__trace_create(int nranks, size_t max_events) {
    struct ccl__trace *t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->sent = calloc((size_t)nranks, sizeof(uint64_t));
    t->received = calloc((size_t)nranks, sizeof(uint64_t));
    t->max = max_events;
    if (!t->sent || !t->received) {
        ccl__trace_destroy(t);
        return NULL;
    }
    return t;
}

void ccl__trace_destroy(struct ccl__trace *t) {
    if (!t) return;
    free(t->ev);
    free(t->sent);
    free(t->received);
    free(t);
}

void ccl__trace_add(struct ccl__trace *t, const struct ccl__trace_event *e) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        if (cap > t->max) cap = t->max;
        struct ccl__trace_event *grown = cap > t->cap ? realloc(t->ev, cap * sizeof(*grown)) : NULL;
        if (!grown) {
            t->dropped++;
            return;
        }
        t->ev = grown;
        t->cap = cap;
    }
    t->ev[t->n++] = *e;
}
