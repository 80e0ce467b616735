"""`ccl-plan --train`: its arithmetic against the lessons' worked examples
and formulas, and its predicted calls against real runs of the
parallelism programs, counted by `ccl-trace summary` and by the programs
themselves. ctest passes CCL_PLAN (the built ccl-plan), CCL_LIBRARY_PATH
(libccl) and CCLRUN."""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TOOLS)
PLAN = os.environ.get("CCL_PLAN", "")
LIB = os.environ.get("CCL_LIBRARY_PATH", "")
CCLRUN = os.environ.get("CCLRUN", "")
LESSONS = os.path.join(ROOT, "examples", "parallelism")
# the lessons' MLP (lesson.py's default --sizes 32,64,64,8): W and b per layer
MLP_LAYERS = [32 * 64 + 64, 64 * 64 + 64, 64 * 8 + 8]


def plan(*args, ok=True):
    p = subprocess.run([PLAN, "--train", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, CCL_TUNING_FILE="none"), timeout=120)
    if ok and p.returncode != 0:
        raise AssertionError(f"ccl-plan --train {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def configs(*args):
    return json.loads(plan(*args, "--json").stdout)


def printed_plan(out):
    """The planner command a lesson printed for its own run, as arguments."""
    m = re.search(r"the planner's view of this run: ccl-plan --train (.*)$", out, re.M)
    if not m:
        raise AssertionError("the lesson printed no planner command:\n" + out)
    return m.group(1).split()


class Arithmetic(unittest.TestCase):
    def setUp(self):
        if not PLAN or not os.access(PLAN, os.X_OK):
            self.fail("CCL_PLAN must name the built ccl-plan (ctest sets it)")

    def per_param(self, precision, n, zero, *extra):
        psi = 720720  # divisible by every N used here: no padding
        doc = configs("--params", str(psi), "--gpus", str(n), "--dp", str(n), "--zero", str(zero), "--precision",
                      precision, "--batch", "840", *extra)
        (c,) = doc["configs"]
        return c["memory"]["total"] / psi

    def test_zero_bytes_per_parameter_as_the_lesson_teaches(self):
        """Mixed precision with Adam and fp32 master weights: 16, 4 + 12/N,
        2 + 14/N, 16/N bytes per parameter; the float64 programs': 32,
        16 + 16/N, 8 + 24/N, 32/N; the issue's default (no master copy): 12."""
        for n in (2, 3, 5, 8):
            with self.subTest(n=n):
                taught = [16, 4 + 12 / n, 2 + 14 / n, 16 / n]
                ours = [32, 16 + 16 / n, 8 + 24 / n, 32 / n]
                for z in range(4):
                    self.assertAlmostEqual(self.per_param("mixed", n, z, "--master-weights"), taught[z])
                    self.assertAlmostEqual(self.per_param("fp64", n, z), ours[z])
                self.assertAlmostEqual(self.per_param("mixed", n, 0), 12)
                self.assertAlmostEqual(self.per_param("mixed", n, 0, "--optimizer", "sgd"), 4)

    def test_transformer_messages_and_the_bubble(self):
        """Tensor parallelism: four all-reduces of s x b x h activations per
        layer and micro-batch; pipeline: activations on and gradients back
        per micro-batch; the bubble (P-1)/(K+P-1); activations s b h (10 +
        24/t) per layer at 16 bits, min(K, P) micro-batches in flight."""
        L, h, s, b, B = 8, 1024, 512, 2, 64
        doc = configs("--params", "1e9", "--layers", str(L), "--hidden", str(h), "--seq", str(s), "--micro-batch",
                      str(b), "--batch", str(B), "--gpus", "16", "--gpus-per-node", "4", "--tp", "4", "--pp", "2",
                      "--zero", "0")
        (c,) = doc["configs"]
        d, K, P, t = 2, B // (2 * b), 2, 4
        self.assertEqual((c["dp"], c["micro_batches"]), (d, K))
        self.assertAlmostEqual(c["bubble"], (P - 1) / (K + P - 1), places=6)
        msg = s * b * h * 2
        comm = {(e["group"], e["collective"]): e for e in c["comm"]}
        self.assertEqual(comm[("tensor", "all_reduce")]["bytes"], msg)
        self.assertEqual(comm[("tensor", "all_reduce")]["calls"], 4 * (L // P) * K)
        self.assertEqual(comm[("pipeline", "send/recv")]["bytes"], msg)
        self.assertEqual(comm[("pipeline", "send/recv")]["calls"], 2 * K)
        # data parallelism: this stage's gradients, cut by t, in DDP's buckets of 25 MiB
        buckets = [e for e in c["comm"] if e["group"] == "data"]
        self.assertEqual({e["collective"] for e in buckets}, {"all_reduce"})
        self.assertEqual(sum(e["bytes"] * e["calls"] for e in buckets), (L // P) * (1e9 / L / t) * 2)
        self.assertEqual(max(e["bytes"] for e in buckets), 25 << 20)
        self.assertAlmostEqual(c["memory"]["activations"], (L // P) * s * b * h * (10 + 24 / t) * min(K, P), places=0)
        for e in c["comm"]:
            self.assertGreater(e["us"], 0)

    def test_ranking_and_fit(self):
        doc = configs("--preset", "llama2-13b", "--gpus", "64", "--intra", "2,150", "--inter", "5,25", "--reduce",
                      "1000")
        cs = doc["configs"]
        self.assertEqual(doc["recommended"], 0)
        fits = [c for c in cs if c["fits"]]
        self.assertTrue(fits and cs[0]["fits"])
        self.assertEqual([c["step_ms"] for c in fits], sorted(c["step_ms"] for c in fits))
        for c in cs:
            self.assertEqual(c["dp"] * c["tp"] * c["pp"], 64)
            self.assertEqual(c["fits"], c["memory"]["total"] <= 80 * 2 ** 30)
            self.assertAlmostEqual(c["step_ms"], c["compute_ms"] + c["comm_ms"], places=2)
        self.assertIn("shortest estimated step", doc["reason"])
        text = plan("--preset", "llama2-13b", "--gpus", "64", "--intra", "2,150", "--inter", "5,25").stdout
        self.assertRegex(text, r"Recommended: dp \d+ x tp \d+ x pp \d+, ZeRO-\d")
        # one GPU of 16 GiB cannot hold 70 billion parameters
        text = plan("--preset", "llama2-70b", "--gpus", "1", "--gpu-mem", "16").stdout
        self.assertIn("Nothing fits in 16 GiB per GPU", text)

    def test_bad_input(self):
        cases = [((), "the model"), (("--params", "1e9"), "--gpus"), (("--params", "1e9", "--preset", "llama2-7b",
                 "--gpus", "8"), "not several"), (("--params", "x", "--gpus", "8"), "not a number"),
                 (("--params", "1e9", "--gpus", "8", "--zero", "4"), "--zero"),
                 (("--preset", "nope", "--gpus", "8"), "--preset nope"),
                 (("--params", "1e9", "--gpus", "8", "--precision", "fp8"), "--precision fp8"),
                 (("--params", "1e9", "--gpus", "8", "--intra", "fast"), "--intra"),
                 (("--params", "1e9", "--gpus", "8", "--precision", "fp32", "--master-weights"), "already"),
                 (("--params", "1e9", "--gpus", "8", "--dp", "3"), "no data x tensor x pipeline split"),
                 (("--layer-params", "1,,2", "--gpus", "2"), "--layer-params")]
        for args, said in cases:
            with self.subTest(args=args):
                p = plan(*args, ok=False)
                self.assertEqual(p.returncode, 2, p.stdout)
                self.assertIn(said, p.stderr)
                self.assertTrue(p.stderr.startswith("ccl-plan: "), p.stderr)


def lesson_run(tmp, name, n, prog, *args):
    """Runs a lesson traced with the ring forced; returns (its output, ccl-trace summary's calls by (kind, size))."""
    trace = os.path.join(tmp, name + ".json")
    env = dict(os.environ, CCL_TRACE=trace, CCL_ALGO="ring")
    p = subprocess.run(["sh", os.path.join(LESSONS, "run_lesson.sh"), LIB, CCLRUN, str(n), prog, *args],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=400)
    if p.returncode == 77:
        raise unittest.SkipTest(p.stdout.strip())
    if p.returncode != 0:
        raise AssertionError(p.stdout)
    s = subprocess.run([sys.executable, os.path.join(TOOLS, "ccl-trace"), "summary", trace], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, check=True)
    calls = {}
    for m in re.finditer(r"^  (\w+) +ring +([\d,]+) B x (\d+) +calls?", s.stdout, re.M):
        calls[(m.group(1), int(m.group(2).replace(",", "")))] = int(m.group(3))
    return p.stdout, calls


class AgainstTheLessons(unittest.TestCase):
    """The planner's calls per step, times the steps, are the calls the real
    program made (by the trace) and says it made (its own count)."""

    steps = 4

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="ccl-plan-test-")
        cls.tmp = cls._tmp.name

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def setUp(self):
        for what, v in (("CCL_PLAN", PLAN), ("CCL_LIBRARY_PATH", LIB), ("CCLRUN", CCLRUN)):
            if not v or not os.path.exists(v):
                self.fail(f"{what} must name the built file (ctest sets it)")

    def compare(self, out, traced, planned, program_kinds, once=()):
        """once: calls the program makes once, after its steps and its count (not the planner's)."""
        want = {}
        for e in planned:
            key = (e["collective"], int(e["bytes"]))
            want[key] = want.get(key, 0) + int(e["calls"]) * self.steps
        for e in once:
            want[e] = want.get(e, 0) + 1
        # the trace also holds the printed loss and the final check: small all-reduces the planner does not plan
        got = {k: v for k, v in traced.items() if k in want or not (k[0] == "all_reduce" and k[1] <= 64)}
        self.assertEqual(got, want, out)
        for kind in program_kinds:  # the program's own count: "(C per step, B B per step)"
            m = re.search(rf"^\[0\]   {kind}: \d+ calls?, [\d,]+ buffer bytes \(([\d.]+) per step, ([\d,]+) B per step\)",
                          out, re.M)
            self.assertIsNotNone(m, f"{kind} not in the program's count:\n{out}")
            calls = sum(e["calls"] for e in planned if e["collective"] == kind) * self.steps
            nbytes = sum(e["calls"] * e["bytes"] for e in planned if e["collective"] == kind) * self.steps
            self.assertAlmostEqual(float(m.group(1)), calls / self.steps)
            self.assertEqual(int(m.group(2).replace(",", "")), round(nbytes / self.steps))

    def test_data_parallel(self):
        n, batch = 3, 96
        out, traced = lesson_run(self.tmp, "dp", n, "data_parallel.py", "--steps", str(self.steps), "--log-every",
                                 "100")
        args = ["--layer-params", ",".join(map(str, MLP_LAYERS)), "--precision", "fp64", "--optimizer", "sgd",
                "--gpus", str(n), "--dp", str(n), "--zero", "0", "--batch", str(batch), "--micro-batch", str(batch // n)]
        self.assertEqual(printed_plan(out), args)
        (c,) = configs(*args)["configs"]
        self.assertEqual(c["comm"][0]["bytes"], 8 * sum(MLP_LAYERS))
        self.compare(out, traced, c["comm"], ())

    def test_zero_stages(self):
        n, batch = 4, 96
        for stage in (1, 2, 3):
            with self.subTest(stage=stage):
                out, traced = lesson_run(self.tmp, f"zero{stage}", n, "zero.py", "--stage", str(stage), "--steps",
                                         str(self.steps), "--log-every", "100")
                args = ["--layer-params", ",".join(map(str, MLP_LAYERS)), "--precision", "fp64", "--optimizer",
                        "adam", "--gpus", str(n), "--dp", str(n), "--zero", str(stage), "--batch", str(batch),
                        "--micro-batch", str(batch // n)]
                self.assertEqual(printed_plan(out), args)
                (c,) = configs(*args)["configs"]
                # stage 3's final check gathers every layer once more
                once = [("all_gather", e["bytes"]) for e in c["comm"] if e["collective"] == "all_gather"] \
                    if stage == 3 else []
                self.compare(out, traced, c["comm"], ("reduce_scatter", "all_gather"), once)
                # and the memory the program held on rank 0, per parameter, is the planner's
                m = re.search(r"memory for the model on rank 0: ([\d,]+) B", out)
                self.assertEqual(int(m.group(1).replace(",", "")), c["memory"]["total"], out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
