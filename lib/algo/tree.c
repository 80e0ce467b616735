/*
 * Trees. Broadcast and reduce run a binomial tree rooted at the root,
 * pipelined chunk by chunk: log2(N) hops instead of the chain's N-1, so
 * small and mid-size messages finish sooner.
 *
 * All-reduce runs a double binary tree: the data is halved, each half is
 * reduced up one binary tree and broadcast down it. In the first tree the
 * inner nodes are the even ranks (the odd ones are leaves); the second is
 * the first shifted by one rank, so its inner nodes are the odd ranks, plus
 * rank 0 when N is odd (as the first tree's root, rank 0 has one child):
 * every other rank forwards data in at most one tree, and the links carry
 * about the same load. (Mirroring the tree for odd N, the other usual
 * choice, maps even ranks to even ranks: the same ranks would be inner
 * nodes of both trees.) All reductions go up (every chunk of both trees) before anything
 * comes down, so no step waits for a round trip through the root.
 *
 * Each element is reduced in one fixed order (a node's own data, then its
 * children lowest first), so results are identical on every rank and from
 * run to run; that order differs from the ring's, so inexact float sums may
 * round differently from ring's (exact inputs give identical results).
 */
#include <string.h>

#include "algo/algo.h"

struct node {
    int parent;            /* rank, -1 for the root */
    int nkids;
    int kids[CCL__STEP_MAX_PEERS];
};

/* Binomial tree over relative ranks v = rank - root (mod N): v's parent
 * clears v's lowest set bit; its children set each lower bit. */
static void binomial(int n, int rank, int root, struct node *t) {
    int v = ccl__mod(rank - root, n);
    int low = v ? v & -v : 1;
    while (!v && low < n) low <<= 1;
    t->parent = v ? (v - low + root) % n : -1;
    t->nkids = 0;
    for (int b = low >> 1; b >= 1; b >>= 1)
        if (v + b < n) t->kids[t->nkids++] = (v + b + root) % n;
}

/* In-order binary tree on 0..n-1 (node 0 is the root, with one child):
 * node v's height is its lowest set bit; leaves are the odd nodes. */
static void btree(int n, int v, int *parent, int kids[2], int *nkids) {
    *nkids = 0;
    if (v == 0) {
        *parent = -1;
        int top = 1;
        while (top * 2 < n) top *= 2;
        if (n > 1) kids[(*nkids)++] = top;
        return;
    }
    int bit = v & -v;
    int up = (v ^ bit) | (bit << 1);
    *parent = up >= n ? v ^ bit : up;
    for (int low = bit >> 1, side = 0; low > 0 && side < 2; side++) {
        if (side == 0) {
            kids[(*nkids)++] = v - low;
            continue;
        }
        int c = low;
        while (c > 0 && v + c >= n) c >>= 1;
        if (c > 0) kids[(*nkids)++] = v + c;
    }
}

/* Tree t (0 or 1) of the double binary tree, for `rank`. */
static void dtree(int n, int rank, int t, struct node *out) {
    int map_in = rank, kids[2], nk, parent;
    if (t == 1) map_in = ccl__mod(rank - 1, n);
    btree(n, map_in, &parent, kids, &nk);
#define MAP_OUT(x) (t == 0 || (x) < 0 ? (x) : ((x) + 1) % n)
    out->parent = MAP_OUT(parent);
    out->nkids = nk;
    for (int i = 0; i < nk; i++) out->kids[i] = MAP_OUT(kids[i]);
#undef MAP_OUT
}

/* Up: a node's data OP its children's, to its parent (or into dst at the
 * root, divided when dividing). */
static struct ccl__step up_step(const struct node *t, const void *src, void *dst, size_t n, int div) {
    struct ccl__step s = {.src = src, .n = n, .nrecv = t->nkids, .reduce = 1};
    memcpy(s.recv, t->kids, sizeof(int) * (size_t)t->nkids);
    if (t->parent >= 0) {
        s.nsend = 1;
        s.send[0] = t->parent;
    } else {
        s.dst = dst;
        s.div = div;
    }
    return s;
}

/* Down: from the parent into dst and on to the children (the root sends
 * src, copying it into dst). */
static struct ccl__step down_step(const struct node *t, const void *src, void *dst, size_t n) {
    struct ccl__step s = {.dst = dst, .n = n, .nsend = t->nkids};
    memcpy(s.send, t->kids, sizeof(int) * (size_t)t->nkids);
    if (t->parent >= 0) {
        s.nrecv = 1;
        s.recv[0] = t->parent;
    } else {
        s.src = src;
    }
    return s;
}

static int depth_of(int n, int rank, int root) {
    int v = ccl__mod(rank - root, n), d = 0;
    for (; v; v &= v - 1) d++;
    return d;
}

/* ---- trace labels ----
 * A trace step is a level of the tree, so that a learner's replay sees
 * data move one level per step: on the way down, a node at depth d
 * receives in step d-1 and sends in step d; on the way up, with `deep`
 * the deepest node's depth, it receives in step deep-1-d and sends in
 * step deep-d (children first: a node sends only after every child's data
 * arrived). Pieces are (chunk = tree, round = slice of that tree's data). */
static void trace_level(struct ccl__prims *p, int up, int deep, int depth, int up_steps, int tree, size_t slice,
                        size_t off) {
    int send = up ? deep - depth : up_steps + depth;
    ccl__prims_at(p, CCL__TR_TREE, up ? CCL__TR_REDUCE_PHASE : CCL__TR_BROADCAST, send - 1,
                  up ? CCL__TR_REDUCE_PHASE : CCL__TR_BROADCAST, send, tree, (uint32_t)slice,
                  (uint64_t)off * p->esize);
}

static int binomial_deepest(int n) {
    int deep = 0;
    for (int v = 1; v < n; v++) {
        int d = depth_of(n, v, 0);
        deep = d > deep ? d : deep;
    }
    return deep;
}

/* Broadcast (down the binomial tree) or reduce (up it), chunk by chunk. */
static ccl_status_t binomial_run(struct ccl_comm *comm, const struct ccl__coll_args *a, int reduce) {
    struct ccl__prims p;
    CCL_CHECK(ccl__prims_init(&p, comm, &a->id, a->plan.chunk_bytes, a->mem));
    struct node t;
    binomial(comm->nranks, comm->rank, a->id.root, &t);
    int d = depth_of(comm->nranks, comm->rank, a->id.root);
    int deep = __builtin_expect(comm->trace != NULL, 0) ? binomial_deepest(comm->nranks) : 0;
    int div = reduce && a->id.op == CCL_AVG ? comm->nranks : 0;
    for (size_t off = 0; off < a->id.count; off += p.chunk_elems) {
        size_t n = a->id.count - off < p.chunk_elems ? a->id.count - off : p.chunk_elems;
        const char *src = a->sendbuf ? ccl__at(a->sendbuf, off, p.esize) : NULL;
        char *dst = a->recvbuf ? (char *)ccl__at(a->recvbuf, off, p.esize) : NULL;
        if (__builtin_expect(comm->trace != NULL, 0))
            trace_level(&p, reduce, deep, d, 0, 0, off / p.chunk_elems, off);
        struct ccl__step s = reduce ? up_step(&t, src, dst, n, div) : down_step(&t, src, dst, n);
        CCL_CHECK(ccl__prims_step(&p, &s));
    }
    return ccl__prims_flush(comm, ccl__prims_what(&p));
}

static ccl_status_t tree_broadcast(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    return binomial_run(comm, a, 0);
}

static ccl_status_t tree_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    return binomial_run(comm, a, 1);
}

/* Half h of the data: [off, off + len). */
static void half(size_t count, int h, size_t *off, size_t *len) {
    size_t first = (count + 1) / 2;
    *off = h ? first : 0;
    *len = h ? count - first : first;
}

static int dtree_depth(int n, int rank, int t) {
    struct node x;
    int d = 0;
    for (dtree(n, rank, t, &x); x.parent >= 0; dtree(n, x.parent, t, &x)) d++;
    return d;
}

/* The deeper of the two trees' deepest nodes (both trees' levels share
 * trace steps; the model waits on every level). */
int ccl__dtree_depth(int n) {
    int deep = 0;
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < n; r++) {
            int d = dtree_depth(n, r, t);
            deep = d > deep ? d : deep;
        }
    return deep;
}

int ccl__tree_parent(int n, int rank, int which) {
    struct node x;
    if (which == 2) binomial(n, rank, 0, &x);
    else dtree(n, rank, which, &x);
    return x.parent;
}

static ccl_status_t tree_all_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    struct ccl__prims p;
    CCL_CHECK(ccl__prims_init(&p, comm, &a->id, a->plan.chunk_bytes, a->mem));
    int n = comm->nranks, div = a->id.op == CCL_AVG ? n : 0;
    struct node t[2];
    dtree(n, comm->rank, 0, &t[0]);
    dtree(n, comm->rank, 1, &t[1]);
    size_t off[2], len[2];
    half(a->id.count, 0, &off[0], &len[0]);
    half(a->id.count, 1, &off[1], &len[1]);
    size_t chunks = (len[0] + p.chunk_elems - 1) / p.chunk_elems;
    int tracing = __builtin_expect(comm->trace != NULL, 0);
    int deep = tracing ? ccl__dtree_depth(n) : 0, depth[2] = {0, 0};
    for (int h = 0; tracing && h < 2; h++) depth[h] = dtree_depth(n, comm->rank, h);
    /* Up, every chunk of both trees; then down. The roots reduce into
     * recvbuf and send from there. */
    for (int phase = 0; phase < 2; phase++)
        for (size_t j = 0; j < chunks; j++)
            for (int h = 0; h < 2; h++) {
                size_t start = j * p.chunk_elems;
                if (start >= len[h]) continue;
                size_t m = len[h] - start < p.chunk_elems ? len[h] - start : p.chunk_elems, e = off[h] + start;
                const char *src = ccl__at(a->sendbuf, e, p.esize);
                char *dst = (char *)ccl__at(a->recvbuf, e, p.esize);
                if (tracing) trace_level(&p, !phase, deep, depth[h], deep, h, j, e);
                struct ccl__step s;
                if (phase == 0) s = up_step(&t[h], src, dst, m, div);
                else s = down_step(&t[h], dst, dst, m);
                CCL_CHECK(ccl__prims_step(&p, &s));
            }
    return ccl__prims_flush(comm, ccl__prims_what(&p));
}

const struct ccl__algo ccl__algo_tree = {
    .name = "tree",
    .summary = "double binary tree all-reduce; binomial-tree broadcast and reduce, pipelined by chunks",
    .run = {[CCL__K_ALL_REDUCE] = tree_all_reduce, [CCL__K_BROADCAST] = tree_broadcast,
            [CCL__K_REDUCE] = tree_reduce},
};
