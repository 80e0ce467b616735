#!/usr/bin/env python3
"""Checks that a benchmark's --csv and --json files parse, follow the fixed
formats, and say what its text output says: check_results.py TEXT CSV JSON.
Exits 1 with a message on the first disagreement."""
import csv
import json
import re
import sys

CSV_HEADER = ("library,op,nranks,nhosts,transport,algo,dtype,redop,root,size_bytes,count,placement,time_us,"
              "algbw_gbps,busbw_gbps,wrong,min_us,median_us,p99_us,max_us,memcpy_gbps,busbw_frac_memcpy")
JSON_KEYS = ["library", "version", "op", "nranks", "nhosts", "transport", "algo", "memcpy_gbps", "iters", "warmup",
             "agg", "blocking", "combine", "rows", "wrong_total", "avg_busbw_gbps"]
ROW_KEYS = ["size_bytes", "count", "dtype", "redop", "root", "placement", "time_us", "algbw_gbps", "busbw_gbps",
            "wrong", "min_us", "median_us", "p99_us", "max_us", "busbw_frac_memcpy"]


def fail(msg):
    print("check_results: " + msg)
    sys.exit(1)


def close(a, b, tol, what):
    if abs(float(a) - float(b)) > tol:
        fail(f"{what}: {a} vs {b}")


def parse_text(path):
    lines = [re.sub(r"^\[0\] ", "", l.rstrip("\n")) for l in open(path)]
    head = next((l for l in lines if re.match(r"# \S+: ", l)), None)
    m = head and re.match(r"# (\S+): (\S+) (\S+), (\d+) ranks?, (\d+) hosts?, transport (\S+), algo (\S+)$", head)
    if not m:
        fail(f"no header line in {path}")
    info = dict(prog=m[1], library=m[2], version=m[3], nranks=int(m[4]), nhosts=int(m[5]), transport=m[6],
                algo=m[7])
    info["stats"] = any("per iteration (us)" in l for l in lines)
    # -A's list: an algo column ends every row
    info["algos"] = any(l.startswith("# ") and l.split()[-1] == "algo" for l in lines)
    memcpy = next(l for l in lines if l.startswith("# memcpy: "))
    info["memcpy"] = float(memcpy.split()[2])
    oob = next(l for l in lines if l.startswith("# Out of bounds values : "))
    info["wrong_total"] = None if "N/A" in oob else int(oob.split(":")[1].split()[0])
    info["avg_busbw"] = float(next(l for l in lines if l.startswith("# Avg bus bandwidth")).split(":")[1])
    rows = []
    for l in lines:
        if l.startswith("#") or not l.strip():
            continue
        f = l.split()
        want = 15 + (8 if info["stats"] else 0) + info["algos"]
        if len(f) != want:
            fail(f"text row has {len(f)} fields, not {want}: {l}")
        for p, (base, frac, stats) in enumerate([(5, 13, 15), (9, 14, 19)]):
            if f[base] == "N/A":
                continue
            rows.append(dict(size_bytes=int(f[0]), count=int(f[1]), dtype=f[2], redop=f[3], root=int(f[4]),
                             placement=["out", "in"][p], time_us=f[base], algbw_gbps=f[base + 1],
                             busbw_gbps=f[base + 2], wrong=None if f[base + 3] == "N/A" else int(f[base + 3]),
                             frac=f[frac], stats=f[stats:stats + 4] if info["stats"] else None,
                             algo=f[-1].split(":")[0] if info["algos"] else info["algo"]))
        # the planner's rows say what it ran: "auto:ring"
        if info["algos"] and f[-1].startswith("auto") and not re.fullmatch(r"auto:[a-z_]+", f[-1]):
            fail(f"an auto row does not say which algorithm ran: {l}")
    return info, rows


def check_csv(path, info, text_rows):
    lines = open(path).read().splitlines()
    if not lines or lines[0] != CSV_HEADER:
        fail("CSV header differs from the fixed one")
    rows = list(csv.DictReader(lines))
    if len(rows) != len(text_rows):
        fail(f"CSV has {len(rows)} rows, the text {len(text_rows)}")
    op = re.sub(r"_perf(_mpi)?$", "", info["prog"])
    for c, t in zip(rows, text_rows):
        where = f"CSV row {c}"
        for key, want in [("library", info["library"]), ("op", op), ("nranks", str(info["nranks"])),
                          ("nhosts", str(info["nhosts"])), ("transport", info["transport"]), ("algo", t["algo"]),
                          ("size_bytes", str(t["size_bytes"])), ("count", str(t["count"])),
                          ("placement", t["placement"]), ("dtype", "" if t["dtype"] == "none" else t["dtype"]),
                          ("redop", "" if t["redop"] == "none" else t["redop"]),
                          ("root", "" if t["root"] < 0 else str(t["root"])),
                          ("wrong", "" if t["wrong"] is None else str(t["wrong"]))]:
            if c[key] != want:
                fail(f"{where}: {key} is {c[key]!r}, the text says {want!r}")
        close(c["time_us"], t["time_us"], 0.0051, where + " time")
        close(c["algbw_gbps"], t["algbw_gbps"], 0.0051, where + " algbw")
        close(c["busbw_gbps"], t["busbw_gbps"], 0.0051, where + " busbw")
        close(c["busbw_frac_memcpy"], t["frac"], 0.00051, where + " fraction")
        close(c["memcpy_gbps"], info["memcpy"], 0.0051, where + " memcpy")
        stats = [c[k] for k in ("min_us", "median_us", "p99_us", "max_us")]
        if t["stats"] is None:
            if any(stats):
                fail(f"{where}: statistics without -I")
        else:
            for a, b in zip(stats, t["stats"]):
                close(a, b, 0.0051, where + " statistics")
            if not float(stats[0]) <= float(stats[1]) <= float(stats[2]) <= float(stats[3]):
                fail(f"{where}: min <= median <= p99 <= max does not hold")


def check_json(path, info, text_rows):
    try:
        doc = json.load(open(path))
    except ValueError as e:
        fail(f"JSON does not parse: {e}")
    if list(doc) != JSON_KEYS:
        fail(f"JSON keys {list(doc)}")
    op = re.sub(r"_perf(_mpi)?$", "", info["prog"])
    for key, want in [("library", info["library"]), ("version", info["version"]), ("op", op),
                      ("nranks", info["nranks"]), ("nhosts", info["nhosts"]), ("transport", info["transport"]),
                      ("algo", info["algo"]), ("wrong_total", info["wrong_total"])]:
        if doc[key] != want:
            fail(f"JSON {key} is {doc[key]!r}, the text says {want!r}")
    close(doc["memcpy_gbps"], info["memcpy"], 0.0051, "JSON memcpy")
    close(doc["avg_busbw_gbps"], info["avg_busbw"], max(1e-5 * info["avg_busbw"], 1e-6), "JSON avg busbw")
    if len(doc["rows"]) != len(text_rows):
        fail(f"JSON has {len(doc['rows'])} rows, the text {len(text_rows)}")
    for j, t in zip(doc["rows"], text_rows):
        if list(j) != ROW_KEYS + (["algo"] if info["algos"] else []):
            fail(f"JSON row keys {list(j)}")
        if info["algos"] and j["algo"] != t["algo"]:
            fail(f"JSON row {j}: algo is {j['algo']!r}, the text says {t['algo']!r}")
        for key in ("size_bytes", "count", "dtype", "redop", "root", "placement", "wrong"):
            if j[key] != t[key]:
                fail(f"JSON row {j}: {key} is {j[key]!r}, the text says {t[key]!r}")
        for key in ("time_us", "algbw_gbps", "busbw_gbps"):
            close(j[key], t[key], 0.0051, f"JSON row {key}")
        close(j["busbw_frac_memcpy"], t["frac"], 0.00051, "JSON row fraction")
        stats = [j[k] for k in ("min_us", "median_us", "p99_us", "max_us")]
        if t["stats"] is None:
            if stats != [None] * 4:
                fail("JSON statistics without -I")
        else:
            for a, b in zip(stats, t["stats"]):
                close(a, b, 0.0051, "JSON statistics")


def main():
    if len(sys.argv) != 4:
        fail("usage: check_results.py TEXT CSV JSON")
    info, rows = parse_text(sys.argv[1])
    if not rows:
        fail("no rows in the text")
    check_csv(sys.argv[2], info, rows)
    check_json(sys.argv[3], info, rows)
    print(f"check_results: {len(rows)} rows agree")


main()
