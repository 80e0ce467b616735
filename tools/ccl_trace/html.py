"""`ccl-trace html`: one self-contained page that plays a real trace back.

The page (no network, no external scripts) draws the ranks in the
algorithm's own shape, moves every transfer of a step from sender to
receiver, and shows each rank's buffer as chunks filled by how many ranks'
data they hold. Clicking a chunk tells its provenance; a side panel keeps
the running byte totals against the algorithm's formula.

Everything the page shows comes from the replay (provenance.py) done here:
the page gets the moves, each with the provenance it carried and left
behind, and replays them itself, so stepping back and forth is cheap and
the file stays small (provenances are shared through one table).
"""

import json
import math
import os
from dataclasses import dataclass

from . import formulas
from .pieces import Pieces
from .provenance import REDUCING, replay
from .tracefile import TraceError, load
from .values import Values

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "viewer.html")
# The number of values of a piece the page can show (the rest is counted).
SHOWN_VALUES = 6


@dataclass
class Shape:
    """What the formulas need, read off the trace when no values file
    says it: the buffer's size, an element size that divides every piece,
    and the root."""

    coll: str
    nranks: int
    count: int
    esize: int
    root: int


def infer_shape(coll, nranks):
    end = max(e.offset + e.bytes for e in coll.events)
    g = 0
    for e in coll.events:
        g = math.gcd(math.gcd(g, e.offset), e.bytes)
    esize = next((s for s in (8, 4, 2, 1) if g % s == 0), 1)
    blocks = nranks if coll.coll in ("reduce_scatter", "all_gather", "all_to_all") else 1
    senders = {t.src for t in coll.transfers}
    receivers = {t.dst for t in coll.transfers}
    if coll.coll == "broadcast":
        root = min(senders - receivers, default=0)
    elif coll.coll == "reduce":
        root = min(receivers - senders, default=0)
    else:
        root = 0
    return Shape(coll.coll, nranks, end // esize // blocks, esize, root)


def layout(coll, nranks):
    """Each rank's place, in the unit square: the ring's order on a circle,
    a single tree in levels (root on top), anything else by rank on a
    circle. Returns ({rank: (x, y)}, shape name)."""
    first_phase = coll.transfers[0].send.phase if coll.transfers else None
    if coll.algo == "tree" and coll.coll in ("broadcast", "reduce"):
        edges = [(t.src, t.dst) for t in coll.transfers if t.send.phase == first_phase]
        parent = {}
        for s, d in edges:
            child, par = (d, s) if coll.coll == "broadcast" else (s, d)
            parent.setdefault(child, par)
        level = {}
        for r in range(nranks):
            d, x = 0, r
            while x in parent and d <= nranks:
                x, d = parent[x], d + 1
            level[r] = d
        depth = max(level.values(), default=0)
        pos = {}
        for lv in range(depth + 1):
            # children sit in their parents' order, so that edges do not cross
            ranks = sorted((r for r in range(nranks) if level[r] == lv),
                           key=lambda r: (pos[parent[r]][0] if r in parent and parent[r] in pos else 0, r))
            for i, r in enumerate(ranks):
                pos[r] = ((i + 1) / (len(ranks) + 1), 0.1 + 0.8 * lv / max(depth, 1))
        return pos, "tree"
    if coll.algo in ("ring", "chain"):
        order = formulas.ring_order(coll, start=0)
        order += [r for r in range(nranks) if r not in order]
        shape = "ring" if coll.algo == "ring" else "chain along the ring"
    else:
        order, shape = list(range(nranks)), "circle"
    pos = {}
    for i, r in enumerate(order):
        a = -math.pi / 2 + 2 * math.pi * i / max(nranks, 1)
        pos[r] = (0.5 + 0.38 * math.cos(a), 0.5 + 0.38 * math.sin(a))
    return pos, shape


def totals_for(coll, shape):
    """(formula text, steps formula, want_steps, want_sent, want_received),
    or None where the algorithm has no formula here."""
    try:
        t = formulas.totals(coll, shape, coll.algo)
    except (KeyError, ZeroDivisionError, IndexError):
        return None
    n = shape.nranks
    return {"formula": t.formula, "steps_formula": t.steps_formula, "want_steps": t.want_steps,
            "want_sent": [t.want_sent.get(r, 0) for r in range(n)],
            "want_received": [t.want_received.get(r, 0) for r in range(n)], "D": t.D}


def contributions(vals, parts):
    """[rank][i] -> the rank's first input values in byte range parts[i]
    (None: none)."""
    out = []
    for r in range(vals.nranks):
        row = []
        for off, nb in parts:
            idx = list(vals.elements(off, nb))
            got = [vals.contribution(r, i) for i in idx[:SHOWN_VALUES]]
            row.append(None if not idx or None in got else got)
        out.append(row)
    return out


def payload(trace, coll, vals=None):
    nranks = max(trace.nranks, 1 + max(coll.ranks, default=0))
    story = replay(coll, nranks)
    coll = story.coll  # cut into pieces where the trace's labels do not name them
    pcs = Pieces(coll, nranks)
    keys = list(pcs.span)
    index = {k: i for i, k in enumerate(keys)}
    parts = [pcs.where(k) for k in keys]
    # A copy's values are its origin's: a range of its owners' inputs, the
    # piece's own place unless an all-to-all moved the block elsewhere.
    sources, source_index = [], {}

    def origin_id(offset, k):
        at = (offset, pcs.span[k][1])
        if at not in source_index:
            source_index[at] = len(sources)
            sources.append(at)
        return source_index[at]

    for k in keys:
        origin_id(pcs.span[k][0], k)
    provs, prov_index = [], {}

    def prov_id(p):
        p = tuple(p)
        if p not in prov_index:
            prov_index[p] = len(provs)
            provs.append(list(p))
        return prov_index[p]

    initial = [[prov_id(story.initial[r].get(k, ())) for k in keys] for r in range(nranks)]
    origin = [[origin_id(story.origin_initial.get(r, {}).get(k, pcs.span[k][0]), k) for k in keys]
              for r in range(nranks)]
    steps = []
    for step, phase, moves, _ in story.steps:
        steps.append({"step": step, "phase": phase,
                      "moves": [[m.transfer.src, m.transfer.dst, index[m.transfer.send.key], m.transfer.recv.bytes,
                                 1 if m.reduced else 0, prov_id(m.carried), prov_id(m.result),
                                 index[m.transfer.recv.key], origin_id(m.origin, m.transfer.recv.key)]
                                for m in moves]})
    shape = Shape(vals.coll, vals.nranks, vals.count, vals.esize, vals.root) if vals else infer_shape(coll, nranks)
    pos, shape_name = layout(coll, nranks)
    transports = sorted({e.transport for e in coll.events if e.kind != "reduce"})
    return {
        "coll": coll.coll, "algo": coll.algo, "seq": coll.seq, "nranks": nranks, "shape": shape_name,
        "reducing": coll.coll in REDUCING, "transport": ", ".join(transports),
        "pieces": [{"label": pcs.label[k], "chunk": k[0], "offset": o, "bytes": b, "space": pcs.span[k][2]}
                   for k, (o, b) in zip(keys, parts)],
        "pos": [[round(pos[r][0], 4), round(pos[r][1], 4)] for r in range(nranks)],
        "provs": provs, "initial": initial, "origin": origin, "steps": steps,
        "totals": totals_for(coll, shape),
        "values": contributions(vals, sources) if vals else None,
        "dtype": vals.dtype if vals else None,
        "problems": story.problems,
    }


def page(data, title):
    try:
        with open(TEMPLATE, encoding="utf-8") as f:
            html = f.read()
    except OSError as exc:
        raise TraceError(f"cannot read the viewer's template {TEMPLATE}: {exc.strerror}") from None
    # "</" cannot end the script early once escaped.
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return html.replace("@TITLE@", title).replace("@DATA@", blob)


def write(trace_path, out_path, seq=None, values_path=None):
    """Writes the page; returns its size in bytes."""
    trace = load(trace_path)
    vals = Values(values_path) if values_path else None
    coll = trace.collective(coll=vals.coll if vals and seq is None else None, seq=seq)
    if not coll.transfers:
        raise TraceError(f"{trace_path}: the {coll.coll} #{coll.seq} moved no data between ranks: nothing to show")
    data = payload(trace, coll, vals)
    title = f"libccl {coll.algo} {coll.coll} on {data['nranks']} ranks"
    text = page(data, title)
    try:
        with open(out_path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise TraceError(f"cannot write {out_path}: {exc.strerror}") from None
    return len(text.encode("utf-8"))


def main(args):
    size = write(args.trace, args.output, args.seq, args.values)
    print(f"wrote {args.output} ({size} bytes): open it in a browser; arrow keys step, space plays")
    return 0
