"""Where every piece of the buffer came from, replayed from a trace.

Each rank holds, for every piece (chunk, round) of the buffer, the list of
ranks whose input is summed into its copy, in the order they were added.
The replay goes step by step: a send carries what its rank held after the
earlier steps; the receive matched to it (args.link_seq) either stores that
(a copy) or, when a reduction consumed it, adds the receiver's own holding
to it. Nothing here knows the ring: the provenance comes from the events.
"""

# In these collectives every rank's input is part of the result; in the
# others (all_gather, broadcast) data starts only where it is first sent.
REDUCING = {"all_reduce", "reduce_scatter", "reduce", "barrier"}


class Move:
    """A transfer as the replay saw it. origin: the input byte offset the
    values it carries come from (a copy's; a sum's are at its own place)."""

    __slots__ = ("transfer", "carried", "result", "reduced", "origin")

    def __init__(self, transfer, carried, result, reduced, origin):
        self.transfer, self.carried, self.result, self.reduced = transfer, carried, result, reduced
        self.origin = origin


class Story:
    """The replay: per step the moves and what every rank held afterwards."""

    def __init__(self, coll, nranks):
        self.coll, self.nranks = coll, nranks
        self.initial = {}
        # origin[r][key]: where in its owner's input the values of rank r's
        # copy come from (a byte offset); the piece's own offset unless
        # an all-to-all moved a block to another place
        self.origin_initial, self.origin = {}, {}
        self.steps = []  # (step, phase, [Move], holdings after the step)
        self.final = {}
        self.problems = []

    def moves(self):
        for _, _, moves, _ in self.steps:
            yield from moves


def all_to_all_start(coll, ranks, nranks):
    """Every rank holds its whole input; the block it keeps for itself is
    copied into its output before anything moves (no transfer shows it).
    Bruck's work buffer starts as the input rotated: block i of rank r is
    its block for rank r + i. Returns (held, origin)."""
    held, origin = {r: {} for r in range(nranks)}, {r: {} for r in range(nranks)}
    spans = {}
    for e in coll.events:
        spans.setdefault(e.key, (e.space, e.offset, e.bytes))
    ends = [o + b for sp, o, b in spans.values() if sp in ("", "out")]
    block = max(ends, default=0) // max(nranks, 1)
    for r in ranks:
        for k, (sp, off, nb) in spans.items():
            if sp == "in":
                held[r][k], origin[r][k] = (r,), off
            elif sp == "out" and block and off // block == r:
                held[r][k], origin[r][k] = (r,), off
            elif sp == "" and block:
                i, within = divmod(off, block)
                held[r][k], origin[r][k] = (r,), ((r + i) % nranks) * block + within
    return held, origin


def initial_holdings(coll, ranks, nranks):
    """(held, origin) before the first step."""
    if coll.coll == "all_to_all":
        return all_to_all_start(coll, ranks, nranks)
    keys = sorted({e.key for e in coll.events})
    held = {r: {} for r in range(nranks)}
    if coll.coll in REDUCING:
        for r in ranks:
            for k in keys:
                held[r][k] = (r,)
    else:
        # A rank that sends a piece it never receives is where that piece starts.
        received = {(e.rank, e.key) for e in coll.events if e.kind == "recv"}
        for e in coll.events:
            if e.kind == "send" and (e.rank, e.key) not in received:
                held[e.rank][e.key] = (e.rank,)
    offsets = {e.key: e.offset for e in coll.events}
    return held, {r: {k: offsets[k] for k in h} for r, h in held.items()}


def replay(coll, nranks):
    """Replays one collective (cut into pieces: Collective.by_piece);
    returns a Story whose coll is the view it replayed."""
    coll = coll.by_piece()
    story = Story(coll, nranks)
    held, origin = initial_holdings(coll, coll.ranks, nranks)
    story.initial = {r: dict(h) for r, h in held.items()}
    story.origin_initial = {r: dict(o) for r, o in origin.items()}
    by_step = {}
    for t in coll.transfers:
        by_step.setdefault(t.step, []).append(t)
    for e in coll.unmatched:
        story.problems.append(f"rank {e.rank}: {e.kind} of c{e.chunk} (step {e.step}, link_seq "
                              f"{e.link_seq}, peer {e.peer}) has no matching event on the other side")
    for step in sorted(by_step):
        transfers = by_step[step]
        # every send of a step carries what its rank held before the step
        carried = [held[t.src].get(t.send.key, ()) for t in transfers]
        came_from = [origin[t.src].get(t.send.key, t.send.offset) for t in transfers]
        moves = []
        for t, data, src_at in zip(transfers, carried, came_from):
            if not data:
                story.problems.append(f"step {step}: rank {t.src} sends c{t.send.chunk} before holding any of it")
            if t.send.key != t.recv.key and t.send.space == t.recv.space:
                story.problems.append(f"step {step}: rank {t.src} sends c{t.send.chunk} but rank {t.dst} "
                                      f"receives it as c{t.recv.chunk}")
            if t.reduce is not None:
                result = tuple(data) + tuple(held[t.dst].get(t.recv.key, ()))
            else:
                result = tuple(data)
            held[t.dst][t.recv.key] = result
            origin[t.dst][t.recv.key] = t.recv.offset if t.reduce is not None else src_at
            moves.append(Move(t, tuple(data), result, t.reduce is not None, origin[t.dst][t.recv.key]))
        phase = transfers[0].send.phase
        story.steps.append((step, phase, moves, {r: dict(h) for r, h in held.items()}))
    story.final = held
    story.origin = origin
    return story


def names(prov):
    """("r0", "r1") style: 'r0+r1'."""
    return "+".join(f"r{r}" for r in prov) if prov else "nothing"


def short_names(prov, nranks):
    """A compact provenance for tables: all ranks, or the list."""
    if not prov:
        return "-"
    if len(prov) == nranks and len(set(prov)) == nranks and nranks > 2:
        return f"all {nranks}" if nranks > 4 else names(prov)
    if len(prov) > 4:
        return f"r{prov[0]}+..+r{prov[-1]} ({len(prov)})"
    return names(prov)
