#!/usr/bin/env python3
"""bench/compare: ratios and geometric means on the samples, and exit 2 on bad input."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
COMPARE = os.path.join(HERE, "..", "compare")
DATA = os.path.join(HERE, "data")
CSV = os.path.join(DATA, "all_reduce_libccl.csv")
JSON = os.path.join(DATA, "all_reduce_openmpi.json")

# (size, placement) -> A/B of the samples' busbw, worked out by hand:
# out 0.25/0.5, 1.5/1.5, 4/2, 6/4, 7.2/4.8; in 0.3/0.6, 1.8/1.2, 4.5/3, 6.6/4.4, 7.5/6.
RATIOS = {
    (1024, "out"): "0.500", (8192, "out"): "1.000", (65536, "out"): "2.000",
    (1048576, "out"): "1.500", (8388608, "out"): "1.500",
    (1024, "in"): "0.500", (8192, "in"): "1.500", (65536, "in"): "1.500",
    (1048576, "in"): "1.500", (8388608, "in"): "1.250",
}
# Geometric means: (0.5*1*2*1.5*1.5)^(1/5) = 2.25^0.2; in: 2.109375^0.2; both: (2.25*2.109375)^0.1.
GEOMEAN_OUT, GEOMEAN_IN, GEOMEAN_BOTH, GEOMEAN_SWAPPED = "1.176", "1.161", "1.169", "0.856"


def run_compare(*args):
    return subprocess.run([sys.executable, COMPARE, *args], capture_output=True, text=True, timeout=60)


def table(stdout):
    """Data rows of the table: {(size, placement): cells}."""
    lines = stdout.splitlines()
    start = next(i for i, l in enumerate(lines) if l.split()[:1] == ["size"])
    rows = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        cells = line.split()
        rows[(int(cells[0]), cells[3])] = cells
    return rows


class CompareTest(unittest.TestCase):
    def check_ok(self, *args):
        r = run_compare(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        return r.stdout

    def test_ratios_and_geomean_both_placements(self):
        out = self.check_ok(CSV, JSON)
        lines = out.splitlines()
        self.assertEqual(lines[0], f"A: {CSV}: libccl, all_reduce, 4 ranks on 1 host, shm, ring, memcpy 9.80 GB/s")
        self.assertEqual(lines[1],
                         f"B: {JSON}: mpi-openmpi 4.1.4, all_reduce, 4 ranks on 1 host, shm, ring, memcpy 9.76 GB/s")
        self.assertEqual(lines[3].split(), ["size", "type", "redop", "place", "A", "time(us)", "A", "busbw",
                                            "B", "time(us)", "B", "busbw", "A/B"])
        rows = table(out)
        self.assertEqual({k: v[-1] for k, v in rows.items()}, RATIOS)
        self.assertEqual(rows[(65536, "out")], ["65536", "float32", "sum", "out",
                                                "24.58", "4.00", "49.15", "2.00", "2.000"])
        self.assertEqual(rows[(1024, "in")][5], "0.300")
        self.assertEqual(rows[(1024, "in")][7], "0.600")
        self.assertIn(f"geometric mean of A/B: {GEOMEAN_BOTH} over 10 rows", out)
        self.assertIn("only in B, not compared: 2 rows (out 33554432, in 33554432)", out)
        # Out-of-place rows come first, each sweep by size: the table reads like nccl-tests.
        order = [k for k in table(out)]
        self.assertEqual(order, sorted(order, key=lambda k: (k[1] == "in", k[0])))
        # Columns line up: every table line has its ratio ending in the same column.
        table_lines = lines[3:3 + 1 + len(RATIOS)]
        self.assertEqual(len({len(l) for l in table_lines}), 1, table_lines)

    def test_placement_filters(self):
        out = self.check_ok(CSV, JSON, "--placement", "out")
        self.assertEqual({k: v[-1] for k, v in table(out).items()},
                         {k: v for k, v in RATIOS.items() if k[1] == "out"})
        self.assertIn(f"geometric mean of A/B: {GEOMEAN_OUT} over 5 rows", out)
        out = self.check_ok(CSV, JSON, "--placement", "in", "--dtype", "float32")
        self.assertEqual(len(table(out)), 5)
        self.assertIn(f"geometric mean of A/B: {GEOMEAN_IN} over 5 rows", out)

    def test_swapped_files_invert_the_ratios(self):
        out = self.check_ok(JSON, CSV)
        self.assertEqual(table(out)[(65536, "out")][-1], "0.500")
        self.assertIn(f"geometric mean of A/B: {GEOMEAN_SWAPPED} over 10 rows", out)
        self.assertIn("only in A, not compared: 2 rows", out)

    def test_csv_and_json_spellings_of_no_redop_match(self):
        # JSON writes "none" where CSV leaves redop empty (all_gather has no reduction).
        out = self.check_ok(os.path.join(DATA, "all_gather_libccl.json"), os.path.join(DATA, "all_gather_openmpi.csv"))
        rows = table(out)
        self.assertEqual(len(rows), 10)
        self.assertEqual({cells[2] for cells in rows.values()}, {"-"})
        self.assertEqual({cells[-1] for cells in rows.values()}, {"1.250"})  # B's busbw is 0.8 of A's
        self.assertIn("geometric mean of A/B: 1.250 over 10 rows", out)

    def test_barrier_compares_time(self):
        out = self.check_ok(os.path.join(DATA, "barrier_libccl.csv"), os.path.join(DATA, "barrier_openmpi.json"))
        self.assertEqual(table(out)[(0, "out")][-1], "2.000")  # B took 9.0 us, A 4.5 us
        self.assertIn("barrier rows: A/B is B's time over A's", out)

    def check_fails(self, a, b, *args, says):
        r = run_compare(a, b, *args)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "", "no half-printed table")
        self.assertTrue(r.stderr.startswith("compare: "), r.stderr)
        self.assertIn(says, r.stderr)

    def test_unreadable_and_mismatched_files_exit_2(self):
        self.check_fails(CSV, os.path.join(DATA, "truncated.json"), says="truncated.json: not valid JSON")
        self.check_fails(os.path.join(DATA, "nccl_tests_stdout.txt"), JSON,
                         says="nccl_tests_stdout.txt: not a benchmark result file")
        self.check_fails(CSV, os.path.join(DATA, "no_such_file.json"), says="No such file")
        self.check_fails(CSV, os.path.join(DATA, "all_gather_libccl.json"),
                         says="measures all_reduce and")
        self.check_fails(CSV, JSON, "--dtype", "int8", says="no rows of")

    def test_malformed_csv_row_names_its_line(self):
        tmp = tempfile.mkdtemp(prefix="ccl-compare-test-")
        try:
            bad = os.path.join(tmp, "bad.csv")
            with open(CSV) as src, open(bad, "w") as dst:
                lines = src.readlines()
                lines[3] = lines[3].replace(",4.0,", ",four,")
                dst.writelines(lines)
            self.check_fails(bad, JSON, says="bad.csv:4: busbw_gbps is 'four', not a number")
            with open(bad, "w") as dst:
                dst.writelines(lines[:2] + [lines[2].rsplit(",", 3)[0] + "\n"])
            self.check_fails(bad, JSON, says="bad.csv:3: 19 fields where the header has 22")
        finally:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    unittest.main()
