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
from .pieces import Pieces
from .provenance import names, replay, short_names
from .stories import ALGO_PHASE_TEXT, PHASE_TEXT
from .tracefile import TraceError, load
from .values import Values

RING_COLLS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")
COLLS = RING_COLLS + ("all_to_all",)
# What each algorithm is explained for: every collective libccl runs it
# for (besides barriers, which move no data).
ALGOS = {
    "ring": RING_COLLS,
    "tree": ("all_reduce", "broadcast", "reduce"),
    "rd": ("all_reduce",),
    "rhd": ("all_reduce",),
    "bruck": ("all_gather", "all_to_all"),
    "hier": ("all_reduce",),
    "pairwise": ("all_to_all",),
    "direct": COLLS,
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
    if args.ranks_per_host:
        cmd += ["--ranks-per-host", str(args.ranks_per_host)]
    # Forced for the explained collective only (CCL_ALGO's per-collective form).
    env = dict(os.environ, CCL_ALGO=f"{args.collective.replace('_', '')}:{args.algo}")
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise TraceError(f"{' '.join(cmd)} failed (status {proc.returncode}):\n{proc.stdout.rstrip()}")
    return trace, values


def byte_range(ev):
    return f"bytes {ev.offset}-{ev.offset + ev.bytes - 1}"


def show_inputs(out, vals, pcs):
    print("Inputs, as the run filled them:", file=out)
    if vals.pattern == "digits":
        print("  rank r's element i is (i mod 9 + 1) x 10^r, so decimal digit r of any sum is non-zero", file=out)
        print("  exactly when rank r's data is in it (element 0 of r0+r2 is 101, element 1 is 202).", file=out)
    else:
        print("  rank r's element i is (r+1) x 1000 + (i mod 1000).", file=out)
    if vals.coll == "all_to_all":  # blocks: in[q] is the one for rank q
        bb = vals.count * vals.esize
        inputs = [(f"in[{q}]", q * bb, bb) for q in range(vals.nranks)]
    else:
        inputs = [(pcs.label[k], *pcs.where(k)) for k in pcs.keys()]
    for r in range(vals.nranks):
        if r not in vals.inputs:
            print(f"  r{r}: (no input)", file=out)
            continue
        cells = [f"{label}={vals.piece((r,), off, nb)}" for label, off, nb in inputs
                 if vals.contribution(r, off // vals.esize) is not None]
        print(f"  r{r}: " + "  ".join(cells), file=out)


def show_grid(out, story, held, pcs):
    n = story.nranks
    keys = pcs.keys(with_input=False)
    labels = [pcs.label[k] for k in keys]
    cells = [[short_names(held[r].get(k, ()), n) for k in keys] for r in range(n)]
    width = max([len(x) for row in cells for x in row] + [len(x) for x in labels]) + 2
    print("       " + "".join(x.ljust(width) for x in labels).rstrip(), file=out)
    for r in range(n):
        print(f"    r{r}".ljust(7) + "".join(x.ljust(width) for x in cells[r]).rstrip(), file=out)


def show_step(out, vals, step, phase, moves, steps_of_phase, pcs):
    pos = steps_of_phase.index(step) + 1
    print(f"Step {step}  ({phase}, {pos} of {len(steps_of_phase)})", file=out)
    rows = []
    for m in moves:
        s, r = m.transfer.send, m.transfer.recv
        what, into = pcs.label[s.key], pcs.label[r.key]
        left = f"r{s.rank} sends {what} ({byte_range(s)}) to r{r.rank},"
        if m.reduced:
            verb = f"which adds its own {into}"
        else:
            verb = "which stores it" + (f" as {into}" if into != what else "")
        rows.append((left, verb, f"{into} = {names(m.result)}", vals.piece(m.result, m.origin, r.bytes)))
    w = [max(len(row[i]) for row in rows) for i in range(3)]
    for left, verb, prov, val in rows:
        print(f"  {left.ljust(w[0])} {verb.ljust(w[1])}: {prov.ljust(w[2])} = {val}", file=out)


def result_rows(vals, story):
    """Per rank with an output: (rank, values from the replay, values the run produced)."""
    pcs = Pieces(story.coll, vals.nranks)
    rows = []
    for r in range(vals.nranks):
        if r not in vals.outputs:
            continue
        replayed = []
        for key in pcs.keys(with_input=False):
            off, nb = pcs.where(key)
            prov = story.final[r].get(key, ())
            src = story.origin.get(r, {}).get(key, off) // vals.esize
            for j, i in enumerate(vals.elements(off, nb)):
                replayed.append((i, vals.value(prov, src + j)))
        if vals.coll == "reduce_scatter":  # the output is the rank's own block
            lo = r * vals.count
            replayed = [(i - lo, v) for i, v in replayed if lo <= i < lo + vals.count]
        if vals.coll == "all_to_all" and story.coll.algo == "bruck":
            replayed = bruck_rotation(vals, r, replayed)
        got = [v for _, v in sorted(replayed)]
        rows.append((r, got, vals.outputs[r]))
    return rows


def bruck_rotation(vals, r, work):
    """Bruck's all-to-all ends by copying block i of its work buffer to block
    r - i of the output; block 0, the one it keeps, never moves (its copy
    is the rank's own input block r)."""
    c, n = vals.count, vals.nranks
    have = dict(work)
    out = []
    for i in range(c * n):
        q, j = divmod(i, c)
        w = (r - q) % n
        out.append((i, have.get(w * c + j) if w else vals.value((r,), r * c + j)))
    return out


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


def partners(coll):
    """Per step, who exchanges with whom."""
    for step in coll.steps:
        pairs = sorted({tuple(sorted((t.src, t.dst))) for t in coll.transfers if t.step == step})
        yield step, ", ".join(f"r{a}<->r{b}" for a, b in pairs)


def show_structure(out, vals, coll, pcs):
    """How the ranks are wired, as this algorithm uses them."""
    algo = coll.algo
    n = len(pcs.span)
    if algo in ("ring", "chain"):
        order = formulas.ring_order(coll, start=chain_start(coll))
        ring = algo == "ring"
        print(("Ring: " if ring else "Chain: ") + " -> ".join(f"r{r}" for r in order)
              + (f" -> r{order[0]}" if ring else ""), file=out)
        print(f"The buffer is cut into {n} pieces; chunk cK is the part rank K ends up owning:" if ring
              else f"The buffer moves in {n} piece(s):", file=out)
    elif algo == "tree" and vals.coll == "all_reduce":
        for h in sorted({k[0] for k in pcs.span}):
            print(f"Tree {h} (carries c{h}), child -> parent: {edges(coll, h)}", file=out)
        print("The buffer is halved: chunk c0 is the half tree 0 carries, c1 the half tree 1 carries:", file=out)
    elif algo == "tree":
        print(f"Binomial tree rooted at r{vals.root}, " + ("child -> parent: " if vals.coll == "reduce"
                                                           else "parent -> child: ") + edges(coll), file=out)
        print(f"The buffer moves in {n} piece(s):", file=out)
    elif algo in ("rd", "rhd"):
        for step, pairs in partners(coll):
            print(f"Step {step} partners: {pairs}", file=out)
        print(f"The whole buffer moves in every exchange, as {n} piece(s):" if algo == "rd" else
              f"Each exchange moves a part of the buffer; the parts are cut into {n} pieces, at every place "
              "where some exchange starts or ends:", file=out)
    elif algo == "bruck":
        for step in coll.steps:
            pairs = sorted({(t.src, t.dst) for t in coll.transfers if t.step == step})
            print(f"Step {step} (distance {2 ** step}): " + ", ".join(f"r{a}->r{b}" for a, b in pairs), file=out)
        if vals.coll == "all_to_all":
            para(out, "Rank r's work buffer starts as its input rotated: block cK is its block for rank r + K "
                      "(c0, the block it keeps, never moves); at the end block cK goes to output block r - K.")
        else:
            print(f"Block cK is rank K's input; the buffer holds {n} pieces:", file=out)
    elif algo == "hier":
        hosts = formulas.hosts_of(coll, vals.nranks)
        print("Hosts (from which transfers stay inside one): " +
              "  ".join("{" + " ".join(f"r{r}" for r in h) + "}" for h in hosts), file=out)
        print(f"The buffer is cut into {n} pieces, at every place where some ring's block starts or ends:",
              file=out)
    elif vals.coll == "all_to_all":
        if algo == "pairwise":
            for step in coll.steps:
                pairs = sorted({(t.src, t.dst) for t in coll.transfers if t.step == step})
                print(f"Step {step}: " + ", ".join(f"r{a}->r{b}" for a, b in pairs), file=out)
        else:
            print("One host: every rank publishes its input in a shared window and every peer reads its own "
                  "block there (the trace tells each read as a transfer from the window's owner).", file=out)
        print(f"Each rank's input and output hold {vals.nranks} blocks of {vals.count} element(s):", file=out)
    else:
        print("One host: every rank publishes its data in a shared window and its peers read it there in "
              "place (the trace tells each read as a transfer from the window's owner).", file=out)
        print(f"The buffer moves in {n} piece(s):", file=out)
    line = ""
    for k, (o, b, _) in pcs.span.items():
        entry = f"{pcs.label[k]} = bytes {o}-{o + b - 1}"
        if line and len(line) + 3 + len(entry) > 98:
            print("  " + line, file=out)
            line = ""
        line += ("   " if line else "") + entry
    print("  " + line, file=out)


def chain_start(coll):
    """The rank that only sends (a chain's start); 0 on a ring."""
    receivers = {t.dst for t in coll.transfers}
    starts = sorted({t.src for t in coll.transfers} - receivers)
    return starts[0] if starts else 0


def show_header(out, vals, coll, pcs):
    D = formulas.buffer_bytes(vals)
    print(f"A real {coll.algo} {vals.coll} on {vals.nranks} ranks, traced by libccl and replayed from the "
          f"trace.", file=out)
    transport = sorted({e.transport for e in coll.events if e.kind != "reduce"})
    op = ", op sum" if vals.coll in ("all_reduce", "reduce_scatter", "reduce") else ""
    whole = "a rank's whole input" if vals.coll == "all_to_all" else "the whole buffer"
    print(f"count {vals.count} x {vals.dtype} ({whole}: D = {D} bytes){op}, "
          f"transport {', '.join(transport)}.", file=out)
    show_structure(out, vals, coll, pcs)
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


def show_steps(out, vals, story, pcs):
    phases = phase_steps(story)
    for step, phase, moves, held in story.steps:
        number, steps = next((i + 1, s) for i, (p, s) in enumerate(phases) if p == phase and step in s)
        if step == steps[0]:
            print(f"\n== Phase {number}: {phase}, steps {steps[0]}-{steps[-1]} ==", file=out)
            para(out, phase_text(story.coll.algo, vals, phase, number))
        print(file=out)
        show_step(out, vals, step, phase, moves, steps, pcs)
        if vals.nranks <= 4 or step == steps[-1]:
            print("  Who holds what now (each copy's ingredients, in the order they were added):", file=out)
            show_grid(out, story, held, pcs)


def show_result(out, vals, story, pcs):
    ok = True
    print("\n== Result ==", file=out)
    keys = pcs.keys(with_input=False)
    complete = all(sorted(story.final[r].get(k, ())) == list(range(vals.nranks)) for r in vals.outputs for k in keys)
    if vals.coll == "all_reduce" and complete:
        para(out, f"Every rank holds all {len(keys)} chunks, each the sum over all {vals.nranks} ranks:")
    elif vals.coll == "all_gather":
        para(out, f"Every rank holds all {len(keys)} chunks, chunk cK being rank K's input:")
    elif vals.coll == "reduce_scatter":
        para(out, "Each rank's output is its own chunk, summed over all ranks:")
    elif vals.coll == "broadcast":
        para(out, f"Every rank holds the root's (r{vals.root}'s) buffer:")
    elif vals.coll == "reduce":
        para(out, f"The root r{vals.root} holds the sum over all ranks:")
    elif vals.coll == "all_to_all" and story.coll.algo == "bruck":
        para(out, "Each block has moved K ranks on, once per 1 bit of K; the final rotation puts work block cK "
                  "of rank r at output block r - K, so that block q of every rank's output is rank q's block "
                  "for it:")
    elif vals.coll == "all_to_all":
        para(out, "Every rank r holds in out[q] rank q's in[r], the block q had for it:")
    for r, got, want in result_rows(vals, story):
        same = got == want
        ok &= same
        shown = " ".join(str(v) for v in want[:16]) + (" ..." if len(want) > 16 else "")
        print(f"  r{r}: {shown}   " + ("(the run's output; the replay agrees)" if same
                                        else f"(the replay predicts {got[:16]}: MISMATCH)"), file=out)
    return ok


def show_totals(out, vals, coll):
    t = formulas.totals(coll, vals, coll.algo)
    print(f"\n== Totals (N = {vals.nranks}, D = {t.D} bytes) ==", file=out)
    print(textwrap.fill(f"expected per rank, each way: {t.formula}", width=100, initial_indent="  ",
                        subsequent_indent="    "), file=out)
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


def followable(trace_path, vals, coll):
    """TraceError unless explain can tell this call's story."""
    algo = "ring" if coll.algo == "chain" else coll.algo  # the ring's broadcast and reduce run as a chain
    if algo not in ALGOS:
        raise TraceError(f"{trace_path}: the {vals.coll} ran {coll.algo}, which explain cannot follow "
                         f"(it follows {', '.join(ALGOS)})")
    if vals.coll not in ALGOS[algo]:
        raise TraceError(f"{trace_path}: explain follows {algo} for {', '.join(ALGOS[algo])}, not {vals.coll}")


def explain(trace_path, values_path, out=sys.stdout):
    """Prints the story; returns True when the traced totals match the
    formulas and the replayed values match the run's output."""
    vals = Values(values_path)
    trace = load(trace_path)
    coll = trace.collective(coll=vals.coll)
    followable(trace_path, vals, coll)
    story = replay(coll, vals.nranks)
    coll = story.coll  # cut into pieces where the trace's labels do not name them
    pcs = Pieces(coll, vals.nranks)
    show_header(out, vals, coll, pcs)
    show_inputs(out, vals, pcs)
    show_steps(out, vals, story, pcs)
    for p in story.problems:
        print(f"problem: {p}", file=out)
    ok = not story.problems
    ok &= show_result(out, vals, story, pcs)
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
    if args.ranks_per_host is None and args.algo == "hier":
        # hosts of the smallest size above 1 that divides the ranks (one rank per host for a prime)
        args.ranks_per_host = next((d for d in range(2, args.ranks) if args.ranks % d == 0), 1)
    if args.ranks_per_host is not None and (args.ranks_per_host < 1 or args.ranks % args.ranks_per_host):
        raise TraceError(f"--ranks-per-host {args.ranks_per_host} does not divide --ranks {args.ranks}")
    if args.count is None:
        args.count = 2 if args.collective in ("reduce_scatter", "all_gather", "all_to_all") else 2 * args.ranks
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        trace, values = run(args, script_dir, args.keep)
        ok = explain(trace, values)
        print(f"\nKept {trace} and {values}: `ccl-trace render {trace} -o {args.algo}.svg` draws it; "
              f"`ccl-trace html {trace} --values {values} -o {args.algo}.html` plays it in a browser; "
              "ui.perfetto.dev opens the trace.")
        return 0 if ok else 1
    with tempfile.TemporaryDirectory(prefix="ccl-trace-") as tmp:
        trace, values = run(args, script_dir, tmp)
        return 0 if explain(trace, values) else 1
