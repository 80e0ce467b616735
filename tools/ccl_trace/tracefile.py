"""Reading libccl trace files (docs/trace-format.md) into plain objects.

A trace holds, per rank, one complete event per chunk sent, received or
reduced, plus flow events that tie each send to its receive. Everything
here works from the file alone; nothing assumes a particular algorithm.
"""

import json
from collections import defaultdict


class TraceError(Exception):
    """The file cannot be used: unreadable, not a trace, or inconsistent."""


KINDS = ("send", "recv", "reduce")
# Within one step a rank receives before it reduces, and reduces before it
# forwards; used only to order events that share a step.
KIND_ORDER = {"recv": 0, "reduce": 1, "send": 2}


class Event:
    """One chunk event (a "ph": "X" event of cat send, recv or reduce)."""

    __slots__ = ("kind", "rank", "tid", "ts", "dur", "coll", "seq", "algo", "step", "phase",
                 "chunk", "round", "offset", "bytes", "peer", "transport", "link_seq", "space")

    def __init__(self, raw):
        args = raw.get("args") or {}
        self.kind = raw["cat"]
        self.rank = int(raw["pid"])
        self.tid = raw.get("tid")
        self.ts = float(raw["ts"])
        self.dur = float(raw.get("dur", 0.0))
        self.coll = args.get("coll", "?")
        self.seq = int(args.get("seq", 0))
        self.algo = args.get("algo", "?")
        self.step = int(args.get("step", 0))
        self.phase = args.get("phase", "?")
        self.chunk = int(args.get("chunk", 0))
        self.round = int(args.get("round", 0))
        self.offset = int(args.get("offset", 0))
        self.bytes = int(args.get("bytes", 0))
        self.peer = int(args.get("peer", -1))
        self.transport = args.get("transport", "?")
        self.link_seq = int(args.get("link_seq", -1))
        # Which buffer the offset is in: "" (the collective's one buffer),
        # or, for a by_piece view of an all-to-all, "in" or "out".
        self.space = ""

    @property
    def key(self):
        """The piece of the buffer this event is about."""
        return (self.chunk, self.round)

    @property
    def end(self):
        return self.ts + self.dur

    def __repr__(self):
        return (f"<{self.kind} c{self.chunk} r{self.rank} peer {self.peer} step {self.step} "
                f"round {self.round} link {self.link_seq}>")


class Transfer:
    """A send and the receive that got its data (and the reduction, if any)."""

    __slots__ = ("send", "recv", "reduce")

    def __init__(self, send, recv, reduce=None):
        self.send, self.recv, self.reduce = send, recv, reduce

    @property
    def src(self):
        return self.send.rank

    @property
    def dst(self):
        return self.recv.rank

    @property
    def step(self):
        return self.send.step


class Collective:
    """The events of one collective call (one args.seq of one args.coll)."""

    def __init__(self, coll, seq, events):
        self.coll, self.seq, self.events = coll, seq, events
        self.algo = events[0].algo if events else "?"
        self.transfers, self.unmatched = match_transfers(events)
        self._pieces = None

    @property
    def ranks(self):
        return sorted({e.rank for e in self.events} | {e.peer for e in self.events if e.kind != "reduce"})

    def by_piece(self):
        """This call with every event about one piece of the buffer: itself
        where the trace's (chunk, round) labels already name pieces (the
        ring, the trees, rd, direct, hier), else re-cut by byte range
        (recursive halving-doubling sends a different half each step, a
        Bruck step a different run of blocks, an all-to-all a block of its
        input into a block of another rank's output). Piece keys are then
        (index, 0), numbered by offset: the output's pieces first, then,
        for an all-to-all, the input's."""
        if self._pieces is None:
            self._pieces = cut_into_pieces(self)
        return self._pieces

    @property
    def steps(self):
        return sorted({e.step for e in self.events})

    def phase_of_step(self, step):
        for e in self.events:
            if e.step == step and e.kind == "send":
                return e.phase
        return "?"


class Trace:
    def __init__(self, path, doc):
        self.path = path
        other = doc.get("otherData") or {}
        self.other = other
        raw = doc["traceEvents"]
        self.events = []
        self.flow_starts, self.flow_ends = {}, {}
        self.rank_names = {}
        for r in raw:
            if not isinstance(r, dict):
                raise TraceError(f"{path}: traceEvents holds something that is not an event: {r!r}")
            ph, cat = r.get("ph"), r.get("cat")
            if ph == "X" and cat in KINDS:
                try:
                    self.events.append(Event(r))
                except (KeyError, TypeError, ValueError) as exc:
                    raise TraceError(f"{path}: malformed {cat} event ({exc}): {r!r}") from None
            elif ph == "s" and cat == "flow":
                self.flow_starts.setdefault(str(r.get("id")), []).append(r)
            elif ph == "f" and cat == "flow":
                self.flow_ends.setdefault(str(r.get("id")), []).append(r)
            elif ph == "M" and r.get("name") == "process_name":
                self.rank_names[r.get("pid")] = (r.get("args") or {}).get("name")
        if not self.events:
            raise TraceError(f"{path}: the trace has no send, receive or reduce events "
                             "(was anything traced before the communicator was destroyed?)")
        self.nranks = int(other.get("nranks") or 1 + max(max(e.rank, e.peer) for e in self.events))
        self.dropped = int(other.get("dropped_events", 0) or 0)

    def collectives(self):
        """The traced collective calls, in sequence order."""
        groups = defaultdict(list)
        for e in self.events:
            groups[(e.seq, e.coll)].append(e)
        return [Collective(coll, seq, evs) for (seq, coll), evs in sorted(groups.items())]

    def collective(self, coll=None, seq=None):
        """One collective: the one with this seq, else the first of this kind."""
        calls = self.collectives()
        for c in calls:
            if (seq is None or c.seq == seq) and (coll is None or c.coll == coll):
                return c
        what = " ".join(x for x in (coll, None if seq is None else f"#{seq}") if x)
        have = ", ".join(f"{c.coll} #{c.seq}" for c in calls)
        raise TraceError(f"{self.path}: no {what or 'collective'} in the trace (it has: {have})")

    def flow_problems(self):
        """Flows without both ends: every "s" needs an "f" with its id, and back."""
        problems = []
        for fid in sorted(set(self.flow_starts) - set(self.flow_ends)):
            problems.append(f"flow {fid} starts (ph s) but never finishes (no ph f)")
        for fid in sorted(set(self.flow_ends) - set(self.flow_starts)):
            problems.append(f"flow {fid} finishes (ph f) but never starts (no ph s)")
        for fid, evs in sorted(self.flow_starts.items()):
            if len(evs) > 1:
                problems.append(f"flow {fid} starts {len(evs)} times")
        for fid, evs in sorted(self.flow_ends.items()):
            if len(evs) > 1:
                problems.append(f"flow {fid} finishes {len(evs)} times")
        return problems


def load(path):
    """Parses a trace file; TraceError with a sentence when it cannot."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path} is not JSON ({exc}); is it a libccl trace (CCL_TRACE=FILE)?") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{path} is JSON but not a trace: no traceEvents list")
    return Trace(path, doc)


def match_transfers(events):
    """Pairs every send with its receive by (sender, receiver, link_seq), and
    attaches the reduction that consumed a receive: same rank, step and
    piece of the buffer, data from the same peer. Returns (transfers,
    unmatched events)."""
    sends, recvs, reduces = {}, {}, {}
    for e in events:
        if e.kind == "send":
            sends[(e.rank, e.peer, e.link_seq)] = e
        elif e.kind == "recv":
            recvs[(e.peer, e.rank, e.link_seq)] = e
        else:
            reduces.setdefault((e.rank, e.peer, e.step, e.key), []).append(e)
    transfers, unmatched = [], []
    for link, s in sends.items():
        r = recvs.pop(link, None)
        if r is None:
            unmatched.append(s)
            continue
        red = reduces.get((r.rank, r.peer, r.step, r.key))
        transfers.append(Transfer(s, r, red.pop(0) if red else None))
    unmatched.extend(recvs.values())
    for rest in reduces.values():
        unmatched.extend(rest)
    transfers.sort(key=lambda t: (t.step, t.send.round, t.src, t.send.chunk))
    return transfers, unmatched


# ---- the by_piece view ----

def labels_name_pieces(coll):
    """Whether every (chunk, round) label means one byte range, and no two
    ranges overlap (the hierarchical algorithm's rings cut the buffer
    differently, under labels of their own)."""
    spans = {}
    for e in coll.events:
        spans.setdefault(e.key, set()).add((e.offset, e.bytes))
    if any(len(v) != 1 for v in spans.values()):
        return False
    ranges = sorted(next(iter(v)) for v in spans.values())
    return all(a_off + a_len <= b_off for (a_off, a_len), (b_off, _) in zip(ranges, ranges[1:]))


def space_of(coll, e):
    """An all-to-all reads its input and writes its output: two buffers.
    (Bruck's all-to-all moves blocks of one work buffer.)"""
    if coll.coll == "all_to_all" and coll.algo != "bruck":
        return "in" if e.kind == "send" else "out"
    return ""


def derive(e, space, offset, nbytes, index):
    d = Event.__new__(Event)
    for name in Event.__slots__:
        setattr(d, name, getattr(e, name))
    d.space, d.offset, d.bytes, d.chunk, d.round = space, offset, nbytes, index, 0
    return d


def unpack_bruck(coll):
    """Bruck's all-to-all sends, in step k, the blocks of its work buffer
    whose index has bit k set, packed in index order into one message; the
    trace gives offsets in that message. Returns the transfers with their
    offsets moved to the blocks' places in the work buffer (one transfer
    per block or part of one), and the unmatched events."""
    n = 1 + max(coll.ranks, default=0)
    sent = {}
    for t in coll.transfers:
        sent[(t.src, t.step)] = sent.get((t.src, t.step), 0) + t.send.bytes
    blocks_of = {s: [i for i in range(n) if i & (1 << s)] for s in {t.step for t in coll.transfers}}
    bb = max((b // len(blocks_of[s]) for (_, s), b in sent.items() if blocks_of[s]), default=0)
    if not bb:
        return list(coll.transfers), list(coll.unmatched)
    out = []
    for t in coll.transfers:
        idx, o, end = blocks_of[t.step], t.send.offset, t.send.offset + t.send.bytes
        for j in range(o // bb, (end - 1) // bb + 1):
            a, b = max(o, j * bb), min(end, (j + 1) * bb)
            block = idx[j] if j < len(idx) else j
            at = block * bb + a - j * bb  # both ends pack and unpack the same blocks alike
            out.append(Transfer(*(derive(e, "", at, b - a, block) if e is not None else None
                                  for e in (t.send, t.recv, t.reduce))))
    return out, list(coll.unmatched)


def cut_into_pieces(coll):
    a2a = coll.coll == "all_to_all" and coll.algo != "bruck"
    if coll.coll == "all_to_all" and coll.algo == "bruck":
        transfers, unmatched = unpack_bruck(coll)
        seq, coll = coll.seq, Collective.__new__(Collective)
        coll.coll, coll.seq, coll.algo = "all_to_all", seq, "bruck"
        coll.transfers, coll.unmatched = transfers, unmatched
        coll.events = [e for t in transfers for e in (t.send, t.recv, t.reduce) if e is not None] + unmatched
        coll._pieces = None
    elif not a2a and labels_name_pieces(coll):
        return coll
    cuts = {}
    for e in coll.events:
        cuts.setdefault(space_of(coll, e), set()).update((e.offset, e.offset + e.bytes))

    def inner(e):
        sp = space_of(coll, e)
        return {c - e.offset for c in cuts[sp] if e.offset < c < e.offset + e.bytes}

    # A transfer lands its bytes in order: a cut on either side cuts the other.
    changed = True
    while changed:
        changed = False
        for t in coll.transfers:
            rel = inner(t.send) | inner(t.recv)
            for e in (t.send, t.recv):
                new = {e.offset + x for x in rel} - cuts[space_of(coll, e)]
                if new:
                    cuts[space_of(coll, e)].update(new)
                    changed = True
    index = {}
    for sp in ("", "out", "in"):
        cs = sorted(cuts.get(sp, ()))
        for a in cs[:-1]:
            index[(sp, a)] = len(index)

    def pieces_of(e, rel):
        """(relative start, length) of the pieces of e, cut at rel."""
        points = [0] + sorted(rel) + [e.bytes]
        return [(a, b - a) for a, b in zip(points, points[1:]) if b > a]

    def split(e, rel):
        sp = space_of(coll, e)
        return [derive(e, sp, e.offset + a, n, index[(sp, e.offset + a)]) for a, n in pieces_of(e, rel)]

    events, transfers, unmatched = [], [], []
    for t in coll.transfers:
        rel = inner(t.send) | inner(t.recv)
        sends, recvs = split(t.send, rel), split(t.recv, rel)
        reduces = split(t.reduce, rel) if t.reduce is not None else [None] * len(recvs)
        for s, r, red in zip(sends, recvs, reduces):
            transfers.append(Transfer(s, r, red))
            events += [x for x in (s, r, red) if x is not None]
    for e in coll.unmatched:
        parts = split(e, inner(e))
        unmatched += parts
        events += parts
    transfers.sort(key=lambda t: (t.step, t.send.round, t.src, t.send.chunk))
    view = Collective.__new__(Collective)
    view.coll, view.seq, view.algo = coll.coll, coll.seq, coll.algo
    view.events, view.transfers, view.unmatched = events, transfers, unmatched
    view._pieces = view
    return view
