"""Elastic communicators from Python, on real processes: revoke, shrink
after a real kill, shrink by list, grow with newcomers (and an intruder
refused), each new Comm checked against a numpy reference on every rank."""
import multiprocessing as mp
import os
import signal
import time
import traceback

import numpy as np
import pytest

import ccl
from ranks import run


def check(comm, salt=0):
    """all_reduce of every dtype, exact sums: every rank computes the reference."""
    for dt in ("int8", "int32", "int64", "float16", "float32", "float64"):
        for count in (0, 1, 7, 1001):
            x = ((np.arange(count) * 7 + comm.rank * 3 + salt) % 5 + 1).astype(dt)
            want = sum(((np.arange(count) * 7 + r * 3 + salt) % 5 + 1) for r in range(comm.size)).astype(dt)
            comm.all_reduce(x)  # in place
            got = x
            assert np.array_equal(got, want), (dt, count, got[:5], want[:5])


def test_revoke_then_shrink():
    def body(comm):
        if comm.rank == 1:
            comm.barrier()
            time.sleep(0.2)  # the others leave the barrier first: a revoke ends whatever call it finds
            comm.revoke()
        else:
            comm.barrier()
            with pytest.raises(ccl.Revoked) as e:
                comm.all_reduce(np.ones(1 << 20, np.float32))
            assert "rank 1 revoked" in str(e.value), str(e.value)
        with pytest.raises(ccl.Revoked):
            comm.barrier()
        new = comm.shrink()
        assert (new.rank, new.size) == (comm.rank, comm.size)
        assert comm.failed_ranks() == []
        check(new)
        new.destroy()
    run(3, body, timeout=5)


def test_shrink_after_a_kill():
    def body(comm):
        if comm.rank == 2:
            comm.barrier()
            time.sleep(0.2)  # the others leave the barrier first
            os._exit(9)
        comm.barrier()
        with pytest.raises((ccl.RemoteError, ccl.Revoked)):
            for _ in range(1000):
                comm.all_reduce(np.ones(1 << 16, np.float32))
        new = comm.shrink()
        assert comm.failed_ranks() == [2]
        assert (new.rank, new.size) == ([0, 1, None, 2][comm.rank], 3)
        check(new, salt=1)
        new.destroy()
    with pytest.raises(AssertionError) as e:
        run(4, body, timeout=5, deadline=10)
    assert "rank 0 ---" not in str(e.value) and "rank 1 ---" not in str(e.value) and \
        "rank 3 ---" not in str(e.value) and "[2]" in str(e.value), str(e.value)


def test_shrink_by_list():
    def body(comm):
        if comm.rank == 0:
            with pytest.raises(ccl.Revoked):
                comm.barrier()  # left out: its communicator is revoked under it
            return
        new = comm.shrink(exclude=[0])
        assert (new.rank, new.size) == (comm.rank - 1, 2)
        assert comm.failed_ranks() == [0]
        check(new)
        new.destroy()
    run(3, body, timeout=5)


def test_bad_arguments():
    def body(comm):
        with pytest.raises(ccl.InvalidArgument):
            comm.shrink(exclude=[comm.rank])
        with pytest.raises(ccl.InvalidArgument):
            comm.shrink(exclude=[7])
        if comm.rank == 1:
            with pytest.raises(ccl.InvalidUsage):
                comm.grow_id()
        with pytest.raises(ccl.InvalidArgument):
            ccl.Comm.join(3, 2, b"short")
        check(comm)
    run(2, body, timeout=5)


def _grower(role, rank, uid, q, out):
    """A member (role "member": the first two ranks) or a newcomer."""
    try:
        if role == "member":
            comm = ccl.Comm(2, rank, uid, timeout=10)
            gid = comm.grow_id() if rank == 0 else None
            if rank == 0:
                for _ in range(2):
                    q.put(gid)
            new = comm.grow(3, gid)
            comm.destroy()
        elif role == "intruder":
            gid = q.get(timeout=30)
            with pytest.raises(ccl.Error) as e:
                ccl.Comm.join(3, 0, gid)  # claims member rank 0 with the newcomers' id
            out.put((rank, None))
            return
        else:
            new = ccl.Comm.join(3, rank, q.get(timeout=30))
        assert (new.rank, new.size) == (rank, 3)
        check(new, salt=2)
        new.destroy()
        out.put((rank, None))
    except BaseException:
        out.put((rank, traceback.format_exc()))


def test_grow_with_a_newcomer_and_an_intruder():
    ctx = mp.get_context("fork")
    q, out = ctx.Queue(), ctx.Queue()
    uid = ccl.get_unique_id()
    roles = [("member", 0), ("member", 1), ("newcomer", 2), ("intruder", 3)]
    procs = [ctx.Process(target=_grower, args=(role, r, uid, q, out)) for role, r in roles]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in procs:
            r, err = out.get(timeout=60)
            results[r] = err
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
    bad = {r: e for r, e in results.items() if e}
    assert not bad and len(results) == 4, bad or results
