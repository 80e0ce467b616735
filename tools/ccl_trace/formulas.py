"""What each algorithm should move, from its own formula, and the traced
totals to hold them against: the ring (and the chain along it), the
double binary tree and the binomial tree, recursive doubling, the
single-host direct algorithm and the hierarchical one.

D is the whole buffer in bytes: count x element size for all_reduce,
broadcast and reduce; nranks x count x element size for reduce_scatter
(the send buffer) and all_gather (the receive buffer).
"""


class Totals:
    def __init__(self):
        self.sent, self.received = {}, {}            # traced, per rank
        self.want_sent, self.want_received = {}, {}  # from the formula, per rank
        self.formula = ""                            # the formula, in words
        self.steps, self.want_steps, self.steps_formula = 0, 0, ""
        self.D = 0

    @property
    def bytes_ok(self):
        return self.sent == self.want_sent and self.received == self.want_received

    @property
    def steps_ok(self):
        return self.steps == self.want_steps

    @property
    def ok(self):
        return self.bytes_ok and self.steps_ok


def buffer_bytes(values):
    per_rank_blocks = values.coll in ("reduce_scatter", "all_gather", "all_to_all")
    return values.count * values.esize * (values.nranks if per_rank_blocks else 1)


def blocks(count, n):
    """Element lengths of count split into n near-equal blocks (the first count % n one longer)."""
    base, extra = divmod(count, n)
    return [base + (b < extra) for b in range(n)]


def ring_neighbours(coll):
    """next and prev rank of every rank, from who sends to whom."""
    nxt = {}
    for t in coll.transfers:
        nxt.setdefault(t.src, t.dst)
    prev = {d: s for s, d in nxt.items()}
    return nxt, prev


def ring_order(coll, start=0):
    nxt, _ = ring_neighbours(coll)
    order, r = [], start
    while r not in order:
        order.append(r)
        if r not in nxt:
            break
        r = nxt[r]
    return order


def traced(coll, values):
    """A Totals with the traced side filled in."""
    t = Totals()
    t.D = buffer_bytes(values)
    for r in range(values.nranks):
        t.sent[r] = t.received[r] = 0
    for tr in coll.transfers:
        t.sent[tr.src] += tr.send.bytes
        t.received[tr.dst] += tr.recv.bytes
    t.steps = len(coll.steps)
    return t


def totals(coll, values, algo="ring"):
    """Traced bytes per rank and step count, against the algorithm's formula."""
    t = traced(coll, values)
    if values.coll == "all_to_all":
        all_to_all_totals(t, coll, values)
        return t
    {"ring": ring_totals, "chain": ring_totals, "tree": tree_totals, "rd": rd_totals, "rhd": rhd_totals,
     "bruck": bruck_totals, "direct": direct_totals, "hier": hier_totals}[algo](t, coll, values)
    return t


def ring_totals(t, coll, values):
    N, D = values.nranks, t.D
    nxt, prev = ring_neighbours(coll)
    if values.coll == "all_reduce":
        t.want_steps, t.steps_formula = 2 * (N - 1), "2(N-1)"
        if D % N == 0:
            t.formula = f"2(N-1)/N x D = 2x{N - 1}/{N} x {D} = {2 * (N - 1) * D // N}"
        else:
            t.formula = (f"2(N-1)/N x D = {2 * (N - 1) * D / N:.1f}; D/N is not whole, so each rank "
                         "moves 2D less its own chunk and one neighbour's")
        # A rank sends every chunk but its own (reduce-scatter) and every one
        # but its successor's (all-gather); chunk r belongs to rank r.
        blk = [b * values.esize for b in blocks(values.count, N)]
        for r in range(N):
            t.want_sent[r] = 2 * D - blk[r] - blk[nxt.get(r, (r + 1) % N)]
            t.want_received[r] = 2 * D - blk[prev.get(r, (r - 1) % N)] - blk[r]
    elif values.coll in ("reduce_scatter", "all_gather"):
        t.want_steps, t.steps_formula = N - 1, "N-1"
        t.formula = f"(N-1)/N x D = {N - 1}/{N} x {D} = {(N - 1) * D // N}"
        for r in range(N):
            t.want_sent[r] = t.want_received[r] = (N - 1) * D // N
    else:
        # a chain along the ring: broadcast starts at the root, reduce ends there
        t.want_steps, t.steps_formula = N - 1, "N-1"
        root = values.root
        first = root if values.coll == "broadcast" else nxt.get(root, (root + 1) % N)
        last = prev.get(first, (first - 1) % N)
        t.formula = f"D = {D} for every rank but the chain's end (r{last}) sent, its start (r{first}) received"
        for r in range(N):
            t.want_sent[r] = 0 if r == last else D
            t.want_received[r] = 0 if r == first else D


# ---- trees (lib/algo/tree.c) ----

def btree(n, v):
    """The in-order binary tree on 0..n-1 (node 0 the root with one child):
    (parent, [children])."""
    if v == 0:
        top = 1
        while top * 2 < n:
            top *= 2
        return -1, ([top] if n > 1 else [])
    bit = v & -v
    up = (v ^ bit) | (bit << 1)
    parent = v ^ bit if up >= n else up
    kids = []
    low = bit >> 1
    if low:
        kids.append(v - low)
        c = low
        while c > 0 and v + c >= n:
            c >>= 1
        if c > 0:
            kids.append(v + c)
    return parent, kids


def dtree(n, rank, tree):
    """Tree 0 or 1 of the double binary tree: the second is the first
    shifted by one rank."""
    def map_in(x):
        return x if tree == 0 else (x - 1) % n

    def map_out(x):
        return x if tree == 0 or x < 0 else (x + 1) % n
    parent, kids = btree(n, map_in(rank))
    return map_out(parent), [map_out(k) for k in kids]


def depth(parent_of, rank):
    d = 0
    while parent_of(rank) >= 0:
        rank, d = parent_of(rank), d + 1
    return d


def binomial(n, rank, root):
    """(parent, [children]) in the binomial tree rooted at root."""
    v = (rank - root) % n
    low = v & -v if v else 1
    while not v and low < n:
        low <<= 1
    parent = (v - low + root) % n if v else -1
    kids, b = [], low >> 1
    while b >= 1:
        if v + b < n:
            kids.append((v + b + root) % n)
        b >>= 1
    return parent, kids


def tree_totals(t, coll, values):
    N = values.nranks
    if values.coll == "all_reduce":
        first = (values.count + 1) // 2
        half = [first * values.esize, (values.count - first) * values.esize]
        deep = 0
        for r in range(N):
            t.want_sent[r] = t.want_received[r] = 0
        for h in (0, 1):
            for r in range(N):
                parent, kids = dtree(N, r, h)
                # up: a node sends its half to its parent and gets each child's; down: the reverse
                moved = (parent >= 0) * half[h] + len(kids) * half[h]
                t.want_sent[r] += moved
                t.want_received[r] += moved
                if half[h]:
                    deep = max(deep, depth(lambda x, h=h: dtree(N, x, h)[0], r))
        t.want_steps, t.steps_formula = 2 * deep, f"2 x the deepest level ({deep})"
        t.formula = (f"per tree, its half of D ({half[0]} and {half[1]} bytes) once over every edge up and once "
                     "down: a rank moves the half to its parent and to each child, and back")
        return
    # binomial broadcast (down) or reduce (up): D over every edge once
    D, root = t.D, values.root
    deep = max(bin((r - root) % N).count("1") for r in range(N))
    for r in range(N):
        parent, kids = binomial(N, r, root)
        down, up = len(kids) * D, (parent >= 0) * D
        t.want_sent[r], t.want_received[r] = (down, up) if values.coll == "broadcast" else (up, down)
    t.want_steps, t.steps_formula = deep, "the deepest level = the most 1 bits in a rank's distance from the root"
    t.formula = f"D = {D} over every edge of the binomial tree once: a rank moves D per child and D to/from its parent"


# ---- recursive doubling (lib/algo/rd.c) ----

def fold(N):
    """(P, R): the power of two below N and the ranks above it."""
    P = 1
    while P * 2 <= N:
        P *= 2
    return P, N - P


def rd_totals(t, coll, values):
    N, D = values.nranks, t.D
    P, R = fold(N)
    logP = P.bit_length() - 1
    for r in range(N):
        takes_part = r >= 2 * R or r % 2 == 1
        moved = logP * D * takes_part + D * (r < 2 * R)
        t.want_sent[r] = t.want_received[r] = moved
    t.want_steps = logP + (2 if R else 0)
    t.steps_formula = f"log2(P) = {logP}" + (" + 2 (fold in, fold out)" if R else "")
    t.formula = (f"D = {D} per exchange: log2(P) = {logP} exchanges among the P = {P} ranks"
                 + (f"; the first 2R = {2 * R} ranks pair up first (one hands its data in, "
                    "gets the result back), one more D each way" if R else ""))


# rd.c runs a buffer larger than this as one all-reduce per segment (for
# chunks that divide it, as the plan's do).
RHD_SEGMENT_BYTES = 1 << 20


def rhd_moves(count, P, me):
    """Elements participant `me` of P sends and receives: halving (it sends
    the half its bit does not keep) then doubling (it sends all it has and
    gets its partner's as much), blocks of count split P ways."""
    off = [b * (count // P) + min(b, count % P) for b in range(P + 1)]
    sent = received = 0
    lo, hi, mask = 0, P, P // 2
    while mask >= 1:
        mid = (lo + hi) // 2
        keep, other = ((lo, mid), (mid, hi)) if not me & mask else ((mid, hi), (lo, mid))
        sent += off[other[1]] - off[other[0]]
        received += off[keep[1]] - off[keep[0]]
        lo, hi = keep
        mask //= 2
    mask = 1
    while mask < P:
        width = hi - lo
        plo = lo - width if me & mask else hi
        sent += off[hi] - off[lo]
        received += off[plo + width] - off[plo]
        lo, hi = min(lo, plo), max(hi, plo + width)
        mask *= 2
    return sent, received


def rhd_totals(t, coll, values):
    N, D, es = values.nranks, t.D, values.esize
    P, R = fold(N)
    seg = max(RHD_SEGMENT_BYTES // es, 1)
    segments = [min(seg, values.count - b) for b in range(0, values.count, seg)] or [0]
    for r in range(N):
        me = (r // 2 if r % 2 else -1) if r < 2 * R else r - R
        s = rcv = 0
        for n in segments:
            if me >= 0:
                a, b = rhd_moves(n, P, me)
                s, rcv = s + a * es, rcv + b * es
            if r < 2 * R:  # the pair's even rank hands its data in and gets the result back
                s, rcv = s + n * es, rcv + n * es
        t.want_sent[r], t.want_received[r] = s, rcv
    logP = P.bit_length() - 1
    t.want_steps = 2 * logP + (2 if R else 0)
    t.steps_formula = f"2 log2(P) = {2 * logP}" + (" + 2 (fold in, fold out)" if R else "")
    t.formula = (f"halving then doubling among P = {P}: each sends and receives D - its block in each half, "
                 f"2(P-1)/P x D = {2 * (P - 1) * D // P} when the blocks are equal"
                 + (f"; the first 2R = {2 * R} ranks pair up first, one more D each way" if R else ""))


def bruck_totals(t, coll, values):
    N, D = values.nranks, t.D
    for r in range(N):
        t.want_sent[r] = t.want_received[r] = (N - 1) * D // N
    t.want_steps = max(N - 1, 0).bit_length()
    t.steps_formula = f"ceil(log2 N) = {t.want_steps}"
    t.formula = (f"(N-1)/N x D = {(N - 1) * D // N}: step k passes the (up to) 2^k blocks gathered so far to "
                 "the rank 2^k below, so every block reaches every rank once")


def all_to_all_totals(t, coll, values):
    N, D = values.nranks, t.D
    for r in range(N):
        t.want_sent[r] = t.want_received[r] = (N - 1) * D // N
    if coll.algo == "bruck":
        B, steps = D // max(N, 1), max(N - 1, 0).bit_length()
        moved = sum(B for k in range(steps) for i in range(N) if i & (1 << k))
        for r in range(N):
            t.want_sent[r] = t.want_received[r] = moved
        t.want_steps, t.steps_formula = steps, f"ceil(log2 N) = {steps}"
        t.formula = (f"B x (the 1 bits of 1..N-1) = {moved} (B = D/N = {B}): the block for the rank i ahead "
                     "moves once per 1 bit of i, all blocks with bit k set in one message in step k")
        return
    if coll.algo == "direct":
        t.want_steps, t.steps_formula = 1, "1"
    else:
        t.want_steps, t.steps_formula = N - 1, f"N-1 = {N - 1}"
    t.formula = (f"(N-1)/N x D = {(N - 1) * D // N} (D = {D}, a rank's whole input): one block to and from "
                 "every other rank; the block a rank keeps is copied locally")


# ---- single-host direct (lib/algo/direct.c) ----

ONE_SHOT_BYTES = 16384  # direct.c: a round this small is reduced whole by every reader


def direct_totals(t, coll, values):
    N, D, root = values.nranks, t.D, values.root
    slice_ = [b * values.esize for b in blocks(values.count, N)]
    c = values.coll
    if c in ("all_reduce", "reduce") and D <= ONE_SHOT_BYTES:
        readers = list(range(N)) if c == "all_reduce" else [root]
        for r in range(N):
            t.want_sent[r] = D * sum(1 for q in readers if q != r)
            t.want_received[r] = D * (N - 1) if r in readers else 0
        t.want_steps, t.steps_formula = 1, "1"
        t.formula = (f"every rank that wants the result reads all {N - 1} peers' whole buffers (D = {D}) "
                     "and reduces them itself: one step")
    elif c in ("all_reduce", "reduce"):
        for r in range(N):
            t.want_sent[r] = D - slice_[r]                       # slice q of my input, to rank q
            t.want_received[r] = (N - 1) * slice_[r]             # my slice of every input
            gather = [q for q in range(N) if q != r and (c == "all_reduce" or q == root)]
            t.want_sent[r] += len(gather) * slice_[r]            # my finished slice, to every reader
            if c == "all_reduce" or r == root:
                t.want_received[r] += D - slice_[r]              # every finished slice
        t.want_steps, t.steps_formula = 2, "2"
        t.formula = "rank q reduces slice q of every input (step 0), then readers copy every finished slice (step 1)"
    elif c == "broadcast":
        for r in range(N):
            t.want_sent[r] = (N - 1) * D if r == root else 0
            t.want_received[r] = 0 if r == root else D
        t.want_steps, t.steps_formula = 1, "1"
        t.formula = f"every rank reads the root's buffer (D = {D}) from its window: one step"
    else:  # all_gather, reduce_scatter: one block of D/N per pair
        for r in range(N):
            t.want_sent[r] = t.want_received[r] = (N - 1) * D // N
        t.want_steps, t.steps_formula = 1, "1"
        t.formula = f"(N-1)/N x D = {(N - 1) * D // N}: one block read from (or by) every peer, all in one step"


# ---- hierarchical (lib/algo/hier.c) ----

def hosts_of(coll, n):
    """The hosts, as sorted rank lists: ranks that trade over shared memory share one."""
    host = list(range(n))

    def find(r):
        while host[r] != r:
            r = host[r]
        return r
    for t in coll.transfers:
        if t.send.transport == "shm":
            host[find(t.src)] = find(t.dst)
    groups = {}
    for r in range(n):
        groups.setdefault(find(r), []).append(r)
    return sorted(groups.values())


def ring_share(lens, pos, what):
    """(sent, received) elements of the rank at ring position pos, block b
    being lens[b]: a reduce-scatter sends every block but its own and gets
    every one but its predecessor's; an all-gather sends every one but its
    successor's and gets every one but its own."""
    n, total = len(lens), sum(lens)
    prev, nxt = lens[(pos - 1) % n], lens[(pos + 1) % n]
    if what == "reduce_scatter":
        return total - lens[pos], total - prev
    if what == "all_gather":
        return total - nxt, total - lens[pos]
    return 2 * total - lens[pos] - nxt, 2 * total - prev - lens[pos]


def hier_totals(t, coll, values):
    N, es = values.nranks, values.esize
    hosts = hosts_of(coll, N)
    H, L = len(hosts), len(hosts[0])
    inside = blocks(values.count, L)
    for h, ranks in enumerate(hosts):
        for place, r in enumerate(ranks):
            sent = recv = 0
            if L > 1:
                for what in ("reduce_scatter", "all_gather"):
                    s, v = ring_share(inside, place, what)
                    sent, recv = sent + s, recv + v
            if H > 1 and inside[place]:
                s, v = ring_share(blocks(inside[place], H), h, "all_reduce")
                sent, recv = sent + s, recv + v
            t.want_sent[r], t.want_received[r] = sent * es, recv * es
    t.want_steps = 2 * (L - 1) + 2 * (H - 1)
    t.steps_formula = f"(L-1) + 2(H-1) + (L-1) with L = {L} ranks per host, H = {H} hosts"
    t.formula = ("a ring reduce-scatter of the L blocks inside each host, a ring all-reduce of block i among "
                 "the ranks at place i of every host, a ring all-gather inside each host: about "
                 "2(L-1)/L x D inside and 2(H-1)/H x D/L across")
