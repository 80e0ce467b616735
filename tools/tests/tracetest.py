"""Shared pieces of the chunk tracer tests: run ccl_trace_run for real and
load what it wrote. ctest passes CCL_TRACE_RUN (the built ccl_trace_run);
CCL_TRACE_TOOL may name the ccl-trace script (default: the source tree's)."""

import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TOOLS)

from ccl_trace import formulas, render  # noqa: E402
from ccl_trace.provenance import replay  # noqa: E402
from ccl_trace.tracefile import load  # noqa: E402
from ccl_trace.values import Values  # noqa: E402

RUNNER = os.environ.get("CCL_TRACE_RUN", "")
TOOL = os.environ.get("CCL_TRACE_TOOL", os.path.join(TOOLS, "ccl-trace"))
SVG_NS = "{http://www.w3.org/2000/svg}"


def need_runner(test):
    if not RUNNER or not os.access(RUNNER, os.X_OK):
        test.fail("CCL_TRACE_RUN must name the built ccl_trace_run (ctest sets it)")


class Run:
    """One real traced run: its trace, values, replay and totals."""

    def __init__(self, workdir, coll, ranks, count, transport=None, root=0, dtype=None, compare=True, algo="ring",
                 ranks_per_host=None):
        self.trace_path = os.path.join(workdir, f"{coll}-{ranks}-{algo}.json")
        self.values_path = os.path.join(workdir, f"{coll}-{ranks}-{algo}.txt")
        cmd = [RUNNER, "--ranks", str(ranks), "--count", str(count), "--coll", coll, "--out", self.trace_path,
               "--values", self.values_path, "--root", str(root)]
        if transport:
            cmd += ["--transport", transport]
        if dtype:
            cmd += ["--dtype", dtype]
        if ranks_per_host:
            cmd += ["--ranks-per-host", str(ranks_per_host)]
        if compare:
            cmd.append("--compare-untraced")
        # Forced for every collective of the process (the trace's own
        # gathering at destroy must not depend on it).
        env = dict(os.environ, CCL_ALGO=algo)
        self.proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   timeout=240)
        self.output = self.proc.stdout
        if self.proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {self.proc.returncode}:\n{self.output}")
        self.trace = load(self.trace_path)
        self.values = Values(self.values_path)
        self.coll = self.trace.collective(coll=coll)
        self.story = replay(self.coll, ranks)
        self.totals = formulas.totals(self.coll, self.values, self.coll.algo)
        self.ranks = ranks


class TracerTest(unittest.TestCase):
    """Gives each test class a scratch directory."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="ccl-trace-test-")
        cls.tmp = cls._tmp.name

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def setUp(self):
        need_runner(self)

    def run_coll(self, coll, ranks, count, **kw):
        return Run(self.tmp, coll, ranks, count, **kw)

    def assert_flows_paired(self, run):
        self.assertEqual(run.trace.flow_problems(), [])
        starts, ends = set(run.trace.flow_starts), set(run.trace.flow_ends)
        self.assertEqual(starts, ends)
        # one flow per transfer, and nothing left without its other side
        self.assertEqual(len(starts), len(run.coll.transfers))
        self.assertEqual(run.coll.unmatched, [])
        self.assertEqual(run.story.problems, [])

    def assert_svg(self, run, by_time=False):
        svg = render.render(run.trace, by_time=by_time)
        path = run.trace_path + (".time.svg" if by_time else ".svg")
        with open(path, "w", encoding="utf-8") as f:
            f.write(svg)
        root = ET.parse(path).getroot()  # well-formed, or this raises
        self.assertEqual(root.tag, SVG_NS + "svg")
        arrows = [e for e in root.iter(SVG_NS + "path") if e.get("class") == "transfer"]
        self.assertEqual(len(arrows), len(run.coll.transfers))
        reductions = [e for e in root.iter(SVG_NS + "g") if e.get("class") == "reduce"]
        # one mark per reduction, plus the legend's example when there are any
        reduced = sum(t.reduce is not None for t in run.coll.transfers)
        self.assertEqual(len(reductions), reduced + (reduced > 0))

    def assert_untraced_identical(self, run):
        self.assertIn("untraced run gave bit-identical outputs on every rank", run.output)
