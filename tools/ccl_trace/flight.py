"""`ccl-trace flight DIR`: read every rank's flight recorder dump and say
which rank went apart from the others first, and how.

A dump (lib/core/flight.h) is a header and a ring of fixed 64-byte
entries, one per call. A rank writes its own when its communicator fails,
when the user sends CCL_FLIGHT_SIGNAL, and when ccl-status asks; a rank
that is stopped, killed or stuck outside the library writes none, and that
absence is evidence too.
"""
import collections
import glob
import json
import os
import struct
import time

from .tracefile import TraceError

MAGIC = b"CCLFLT1\0"
HEADER = struct.Struct("<8sIIIIiiQQiiiidd64s512s")
ENTRY = struct.Struct("<QQddIiiBBBBbb2xI")

KINDS = {1: "all_reduce", 2: "reduce_scatter", 3: "all_gather", 4: "broadcast", 5: "reduce", 6: "all_to_all",
         7: "barrier", 8: "send/recv", 9: "gather", 10: "scatter", 11: "all_to_all_v"}
P2P = 8
DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64"]
OPS = ["sum", "prod", "max", "min", "avg", "band", "bor", "bxor"]
ALGOS = ["ring", "tree", "rd", "rhd", "bruck", "pairwise", "direct", "hier", "single_copy"]
STATES = {1: "issued", 2: "running", 3: "done", 4: "failed"}
REASONS = {1: "failure", 2: "signal", 3: "asked"}
STATUS = {0: "ok", -1: "invalid argument", -2: "invalid usage", -3: "system error", -4: "remote error",
          -5: "timeout", -6: "aborted", -7: "unsupported", -8: "out of memory", -9: "internal error",
          -10: "revoked"}


def _text(raw):
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def read_dump(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER.size or data[:8] != MAGIC:
        raise TraceError(f"{path}: not a libccl flight recorder dump")
    (magic, version, header_bytes, entry_bytes, capacity, rank, nranks, comm_id, recorded, pid, reason,
     failed_status, culprit, dumped_at, timeout_s, host, last_error) = HEADER.unpack_from(data)
    if version != 1 or entry_bytes != ENTRY.size or header_bytes < HEADER.size:
        raise TraceError(f"{path}: flight recorder version {version} (entries of {entry_bytes} bytes): "
                         "this ccl-trace reads version 1")
    if len(data) < header_bytes + capacity * entry_bytes:
        raise TraceError(f"{path}: cut short ({len(data)} bytes, {capacity} entries expected)")
    first = max(0, recorded - capacity)
    calls = []
    for k in range(capacity):
        (index, count, t_start, t_end, seq, peer, status, kind, state, algo, is_send, dtype, op,
         _steps) = ENTRY.unpack_from(data, header_bytes + k * entry_bytes)
        if state not in STATES or not first <= index < recorded:
            continue  # never used, or overwritten while the dump ran
        calls.append({"index": index, "seq": seq, "kind": kind, "name": KINDS.get(kind, f"kind {kind}"),
                      "count": count, "dtype": DTYPES[dtype] if 0 <= dtype < len(DTYPES) else f"dtype {dtype}",
                      "op": OPS[op] if 0 <= op < len(OPS) else ("premul_sum" if op >= len(OPS) else None),
                      "peer": peer, "is_send": bool(is_send), "state": STATES[state],
                      "algo": ALGOS[algo] if algo < len(ALGOS) else None, "status": status,
                      "start": t_start, "end": t_end or None})
    calls.sort(key=lambda c: c["index"])
    return {"path": path, "rank": rank, "nranks": nranks, "comm": f"{comm_id:016x}", "recorded": recorded,
            "capacity": capacity, "pid": pid, "reason": REASONS.get(reason, str(reason)),
            "failed": STATUS.get(failed_status, str(failed_status)) if failed_status else None,
            "culprit": culprit - 1 if culprit > 0 else None, "dumped_at": dumped_at, "timeout_s": timeout_s,
            "host": _text(host), "last_error": _text(last_error), "calls": calls}


def _signature(c):
    """What every rank must agree on for one collective call."""
    sig = [c["name"], f"{c['count']} x {c['dtype']}"]
    if c["op"] and c["kind"] in (1, 2, 5):
        sig.append(c["op"])
    if c["peer"] >= 0:
        sig.append(f"root {c['peer']}")
    return " ".join(sig)


def _call_words(c):
    if c["kind"] == P2P:
        return f"{'send to' if c['is_send'] else 'receive from'} rank {c['peer']}, {c['count']} x {c['dtype']}"
    return f"{_signature(c)} (call #{c['seq']})"


def _clock(t):
    if not t:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 1000):03d}"


def analyse(dumps):
    """One communicator's dumps -> findings: culprits, a paragraph, rows."""
    nranks = max(d["nranks"] for d in dumps)
    by_rank = {d["rank"]: d for d in dumps}
    missing = [r for r in range(nranks) if r not in by_rank]
    colls = {r: {c["seq"]: c for c in d["calls"] if c["kind"] != P2P} for r, d in by_rank.items()}
    findings, culprits = [], []

    # The earliest call at which the ranks' records disagree. Calls a
    # rank's ring no longer holds are no evidence.
    seen_from = max((min(cs) for cs in colls.values() if cs), default=0)
    last = {r: max(cs) if cs else -1 for r, cs in colls.items()}
    top = max(last.values(), default=-1)
    for seq in range(seen_from, top + 1):
        have = {r: cs[seq] for r, cs in colls.items() if seq in cs}
        sigs = collections.Counter(_signature(c) for c in have.values())
        if len(sigs) > 1:
            common = sigs.most_common(1)[0][0]
            odd = sorted(r for r, c in have.items() if _signature(c) != common)
            for r in odd:
                findings.append(f"rank {r} called {_signature(have[r])} as call #{seq}, where rank(s) "
                                f"{', '.join(str(x) for x in sorted(set(have) - set(odd)))} called {common}")
            culprits += odd
            break
        if len(have) == len(colls) and len(have) > 1:
            # Everyone made it: a rank that came long after the others
            # (after they had waited half their timeout) held them up.
            first = min(c["start"] for c in have.values())
            slack = max(1.0, 0.5 * min(d["timeout_s"] for d in by_rank.values()))
            late = sorted(r for r, c in have.items() if c["start"] - first > slack)
            if late:
                early = sorted(set(have) - set(late))
                for r in late:
                    findings.append(f"rank {r} entered call #{seq} ({_signature(have[r])}) at "
                                    f"{_clock(have[r]['start'])}, {have[r]['start'] - first:.1f} s after rank(s) "
                                    f"{', '.join(str(x) for x in early)}")
                culprits += late
                break
        absent = sorted(r for r in colls if seq not in colls[r] and last[r] < seq)
        if absent and have:
            c = next(iter(have.values()))
            for r in absent:
                prev = colls[r].get(last[r])
                since = f"; its last call, #{last[r]} ({prev['name']}), {'ended' if prev['end'] else 'started'} at " \
                        f"{_clock(prev['end'] or prev['start'])}" if prev else ""
                findings.append(f"rank {r} never made call #{seq} ({_signature(c)}), which rank(s) "
                                f"{', '.join(str(x) for x in sorted(have))} entered at {_clock(min(h['start'] for h in have.values()))}{since}")
            culprits += absent
            break

    if missing:
        failed = [d for d in dumps if d["reason"] == "failure"]
        words = "stopped, killed, or stuck outside libccl" if failed else "not asked, or not running"
        for r in missing:
            findings.append(f"rank {r} left no dump ({words})")
        if not culprits:
            culprits += missing

    # Ranks still inside a call: how long they had been in it.
    for r, d in sorted(by_rank.items()):
        running = [c for c in d["calls"] if c["state"] == "running"]
        if running:
            c = running[-1]
            findings.append(f"rank {r} was in {_call_words(c)} for {d['dumped_at'] - c['start']:.1f} s when it "
                            f"dumped ({d['reason']})")

    blamed = collections.Counter(d["culprit"] for d in dumps if d["culprit"] is not None)
    if not culprits and blamed:
        culprits.append(blamed.most_common(1)[0][0])
    rows = []
    for r in range(nranks):
        d = by_rank.get(r)
        if not d:
            rows.append({"rank": r, "dump": None})
            continue
        c = d["calls"][-1] if d["calls"] else None
        rows.append({"rank": r, "dump": d["reason"], "host": d["host"], "pid": d["pid"], "calls": d["recorded"],
                     "last": _call_words(c) if c else None, "state": c["state"] if c else None,
                     "algo": c["algo"] if c else None, "started": c["start"] if c else None,
                     "ended": c["end"] if c else None, "error": d["last_error"] or None})
    return {"comm": dumps[0]["comm"], "nranks": nranks, "culprits": sorted(set(culprits)), "findings": findings,
            "ranks": rows, "blamed_by_ranks": {str(k): v for k, v in blamed.items()}}


def load_dir(path):
    files = sorted(glob.glob(os.path.join(path, "*.flight")))
    if not files:
        raise TraceError(f"{path}: no flight recorder dumps (*.flight) here")
    comms = collections.defaultdict(list)
    for f in files:
        d = read_dump(f)
        comms[d["comm"]].append(d)
    return comms


def paragraph(a):
    who = ", ".join(f"rank {r}" for r in a["culprits"]) or "no rank"
    head = f"communicator {a['comm']} ({a['nranks']} ranks): {who} went apart first."
    return " ".join([head] + [f + "." for f in a["findings"]])


def table(a):
    lines = [f"{'rank':>4}  {'dump':<8} {'host':<12} {'pid':>7} {'calls':>6}  {'last call':<44} {'state':<8} "
             f"{'started':<12} {'ended':<12}"]
    for row in a["ranks"]:
        if not row["dump"]:
            lines.append(f"{row['rank']:>4}  {'none':<8}")
            continue
        lines.append(f"{row['rank']:>4}  {row['dump']:<8} {row['host'][:12]:<12} {row['pid']:>7} {row['calls']:>6}  "
                     f"{(row['last'] or '-')[:44]:<44} {row['state'] or '-':<8} {_clock(row['started']):<12} "
                     f"{_clock(row['ended']):<12}")
    errors = [(row["rank"], row["error"]) for row in a["ranks"] if row.get("error")]
    for r, e in errors:
        lines.append(f"  rank {r}: {e}")
    return "\n".join(lines)


def main(args):
    comms = load_dir(args.dir)
    results = [analyse(ds) for _, ds in sorted(comms.items())]
    # The communicators that failed first, then the rest.
    results.sort(key=lambda a: (not a["culprits"], a["comm"]))
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for a in results:
            print(paragraph(a))
            print()
            print(table(a))
            print()
    return 0
