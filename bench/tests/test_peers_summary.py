"""bench/peers_summary.py on made-up rounds: medians per side over the
rounds, ratios to libccl (busbw above 1 KiB, time up to it), wrong rows
left out, a missing side shown as '-', summary.csv written."""
import csv
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "peers_summary.py")
FIELDS = ["library", "op", "nranks", "nhosts", "transport", "algo", "dtype", "redop", "root", "size_bytes",
          "count", "placement", "time_us", "algbw_gbps", "busbw_gbps", "wrong"]


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        for size, time_us, busbw, wrong in rows:
            for placement in ("out", "in"):
                w.writerow(["x", "all_reduce", 2, 1, "shm", "auto", "float32", "sum", "", size, size // 4,
                            placement, time_us, busbw, busbw, wrong])


def main():
    with tempfile.TemporaryDirectory() as d:
        # libccl: busbw 10, 12, 11 at 1 MiB (median 11); time 2, 4, 3 us at 8 B (median 3)
        for r, (t8, bw) in enumerate([(2, 10), (4, 12), (3, 11)], 1):
            write(os.path.join(d, f"libccl-2-r{r}.csv"), [(8, t8, 0.01, 0), (1 << 20, 100, bw, 0)])
            write(os.path.join(d, f"libccl-zc-2-r{r}.csv"), [(8, t8, 0.01, 0), (1 << 20, 50, 2 * bw, 0)])
            # the peer: busbw 5 (one round wrong: left out), time 6 us
            write(os.path.join(d, f"ompi4-2-r{r}.csv"), [(8, 6, 0.01, 0), (1 << 20, 200, 5 if r != 2 else 99, 1 if r == 2 else 0)])
        out = subprocess.run([sys.executable, SCRIPT, d, "libccl libccl-zc ompi4 mpich5", "2", "3"], check=True,
                             capture_output=True, text=True).stdout
        print(out)
        rows = list(csv.DictReader(open(os.path.join(d, "summary.csv"))))
        peer = {int(r["size_bytes"]): r for r in rows if r["side"] == "ompi4"}
        assert abs(float(peer[1 << 20]["median_busbw_gbps"]) - 5) < 1e-9, peer
        assert peer[1 << 20]["libccl_ratio"] == "2.200", peer  # 11 / 5
        assert peer[1 << 20]["libccl_zc_ratio"] == "4.400", peer  # 22 / 5
        assert peer[8]["libccl_ratio"] == "2.000", peer  # time: 6 / 3
        assert not any(r["side"] == "mpich5" for r in rows), "a side with no files has no rows"
        assert "vs mpich5" in out and "-" in out.splitlines()[-1]
    print("peers_summary: medians, ratios and the missing side as expected")


if __name__ == "__main__":
    main()
