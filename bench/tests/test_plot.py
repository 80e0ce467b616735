#!/usr/bin/env python3
"""bench/plot: the SVG it writes from the sample results is well formed and right."""

import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "..", "plot")
DATA = os.path.join(HERE, "data")
CSV = os.path.join(DATA, "all_reduce_libccl.csv")
JSON = os.path.join(DATA, "all_reduce_openmpi.json")
NS = {"svg": "http://www.w3.org/2000/svg"}

# busbw of the out-of-place rows in the samples, by size.
CSV_OUT = {1024: 0.25, 8192: 1.5, 65536: 4.0, 1048576: 6.0, 8388608: 7.2}
JSON_OUT = {1024: 0.5, 8192: 1.5, 65536: 2.0, 1048576: 4.0, 8388608: 4.8, 33554432: 5.1}


def run_plot(*args):
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True, text=True, timeout=60)


def points(polyline):
    return [tuple(float(v) for v in p.split(",")) for p in polyline.get("points").split()]


def texts(root, cls):
    return [t.text for t in root.iter("{%s}text" % NS["svg"]) if t.get("class") == cls]


def tick_elements(root, cls):
    return [t for t in root.iter("{%s}text" % NS["svg"]) if t.get("class") == cls]


SIZE_OF = {f"{2 ** (p % 10)}{'BKMGT'[p // 10]}": 2 ** p for p in range(50)}


def fit(xs, ys):
    """Least-squares line through (xs, ys) and the largest distance from it."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    off = my - slope * mx
    return slope, off, max(abs(off + slope * x - y) for x, y in zip(xs, ys))


class PlotTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ccl-plot-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def render(self, *args):
        out = os.path.join(self.tmp, "out.svg")
        r = run_plot(*args, "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        return ET.parse(out).getroot()  # raises if the SVG is not well-formed XML

    def series_lines(self, root):
        return [g.find("svg:polyline", NS) for g in root.findall("svg:g", NS) if g.get("class") == "series"]

    def test_csv_and_json_out_of_place(self):
        root = self.render(CSV, JSON)
        self.assertEqual(root.tag, "{%s}svg" % NS["svg"])
        lines = self.series_lines(root)
        self.assertEqual(len(lines), 2, "one polyline per file (out-of-place only)")
        csv_pts, json_pts = points(lines[0]), points(lines[1])
        self.assertEqual(len(csv_pts), len(CSV_OUT))
        self.assertEqual(len(json_pts), len(JSON_OUT))
        self.assertTrue(all(l.get("stroke-dasharray") is None for l in lines), "out-of-place lines are solid")

        # x is log2(size): one linear map for every point of both lines.
        sizes = sorted(CSV_OUT) + sorted(JSON_OUT)
        xs = [p[0] for p in csv_pts + json_pts]
        slope, off, err = fit([math.log2(s) for s in sizes], xs)
        self.assertGreater(slope, 0)
        self.assertLess(err, 0.2)
        # ... and the tick labels say the truth about it: "1M" is where 2^20 bytes is.
        for tick in tick_elements(root, "xtick"):
            self.assertAlmostEqual(float(tick.get("x")), off + slope * math.log2(SIZE_OF[tick.text]), delta=0.3)
        frame = [r for g in root.findall("svg:g", NS) if g.get("class") == "axes" for r in g.findall("svg:rect", NS)][0]
        left, width = float(frame.get("x")), float(frame.get("width"))
        self.assertTrue(left < min(xs) and max(xs) < left + width, "points inside the frame")
        self.assertGreater(max(xs) - min(xs), 0.9 * width, "the sizes use the width")
        # y is linear in busbw, upwards; the memcpy reference sits on the same map.
        values = [CSV_OUT[s] for s in sorted(CSV_OUT)] + [JSON_OUT[s] for s in sorted(JSON_OUT)]
        ys = [p[1] for p in csv_pts + json_pts]
        slope, off, err = fit(values, ys)
        self.assertLess(slope, 0)
        self.assertLess(err, 0.2)
        for tick in tick_elements(root, "ytick"):  # drawn 4 px below the value's line, to centre it
            self.assertAlmostEqual(float(tick.get("y")) - 4, off + slope * float(tick.text), delta=0.3)
        memcpy = [l for g in root.findall("svg:g", NS) if g.get("class") == "memcpy" for l in g.findall("svg:line", NS)]
        self.assertEqual(len(memcpy), 1, "9.80 and 9.76 GB/s are one machine: one reference line")
        self.assertIsNotNone(memcpy[0].get("stroke-dasharray"))
        self.assertAlmostEqual(float(memcpy[0].get("y1")), off + slope * 9.8, delta=0.3)

        self.assertEqual(texts(root, "xlabel"), ["message size (bytes, log scale)"])
        self.assertEqual(texts(root, "ylabel"), ["busbw (GB/s)"])
        self.assertEqual(texts(root, "xtick"), ["1K", "4K", "16K", "64K", "256K", "1M", "4M", "16M"])
        self.assertEqual(texts(root, "ytick"), ["0", "2", "4", "6", "8", "10", "12"])
        title = " ".join(texts(root, "title"))
        for part in ("all_reduce", "out-of-place", "4 ranks", "shm", "libccl vs mpi-openmpi"):
            self.assertIn(part, title)
        legend = [t.text for g in root.findall("svg:g", NS) if g.get("class") == "legend"
                  for t in g.findall("svg:text", NS)]
        self.assertEqual(legend, ["libccl", "mpi-openmpi", "memcpy 9.80 GB/s"])

    def test_both_placements_are_four_lines_in_place_dashed(self):
        root = self.render(CSV, JSON, "--placement", "both")
        lines = self.series_lines(root)
        self.assertEqual(len(lines), 4)
        dashed = [l.get("stroke-dasharray") is not None for l in lines]
        self.assertEqual(dashed, [False, True, False, True])
        groups = [g.get("stroke") for g in root.findall("svg:g", NS) if g.get("class") == "series"]
        self.assertEqual(groups[0], groups[1], "a run's in-place line keeps its colour")
        self.assertNotEqual(groups[0], groups[2], "different runs, different colours")

    def test_colours_repeat_only_with_another_marker(self):
        # 12 runs in one file (types x ops, as -d all -o sum,max gives): more than the palette.
        with open(CSV) as f:
            header, row = f.readline(), f.readline()
        path = os.path.join(self.tmp, "many.csv")
        with open(path, "w") as f:
            f.write(header)
            for dtype in ("int8", "uint8", "int32", "uint32", "int64", "uint64"):
                for redop in ("sum", "max"):
                    f.write(row.replace(",float32,sum,", f",{dtype},{redop},"))
        root = self.render(path)
        groups = [g for g in root.findall("svg:g", NS) if g.get("class") == "series"]
        self.assertEqual(len(groups), 12)
        styles = [(g.get("stroke"), g[1].tag) for g in groups]  # g[0] is the polyline, g[1] a marker
        self.assertEqual(len(set(styles)), 12, styles)

    def test_logy_maps_log_busbw_linearly(self):
        root = self.render(CSV, "--logy", "--placement", "in")
        lines = self.series_lines(root)
        self.assertEqual(len(lines), 1)
        in_place = [0.3, 1.8, 4.5, 6.6, 7.5]
        ys = [p[1] for p in points(lines[0])]
        slope, off, err = fit([math.log10(v) for v in in_place], ys)
        self.assertLess(slope, 0)
        self.assertLess(err, 0.2)
        for tick in tick_elements(root, "ytick"):
            self.assertAlmostEqual(float(tick.get("y")) - 4, off + slope * math.log10(float(tick.text)), delta=0.3)
        self.assertEqual(texts(root, "ytick"), ["0.5", "1", "2", "5", "10"])
        self.assertEqual(texts(root, "ylabel"), ["busbw (GB/s), log scale"])

    def test_content_decides_the_format_not_the_name(self):
        disguised = os.path.join(self.tmp, "really_json.csv")
        shutil.copy(JSON, disguised)
        root = self.render(disguised)
        self.assertEqual(len(points(self.series_lines(root)[0])), len(JSON_OUT))

    def test_default_output_is_first_input_with_svg(self):
        copy = os.path.join(self.tmp, "run1.csv")
        shutil.copy(CSV, copy)
        r = run_plot(copy, "--title", "my <title> & more")
        self.assertEqual(r.returncode, 0, r.stderr)
        root = ET.parse(os.path.join(self.tmp, "run1.svg")).getroot()
        self.assertEqual(texts(root, "title"), ["my <title> & more"])

    def test_dtype_filter(self):
        self.assertEqual(len(self.series_lines(self.render(CSV, "--dtype", "float32"))), 1)
        r = run_plot(CSV, "--dtype", "float64", "-o", os.path.join(self.tmp, "x.svg"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("float32", r.stderr, "says which dtypes there are")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x.svg")))

    def test_bad_inputs_exit_2_without_output(self):
        out = os.path.join(self.tmp, "x.svg")
        for bad in ("nccl_tests_stdout.txt", "truncated.json", "no_such_file.csv", "barrier_libccl.csv"):
            r = run_plot(os.path.join(DATA, bad), "-o", out)
            self.assertEqual(r.returncode, 2, bad)
            self.assertTrue(r.stderr.startswith("plot: "), r.stderr)
            self.assertFalse(os.path.exists(out), bad)


if __name__ == "__main__":
    unittest.main()
