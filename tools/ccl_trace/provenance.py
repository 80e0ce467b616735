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
    """A transfer as the replay saw it."""

    __slots__ = ("transfer", "carried", "result", "reduced")

    def __init__(self, transfer, carried, result, reduced):
        self.transfer, self.carried, self.result, self.reduced = transfer, carried, result, reduced


class Story:
    """The replay: per step the moves and what every rank held afterwards."""

    def __init__(self, coll, nranks):
        self.coll, self.nranks = coll, nranks
        self.initial = {}
        self.steps = []  # (step, phase, [Move], holdings after the step)
        self.final = {}
        self.problems = []

    def moves(self):
        for _, _, moves, _ in self.steps:
            yield from moves


def initial_holdings(coll, ranks, nranks):
    keys = sorted({e.key for e in coll.events})
    held = {r: {} for r in range(nranks)}
    if coll.coll in REDUCING:
        for r in ranks:
            for k in keys:
                held[r][k] = (r,)
        return held
    # A rank that sends a piece it never receives is where that piece starts.
    received = {(e.rank, e.key) for e in coll.events if e.kind == "recv"}
    for e in coll.events:
        if e.kind == "send" and (e.rank, e.key) not in received:
            held[e.rank][e.key] = (e.rank,)
    return held


def replay(coll, nranks):
    """Replays one collective; returns a Story."""
    story = Story(coll, nranks)
    held = initial_holdings(coll, coll.ranks, nranks)
    story.initial = {r: dict(h) for r, h in held.items()}
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
        moves = []
        for t, data in zip(transfers, carried):
            if not data:
                story.problems.append(f"step {step}: rank {t.src} sends c{t.send.chunk} before holding any of it")
            if t.send.key != t.recv.key:
                story.problems.append(f"step {step}: rank {t.src} sends c{t.send.chunk} but rank {t.dst} "
                                      f"receives it as c{t.recv.chunk}")
            if t.reduce is not None:
                result = tuple(data) + tuple(held[t.dst].get(t.recv.key, ()))
            else:
                result = tuple(data)
            held[t.dst][t.recv.key] = result
            moves.append(Move(t, tuple(data), result, t.reduce is not None))
        phase = transfers[0].send.phase
        story.steps.append((step, phase, moves, {r: dict(h) for r, h in held.items()}))
    story.final = held
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
