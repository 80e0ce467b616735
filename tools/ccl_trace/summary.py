"""`ccl-trace summary`: the numbers for someone debugging a slow run: bytes
and time per rank and per peer, and the slowest steps."""

import sys
from collections import defaultdict

from .tracefile import load


def us(x):
    return f"{x:,.1f}"


def per_rank(trace):
    rows = defaultdict(lambda: {"sent": 0, "received": 0, "send": 0.0, "recv": 0.0, "reduce": 0.0,
                                "first": None, "last": None})
    for e in trace.events:
        row = rows[e.rank]
        if e.kind == "send":
            row["sent"] += e.bytes
        elif e.kind == "recv":
            row["received"] += e.bytes
        row[e.kind] += e.dur
        row["first"] = e.ts if row["first"] is None else min(row["first"], e.ts)
        row["last"] = e.end if row["last"] is None else max(row["last"], e.end)
    return rows


def per_peer(trace):
    """(rank, direction, peer) -> [bytes, slots, total us, longest us]."""
    links = defaultdict(lambda: [0, 0, 0.0, 0.0])
    for e in trace.events:
        if e.kind == "reduce":
            continue
        link = links[(e.rank, "->" if e.kind == "send" else "<-", e.peer)]
        link[0] += e.bytes
        link[1] += 1
        link[2] += e.dur
        link[3] = max(link[3], e.dur)
    return links


def step_times(trace):
    """(coll, seq, step, rank) -> (wall time from its first to last event, events)."""
    groups = defaultdict(list)
    for e in trace.events:
        groups[(e.coll, e.seq, e.step, e.rank)].append(e)
    return {k: (max(e.end for e in evs) - min(e.ts for e in evs), evs) for k, evs in groups.items()}


def by_kind(trace, calls):
    """(coll, algo, buffer bytes) -> [calls, bytes sent, rank-calls]. A call's
    buffer is the extent its data covers (offsets run over the full buffer:
    recvbuf for all_reduce and all_gather, sendbuf for reduce_scatter); each
    point-to-point message counts as one call."""
    rows = defaultdict(lambda: [0, 0, 0])
    for c in calls:
        moves = [e for e in c.events if e.kind in ("send", "recv")]
        if not moves:
            continue
        if c.coll == "send/recv":
            messages = defaultdict(int)
            for e in moves:
                if e.kind == "send":
                    messages[(e.rank, e.peer)] += e.bytes
            for nbytes in messages.values():
                row = rows[(c.coll, c.algo, nbytes)]
                row[0] += 1
                row[1] += nbytes
                row[2] += 1
            continue
        row = rows[(c.coll, c.algo, max(e.offset + e.bytes for e in moves))]
        row[0] += 1
        row[1] += sum(e.bytes for e in moves if e.kind == "send")
        row[2] += len(c.ranks)
    return rows


# Past this many calls the per-call list is cut short (the table by
# collective still counts them all).
LISTED_CALLS = 12


def summary(trace, out=sys.stdout):
    calls = trace.collectives()
    print(f"{trace.path}: {trace.nranks} ranks, {len(trace.events)} chunk events, "
          f"{len(calls)} collective call(s)" + (f", {trace.dropped} events DROPPED" if trace.dropped else ""),
          file=out)
    print("By collective (buffer: the extent of the call's full buffer; sent: what one rank sent in one call, "
          "on average)", file=out)
    for (coll, algo, nbytes), (n, sent, rank_calls) in sorted(by_kind(trace, calls).items()):
        what = "message" if coll == "send/recv" else "call"
        line = f"  {coll:<15}{algo:<9}{nbytes:>12,} B x {n:<6} {what}{'s' if n != 1 else ' '}"
        if coll != "send/recv":
            per = sent / rank_calls
            line += f"   sent {per:>12,.0f} B ({per / nbytes if nbytes else 0:.2f}x the buffer)"
        print(line, file=out)
    print("Calls", file=out)
    for c in calls[:LISTED_CALLS]:
        moved = sum(t.send.bytes for t in c.transfers)
        print(f"  {c.coll} #{c.seq}: {c.algo}, {len(c.steps)} steps, {len(c.transfers)} transfers, "
              f"{moved} bytes", file=out)
    if len(calls) > LISTED_CALLS:
        print(f"  ... and {len(calls) - LISTED_CALLS} more", file=out)
    offsets = trace.other.get("clock_offsets_us")
    if offsets:
        print("  clock offsets to rank 0's bootstrap root (us): " + " ".join(f"{o:g}" for o in offsets), file=out)
    problems = trace.flow_problems()
    for c in calls:
        problems += [f"{e.kind} on rank {e.rank} ({c.coll} #{c.seq} step {e.step}) has no other side"
                     for e in c.unmatched]
    print("\nPer rank (time: summed event durations, us; a receive includes waiting for the data)", file=out)
    print(f"  {'rank':<6}{'sent B':>12}{'recv B':>12}{'send us':>12}{'recv us':>12}{'reduce us':>12}"
          f"{'span us':>12}", file=out)
    for r, row in sorted(per_rank(trace).items()):
        span = row["last"] - row["first"]
        print(f"  r{r:<5}{row['sent']:>12}{row['received']:>12}{us(row['send']):>12}{us(row['recv']):>12}"
              f"{us(row['reduce']):>12}{us(span):>12}", file=out)
    print("\nPer peer", file=out)
    for (rank, way, peer), (nbytes, slots, total, longest) in sorted(per_peer(trace).items()):
        what = "sending" if way == "->" else "receiving"
        print(f"  r{rank} {way} r{peer}: {nbytes} B in {slots} slots, {us(total)} us {what} "
              f"(longest {us(longest)} us)", file=out)
    times = step_times(trace)
    ranked = sorted(times.items(), key=lambda kv: -kv[1][0])
    print("\nSlowest steps (wall time on one rank from its first to its last event of the step)", file=out)
    for (coll, seq, step, rank), (t, evs) in ranked[:5]:
        worst = max(evs, key=lambda e: e.dur)
        way = {"send": "to", "recv": "from", "reduce": "from"}[worst.kind]
        print(f"  {coll} #{seq} step {step} on r{rank}: {us(t)} us; longest: {worst.kind} c{worst.chunk} "
              f"{way} r{worst.peer}, {us(worst.dur)} us", file=out)
    if ranked:
        (coll, seq, step, rank), (t, evs) = ranked[0]
        print(f"The slowest step is {coll} #{seq} step {step}, on rank {rank} ({us(t)} us).", file=out)
        print("A long receive means its sender was late: look at the sender's previous step; a long send "
              "means the receiver had not freed a slot yet.", file=out)
    for p in problems:
        print(f"problem: {p}", file=out)
    return 0


def main(args):
    return summary(load(args.trace))
