"""`ccl-trace explain`: run one collective for real, then tell its story
step by step from the trace: who sent which chunk where, who added what,
and what every copy of every chunk is made of, with the actual values."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from . import formulas
from .provenance import names, replay, short_names
from .tracefile import TraceError, load
from .values import Values

COLLS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")
# What each algorithm can be explained for: where libccl runs it and its
# trace labels every piece of the buffer alike from step to step.
ALGOS = {
    "ring": COLLS,
    "tree": ("all_reduce", "broadcast", "reduce"),
    "rd": ("all_reduce",),
    "direct": COLLS,
}

# Per algorithm (the trace's label: broadcast and reduce on the ring are a
# chain), then per phase.
ALGO_PHASE_TEXT = {
    "tree": {
        "reduce": ("Partial sums climb the tree one level per step: a rank adds what each child sends to its "
                   "own data (its own first, then the children) and passes the sum to its parent. The root "
                   "ends with the sum over all ranks."),
        "broadcast": ("The result goes down the tree one level per step: each rank stores what its parent "
                      "sends and forwards it to its children (no arithmetic)."),
        "reduce-2": ("The buffer is halved and each half climbs its own binary tree (c0 tree 0, c1 tree 1) at "
                     "the same time, one level per step: a rank adds what each child sends to its own data "
                     "and passes the sum to its parent, so each tree's root ends with its half summed over "
                     "all ranks. The second tree is the first shifted or mirrored, so that a rank that works "
                     "as an inner node of one is a leaf of the other and both trees' links share the load."),
        "broadcast-2": ("Each tree's root sends its finished half back down its tree, one level per step: each "
                        "rank stores what its parent sends and forwards it to its children."),
    },
    "rd": {
        "reduce": ("In each step every rank taking part swaps its whole buffer with its partner, the rank "
                   "whose number (among the P taking part) differs in one bit, and both add the two: after "
                   "log2(P) steps every one of them holds the sum over all ranks, in log2(P) steps instead "
                   "of the ring's 2(N-1), moving the whole buffer each time. When N is not a power of two, "
                   "the first 2R ranks pair up before that (step 0): the even one hands its data to the odd "
                   "one, which adds it and takes part for both."),
        "broadcast": "The ranks that sat out get the finished result back from their partner.",
    },
    "direct": {
        "reduce": ("Every rank has put its input in its shared window. Nothing travels hop by hop: every rank "
                   "that wants the result reads every peer's window in place and adds the inputs up itself, "
                   "in rank order, so every copy of the result has the same bits. One step."),
        "reduce-scatter": ("Every rank reads its own slice of every peer's input straight from the peer's "
                           "window and adds them up, in rank order: rank q ends up owning slice q summed over "
                           "all ranks."),
        "all-gather": ("Every rank copies the pieces it lacks (each finished slice, or each rank's block) "
                       "straight out of their owners' windows."),
        "broadcast": "Every rank copies the root's buffer straight out of the root's window: one step.",
    },
}

PHASE_TEXT = {
    "reduce-scatter": ("In each step every rank sends one chunk to the next rank on the ring, which adds its "
                       "own copy of that chunk; the sum travels on in the next step. After N-1 steps every "
                       "chunk has passed every rank once, so each rank holds one chunk summed over all ranks. "
                       "The ingredients below are listed in the order they were added: every run adds them "
                       "in the same order, so every run gives the same bits."),
    "all-gather": ("Now the finished chunks travel round the ring: each rank forwards the complete chunk it "
                   "finished or last got, and the receiver simply stores it (no arithmetic). After N-1 steps "
                   "every rank holds every complete chunk."),
    "all-gather-only": ("Each rank starts with its own chunk. In every step each rank forwards the chunk it "
                        "got last (its own, first) to the next rank on the ring, which stores it. After N-1 "
                        "steps every rank holds every chunk."),
    "broadcast": ("The root's buffer travels down a chain along the ring: each rank stores what it gets "
                  "and forwards it to the next."),
    "reduce": ("Partial sums travel down a chain along the ring that ends at the root: each rank adds its "
               "own data to what it gets and forwards the sum."),
}


def find_runner(script_dir):
    """CCL_TRACE_RUN, else next to the script, else a build tree beside the
    source tree (newest first), else PATH."""
    env = os.environ.get("CCL_TRACE_RUN")
    if env:
        return env
    here = os.path.join(script_dir, "ccl_trace_run")
    if os.access(here, os.X_OK):
        return here
    root = os.path.dirname(script_dir)
    builds = []
    try:
        for d in os.listdir(root):
            cand = os.path.join(root, d, "tools", "ccl_trace_run")
            if d.startswith("build") and os.access(cand, os.X_OK):
                builds.append((os.path.getmtime(cand), cand))
    except OSError:
        pass
    if builds:
        return max(builds)[1]
    return shutil.which("ccl_trace_run")


def run(args, script_dir, workdir):
    runner = find_runner(script_dir)
    if not runner:
        raise TraceError("cannot find ccl_trace_run: build the tools (target ccl_trace_run) "
                         "or point CCL_TRACE_RUN at it")
    trace, values = os.path.join(workdir, "trace.json"), os.path.join(workdir, "values.txt")
    cmd = [runner, "--ranks", str(args.ranks), "--count", str(args.count), "--coll", args.collective,
           "--out", trace, "--values", values, "--root", str(args.root)]
    if args.transport:
        cmd += ["--transport", args.transport]
    # Forced for the explained collective only (CCL_ALGO's per-collective form).
    env = dict(os.environ, CCL_ALGO=f"{args.collective.replace('_', '')}:{args.algo}")
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise TraceError(f"{' '.join(cmd)} failed (status {proc.returncode}):\n{proc.stdout.rstrip()}")
    return trace, values


def piece_label(key, multi_round):
    chunk, rnd = key
    return f"c{chunk}.{rnd}" if multi_round else f"c{chunk}"


def byte_range(ev):
    return f"bytes {ev.offset}-{ev.offset + ev.bytes - 1}"


def pieces(coll):
    """Every piece of the buffer: key -> (offset, bytes)."""
    out = {}
    for e in coll.events:
        out.setdefault(e.key, (e.offset, e.bytes))
    return dict(sorted(out.items(), key=lambda kv: kv[1][0]))


def several_rounds(parts):
    """Whether some chunk moves in more than one slice (labels then say which)."""
    rounds = {}
    for chunk, rnd in parts:
        rounds.setdefault(chunk, set()).add(rnd)
    return any(len(r) > 1 for r in rounds.values())


def show_inputs(out, vals, parts, multi):
    print("Inputs, as the run filled them:", file=out)
    if vals.pattern == "digits":
        print("  rank r's element i is (i mod 9 + 1) x 10^r, so decimal digit r of any sum is non-zero", file=out)
        print("  exactly when rank r's data is in it (element 0 of r0+r2 is 101, element 1 is 202).", file=out)
    else:
        print("  rank r's element i is (r+1) x 1000 + (i mod 1000).", file=out)
    for r in range(vals.nranks):
        if r not in vals.inputs:
            print(f"  r{r}: (no input)", file=out)
            continue
        cells = []
        for key, (off, nb) in parts.items():
            if vals.contribution(r, off // vals.esize) is not None:
                cells.append(f"{piece_label(key, multi)}={vals.piece((r,), off, nb)}")
        print(f"  r{r}: " + "  ".join(cells), file=out)


def show_grid(out, story, held, parts, multi):
    n = story.nranks
    labels = [piece_label(k, multi) for k in parts]
    cells = [[short_names(held[r].get(k, ()), n) for k in parts] for r in range(n)]
    width = max([len(x) for row in cells for x in row] + [len(x) for x in labels]) + 2
    print("       " + "".join(x.ljust(width) for x in labels).rstrip(), file=out)
    for r in range(n):
        print(f"    r{r}".ljust(7) + "".join(x.ljust(width) for x in cells[r]).rstrip(), file=out)


def show_step(out, vals, step, phase, moves, steps_of_phase, multi):
    pos = steps_of_phase.index(step) + 1
    print(f"Step {step}  ({phase}, {pos} of {len(steps_of_phase)})", file=out)
    rows = []
    for m in moves:
        s, r = m.transfer.send, m.transfer.recv
        what = piece_label(s.key, multi)
        left = f"r{s.rank} sends {what} ({byte_range(s)}) to r{r.rank},"
        verb = f"which adds its own {what}" if m.reduced else "which stores it"
        rows.append((left, verb, f"{what} = {names(m.result)}", vals.piece(m.result, r.offset, r.bytes)))
    w = [max(len(row[i]) for row in rows) for i in range(3)]
    for left, verb, prov, val in rows:
        print(f"  {left.ljust(w[0])} {verb.ljust(w[1])}: {prov.ljust(w[2])} = {val}", file=out)


def result_rows(vals, story, parts, multi):
    """Per rank with an output: (rank, values from the replay, values the run produced)."""
    rows = []
    for r in range(vals.nranks):
        if r not in vals.outputs:
            continue
        replayed = []
        for key, (off, nb) in parts.items():
            prov = story.final[r].get(key, ())
            for i in vals.elements(off, nb):
                replayed.append((i, vals.value(prov, i)))
        if vals.coll == "reduce_scatter":  # the output is the rank's own block
            lo = r * vals.count
            replayed = [(i - lo, v) for i, v in replayed if lo <= i < lo + vals.count]
        got = [v for _, v in sorted(replayed)]
        rows.append((r, got, vals.outputs[r]))
    return rows


def para(out, text):
    print(textwrap.fill(text, width=100), file=out)


def edges(coll, key=None):
    """'r1->r2, r3->r2' for the transfers of the first phase (of one piece)."""
    first = coll.transfers[0].send.phase if coll.transfers else None
    seen = []
    for t in coll.transfers:
        if t.send.phase == first and (key is None or t.send.chunk == key) and (t.src, t.dst) not in seen:
            seen.append((t.src, t.dst))
    return ", ".join(f"r{a}->r{b}" for a, b in seen)


def show_structure(out, vals, coll, parts, multi):
    """How the ranks are wired, as this algorithm uses them."""
    algo = coll.algo
    if algo in ("ring", "chain"):
        order = formulas.ring_order(coll, start=chain_start(coll))
        ring = algo == "ring"
        print(("Ring: " if ring else "Chain: ") + " -> ".join(f"r{r}" for r in order)
              + (f" -> r{order[0]}" if ring else ""), file=out)
        print(f"The buffer is cut into {len(parts)} pieces; chunk cK is the part rank K ends up owning:" if ring
              else f"The buffer moves in {len(parts)} piece(s):", file=out)
    elif algo == "tree" and vals.coll == "all_reduce":
        for h in sorted({k[0] for k in parts}):
            print(f"Tree {h} (carries c{h}), child -> parent: {edges(coll, h)}", file=out)
        print("The buffer is halved: chunk c0 is the half tree 0 carries, c1 the half tree 1 carries:", file=out)
    elif algo == "tree":
        print(f"Binomial tree rooted at r{vals.root}, " + ("child -> parent: " if vals.coll == "reduce"
                                                           else "parent -> child: ") + edges(coll), file=out)
        print(f"The buffer moves in {len(parts)} piece(s):", file=out)
    elif algo == "rd":
        for step in coll.steps:
            pairs = sorted({tuple(sorted((t.src, t.dst))) for t in coll.transfers if t.step == step})
            print(f"Step {step} partners: " + ", ".join(f"r{a}<->r{b}" for a, b in pairs), file=out)
        print(f"The whole buffer moves in every exchange, as {len(parts)} piece(s):", file=out)
    else:
        print("One host: every rank publishes its data in a shared window and its peers read it there in "
              "place (the trace tells each read as a transfer from the window's owner).", file=out)
        print(f"The buffer moves in {len(parts)} piece(s):", file=out)
    print("  " + "   ".join(f"{piece_label(k, multi)} = bytes {o}-{o + b - 1}" for k, (o, b) in parts.items()),
          file=out)


def chain_start(coll):
    """The rank that only sends (a chain's start); 0 on a ring."""
    receivers = {t.dst for t in coll.transfers}
    starts = sorted({t.src for t in coll.transfers} - receivers)
    return starts[0] if starts else 0


def show_header(out, vals, coll, parts, multi):
    D = formulas.buffer_bytes(vals)
    print(f"A real {coll.algo} {vals.coll} on {vals.nranks} ranks, traced by libccl and replayed from the "
          f"trace.", file=out)
    transport = sorted({e.transport for e in coll.events if e.kind != "reduce"})
    op = ", op sum" if vals.coll in ("all_reduce", "reduce_scatter", "reduce") else ""
    print(f"count {vals.count} x {vals.dtype} (the whole buffer: D = {D} bytes){op}, "
          f"transport {', '.join(transport)}.", file=out)
    show_structure(out, vals, coll, parts, multi)
    print(file=out)


def phase_steps(story):
    """[(phase, [steps])] in order."""
    phases = []
    for step, phase, _, _ in story.steps:
        if not phases or phases[-1][0] != phase:
            phases.append((phase, []))
        phases[-1][1].append(step)
    return phases


def phase_text(algo, vals, phase, number):
    texts = ALGO_PHASE_TEXT.get(algo)
    if texts is None:  # the ring and its chain
        alone = phase == "all-gather" and number == 1
        return PHASE_TEXT.get("all-gather-only" if alone else phase, "")
    if algo == "tree" and vals.coll == "all_reduce":
        phase += "-2"
    return texts.get(phase, "")


def show_steps(out, vals, story, parts, multi):
    phases = phase_steps(story)
    for step, phase, moves, held in story.steps:
        number, steps = next((i + 1, s) for i, (p, s) in enumerate(phases) if p == phase and step in s)
        if step == steps[0]:
            print(f"\n== Phase {number}: {phase}, steps {steps[0]}-{steps[-1]} ==", file=out)
            para(out, phase_text(story.coll.algo, vals, phase, number))
        print(file=out)
        show_step(out, vals, step, phase, moves, steps, multi)
        if vals.nranks <= 4 or step == steps[-1]:
            print("  Who holds what now (each copy's ingredients, in the order they were added):", file=out)
            show_grid(out, story, held, parts, multi)


def show_result(out, vals, story, parts, multi):
    ok = True
    print("\n== Result ==", file=out)
    complete = all(sorted(story.final[r].get(k, ())) == list(range(vals.nranks))
                   for r in vals.outputs for k in parts)
    if vals.coll == "all_reduce" and complete:
        para(out, f"Every rank holds all {len(parts)} chunks, each the sum over all {vals.nranks} ranks:")
    elif vals.coll == "all_gather":
        para(out, f"Every rank holds all {len(parts)} chunks, chunk cK being rank K's input:")
    elif vals.coll == "reduce_scatter":
        para(out, "Each rank's output is its own chunk, summed over all ranks:")
    elif vals.coll == "broadcast":
        para(out, f"Every rank holds the root's (r{vals.root}'s) buffer:")
    elif vals.coll == "reduce":
        para(out, f"The root r{vals.root} holds the sum over all ranks:")
    for r, got, want in result_rows(vals, story, parts, multi):
        same = got == want
        ok &= same
        shown = " ".join(str(v) for v in want[:16]) + (" ..." if len(want) > 16 else "")
        print(f"  r{r}: {shown}   " + ("(the run's output; the replay agrees)" if same
                                        else f"(the replay predicts {got[:16]}: MISMATCH)"), file=out)
    return ok


def show_totals(out, vals, coll):
    t = formulas.totals(coll, vals, coll.algo)
    print(f"\n== Totals (N = {vals.nranks}, D = {t.D} bytes) ==", file=out)
    print(f"  expected per rank, each way: {t.formula}", file=out)
    print("  rank      sent  received   expected sent/received", file=out)
    for r in range(vals.nranks):
        mark = "ok" if (t.sent[r], t.received[r]) == (t.want_sent[r], t.want_received[r]) else "MISMATCH"
        want = f"{t.want_sent[r]}/{t.want_received[r]}"
        print(f"  r{r:<4}{t.sent[r]:>9}{t.received[r]:>10}   {want:<22} {mark}", file=out)
    print(f"  steps: {t.steps} traced, expected {t.steps_formula} = {t.want_steps}: "
          f"{'ok' if t.steps_ok else 'MISMATCH'}", file=out)
    print("Every traced total matches its formula." if t.ok else "The traced totals do NOT match the formulas.",
          file=out)
    return t.ok


def explain(trace_path, values_path, out=sys.stdout):
    """Prints the story; returns True when the traced totals match the
    formulas and the replayed values match the run's output."""
    vals = Values(values_path)
    trace = load(trace_path)
    coll = trace.collective(coll=vals.coll)
    if coll.algo not in set(ALGOS) | {"chain"}:  # the ring's broadcast and reduce run as a chain
        raise TraceError(f"{trace_path}: the {vals.coll} ran {coll.algo}, which explain cannot follow "
                         f"(it follows {', '.join(ALGOS)})")
    story = replay(coll, vals.nranks)
    parts = pieces(coll)
    multi = several_rounds(parts)
    show_header(out, vals, coll, parts, multi)
    show_inputs(out, vals, parts, multi)
    show_steps(out, vals, story, parts, multi)
    for p in story.problems:
        print(f"problem: {p}", file=out)
    ok = not story.problems
    ok &= show_result(out, vals, story, parts, multi)
    ok &= show_totals(out, vals, coll)
    if trace.dropped:
        print(f"warning: the trace dropped {trace.dropped} events (CCL_TRACE_MAX_EVENTS)", file=out)
        ok = False
    return ok


def main(args, script_dir):
    if args.collective not in COLLS:
        raise TraceError(f"unknown collective '{args.collective}' (one of: {', '.join(COLLS)})")
    if args.algo not in ALGOS:
        raise TraceError(f"explain follows --algo {', '.join(ALGOS)}; not '{args.algo}'")
    if args.collective not in ALGOS[args.algo]:
        raise TraceError(f"--algo {args.algo} is explained for {', '.join(ALGOS[args.algo])}, not {args.collective}")
    if args.ranks < 2:
        raise TraceError("--ranks must be at least 2: one rank moves no data")
    if args.count is None:
        args.count = 2 if args.collective in ("reduce_scatter", "all_gather") else 2 * args.ranks
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        trace, values = run(args, script_dir, args.keep)
        ok = explain(trace, values)
        print(f"\nKept {trace} and {values}: `ccl-trace render {trace} -o {args.algo}.svg` draws it; "
              "ui.perfetto.dev opens the trace.")
        return 0 if ok else 1
    with tempfile.TemporaryDirectory(prefix="ccl-trace-") as tmp:
        trace, values = run(args, script_dir, tmp)
        return 0 if explain(trace, values) else 1
