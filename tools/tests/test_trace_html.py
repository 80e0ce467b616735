"""`ccl-trace html` in a real browser: pages made from real traced runs are
opened by headless Chromium, stepped through by script (the page's own
keyboard and click handlers), and what their panels show is checked
against the replay of the same trace and against the run's own output."""

import json
import os
import shutil
import subprocess
import sys
import unittest
from html.parser import HTMLParser

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tracetest import TOOL, TracerTest  # noqa: E402

from ccl_trace import formulas, html  # noqa: E402
from ccl_trace.pieces import Pieces  # noqa: E402
from ccl_trace.provenance import names  # noqa: E402

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


class Texts(HTMLParser):
    """The text of every element with an id, and the root's attributes."""

    def __init__(self):
        super().__init__()
        self.by_id, self.stack, self.root = {}, [], {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html":
            self.root = a
        if tag in ("meta", "input", "br", "link"):
            return
        self.stack.append(a.get("id"))
        if a.get("id"):
            self.by_id[a["id"]] = ""

    def handle_endtag(self, tag):
        if tag in ("meta", "input", "br", "link") or not self.stack:
            return
        self.stack.pop()

    def handle_data(self, data):
        for i in self.stack:
            if i:
                self.by_id[i] += data


def browse(test, page, script, screenshot=None):
    """Opens page#do=script in headless Chromium; returns (Texts, the dumps)."""
    profile = os.path.join(test.tmp, "profile")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
           "--virtual-time-budget=5000", "--hide-scrollbars"]
    url = f"file://{page}#do={script}"
    if screenshot:
        cmd += ["--window-size=1400,900", f"--screenshot={screenshot}", url]
        subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, check=True)
        return None, None
    proc = subprocess.run(cmd + ["--dump-dom", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120)
    test.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    t = Texts()
    t.feed(proc.stdout)
    test.assertEqual(t.root.get("data-done"), "1", "the page's script did not finish:\n" + proc.stderr[-2000:])
    return t, json.loads(t.by_id["log"])


def holding(run, k, r, key):
    """What the replay says rank r holds of piece key after k steps."""
    held = run.story.initial if k == 0 else run.story.steps[k - 1][3]
    return held[r].get(key, ())


def piece_keys(run):
    """The pieces in the page's order (by offset; an all-to-all's output
    before its input), as the replay cut them."""
    return list(Pieces(run.story.coll, run.ranks).span)


@unittest.skipIf(CHROMIUM is None, "no chromium on PATH (tools/install-deps.sh installs Debian's): the viewer's "
                                   "browser tests need one")
class ViewerInBrowser(TracerTest):
    def page(self, run, name):
        path = os.path.join(self.tmp, name + ".html")
        size = html.write(run.trace_path, path, values_path=run.values_path)
        return path, size

    def test_every_chunk_at_every_step_shows_the_replay(self):
        """Ring all-reduce on 4 ranks: stepping with the arrow key and clicking
        every chunk of every rank, the panel shows the replay's provenance and
        the values; at the end those values are the run's output."""
        run = self.run_coll("all_reduce", 4, 10)
        page, _ = self.page(run, "ring4")
        keys = piece_keys(run)
        S = len(run.story.steps)
        script = []
        for k in range(S + 1):
            if k:
                script.append("key:ArrowRight")
            script += [f"click:{r}.{p},dump" for r in range(4) for p in range(len(keys))]
        _, log = browse(self, page, ",".join(script))
        self.assertEqual(len(log), (S + 1) * 4 * len(keys))
        parts = {k: next((e.offset, e.bytes) for e in run.coll.events if e.key == k) for k in keys}
        for d in log:
            k, (r, p) = d["k"], d["sel"]
            key = keys[p]
            prov = holding(run, k, r, key)
            self.assertEqual(d["holds"].split(" (")[0], f"holds {names(prov)}" if prov else "holds nothing yet",
                             f"step {k}, rank {r}, {key}")
            if prov:
                self.assertEqual(d["values"], "values: " + run.values.piece(prov, *parts[key]))
            # the history names every rank summed in, and the steps it took
            for q in set(prov):
                self.assertTrue(any(f"r{q}" in line for line in d["history"]), (k, r, key, d["history"]))
            arrived = [run.story.steps[j][0] for j in range(k) for m in run.story.steps[j][2]
                       if m.transfer.dst == r and m.transfer.send.key == key]
            if arrived:  # the last delivery to this rank is in its history, with its step
                self.assertTrue(any(h.startswith(f"step {arrived[-1]} ") and f"r{r} got" in h for h in d["history"]),
                                (k, r, key, d["history"]))
        # at the end every chunk shows the run's real output, element for element
        for d in log[-4 * len(keys):]:
            r, p = d["sel"]
            off, nb = parts[keys[p]]
            want = run.values.outputs[r][off // run.values.esize:(off + nb) // run.values.esize]
            shown = d["values"].removeprefix("values: [").removesuffix("]").split(" ...")[0].split()
            self.assertEqual([int(v) for v in shown], want[:len(shown)])

    def test_pieces_cut_by_the_replay(self):
        """Algorithms whose transfers carry other parts of the buffer from
        step to step (recursive halving-doubling, Bruck's all-gather) or put
        a block elsewhere than it came from (all-to-all): at every step every
        chunk of every rank shows the replay's provenance, and at the end
        every chunk of the output shows the run's real output."""
        for coll, algo, n, count in (("all_reduce", "rhd", 5, 11), ("all_gather", "bruck", 5, 2),
                                     ("all_to_all", "pairwise", 3, 2), ("all_to_all", "direct", 4, 1),
                                     ("all_to_all", "bruck", 5, 2)):
            with self.subTest(coll=coll, algo=algo, ranks=n):
                run = self.run_coll(coll, n, count, algo=algo, compare=False)
                page, _ = self.page(run, f"cut-{algo}-{coll}")
                pcs = Pieces(run.story.coll, n)
                keys = list(pcs.span)
                S = len(run.story.steps)
                script = []
                for k in range(S + 1):
                    script += (["key:ArrowRight"] if k else []) + [f"click:{r}.{p},dump" for r in range(n)
                                                                   for p in range(len(keys))]
                _, log = browse(self, page, ",".join(script))
                self.assertEqual(len(log), (S + 1) * n * len(keys))
                for d in log:
                    k, (r, p) = d["k"], d["sel"]
                    prov = holding(run, k, r, keys[p])
                    self.assertEqual(d["holds"].split(" (")[0], f"holds {names(prov)}" if prov else "holds nothing yet",
                                     f"step {k}, rank {r}, {pcs.label[keys[p]]}")
                for d in log[-n * len(keys):]:
                    r, p = d["sel"]
                    off, nb, space = pcs.span[keys[p]]
                    if space == "in":
                        continue
                    es = run.values.esize
                    if algo == "bruck" and coll == "all_to_all":  # work block K ends at output block r - K
                        bb = count * es
                        off = (r - off // bb) % n * bb + off % bb
                    want = run.values.outputs[r][off // es:(off + nb) // es]
                    shown = d["values"].removeprefix("values: [").removesuffix("]").split(" ...")[0].split()
                    self.assertEqual([int(v) for v in shown], want[:len(shown)], (r, pcs.label[keys[p]]))
                self.assertIn("(matches)", log[-1]["steps"])
                t = formulas.totals(run.coll, run.values, algo)
                self.assertEqual(log[-1]["sent"], [t.want_sent[r] for r in range(n)])

    def test_totals_keep_pace_and_end_on_the_formula(self):
        run = self.run_coll("all_reduce", 5, 13)
        page, _ = self.page(run, "ring5")
        S = len(run.story.steps)
        _, log = browse(self, page, ",".join(["dump"] + ["key:ArrowRight,dump"] * S))
        for d in log:
            k = d["k"]
            want_sent = [sum(m.transfer.send.bytes for j in range(k) for m in run.story.steps[j][2]
                             if m.transfer.src == r) for r in range(5)]
            self.assertEqual(d["sent"], want_sent)
            self.assertEqual(sum(d["received"]), sum(want_sent))
            self.assertEqual(d["moves"], len(run.story.steps[k - 1][2]) if k else 0)
        t = formulas.totals(run.coll, run.values, "ring")
        self.assertTrue(t.ok)
        self.assertEqual(log[-1]["sent"], [t.want_sent[r] for r in range(5)])
        self.assertIn(f"2(N-1) = {2 * 4}", log[-1]["steps"])
        self.assertIn("(matches)", log[-1]["steps"])

    def test_keyboard(self):
        run = self.run_coll("reduce_scatter", 3, 4)
        page, _ = self.page(run, "rs3")
        S = len(run.story.steps)
        texts, log = browse(self, page, "key:ArrowRight,key:ArrowRight,key:ArrowLeft,dump,key:End,dump,key:Home,dump,"
                                        "click:1.0,dump,key:Escape,dump,key:Space,dump")
        self.assertEqual([d["k"] for d in log], [1, S, 0, 0, 0, 0])
        self.assertIn(f"(1 of {S}", log[0]["label"])
        self.assertIn("Start", log[2]["label"])
        self.assertEqual(log[3]["sel"], [1, 0])
        self.assertIsNone(log[4]["sel"])
        self.assertIn("Click a chunk", log[4]["title"])
        self.assertEqual(log[5]["play"], "pause")  # space started playing
        # and playing went on by itself, to the end, in the browser's time
        self.assertEqual(json.loads(texts.by_id["state"])["k"], S)

    def test_every_algorithm_and_collective(self):
        """One page per algorithm libccl traces: at the last step the totals
        are the traced ones and, where the algorithm has a formula, match it;
        the last chunk of the last rank shows the replay's provenance."""
        cases = [("all_reduce", "tree", 6, {}), ("broadcast", "tree", 7, {"root": 2}), ("reduce", "tree", 5, {}),
                 ("all_reduce", "rd", 5, {}), ("all_reduce", "direct", 3, {}), ("all_gather", "direct", 4, {}),
                 ("reduce_scatter", "ring", 2, {}), ("all_gather", "ring", 3, {}), ("broadcast", "ring", 4, {}),
                 ("all_reduce", "hier", 6, {"ranks_per_host": 3})]
        for coll, algo, n, kw in cases:
            with self.subTest(coll=coll, algo=algo, ranks=n):
                count = 2 if coll in ("reduce_scatter", "all_gather") else 2 * n + 1
                run = self.run_coll(coll, n, count, algo=algo, compare=False, **kw)
                page, _ = self.page(run, f"{algo}-{coll}-{n}")
                keys = piece_keys(run)
                _, log = browse(self, page, f"key:End,click:{n - 1}.{len(keys) - 1},dump")
                d = log[0]
                t = formulas.totals(run.coll, run.values, run.coll.algo)
                self.assertEqual(d["sent"], [t.sent[r] for r in range(n)])
                self.assertEqual(d["received"], [t.received[r] for r in range(n)])
                self.assertIn("(matches)", d["steps"])
                prov = holding(run, len(run.story.steps), n - 1, keys[-1])
                self.assertEqual(d["holds"].split(" (")[0], f"holds {names(prov)}" if prov else "holds nothing yet")

    def test_sixteen_ranks_page_is_small_and_works(self):
        run = self.run_coll("all_reduce", 16, 64, compare=False)
        page, size = self.page(run, "ring16")
        self.assertLess(size, 1 << 20)
        _, log = browse(self, page, "key:End,click:15.0,dump")
        self.assertEqual(log[0]["holds"].split(" (")[0], "holds " + names(holding(run, 30, 15, (0, 0))))
        self.assertIn("(matches)", log[0]["steps"])

    def test_screenshot(self):
        run = self.run_coll("all_reduce", 4, 8)
        page, _ = self.page(run, "shot")
        png = os.path.join(self.tmp, "shot.png")
        browse(self, page, "goto:3,click:1.1", screenshot=png)
        with open(png, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
        self.assertGreater(len(data), 20000)  # a drawn page, not a blank one


class ViewerCommandLine(TracerTest):
    def test_not_a_trace(self):
        bad = os.path.join(self.tmp, "bad.json")
        with open(bad, "w") as f:
            f.write("{}")
        p = subprocess.run([sys.executable, TOOL, "html", bad, "-o", os.path.join(self.tmp, "x.html")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("not a trace", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x.html")))

    def test_no_such_call_and_no_values_needed(self):
        run = self.run_coll("all_reduce", 3, 7)
        out = os.path.join(self.tmp, "novalues.html")
        p = subprocess.run([sys.executable, TOOL, "html", run.trace_path, "-o", out, "--seq", "99"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("no #99", p.stderr)
        p = subprocess.run([sys.executable, TOOL, "html", run.trace_path, "-o", out],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        # without the values file the formula still comes from the trace alone
        data = html.payload(run.trace, run.coll)
        self.assertIsNone(data["values"])
        t = formulas.totals(run.coll, run.values, "ring")
        self.assertEqual(data["totals"]["want_sent"], [t.want_sent[r] for r in range(3)])
        with open(out, encoding="utf-8") as f:
            text = f.read()
        self.assertNotIn("http://", text.replace("http://www.w3.org/2000/svg", ""))  # self-contained
        self.assertNotIn("<script src", text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
