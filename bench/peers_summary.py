#!/usr/bin/env python3
"""The table of bench/compare-peers.sh: each side's median out-of-place
busbw per size over the rounds, and libccl's ratio to every peer (and the
zero-copy path's); up to 1 KiB, the median time per call instead (lower
is better there). Writes OUT_DIR/summary.csv and prints the table.

    peers_summary.py OUT_DIR "SIDES" "RANKS" ROUNDS
"""
import csv
import os
import statistics
import sys


def load(path):
    rows = {}
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for row in csv.DictReader(f):
            if row.get("placement") != "out" or row.get("wrong") not in ("", "0", None):
                continue
            rows[int(row["size_bytes"])] = (float(row["busbw_gbps"]), float(row["time_us"]))
    return rows


def human(n):
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def main():
    out, sides, ranks, rounds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), int(sys.argv[4])
    summary = [["nranks", "size_bytes", "side", "median_busbw_gbps", "median_time_us", "libccl_ratio",
                "libccl_zc_ratio"]]
    for n in ranks:
        med = {}
        for s in sides:
            per = {}
            for r in range(1, rounds + 1):
                for size, v in load(os.path.join(out, f"{s}-{n}-r{r}.csv")).items():
                    per.setdefault(size, []).append(v)
            med[s] = {size: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
                      for size, v in per.items()}
        sizes = sorted(set().union(*(m.keys() for m in med.values())))
        peers = [s for s in sides if not s.startswith("libccl")]
        print(f"\n{n} ranks: median over {rounds} rounds, busbw GB/s (time us up to 1K); "
              f"ratio = libccl / peer (peer / libccl for times), zero-copy in brackets")
        head = f"{'size':>6} " + " ".join(f"{s:>10}" for s in sides) + "  " + \
            " ".join(f"{'vs ' + p:>16}" for p in peers)
        print(head)
        for size in sizes:
            small = size <= 1024
            vals = [med[s].get(size) for s in sides]
            cells = [f"{(v[1] if small else v[0]):10.2f}" if v else f"{'-':>10}" for v in vals]
            ratios = []
            base, zc = med["libccl"].get(size), med.get("libccl-zc", {}).get(size)
            for p in peers:
                pv = med[p].get(size)
                if not pv or not base:
                    ratios.append(f"{'-':>16}")
                    continue
                def ratio(mine):
                    if not mine:
                        return None
                    return pv[1] / mine[1] if small else (mine[0] / pv[0] if pv[0] > 0 else None)
                a, b = ratio(base), ratio(zc)
                ratios.append(f"{(f'{a:.2f}' if a else '-') + (f' [{b:.2f}]' if b else ''):>16}")
                summary.append([n, size, p, f"{pv[0]:.4f}", f"{pv[1]:.2f}", f"{a:.3f}" if a else "",
                                f"{b:.3f}" if b else ""])
            for s in ("libccl", "libccl-zc"):
                v = med.get(s, {}).get(size)
                if v:
                    summary.append([n, size, s, f"{v[0]:.4f}", f"{v[1]:.2f}", "", ""])
            print(f"{human(size):>6} " + " ".join(cells) + "  " + " ".join(ratios))
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        csv.writer(f).writerows(summary)


if __name__ == "__main__":
    main()
