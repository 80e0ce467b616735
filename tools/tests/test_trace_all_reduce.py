"""Ring all-reduce, traced for real on 2, 3, 4, 5 and 8 ranks: the traced
bytes and steps equal the textbook formulas exactly, every chunk ends up
made of every rank's data, flows pair up, the picture has one arrow per
transfer, and tracing does not change a single bit of the result."""

import io
import unittest

from tracetest import TracerTest
from ccl_trace import explain


class RingAllReduce(TracerTest):
    def check(self, n, transport=None):
        count = 4 * n  # D divisible by N: the formula is exact
        run = self.run_coll("all_reduce", n, count, transport=transport)
        D = count * 8
        per_rank = 2 * (n - 1) * D // n
        self.assertEqual(run.totals.D, D)
        self.assertEqual(run.totals.sent, {r: per_rank for r in range(n)})
        self.assertEqual(run.totals.received, {r: per_rank for r in range(n)})
        self.assertEqual(run.coll.steps, list(range(2 * (n - 1))))
        self.assertTrue(run.totals.ok)
        for step in range(2 * (n - 1)):
            want = "reduce-scatter" if step < n - 1 else "all-gather"
            self.assertEqual(run.coll.phase_of_step(step), want)
        # count is small: one slot per chunk, so N transfers per step
        self.assertEqual(len(run.coll.transfers), n * 2 * (n - 1))
        self.assertEqual(sum(t.reduce is not None for t in run.coll.transfers), n * (n - 1))
        for r in range(n):
            self.assertEqual(len(run.story.final[r]), n)
            for key, prov in run.story.final[r].items():
                self.assertEqual(sorted(prov), list(range(n)), f"rank {r} chunk {key}: {prov}")
        self.assert_flows_paired(run)
        self.assert_svg(run)
        self.assert_svg(run, by_time=True)
        self.assert_untraced_identical(run)
        out = io.StringIO()
        self.assertTrue(explain.explain(run.trace_path, run.values_path, out=out), out.getvalue())

    def test_2_ranks(self):
        self.check(2)

    def test_3_ranks(self):
        self.check(3)

    def test_4_ranks(self):
        self.check(4)

    def test_5_ranks(self):
        self.check(5)

    def test_8_ranks(self):
        self.check(8)

    def test_4_ranks_tcp(self):
        self.check(4, transport="tcp")

    def test_simulated_hosts_share_one_clock(self):
        # A host per rank (CCL_HOST_ID) on one kernel, talking tcp: they read
        # one monotonic clock, so the trace applies no estimated offsets,
        # and every receive ends after its send began.
        run = self.run_coll("all_reduce", 3, 12, transport="tcp", ranks_per_host=1)
        self.assertEqual(run.trace.other.get("clock_offsets_us"), [0, 0, 0])
        self.assertTrue(run.coll.transfers)
        for t in run.coll.transfers:
            self.assertGreaterEqual(t.recv.ts + t.recv.dur, t.send.ts, f"{t}")

    def test_uneven_blocks(self):
        # 10 elements on 3 ranks: chunks of 4, 3 and 3 elements
        run = self.run_coll("all_reduce", 3, 10)
        D = 80
        self.assertEqual(sum(run.totals.sent.values()), 2 * (3 - 1) * D)
        self.assertEqual(sum(run.totals.received.values()), 2 * (3 - 1) * D)
        self.assertTrue(run.totals.ok)
        sizes = sorted({(t.send.chunk, t.send.bytes) for t in run.coll.transfers})
        self.assertEqual(sizes, [(0, 32), (1, 24), (2, 24)])

    def test_several_rounds(self):
        # 160000 bytes per chunk: more than one 128 KiB shared-memory slot
        run = self.run_coll("all_reduce", 3, 60000, compare=False)
        self.assertGreater(len({t.send.round for t in run.coll.transfers}), 1)
        self.assertEqual(run.totals.sent, {r: 2 * 2 * 480000 // 3 for r in range(3)})
        self.assertEqual(len(run.coll.steps), 4)
        for r in range(3):
            for key, prov in run.story.final[r].items():
                self.assertEqual(sorted(prov), [0, 1, 2], f"rank {r} piece {key}")
        self.assert_flows_paired(run)
        self.assert_svg(run)


if __name__ == "__main__":
    unittest.main()
