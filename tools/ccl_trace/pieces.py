"""Cutting a traced call into pieces of the buffer, for the replay.

The trace labels every event with a (chunk, round). Where a label means one
byte range throughout the call (the ring, the trees, rd, direct), that
label is the piece. Where it does not (recursive halving-doubling sends a
different half each step, a Bruck all-gather step a different run of
blocks, the hierarchical algorithm cuts the buffer twice, an all-to-all
moves a block from one buffer to another, Bruck's all-to-all packs scattered
blocks into one message), the call is re-cut by byte range, at every place
where some transfer starts or ends, and each transfer split to match.
"""

from .tracefile import Collective, Event, Transfer


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


def two_buffers(coll):
    """An all-to-all reads its input and writes its output: two buffers.
    (Bruck's all-to-all moves blocks of one work buffer.)"""
    return coll.coll == "all_to_all" and coll.algo != "bruck"


def space_of(coll, e):
    return ("in" if e.kind == "send" else "out") if two_buffers(coll) else ""


def view(coll, transfers, unmatched):
    """A Collective like coll, made of these transfers and unmatched events."""
    v = Collective.__new__(Collective)
    v.coll, v.seq, v.algo = coll.coll, coll.seq, coll.algo
    v.transfers, v.unmatched = transfers, unmatched
    v.events = [e for t in transfers for e in (t.send, t.recv, t.reduce) if e is not None] + unmatched
    v._pieces = None
    return v


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
    if coll.coll == "all_to_all" and coll.algo == "bruck":
        coll = view(coll, *unpack_bruck(coll))
    elif not two_buffers(coll) and labels_name_pieces(coll):
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

    transfers = []
    for t in coll.transfers:
        rel = inner(t.send) | inner(t.recv)
        sends, recvs = split(t.send, rel), split(t.recv, rel)
        reduces = split(t.reduce, rel) if t.reduce is not None else [None] * len(recvs)
        transfers += [Transfer(s, r, red) for s, r, red in zip(sends, recvs, reduces)]
    unmatched = [part for e in coll.unmatched for part in split(e, inner(e))]
    transfers.sort(key=lambda t: (t.step, t.send.round, t.src, t.send.chunk))
    cut = view(coll, transfers, unmatched)
    cut._pieces = cut  # already cut
    return cut


class Pieces:
    """The pieces of a replayed call in buffer order (an all-to-all's output
    first, then its input) with their labels: cK, or cK.R when a chunk moves
    in several slices; an all-to-all's blocks are out[q] (what came from
    rank q) and in[q] (what goes to rank q), .j when cut."""

    def __init__(self, coll, nranks):
        spans = {}
        for e in coll.events:
            spans.setdefault(e.key, (e.offset, e.bytes, e.space))
        self.span = dict(sorted(spans.items(), key=lambda kv: (kv[1][2] == "in", kv[1][0], kv[0])))
        self.label = {}
        if coll.coll == "all_to_all":  # by block: Bruck's work buffer's cK, or in[q] and out[q]
            ends = [o + b for o, b, sp in self.span.values() if sp != "in"]
            block = max(max(ends, default=0) // max(nranks, 1), 1)
            of_block = {}
            for k, (o, _, sp) in self.span.items():
                of_block.setdefault((sp, o // block), []).append(k)
            for (sp, q), keys in of_block.items():
                for j, k in enumerate(keys):
                    self.label[k] = (f"{sp}[{q}]" if sp else f"c{q}") + (f".{j}" if len(keys) > 1 else "")
        else:
            rounds = {}
            for chunk, rnd in self.span:
                rounds.setdefault(chunk, set()).add(rnd)
            multi = any(len(r) > 1 for r in rounds.values())
            for chunk, rnd in self.span:
                self.label[(chunk, rnd)] = f"c{chunk}.{rnd}" if multi else f"c{chunk}"

    def keys(self, with_input=True):
        return [k for k, (_, _, sp) in self.span.items() if with_input or sp != "in"]

    def where(self, k):
        o, b, _ = self.span[k]
        return o, b
