"""`ccl-trace render`: a trace as an SVG picture.

Ranks are horizontal lanes (in ring order), steps are columns (or real time
with --time). Every transfer is one arrow, <path class="transfer">, from the
sender's lane to the receiver's, coloured by the chunk it carries; a filled
circle with a plus at the arrow's end marks a reduction. Between the step
columns a row of small boxes per lane shows which chunks the rank holds:
fill strength is the share of ranks summed into its copy.
"""

from xml.sax.saxutils import escape

from .formulas import ring_neighbours
from .provenance import REDUCING, replay
from .tracefile import TraceError, load

COLOURS = ("#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#ff9da7",
           "#9c755f", "#5f5f5f")


def num(x):
    """Short coordinates keep the file small: 12.0 -> 12, 12.25 -> 12.2."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


# Boxes use classes: k<chunk> for the colour, o<percent> for the share.
STYLE = ("text{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif}"
         ".h rect{stroke:#888;stroke-width:.6}"
         + "".join(f".k{i}{{fill:{c}}}" for i, c in enumerate(COLOURS)) + ".k{fill:white}")


def colour(chunk):
    return COLOURS[chunk % len(COLOURS)]


class Canvas:
    def __init__(self):
        self.parts = []
        self.styles = set()

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, size=12, anchor="start", weight="normal", fill="#222", extra=""):
        attrs = (f" text-anchor='{anchor}'" if anchor != "start" else "") + \
            (f" font-weight='{weight}'" if weight != "normal" else "") + (f" {extra}" if extra else "")
        self.add(f"<text x='{num(x)}' y='{num(y)}' font-size='{size}' fill='{fill}'{attrs}>{escape(str(s))}</text>")

    def svg(self, width, height, title):
        head = (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
                f"viewBox='0 0 {width:.0f} {height:.0f}'>\n<title>{escape(title)}</title>\n"
                f"<style>{STYLE}{''.join(sorted(self.styles))}</style>\n")
        return head + "\n".join(self.parts) + "\n</svg>\n"


def lane_order(coll, nranks):
    """Ring order from rank 0; a chain's lanes start where the chain does."""
    nxt, _ = ring_neighbours(coll)
    starts = sorted(set(nxt) - set(nxt.values()))
    order, r = [], starts[0] if starts else 0
    while r not in order and r is not None:
        order.append(r)
        r = nxt.get(r)
    return order + [r for r in range(nranks) if r not in order]


def arrow_defs(c, chunks):
    c.add("<defs>")
    for ch in chunks:
        c.add(f"<marker id='head{ch}' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='4.5' markerHeight='4.5' "
              f"orient='auto-start-reverse'><path d='M0,0 L10,5 L0,10 z' fill='{colour(ch)}'/></marker>")
    c.add("<marker id='headgrey' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='4.5' markerHeight='4.5' "
          "orient='auto-start-reverse'><path d='M0,0 L10,5 L0,10 z' fill='#777'/></marker>")
    c.add("</defs>")


def reduce_mark(c, x, y, ch):
    c.add(f"<g class='reduce'><circle cx='{num(x)}' cy='{num(y)}' r='7' fill='{colour(ch)}' stroke='#222' "
          f"stroke-width='1'/><path d='M{num(x - 4)},{num(y)} H{num(x + 4)} M{num(x)},{num(y - 4)} V{num(y + 4)}' "
          f"stroke='white' stroke-width='2'/></g>")


def transfer_path(c, t, x0, y0, x1, y1, wrap, top, bottom, labels):
    """One path per transfer. An arrow that closes the ring (last lane to
    first) leaves through the bottom edge and comes back in at the top, as
    if the lanes were drawn on a cylinder, instead of crossing every lane."""
    ch = t.send.chunk
    if wrap:
        xm = (x0 + x1) / 2
        d = f"M{num(x0)},{num(y0)} L{num(xm)},{num(bottom)} M{num(xm)},{num(top)} L{num(x1)},{num(y1)}"
        dash = " stroke-dasharray='6,3'"
    else:
        d = f"M{num(x0)},{num(y0)} L{num(x1)},{num(y1)}"
        dash = ""
    info = (f"r{t.src} -> r{t.dst}: c{t.send.chunk} round {t.send.round}, {t.send.bytes} bytes, step {t.step}"
            + (", reduced" if t.reduce else ""))
    c.add(f"<path class='transfer' d='{d}' fill='none' stroke='{colour(ch)}' stroke-width='2.5'{dash} "
          f"marker-end='url(#head{ch})'><title>{escape(info)}</title></path>")
    if not labels:
        return
    lx, ly = x0 + (x1 - x0) * 0.22, y0 + ((bottom if wrap else y1) - y0) * 0.22
    c.text(lx + 4, ly - 3, f"c{ch}", size=11, weight="bold", fill=colour(ch),
           extra="stroke='white' stroke-width='3' paint-order='stroke'")


def holdings(c, x, y, held, keys_of, nranks, reducing, box):
    """A row of boxes, one per chunk, filled by the share of ranks summed
    into the rank's copy (the least complete slice, if several)."""
    chunks = sorted(keys_of)
    row = [f"<g class='h' transform='translate({num(x - box * len(chunks) / 2)},"
           f"{num(y - box / 2)})'>"]
    for i, ch in enumerate(chunks):
        shares = [len(set(held.get(k, ()))) / nranks if reducing else float(bool(held.get(k))) for k in keys_of[ch]]
        share = min(shares)
        cls = "k"
        if share > 0:
            pct = round(15 + 85 * share)
            c.styles.add(f".o{pct}{{fill-opacity:{pct / 100:g}}}")
            cls = f"k{ch % len(COLOURS)} o{pct}"
        row.append(f"<rect x='{i * box}' width='{box - 1}' height='{box - 1}' class='{cls}'/>")
    c.add("".join(row) + "</g>")


MAX_ROW_WIDTH = 1500


class Layout:
    """Sizes that depend on the number of ranks and chunks."""

    def __init__(self, n, chunks):
        self.n = n
        self.lane_h = 64 if n <= 4 else 50
        self.left = 78
        self.box = 11 if len(chunks) <= 8 else max(4, 88 // len(chunks))
        self.gap = self.box * len(chunks) + 16
        self.col_w = self.gap + (110 if n <= 4 else 78)
        self.head = 92  # title of a row: phase bracket and step numbers


def step_rows(coll, steps, lay):
    """Steps per row: all in one row when it fits, else a row per phase
    (cut further when one phase alone is too wide)."""
    if lay.left + lay.col_w * len(steps) + lay.gap <= MAX_ROW_WIDTH:
        return [steps]
    per_row = max(1, (MAX_ROW_WIDTH - lay.left - lay.gap) // lay.col_w)
    rows, cur = [], []
    for s in steps:
        if cur and (coll.phase_of_step(s) != coll.phase_of_step(cur[-1]) or len(cur) == per_row):
            rows.append(cur)
            cur = []
        cur.append(s)
    return rows + [cur]


def draw_lanes(c, lay, lanes, top, width):
    ylane = {}
    for i, r in enumerate(lanes):
        y = top + lay.lane_h * i + lay.lane_h / 2
        ylane[r] = y
        band = "#f4f6f8" if i % 2 == 0 else "#ffffff"
        c.add(f"<rect x='0' y='{num(y - lay.lane_h / 2)}' width='{width:.0f}' height='{lay.lane_h}' fill='{band}'/>")
        c.add(f"<line x1='{lay.left}' y1='{num(y)}' x2='{width - 10:.0f}' y2='{num(y)}' stroke='#bbb'/>")
        c.text(12, y + 5, f"rank {r}", size=13, weight="bold")
    return ylane


def draw_phase_spans(c, spans, top):
    """Brackets over the columns; in real time phases overlap (the pipeline),
    so an overlapping bracket goes one level up."""
    prev_end = None
    level = 0
    for name, x0, x1 in spans:
        level = 1 - level if prev_end is not None and x0 < prev_end else 0
        y = top - 16 * level
        prev_end = x1
        c.add(f"<path d='M{num(x0)},{num(y - 30)} V{num(y - 24)} H{num(x1)} V{num(y - 30)}' fill='none' "
              "stroke='#444'/>")
        c.text((x0 + x1) / 2, y - 36, name, size=13, anchor="middle", weight="bold", fill="#333")


def draw_transfer(c, coll, t, x0, x1, ylane, lanes, top, bottom, labels=True):
    wrap = coll.algo == "ring" and t.src == lanes[-1] and t.dst == lanes[0] and len(lanes) > 2
    transfer_path(c, t, x0, ylane[t.src], x1, ylane[t.dst], wrap, top, bottom, labels)
    if wrap and labels:
        xm = (x0 + x1) / 2
        c.text(xm, bottom + 11, f"to r{t.dst}", size=9, anchor="middle", fill="#666")
        c.text(xm, top - 4, f"from r{t.src}", size=9, anchor="middle", fill="#666")
    if t.reduce is not None:
        reduce_mark(c, x1, ylane[t.dst], t.recv.chunk)


def render_steps(c, coll, story, lanes, lay, chunks, y):
    """Step columns, in one or more rows; returns the height used."""
    steps = coll.steps
    snapshots = [story.initial] + [h for _, _, _, h in story.steps]
    reducing = coll.coll in REDUCING
    keys_of = {}
    for e in coll.events:
        keys_of.setdefault(e.chunk, set()).add(e.key)
    rounds_of = {}
    for t in coll.transfers:
        rounds_of.setdefault(t.step, set()).add(t.send.round)
    width = 0
    for row in step_rows(coll, steps, lay):
        top = y + lay.head
        bottom = top + lay.lane_h * len(lanes)
        row_w = lay.left + lay.col_w * len(row) + lay.gap + 30
        width = max(width, row_w)
        ylane = draw_lanes(c, lay, lanes, top, row_w)
        bx = lambda k: lay.left + lay.gap / 2 + 10 + k * lay.col_w  # noqa: E731 (boundary before column k)
        spans = []
        for k, s in enumerate(row):
            c.text((bx(k) + bx(k + 1)) / 2, top - 20, f"step {s}", size=11, anchor="middle", fill="#555")
            name = coll.phase_of_step(s)
            if spans and spans[-1][0] == name:
                spans[-1][2] = bx(k + 1) - lay.gap / 2
            else:
                spans.append([name, bx(k) + lay.gap / 2, bx(k + 1) - lay.gap / 2])
        draw_phase_spans(c, spans, top - 8)
        first = steps.index(row[0])
        for k in range(len(row) + 1):
            for r in lanes:
                holdings(c, bx(k), ylane[r], snapshots[first + k][r], keys_of, lay.n, reducing, lay.box)
        for t in coll.transfers:
            if t.step not in row:
                continue
            k = row.index(t.step)
            rounds = sorted(rounds_of[t.step])
            # several rounds in one step: side by side, each a little shorter
            i, d = rounds.index(t.send.round), (lay.col_w - lay.gap) * 0.5 / len(rounds)
            x0 = bx(k) + lay.gap / 2 + 2 + i * d
            x1 = bx(k + 1) - lay.gap / 2 - 2 - (len(rounds) - 1 - i) * d
            draw_transfer(c, coll, t, x0, x1, ylane, lanes, top, bottom)
        y = bottom + 26
    return y, width


def render_time(c, coll, lanes, lay, y):
    t0 = min(e.ts for e in coll.events)
    span = max(max(e.end for e in coll.events) - t0, 1e-3)
    plot_w = max(700.0, 95.0 * len(coll.steps))
    xt = lambda ts: lay.left + 20 + (ts - t0) / span * plot_w  # noqa: E731
    width = lay.left + plot_w + 60
    top = y + lay.head
    bottom = top + lay.lane_h * len(lanes)
    ylane = draw_lanes(c, lay, lanes, top, width)
    draw_phase_spans(c, phases_by_time(coll, xt), top + 8)
    # where the time went: sends above the lane, receives below, reductions on it
    for e in coll.events:
        dy = {"send": -9, "recv": 3, "reduce": -3}[e.kind]
        w = max(xt(e.end) - xt(e.ts), 1.0)
        tip = escape(f"r{e.rank} {e.kind} c{e.chunk}: {e.dur} us")
        c.add(f"<rect class='{e.kind}' x='{num(xt(e.ts))}' y='{num(ylane[e.rank] + dy)}' width='{num(w)}' height='6' "
              f"fill='{colour(e.chunk)}' fill-opacity='0.35'><title>{tip}</title></rect>")
    for t in coll.transfers:
        draw_transfer(c, coll, t, xt(t.send.ts + t.send.dur / 2), xt(t.recv.end), ylane, lanes, top, bottom,
                      labels=False)
    draw_time_axis(c, t0, span, xt, bottom + 16)
    return bottom + 60, width


def render(trace, seq=None, by_time=False):
    coll = trace.collective(seq=seq)
    if not coll.transfers:
        raise TraceError(f"{trace.path}: collective {coll.coll} #{coll.seq} has no matched transfers to draw")
    n = max(trace.nranks, 1 + max(coll.ranks))
    story = replay(coll, n)
    lanes = lane_order(coll, n)
    chunks = sorted({e.chunk for e in coll.events})
    lay = Layout(n, chunks)
    c = Canvas()
    background = len(c.parts)
    arrow_defs(c, chunks)
    total = sum(t.send.bytes for t in coll.transfers)
    title = (f"{coll.algo} {coll.coll} on {n} ranks (call #{coll.seq}): {len(coll.transfers)} transfers, "
             f"{total} bytes moved")
    c.text(lay.left, 24, title, size=16, weight="bold")
    if by_time:
        y, width = render_time(c, coll, lanes, lay, 10)
    else:
        y, width = render_steps(c, coll, story, lanes, lay, chunks, 10)
    wraps = (lanes[-1], lanes[0]) if coll.algo == "ring" and n > 2 else None
    width = max(width, 930 if wraps else 800)
    legend(c, lay.left, y + 14, chunks, by_time, wraps, any(t.reduce for t in coll.transfers))
    height = y + 92
    c.parts.insert(background, f"<rect width='{width:.0f}' height='{height:.0f}' fill='white'/>")
    return c.svg(width, height, title)


def phases_by_time(coll, xt):
    spans = {}
    for e in coll.events:
        lo, hi = spans.get(e.phase, (e.ts, e.end))
        spans[e.phase] = (min(lo, e.ts), max(hi, e.end))
    return [[name, xt(lo), xt(hi)] for name, (lo, hi) in sorted(spans.items(), key=lambda kv: kv[1][0])]


def draw_time_axis(c, t0, span, xt, y):
    c.add(f"<line x1='{num(xt(t0))}' y1='{num(y + 6)}' x2='{num(xt(t0 + span))}' y2='{num(y + 6)}' stroke='#444'/>")
    step = 10 ** len(str(int(span / 5))) / 10 if span >= 5 else 1
    while span / step > 10:
        step *= 2
    tick = 0.0
    while tick <= span + 1e-9:
        x = xt(t0 + tick)
        c.add(f"<line x1='{num(x)}' y1='{num(y + 2)}' x2='{num(x)}' y2='{num(y + 10)}' stroke='#444'/>")
        c.text(x, y + 22, f"{tick:g} us", size=10, anchor="middle", fill="#444")
        tick += step


def legend(c, x, y, chunks, by_time, wraps, reductions):
    c.text(x, y + 4, "chunks:", size=12, weight="bold")
    for i, ch in enumerate(chunks[:16]):
        cx = x + 58 + i * 46
        c.add(f"<line x1='{num(cx)}' y1='{num(y)}' x2='{num(cx + 22)}' y2='{num(y)}' stroke='{colour(ch)}' "
              f"stroke-width='2.5' marker-end='url(#head{ch})'/>")
        c.text(cx + 26, y + 4, f"c{ch}", size=11)
    y += 22
    cx = x
    if reductions:
        reduce_mark(c, cx + 6, y, chunks[0])
        c.text(cx + 18, y + 4, "received and added to the receiver's own copy", size=11)
        cx += 300
    c.add(f"<line x1='{num(cx)}' y1='{num(y)}' x2='{num(cx + 26)}' y2='{num(y)}' stroke='#777' stroke-width='2.5' "
          "marker-end='url(#headgrey)'/>")
    c.text(cx + 32, y + 4, "arrow alone: received and stored", size=11)
    if wraps:
        cx += 230
        c.add(f"<line x1='{num(cx)}' y1='{num(y)}' x2='{num(cx + 26)}' y2='{num(y)}' stroke='#777' "
              "stroke-width='2.5' stroke-dasharray='6,3' marker-end='url(#headgrey)'/>")
        c.text(cx + 32, y + 4, f"dashed: rank {wraps[0]} to rank {wraps[1]}, round the back", size=11)
    if by_time:
        y += 22
        c.add(f"<rect x='{num(x)}' y='{num(y - 6)}' width='24' height='6' fill='{colour(chunks[0])}' "
              "fill-opacity='0.35'/>")
        c.text(x + 30, y + 1, "bars: time each rank spent sending (above its line), receiving (below) and "
               "reducing (on it); arrows run from mid-send to the end of the receive", size=11)
    else:
        y += 22
        for i, opacity in enumerate((1.0, 0.45, None)):
            fill = f"fill='{colour(chunks[0])}' fill-opacity='{opacity}'" if opacity else "fill='white'"
            c.add(f"<rect x='{num(x + i * 11)}' y='{num(y - 6)}' width='10' height='10' {fill} stroke='#888' "
                  "stroke-width='0.6'/>")
        c.text(x + 40, y + 4, "boxes between steps: the chunks c0, c1, ... a rank holds; full colour: complete, "
               "pale: a partial sum, white: not held", size=11)


def main(args):
    trace = load(args.trace)
    svg = render(trace, seq=args.seq, by_time=args.time)
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(svg)
    except OSError as exc:
        raise TraceError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    return 0
