"""Traces of every algorithm ccl-trace explains besides the ring: the
double binary tree (all-reduce), the binomial tree (broadcast, reduce),
recursive doubling and recursive halving-doubling (all-reduce, folding the
extra ranks in and out when N is not a power of two), Bruck's all-gather,
the pairwise and direct all-to-all, and the single-host direct algorithm
(every collective, one-step and two-step rounds); the hierarchical all-reduce's
three rings (labels, step numbers, which links, totals, the result). For each, over rank counts
that include 1-off-a-power-of-two, primes and 8: every send has its
receive and flow, the replay finds no problem, every rank's replayed
values equal what the run produced, and the traced bytes per rank and
step count equal that algorithm's own formula. The runner also checks
that the traced run's output has the same bits as an untraced one."""

import unittest

from tracetest import TracerTest
from ccl_trace.explain import result_rows


class Algorithms(TracerTest):
    def check(self, algo, coll, ranks, count, root=0, transport=None):
        with self.subTest(algo=algo, coll=coll, ranks=ranks, count=count, root=root, transport=transport):
            run = self.run_coll(coll, ranks, count, algo=algo, root=root, transport=transport)
            label = "chain" if algo == "ring" and coll in ("broadcast", "reduce") else algo
            self.assertEqual(run.coll.algo, label)
            self.assert_flows_paired(run)
            self.assertEqual(run.coll.unmatched, [])
            self.assertEqual(run.story.problems, [])
            rows = result_rows(run.values, run.story)
            self.assertEqual(len(rows), 1 if coll == "reduce" else ranks)
            for r, replayed, produced in rows:
                self.assertEqual(replayed, produced, f"rank {r}: the replay disagrees with the run")
            t = run.totals
            self.assertTrue(t.bytes_ok, f"sent {t.sent} received {t.received}, formula {t.want_sent} "
                                        f"{t.want_received} ({t.formula})")
            self.assertTrue(t.steps_ok, f"{t.steps} steps, formula {t.steps_formula} = {t.want_steps}")
            return run

    def test_tree_all_reduce(self):
        for ranks in (2, 3, 4, 5, 7, 8):
            run = self.check("tree", "all_reduce", ranks, 2 * ranks + 1)
            # A rank with children in both trees (it adds data on the way up
            # in both) does twice the work: only tree 0's root, which has a
            # single child, may, and only when N is odd.
            parents = [{t.dst for t in run.coll.transfers if t.send.phase == "reduce" and t.send.chunk == h}
                       for h in (0, 1)]
            self.assertLessEqual(parents[0] & parents[1], {0} if ranks % 2 else set(), f"{ranks} ranks")
        self.check("tree", "all_reduce", 5, 1)  # one element: the second tree carries nothing
        self.check("tree", "all_reduce", 4, 10, transport="tcp")

    def test_tree_broadcast_reduce(self):
        for ranks, root in ((2, 1), (3, 0), (6, 2), (7, 6)):
            self.check("tree", "broadcast", ranks, 5, root=root)
            self.check("tree", "reduce", ranks, 5, root=root)

    def test_rd_all_reduce(self):
        for ranks in (2, 3, 4, 5, 6, 8):
            self.check("rd", "all_reduce", ranks, 7)
        self.check("rd", "all_reduce", 3, 4, transport="tcp")

    def test_direct(self):
        for ranks in (2, 3, 5):
            for coll in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"):
                self.check("direct", coll, ranks, 7, root=ranks - 1)
        # More than a one-step round: slices reduced by their owners, then gathered.
        self.check("direct", "all_reduce", 3, 3001)
        self.check("direct", "reduce", 3, 3001, root=1)

    def test_rhd_all_reduce(self):
        """Recursive halving-doubling: each exchange moves another part of
        the buffer, so the replay cuts it at every part's edges."""
        for ranks in (2, 3, 4, 5, 6, 7, 8):
            run = self.check("rhd", "all_reduce", ranks, 11)
            self.assertGreater(len({e.key for e in run.story.coll.events}), 1)
        self.check("rhd", "all_reduce", 4, 8, transport="tcp")
        self.check("rhd", "all_reduce", 5, 64)
        self.check("rhd", "all_reduce", 8, 1)  # most halves hold nothing

    def test_bruck_all_gather(self):
        for ranks in (2, 3, 5, 6, 7, 8):
            for count in (1, 3):
                self.check("bruck", "all_gather", ranks, count)
        self.check("bruck", "all_gather", 3, 2, transport="tcp")

    def test_all_to_all(self):
        """Pairwise and direct all-to-all: each block goes from its place in
        the sender's input to the sender's place in the receiver's output."""
        for algo in ("pairwise", "direct"):
            for ranks in (2, 3, 5, 8):
                for count in (1, 3):
                    run = self.check(algo, "all_to_all", ranks, count)
                    for t in run.story.coll.transfers:
                        self.assertEqual((t.send.space, t.recv.space), ("in", "out"))
        self.check("pairwise", "all_to_all", 3, 2, transport="tcp")

    def test_bruck_all_to_all(self):
        """Bruck's all-to-all packs the blocks of a step into one message:
        the replay unpacks them into their places in the work buffer, moves
        each once per 1 bit of its distance, and the final rotation gives
        the run's output."""
        for ranks in (2, 3, 5, 6, 7, 8):
            for count in (1, 3):
                run = self.check("bruck", "all_to_all", ranks, count)
                moved = {(t.src, t.send.offset // (count * run.values.esize)) for t in run.story.coll.transfers
                         if t.step == 0}
                self.assertEqual({k for _, k in moved}, {k for k in range(ranks) if k & 1})
        self.check("bruck", "all_to_all", 5, 2, transport="tcp")

    def test_hier_all_reduce(self):
        # (ranks, ranks per host, count): 2x2, 3 hosts of 2 (count not divisible), 2 hosts of 3, one per host
        for ranks, per_host, count in ((4, 2, 12), (6, 2, 13), (6, 3, 7), (3, 1, 5)):
            with self.subTest(ranks=ranks, per_host=per_host, count=count):
                run = self.run_coll("all_reduce", ranks, count, algo="hier", ranks_per_host=per_host)
                self.assertEqual({e.algo for e in run.coll.events}, {"hier"})
                self.assert_flows_paired(run)
                self.assertEqual(run.coll.unmatched, [])
                L, H = per_host, ranks // per_host
                # inside (L-1 steps), across (2(H-1)), inside again (L-1), numbered in that order
                self.assertEqual(sorted(run.coll.steps), list(range(2 * (L - 1) + 2 * (H - 1))))
                for t in run.coll.transfers:
                    across = L - 1 <= t.step < L - 1 + 2 * (H - 1)
                    self.assertEqual(t.src // L != t.dst // L, across, f"{t} in step {t.step}")
                    self.assertLessEqual(t.send.offset + t.send.bytes, count * run.values.esize)
                t = run.totals
                self.assertTrue(t.bytes_ok, f"sent {t.sent} received {t.received}, formula {t.want_sent} "
                                            f"{t.want_received}")
                self.assertTrue(t.steps_ok, f"{t.steps} steps, formula {t.steps_formula} = {t.want_steps}")
                want = [sum(run.values.inputs[r][i] for r in range(ranks)) for i in range(count)]
                for r in range(ranks):
                    self.assertEqual(run.values.outputs[r], want, f"rank {r}")


if __name__ == "__main__":
    unittest.main()
