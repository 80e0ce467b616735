"""ccl-trace flight on dumps written here, byte for byte in the layout
lib/core/flight.h gives, so every rule of the analysis is checked without
waiting for a real job to fail (tests/test_flight.c does that): another
collective at the same number, a call never made, a late arrival, a rank
with no dump, rings that no longer hold the oldest calls, two
communicators in one directory, and files that are not dumps."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TOOLS)

from ccl_trace import flight  # noqa: E402
from ccl_trace.tracefile import TraceError  # noqa: E402

TOOL = os.environ.get("CCL_TRACE_TOOL", os.path.join(TOOLS, "ccl-trace"))
ALL_REDUCE, BROADCAST, P2P = 1, 4, 8
FLOAT32 = 8
RUNNING, DONE, FAILED = 2, 3, 4
T0 = 1_800_000_000.0


def call(seq, kind=ALL_REDUCE, count=33, start=None, end=None, state=DONE, peer=-1, op=0):
    start = T0 + seq if start is None else start
    return {"seq": seq, "kind": kind, "count": count, "start": start,
            "end": (start + 0.01 if state == DONE else 0) if end is None else end, "state": state, "peer": peer,
            "op": op if kind == ALL_REDUCE else -1}


def write_dump(path, rank, nranks, calls, comm=0xABC, capacity=8, reason=1, failed=-5, culprit=0, timeout=2.0,
               error="", dumped_at=None):
    """A dump of the last `capacity` of `calls` (a list of dicts, oldest first)."""
    recorded = len(calls)
    slots = [b"\0" * flight.ENTRY.size] * capacity
    for index, c in enumerate(calls):
        if index < recorded - capacity:
            continue
        slots[index % capacity] = flight.ENTRY.pack(index, c["count"], c["start"], c["end"], c["seq"], c["peer"], 0,
                                                    c["kind"], c["state"], 6, 0, FLOAT32, c["op"], 0)
    first = recorded % capacity  # oldest first, as the library writes them
    ordered = slots[first:] + slots[:first]
    dumped_at = dumped_at if dumped_at is not None else max(c["start"] for c in calls) + timeout
    header = flight.HEADER.pack(flight.MAGIC, 1, flight.HEADER.size, flight.ENTRY.size, capacity, rank, nranks, comm,
                                recorded, 1000 + rank, reason, failed, culprit, dumped_at, timeout, b"host",
                                error.encode())
    with open(path, "wb") as f:
        f.write(header + b"".join(ordered))


class FlightAnalysis(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def dump(self, rank, calls, nranks=3, **kw):
        write_dump(os.path.join(self.dir, f"{kw.get('comm', 0xABC):016x}.{rank}.flight"), rank, nranks, calls, **kw)

    def analyse(self):
        comms = flight.load_dir(self.dir)
        return [flight.analyse(ds) for _, ds in sorted(comms.items())]

    def test_another_collective_at_the_same_number(self):
        good = [call(s) for s in range(4)] + [call(4, state=RUNNING)]
        odd = [call(s) for s in range(4)] + [call(4, kind=BROADCAST, peer=0, state=RUNNING)]
        for r, calls in enumerate([good, odd, good]):
            self.dump(r, calls)
        (a,) = self.analyse()
        self.assertEqual(a["culprits"], [1])
        self.assertIn("rank 1 called broadcast 33 x float32 root 0 as call #4", " ".join(a["findings"]))

    def test_a_call_never_made(self):
        ahead = [call(s) for s in range(5)] + [call(5, state=RUNNING)]
        behind = [call(s) for s in range(5)]
        for r, calls in enumerate([ahead, ahead, behind]):
            self.dump(r, calls)
        (a,) = self.analyse()
        self.assertEqual(a["culprits"], [2])
        self.assertIn("rank 2 never made call #5", " ".join(a["findings"]))

    def test_a_late_arrival(self):
        on_time = [call(s) for s in range(4)] + [call(4, state=FAILED, end=T0 + 6.5)]
        late = [call(s) for s in range(4)] + [call(4, start=T0 + 9.0, state=FAILED, end=T0 + 9.1)]
        for r, calls in enumerate([on_time, late, on_time]):
            self.dump(r, calls)
        (a,) = self.analyse()
        self.assertEqual(a["culprits"], [1])
        self.assertIn("rank 1 entered call #4", " ".join(a["findings"]))

    def test_a_rank_with_no_dump(self):
        calls = [call(s) for s in range(3)] + [call(3, state=RUNNING)]
        self.dump(0, calls)
        self.dump(1, calls)
        (a,) = self.analyse()
        self.assertEqual(a["culprits"], [2])
        self.assertIn("rank 2 left no dump", " ".join(a["findings"]))
        self.assertEqual([row["dump"] for row in a["ranks"]], ["failure", "failure", None])

    def test_rings_that_lost_the_oldest_calls(self):
        # Rank 0 made 20 calls, its ring holds the last 8; the others hold
        # all 20 (a larger ring). Nothing differs where both hold calls.
        calls = [call(s) for s in range(20)]
        self.dump(0, calls, capacity=8, reason=2, failed=0)
        self.dump(1, calls, capacity=32, reason=2, failed=0)
        self.dump(2, calls, capacity=32, reason=2, failed=0)
        (a,) = self.analyse()
        self.assertEqual(a["culprits"], [])
        self.assertEqual(a["findings"], [])
        self.assertEqual(a["ranks"][0]["calls"], 20)

    def test_point_to_point_calls_are_listed_not_compared(self):
        calls = [call(0), call(0, kind=P2P, peer=1), call(1)]
        self.dump(0, calls, nranks=2, reason=2, failed=0)
        self.dump(1, [call(0), call(0, kind=P2P, peer=0), call(1)], nranks=2, reason=2, failed=0)
        (a,) = self.analyse()
        self.assertEqual(a["culprits"], [])

    def test_two_communicators_apart(self):
        good = [call(s) for s in range(3)]
        for r in range(3):
            self.dump(r, good, comm=0x1, reason=2, failed=0)
        self.dump(0, good + [call(3, state=RUNNING)], nranks=2, comm=0x2)
        self.dump(1, good, nranks=2, comm=0x2)
        results = self.analyse()
        self.assertEqual({a["comm"]: a["culprits"] for a in results},
                         {f"{0x1:016x}": [], f"{0x2:016x}": [1]})

    def test_the_command_line(self):
        good = [call(s) for s in range(4)] + [call(4, state=RUNNING)]
        self.dump(0, good, error="all_reduce #4: no progress for 2.0 s")
        self.dump(1, good)
        text = subprocess.run([sys.executable, TOOL, "flight", self.dir], capture_output=True, text=True, check=True)
        self.assertIn("(3 ranks): rank 2 went apart first.", text.stdout)
        self.assertIn("rank 0: all_reduce #4: no progress for 2.0 s", text.stdout)
        out = subprocess.run([sys.executable, TOOL, "flight", self.dir, "--json"], capture_output=True, text=True,
                             check=True)
        (a,) = json.loads(out.stdout)
        self.assertEqual(a["culprits"], [2])
        self.assertEqual(a["ranks"][0]["state"], "running")

    def test_files_that_are_not_dumps(self):
        empty = subprocess.run([sys.executable, TOOL, "flight", self.dir], capture_output=True, text=True)
        self.assertEqual(empty.returncode, 2)
        self.assertIn("no flight recorder dumps", empty.stderr)
        with open(os.path.join(self.dir, "x.0.flight"), "wb") as f:
            f.write(b"not a dump at all" * 10)
        with self.assertRaisesRegex(TraceError, "not a libccl flight recorder dump"):
            flight.load_dir(self.dir)
        os.unlink(os.path.join(self.dir, "x.0.flight"))
        self.dump(0, [call(0)])
        path = os.path.join(self.dir, f"{0xABC:016x}.0.flight")
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[:-10])
        with self.assertRaisesRegex(TraceError, "cut short"):
            flight.load_dir(self.dir)
        bad = subprocess.run([sys.executable, TOOL, "flight", self.dir], capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
