"""What the ring algorithms should move, from the textbook formulas, and the
traced totals to hold them against.

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
    per_rank_blocks = values.coll in ("reduce_scatter", "all_gather")
    return values.count * values.esize * (values.nranks if per_rank_blocks else 1)


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


def totals(coll, values):
    """Traced bytes per rank and step count, against the formulas."""
    N, D = values.nranks, buffer_bytes(values)
    t = Totals()
    t.D = D
    for r in range(N):
        t.sent[r] = t.received[r] = 0
    for tr in coll.transfers:
        t.sent[tr.src] += tr.send.bytes
        t.received[tr.dst] += tr.recv.bytes
    t.steps = len(coll.steps)
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
        base, extra = divmod(values.count, N)
        blk = [(base + (r < extra)) * values.esize for r in range(N)]
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
    return t
