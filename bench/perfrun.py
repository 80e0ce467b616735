"""What the bench scripts share: one sweep of a *_perf program on local
ranks, and its out-of-place rows read back from the CSV it writes."""
import argparse
import csv
import os
import re
import subprocess
import tempfile


def parse_size(s):
    """Bytes from '8', '64K', '16M', '1G' (powers of 1024): an argparse type."""
    m = re.fullmatch(r"(\d+)([KMG]?)", s)
    if not m:
        raise argparse.ArgumentTypeError(f"{s!r} is not a size (8, 64K, 16M)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def perf_cmd(build, coll, transport, ranks, b, e, f, iters, warmup, *extra):
    """The command line of one sweep of build/bench/<coll>_perf on `ranks`
    local ranks over `transport` (tcp: each rank its own host)."""
    cmd = [os.path.join(build, "bench", f"{coll}_perf"), "--ranks", str(ranks), "--transport", transport,
           "-b", str(b), "-e", str(e), "-f", str(f), "-n", str(iters), "-w", str(warmup), *extra]
    return cmd + (["--host-per-rank"] if transport == "tcp" else [])


def sweep(cmd, env=None, stderr=False):
    """Runs cmd writing its CSV to a temporary file: (exit status, the
    out-of-place rows as dicts (none when it failed), its stderr when
    asked for, else None)."""
    status, rows, err, _ = sweep_footer(cmd, env, stderr)
    return status, rows, err


def sweep_footer(cmd, env=None, stderr=False):
    """sweep(), and the report's footer lines ("# Steady : ...") last."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as out:
        r = subprocess.run(cmd + ["--csv", out.name], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE if stderr else subprocess.DEVNULL, text=True)
        rows = []
        if r.returncode == 0:
            with open(out.name, newline="") as f:
                rows = [row for row in csv.DictReader(f) if row["placement"] == "out"]
        footer = [line for line in r.stdout.splitlines() if line.startswith("# Steady")]
        return r.returncode, rows, r.stderr, footer
