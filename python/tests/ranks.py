"""Runs a function on N real processes, one communicator among them:
run(n, fn, *args) forks N ranks (the unique id made here first), calls
fn(comm, *args) in each and fails with every rank's traceback if any rank
raised, exited or hung past the deadline. Used by the tests only."""
import multiprocessing as mp
import os
import signal
import traceback

import ccl


def _rank_main(n, rank, uid, fn, args, q, timeout, algo):
    try:
        comm = ccl.Comm(n, rank, uid, timeout=timeout, algo=algo)
        try:
            fn(comm, *args)
        finally:
            comm.destroy()
        q.put((rank, None))
    except BaseException:
        q.put((rank, traceback.format_exc()))


def run(n, fn, *args, deadline=60, timeout=None, algo=None, env=None):
    """Returns when every rank returned; raises AssertionError naming the
    ranks that failed (and their tracebacks) otherwise. With env (a dict),
    the ranks are fresh interpreters started with it in their environment
    (libccl reads its variables once a process, and a forked rank would
    keep this process's); fn must then be a module-level function."""
    ctx = mp.get_context("spawn" if env else "fork")
    q = ctx.Queue()
    uid = ccl.get_unique_id()
    procs = [ctx.Process(target=_rank_main, args=(n, r, uid, fn, args, q, timeout, algo)) for r in range(n)]
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        for p in procs:
            p.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    results = {}
    try:
        for _ in range(n):
            rank, err = q.get(timeout=deadline)
            results[rank] = err
    except Exception:
        pass
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
            p.join()
    bad = {r: e for r, e in results.items() if e}
    missing = [r for r in range(n) if r not in results]
    msg = "".join(f"\n--- rank {r} ---\n{e}" for r, e in sorted(bad.items()))
    if missing:
        msg += f"\nranks {missing} did not finish within {deadline} s (exit codes " \
               f"{[procs[r].exitcode for r in missing]})"
    assert not bad and not missing, msg
