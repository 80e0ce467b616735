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
            from .pieces import cut_into_pieces  # the cutting needs this module's classes
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
