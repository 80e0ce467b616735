"""The ccl-trace command line and ccl_trace_run's own checks: explain's
story and verdict, render and summary on a real trace, exit status 2 with a
message for what cannot be read, and the flow checker catching a broken
trace."""

import json
import os
import subprocess
import sys
import unittest

from tracetest import RUNNER, TOOL, TracerTest
from ccl_trace.tracefile import load


def tool(*args):
    return subprocess.run([sys.executable, TOOL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=240, env=dict(os.environ, CCL_TRACE_RUN=RUNNER))


class Cli(TracerTest):
    def test_explain_all_reduce(self):
        p = tool("explain", "--ranks", "4")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = p.stdout
        for want in ("== Phase 1: reduce-scatter, steps 0-2 ==", "== Phase 2: all-gather, steps 3-5 ==",
                     "r0 sends c3 (bytes 48-63) to r1, which adds its own c3: c3 = r0+r1",
                     "= [77 88]", "c3 = r0+r1+r2+r3", "1111 2222 3333 4444 5555 6666 7777 8888",
                     "2(N-1)/N x D = 2x3/4 x 64 = 96", "steps: 6 traced, expected 2(N-1) = 6: ok",
                     "Every traced total matches its formula."):
            self.assertIn(want, out)
        self.assertEqual(out.count("MISMATCH"), 0)
        self.assertEqual(out.count(" sends c"), 4 * 6)

    def test_ring_page_quotes_explain_verbatim(self):
        """docs/ring-allreduce.md says its text block is explain's output, verbatim."""
        doc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "ring-allreduce.md")
        with open(doc) as f:
            text = f.read()
        block = text.split("```text\n", 1)[1].split("```", 1)[0]
        p = tool("explain", "--ranks", "4")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(block, p.stdout)

    def test_explain_others_and_keep(self):
        keep = os.path.join(self.tmp, "kept")
        for args in (["reduce_scatter", "--ranks", "3", "--transport", "tcp"], ["all_gather", "--ranks", "5"],
                     ["broadcast", "--ranks", "3", "--root", "2"], ["reduce", "--ranks", "4", "--keep", keep]):
            with self.subTest(args=args):
                p = tool("explain", *args)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                self.assertIn("Every traced total matches its formula.", p.stdout)
        self.assertTrue(os.path.exists(os.path.join(keep, "trace.json")))
        self.assertTrue(os.path.exists(os.path.join(keep, "values.txt")))

    def test_explain_other_algorithms(self):
        """Every other algorithm on the same 4 ranks as the ring above: each
        story with its own structure, phases, values and formula."""
        cases = {
            "tree": ("Tree 0 (carries c0), child -> parent:", "== Phase 1: reduce, steps 0-1 ==",
                     "== Phase 2: broadcast, steps 2-3 ==", "steps: 4 traced, expected 2 x the deepest level (2) = 4: ok"),
            "rd": ("Step 1 partners: r0<->r1, r2<->r3", "Step 2 partners: r0<->r2, r1<->r3",
                   "steps: 2 traced, expected log2(P) = 2 = 2: ok"),
            "direct": ("every rank publishes its data in a shared window", "steps: 1 traced, expected 1 = 1: ok",
                       "r0 sends c0 (bytes 0-63) to r1, which adds its own c0"),
            # halving: r0 keeps the low half and sends the high one to r2, which keeps it
            "rhd": ("Step 1 partners: r0<->r2, r1<->r3", "Step 2 partners: r0<->r1, r2<->r3",
                    "r0 sends c2 (bytes 32-47) to r2, which adds its own c2: c2 = r0+r2 = [505 606]",
                    "== Phase 2: all-gather, steps 3-4 ==", "steps: 4 traced, expected 2 log2(P) = 4 = 4: ok",
                    "2(P-1)/P x D = 96"),
            "hier": ("Hosts (from which transfers stay inside one): {r0 r1}  {r2 r3}",
                     "steps: 4 traced, expected (L-1) + 2(H-1) + (L-1) with L = 2 ranks per host, H = 2 hosts = 4"),
            ("bruck", "all_gather"): ("Step 0 (distance 1): r0->r3, r1->r0, r2->r1, r3->r2",
                                      "Step 1 (distance 2): r0->r2, r1->r3, r2->r0, r3->r1",
                                      "r1 sends c1 (bytes 16-31) to r0, which stores it: c1 = r1 = [10 20]",
                                      "steps: 2 traced, expected ceil(log2 N) = 2 = 2: ok"),
            ("pairwise", "all_to_all"): ("Step 1: r0->r1, r1->r2, r2->r3, r3->r0",
                                         "r0 sends in[1] (bytes 16-31) to r1, which stores it as out[0]: "
                                         "out[0] = r0 = [3 4]", "steps: 3 traced, expected N-1 = 3 = 3: ok"),
            ("bruck", "all_to_all"): ("block cK is its block for rank r + K",
                                      "r0 sends c1 (bytes 16-31) to r1, which stores it: c1 = r0 = [3 4]",
                                      "steps: 2 traced, expected ceil(log2 N) = 2 = 2: ok"),
            ("direct", "all_to_all"): ("every peer reads its own block there",
                                       "r3 sends in[0] (bytes 0-15) to r0,",
                                       "which stores it as out[3]: out[3] = r3 = [1000 2000]",
                                       "steps: 1 traced, expected 1 = 1: ok"),
        }
        for what, wants in cases.items():
            algo, coll = what if isinstance(what, tuple) else (what, "all_reduce")
            with self.subTest(algo=algo, coll=coll):
                p = tool("explain", "--ranks", "4", "--algo", algo, coll)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                self.assertIn(f"A real {algo} {coll} on 4 ranks", p.stdout)
                for want in wants + ("Every traced total matches its formula.",):
                    self.assertIn(want, p.stdout)
                self.assertEqual(p.stdout.count("(the run's output; the replay agrees)"), 4)
                self.assertNotIn("MISMATCH", p.stdout)
                self.assertNotIn("problem:", p.stdout)

    def test_explain_bad_arguments(self):
        for args in (["bogus"], ["--ranks", "1"], ["--algo", "bogus"], ["--algo", "rd", "reduce_scatter"],
                     ["--algo", "tree", "all_gather"], ["--algo", "bruck"], ["--algo", "pairwise"],
                     ["--algo", "hier", "--ranks", "4", "--ranks-per-host", "3"]):
            p = tool("explain", *args)
            self.assertEqual(p.returncode, 2, args)
            self.assertTrue(p.stderr.startswith("ccl-trace: "), p.stderr)

    def test_render_and_summary(self):
        run = self.run_coll("all_reduce", 4, 8, compare=False)
        svg = os.path.join(self.tmp, "cli.svg")
        for extra in ([], ["--time"]):
            p = tool("render", run.trace_path, "-o", svg, *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(svg, encoding="utf-8") as f:
                self.assertEqual(f.read().count("class='transfer'"), 24)
        p = tool("summary", run.trace_path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("all_reduce #0: ring, 6 steps, 24 transfers, 384 bytes", p.stdout)
        self.assertIn("The slowest step is all_reduce #0 step", p.stdout)
        for r in range(4):
            self.assertRegex(p.stdout, rf"\n  r{r} +96 +96 ")

    def test_unusable_files(self):
        empty = os.path.join(self.tmp, "empty.json")
        with open(empty, "w") as f:
            json.dump({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 0}]}, f)
        garbage = os.path.join(self.tmp, "garbage.json")
        with open(garbage, "w") as f:
            f.write("not json")
        cases = {os.path.join(self.tmp, "missing.json"): "cannot read", empty: "no send, receive or reduce events",
                 garbage: "is not JSON"}
        for path, message in cases.items():
            for cmd in (["summary", path], ["render", path, "-o", os.path.join(self.tmp, "x.svg")]):
                p = tool(*cmd)
                self.assertEqual(p.returncode, 2, cmd)
                self.assertIn(message, p.stderr)

    def test_flow_checker_catches_a_lost_end(self):
        run = self.run_coll("all_reduce", 3, 6, compare=False)
        with open(run.trace_path) as f:
            doc = json.load(f)
        lost = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("ph") == "f")
        fid = doc["traceEvents"].pop(lost)["id"]
        broken = os.path.join(self.tmp, "broken.json")
        with open(broken, "w") as f:
            json.dump(doc, f)
        self.assertEqual(load(broken).flow_problems(),
                         [f"flow {fid} starts (ph s) but never finishes (no ph f)"])

    def test_runner_usage(self):
        for args in ([], ["--ranks", "0", "--count", "4", "--coll", "all_reduce", "--out", "x.json"],
                     ["--ranks", "2", "--count", "4", "--coll", "scan", "--out", "x.json"],
                     ["--ranks", "2", "--count", "4", "--coll", "reduce", "--root", "2", "--out", "x.json"],
                     ["--ranks", "2", "--count", "4", "--coll", "reduce", "--out", "t%p.json"]):
            p = subprocess.run([RUNNER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn("ccl_trace_run: ", p.stderr)


if __name__ == "__main__":
    unittest.main()
