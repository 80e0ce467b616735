"""reduce_scatter, all_gather, broadcast and reduce traced for real: byte
totals and step counts against the formulas, and where every chunk ends up
coming from."""

import io
import unittest

from tracetest import TracerTest
from ccl_trace import explain


class RingCollectives(TracerTest):
    def common(self, run):
        self.assertTrue(run.totals.ok, f"{run.totals.sent} {run.totals.received} {run.totals.steps}")
        self.assertEqual(len(run.coll.steps), run.ranks - 1)
        self.assert_flows_paired(run)
        self.assert_svg(run)
        self.assert_untraced_identical(run)
        out = io.StringIO()
        self.assertTrue(explain.explain(run.trace_path, run.values_path, out=out), out.getvalue())

    def test_reduce_scatter(self):
        for n in (3, 4):
            with self.subTest(ranks=n):
                count = 3
                run = self.run_coll("reduce_scatter", n, count)
                D = n * count * 8
                self.assertEqual(run.totals.sent, {r: (n - 1) * D // n for r in range(n)})
                self.assertEqual(run.totals.received, {r: (n - 1) * D // n for r in range(n)})
                for r in range(n):  # rank r's own chunk is the full sum
                    self.assertEqual(sorted(run.story.final[r][(r, 0)]), list(range(n)))
                self.common(run)

    def test_all_gather(self):
        for n in (3, 4):
            with self.subTest(ranks=n):
                run = self.run_coll("all_gather", n, 2, dtype="int32")
                D = n * 2 * 4
                self.assertEqual(run.totals.sent, {r: (n - 1) * D // n for r in range(n)})
                for r in range(n):  # every rank ends with chunk c = rank c's input
                    self.assertEqual(run.story.final[r], {(c, 0): (c,) for c in range(n)})
                self.assertFalse(any(t.reduce for t in run.coll.transfers))
                self.common(run)

    def test_broadcast(self):
        n, root, count = 4, 1, 8
        run = self.run_coll("broadcast", n, count, root=root)
        D = count * 8
        last = (root - 1) % n  # the chain runs along the ring, which is 0..N-1 on one host
        self.assertEqual(run.totals.sent, {r: 0 if r == last else D for r in range(n)})
        self.assertEqual(run.totals.received, {r: 0 if r == root else D for r in range(n)})
        for r in range(n):
            self.assertEqual(run.story.final[r][(0, 0)], (root,))
        self.common(run)

    def test_reduce(self):
        n, root, count = 4, 2, 8
        run = self.run_coll("reduce", n, count, root=root)
        D = count * 8
        first = (root + 1) % n
        self.assertEqual(run.totals.sent, {r: 0 if r == root else D for r in range(n)})
        self.assertEqual(run.totals.received, {r: 0 if r == first else D for r in range(n)})
        self.assertEqual(sorted(run.story.final[root][(0, 0)]), list(range(n)))
        self.common(run)


if __name__ == "__main__":
    unittest.main()
