"""`ccl-plan --train`: its arithmetic against the lessons' worked examples
and formulas, and its predicted calls against real runs of the
parallelism programs (data parallel, ZeRO 1-3, tensor, pipeline), counted by the
trace and by the programs themselves. ctest passes CCL_PLAN (the built
ccl-plan), CCL_LIBRARY_PATH (libccl) and CCLRUN."""

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

    def test_mlp_blocks(self):
        """--block mlp: Megatron's MLP block alone, two all-reduces per layer
        and micro-batch, activations s b h (3 + 16/t) at 16 bits."""
        L, h, s, b, B, t = 4, 1024, 256, 1, 8, 2
        doc = configs("--params", "1e8", "--layers", str(L), "--hidden", str(h), "--seq", str(s), "--micro-batch",
                      str(b), "--batch", str(B), "--gpus", str(t), "--tp", str(t), "--block", "mlp")
        self.assertEqual(doc["model"]["block"], "mlp")
        (c,) = doc["configs"]
        (e,) = c["comm"]
        self.assertEqual((e["group"], e["collective"], e["bytes"], e["calls"]), ("tensor", "all_reduce", s * b * h * 2,
                                                                                  2 * L * B))
        self.assertAlmostEqual(c["memory"]["activations"], L * s * b * h * (3 + 16 / t), places=0)

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
                 (("--layer-params", "1,,2", "--gpus", "2"), "--layer-params"),
                 (("--params", "1e9", "--gpus", "8", "--block", "moe"), "--block moe")]
        for args, said in cases:
            with self.subTest(args=args):
                p = plan(*args, ok=False)
                self.assertEqual(p.returncode, 2, p.stdout)
                self.assertIn(said, p.stderr)
                self.assertTrue(p.stderr.startswith("ccl-plan: "), p.stderr)


def lesson_run(tmp, name, n, prog, *args):
    """Runs a lesson traced with the ring forced; returns (its output, ccl-trace summary's calls by (kind, size))."""
    trace = trace_path(tmp, name)
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


def trace_path(tmp, name):
    return os.path.join(tmp, name + ".json")


def messages_sent(trace, rank):
    """The sizes of the point-to-point messages a rank sent, by the trace."""
    sys.path.insert(0, TOOLS)
    from ccl_trace.tracefile import load
    return [e.bytes for e in load(trace).events if e.kind == "send" and e.coll == "send/recv" and e.rank == rank]


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

    def test_tensor_parallel(self):
        """Megatron's MLP block 64 -> 256 -> 64 on 3 ranks: one all-reduce of
        batch x 64 forward and one backward per step, in the trace, in the
        program's count and in the planner's --block mlp."""
        n, batch = 3, 96
        out, traced = lesson_run(self.tmp, "tp", n, "tensor_parallel.py", "--sizes", "32,64,256,64", "--steps",
                                 str(self.steps), "--log-every", "100")
        args = ["--layer-params", str(64 * 256 + 256 + 256 * 64 + 64), "--block", "mlp", "--hidden", "64", "--seq", "1",
                "--precision", "fp64", "--optimizer", "sgd", "--gpus", str(n), "--dp", "1", "--tp", str(n), "--pp",
                "1", "--batch", str(batch), "--micro-batch", str(batch)]
        self.assertEqual(printed_plan(out), args)
        (c,) = configs(*args)["configs"]
        (e,) = c["comm"]
        self.assertEqual((e["group"], e["collective"], e["bytes"], e["calls"]), ("tensor", "all_reduce", batch * 64 * 8, 2))
        # the program's own count: forward and backward, one each per step
        for way in ("forward", "backward"):
            self.assertIn(f"all_reduce {way}: {self.steps} calls, {self.steps * batch * 64 * 8:,} buffer bytes", out)
        # the trace: the planner's calls of that size (the closing check's all-reduces of the split weights
        # and the printed loss are of other sizes)
        self.assertEqual(traced.get(("all_reduce", e["bytes"])), e["calls"] * self.steps, traced)

    def test_pipeline_parallel(self):
        """3 stages, K = 4 micro-batches of 24 rows: a middle stage sends 2K
        messages of one micro-batch's activations (or their gradients) per
        step, as the planner's pipeline does."""
        P, K, batch = 3, 4, 96
        out, _ = lesson_run(self.tmp, "pp", P, "pipeline_parallel.py", "--steps", str(self.steps), "--micro", str(K),
                            "--compute-ms", "0", "--log-every", "100")
        layers = [32 * 64 + 64, 64 * 64 + 64, 64 * 64 + 64, 64 * 8 + 8]  # the lesson's default --sizes 32,64,64,64,8
        args = ["--layer-params", ",".join(map(str, layers)), "--hidden", "64", "--seq", "1", "--precision", "fp64",
                "--optimizer", "sgd", "--gpus", str(P), "--dp", "1", "--tp", "1", "--pp", str(P), "--batch",
                str(batch), "--micro-batch", str(batch // K)]
        self.assertEqual(printed_plan(out), args)
        (c,) = configs(*args)["configs"]
        (e,) = c["comm"]
        self.assertEqual((e["group"], e["collective"]), ("pipeline", "send/recv"))
        self.assertEqual(e["bytes"], batch // K * 64 * 8)
        sent = messages_sent(trace_path(self.tmp, "pp"), 1)
        self.assertEqual(set(sent), {e["bytes"]})
        self.assertEqual(len(sent), e["calls"] * self.steps)
        # the ends send half as much, as the program counts for stage 0
        self.assertEqual(len(messages_sent(trace_path(self.tmp, "pp"), 0)), K * self.steps)
        self.assertIn(f"stage 0 sent {K} messages per step ({K * e['bytes']:,} B)", out)
        self.assertAlmostEqual(c["bubble"], (P - 1) / (K + P - 1), places=6)


if __name__ == "__main__":
    unittest.main(verbosity=2)
