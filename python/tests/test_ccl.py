"""import ccl on real processes: every collective and dtype against a
numpy reference computed here (bit-exact: values whose sums are exact),
rank counts 1, 2, 3 and 5, counts 0, 1 and 7 and 1001; buffers of every
kind; async requests, groups, split; bad arguments caught before anything
is sent; errors with the library's sentence; the GIL released while a call
waits; abort, timeout and a killed rank."""
import multiprocessing as mp
import os
import pickle
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ccl
from ranks import run

RANKS = [1, 2, 3, 5]
COUNTS = [0, 1, 7, 1001]
NP_DTYPES = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "uint32": np.uint32, "int64": np.int64,
             "uint64": np.uint64, "float16": np.float16, "float32": np.float32, "float64": np.float64}


def data(rank, count, dt, salt=0):
    """Small integers (exact in every dtype, sums and products included)."""
    v = (np.arange(count, dtype=np.int64) * 7 + rank * 3 + salt) % 5 + 1
    return v.astype(NP_DTYPES[dt])


def reference(inputs, op, dt):
    n = len(inputs)
    stack = np.stack(inputs).astype(np.float64 if dt.startswith("float") else np.int64)
    if op == "sum":
        r = stack.sum(axis=0)
    elif op == "prod":
        r = stack.prod(axis=0)
    elif op == "max":
        r = stack.max(axis=0)
    elif op == "min":
        r = stack.min(axis=0)
    elif op in ("band", "bor", "bxor"):
        f = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op]
        r = f.reduce(stack, axis=0)
    else:  # avg: the sum divided in the element type; integers truncate toward zero
        s = stack.sum(axis=0)
        if dt.startswith("float"):
            return (s.astype(NP_DTYPES[dt]) / NP_DTYPES[dt](n)).astype(NP_DTYPES[dt])
        r = np.fix(s / n).astype(np.int64)
    return r.astype(NP_DTYPES[dt])


def check_all_reduce(comm, dt, count):
    for op in ccl.OPS:
        if op.startswith("b") and dt.startswith("float"):
            with pytest.raises(ccl.InvalidArgument, match="for integer dtypes"):
                comm.all_reduce(data(comm.rank, count, dt), op=op)
            continue
        mine = data(comm.rank, count, dt)
        want = reference([data(r, count, dt) for r in range(comm.size)], op, dt)
        out = np.full(count, 99, dtype=NP_DTYPES[dt])
        comm.all_reduce(mine, out, op=op)
        np.testing.assert_array_equal(out, want, err_msg=f"all_reduce {op} {dt} count {count}")
        comm.all_reduce(mine, op=op)  # in place
        np.testing.assert_array_equal(mine, want, err_msg=f"in-place all_reduce {op} {dt} count {count}")


def check_rest(comm, dt, count):
    n, me = comm.size, comm.rank
    ins = [data(r, count * n, dt, 1) for r in range(n)]
    # reduce_scatter
    out = np.zeros(count, NP_DTYPES[dt])
    comm.reduce_scatter(ins[me], out, op="max")
    np.testing.assert_array_equal(out, reference(ins, "max", dt)[me * count:(me + 1) * count])
    # all_gather
    out = np.zeros(count * n, NP_DTYPES[dt])
    comm.all_gather(data(me, count, dt, 2), out)
    np.testing.assert_array_equal(out, np.concatenate([data(r, count, dt, 2) for r in range(n)]))
    # broadcast and reduce from the last rank
    root = n - 1
    buf = data(me, count, dt, 3) if me == root else np.zeros(count, NP_DTYPES[dt])
    comm.broadcast(buf, root=root)
    np.testing.assert_array_equal(buf, data(root, count, dt, 3))
    out = np.zeros(count, NP_DTYPES[dt])
    comm.reduce(data(me, count, dt, 4), out, root=root, op="sum")
    if me == root:
        np.testing.assert_array_equal(out, reference([data(r, count, dt, 4) for r in range(n)], "sum", dt))
    # all_to_all: block p of rank r is data(r, ...)[p]
    out = np.zeros(count * n, NP_DTYPES[dt])
    comm.all_to_all(ins[me], out)
    want = np.concatenate([ins[r][me * count:(me + 1) * count] for r in range(n)])
    np.testing.assert_array_equal(out, want)
    # gather and scatter at root 0
    g = np.zeros(count * n, NP_DTYPES[dt]) if me == 0 else None
    comm.gather(data(me, count, dt, 5), g, root=0)
    if me == 0:
        np.testing.assert_array_equal(g, np.concatenate([data(r, count, dt, 5) for r in range(n)]))
    part = np.zeros(count, NP_DTYPES[dt])
    comm.scatter(ins[0] if me == 0 else None, part, root=0)
    np.testing.assert_array_equal(part, ins[0][me * count:(me + 1) * count])
    # all_to_all_v: rank r sends (r + p) % 3 * count // 2 elements to p
    sc = [(me + p) % 3 * count // 2 for p in range(n)]
    rc = [(p + me) % 3 * count // 2 for p in range(n)]
    send = data(me, sum(sc), dt, 6)
    recv = np.zeros(sum(rc), NP_DTYPES[dt])
    comm.all_to_all_v(send, sc, recv, rc)
    at = 0
    for p in range(n):
        theirs = data(p, sum((p + q) % 3 * count // 2 for q in range(n)), dt, 6)
        off = sum((p + q) % 3 * count // 2 for q in range(me))
        np.testing.assert_array_equal(recv[at:at + rc[p]], theirs[off:off + rc[p]], err_msg=f"from rank {p}")
        at += rc[p]


@pytest.mark.parametrize("n", RANKS)
def test_every_collective_every_dtype(n):
    def body(comm):
        for dt in NP_DTYPES:
            for count in COUNTS:
                check_all_reduce(comm, dt, count)
                check_rest(comm, dt, count)
        comm.barrier()
    run(n, body, deadline=240)


def test_buffers_of_every_kind():
    def body(comm):
        b = bytearray(range(16))
        comm.all_reduce(b, op="max")  # uint8 from the format
        assert list(b) == list(range(16))
        m = memoryview(bytearray(8)).cast("f")  # 2 float32
        m[0], m[1] = comm.rank, 1.0
        comm.all_reduce(m)
        assert list(m) == [sum(range(comm.size)), float(comm.size)]
        # bfloat16 bits in a uint16 array: 1.0 is 0x3f80; the sum of three is 3.0 = 0x4040
        bf = np.full(4, 0x3F80, np.uint16)
        comm.all_reduce(bf, dtype="bfloat16")
        assert (bf == 0x4040).all(), bf
        # raw bytes with an explicit dtype, a read-only send buffer
        ro = np.full(3, 2, np.int32)
        ro.setflags(write=False)
        out = bytearray(12)
        comm.all_reduce(ro, out, dtype=ccl.INT32)
        assert np.frombuffer(out, np.int32).tolist() == [6, 6, 6]
        # 2-D C-contiguous arrays
        x = np.ones((3, 4), np.float64)
        comm.all_reduce(x)
        assert (x == 3).all()
    run(3, body)


def test_async_requests_and_groups():
    def body(comm):
        n, me = comm.size, comm.rank
        xs = [np.full(1000, me + i, np.float32) for i in range(4)]
        reqs = [comm.all_reduce_async(x) for x in xs]
        while not reqs[-1].test():
            time.sleep(0.001)
        for i, (r, x) in enumerate(zip(reqs, xs)):
            r.wait()
            assert r.done and (x == sum(range(n)) + n * i).all()
        out = np.zeros(2 * n, np.int64)
        r = comm.all_gather_async(np.full(2, me, np.int64), out)
        assert r.wait() and out.tolist() == [p for p in range(n) for _ in range(2)]
        # a ring of send/recv in a group, with an async receive inside
        got = np.zeros(5, np.float64)
        with ccl.group():
            comm.send(np.full(5, float(me)), (me + 1) % n)
            rr = comm.recv_async(got, (me - 1) % n)
        rr.wait()
        assert (got == (me - 1) % n).all()
        comm.barrier_async().wait()
    run(3, body)


def test_two_threads_wait_on_one_request():
    """Both waiters return the request's own result: one waits in libccl,
    the other for its answer (libccl alone would refuse the second)."""
    def body(comm):
        x = np.full(1000, comm.rank, np.float32)
        if comm.rank != 0:
            time.sleep(0.3)  # rank 0's request is still in flight when its threads wait
            comm.all_reduce(x)
        else:
            r = comm.all_reduce_async(x)
            got = []
            threads = [threading.Thread(target=lambda: got.append(r.wait())) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert not any(t.is_alive() for t in threads), "a waiter is still waiting"
            assert got == [True, True] and r.test()
        assert (x == sum(range(comm.size))).all()
    run(3, body)


def test_bind_thread_pins_that_thread_alone():
    """A thread of the rank's own pins itself where CCL_BIND=core would
    pin the rank, and communicates from there; the main thread stays."""
    import os
    def body(comm):
        before = os.sched_getaffinity(0)
        got = {}

        def worker():
            comm.bind_thread()
            got["cpus"] = os.sched_getaffinity(0)  # this thread's
            x = np.array([comm.rank], np.int64)
            comm.all_reduce(x)
            got["sum"] = int(x[0])
        t = threading.Thread(target=worker)
        t.start()
        t.join(60)
        assert not t.is_alive()
        assert got["sum"] == sum(range(comm.size))
        assert len(got["cpus"]) == 1 and got["cpus"] <= before
        assert os.sched_getaffinity(0) == before
        mine = np.array(sorted(got["cpus"]), np.int64)
        everyone = np.zeros(comm.size, np.int64)
        comm.all_gather(mine, everyone)
        if comm.size <= len(before):
            assert len(set(everyone.tolist())) == comm.size, everyone.tolist()
    run(2, body)


def test_split_describe_and_register():
    def body(comm):
        sub = comm.split(comm.rank % 2, key=-comm.rank)
        assert sub.size == (comm.size + 1 - comm.rank % 2) // 2
        x = np.array([comm.rank], np.int32)
        sub.all_reduce(x)
        assert x[0] == sum(r for r in range(comm.size) if r % 2 == comm.rank % 2)
        assert comm.split(None) is None
        # The upper ranks, led by the last; the rest make no call.
        if comm.rank >= 2:
            members = list(range(comm.size - 1, 1, -1))
            g = comm.create_group(members)
            assert (g.rank, g.size) == (members.index(comm.rank), len(members))
            y = np.array([comm.rank], np.int32)
            g.broadcast(y, root=0)
            assert y[0] == comm.size - 1
            g.destroy()
        with pytest.raises(ccl.InvalidUsage) as e:
            comm.create_group([(comm.rank + 1) % comm.size])
        assert "is not in ranks" in str(e.value)
        assert "ranks=%d" % comm.size in comm.describe()
        buf = np.zeros(1 << 20, np.uint8)
        h = comm.register(buf)
        comm.deregister(h)
        with pytest.raises(ccl.InvalidArgument):
            comm.deregister(h)
        sub.destroy()
        with pytest.raises(ccl.InvalidUsage):
            sub.barrier()
    run(4, body)


def _zero_copy_body(comm):
    x = comm.empty((256, 1024), "float32")
    assert x.shape == (256, 1024) and not x.any()
    x[:] = comm.rank + 1
    comm.all_reduce(x)
    assert (x == comm.size * (comm.size + 1) / 2).all()
    k = 32768  # 256 KiB a rank
    y = comm.empty(comm.size * k, "int64")
    y[comm.rank * k:(comm.rank + 1) * k] = comm.rank
    comm.all_gather(y[comm.rank * k:(comm.rank + 1) * k], y)
    assert (y.reshape(comm.size, k) == np.arange(comm.size)[:, None]).all()
    assert "zero_copy_calls=2" in comm.describe(), comm.describe()
    comm.mem_free(y)
    mem = comm.mem_alloc(1 << 16)
    v = mem.numpy("uint8")
    v[:] = 7
    assert bytes(mem.view()[:3]) == b"\x07\x07\x07"
    mem.free()
    with pytest.raises(ccl.InvalidArgument):
        mem.free()
    # a release is this rank's alone; the next allocation reuses what
    # every rank released (the same address, zeroed)
    z = comm.empty(1 << 16, "uint8")
    z[:] = 9
    addr = z.ctypes.data
    comm.mem_release(z)
    with pytest.raises(ccl.InvalidArgument):
        comm.mem_release(z)
    w = comm.empty(1 << 16, "uint8")
    assert w.ctypes.data == addr and not w.any()
    comm.mem_free(w)
    with pytest.raises(ccl.InvalidArgument):
        comm.mem_free(np.zeros(4))
    # different sizes: every rank refuses
    with pytest.raises(ccl.InvalidUsage):
        comm.mem_alloc(4096 * (comm.rank + 1))
    comm.mem_free(x)


def test_shared_memory_runs_zero_copy():
    # Every call on the shared allocations takes the path here
    # (CCL_ZERO_COPY_MIN=0, as test_zero_copy.c runs it): whether the cost
    # model sends a 256 KiB all-gather there rests on the figures the ranks
    # probe at init, which a crowded machine moves either way (3 runs of 15
    # chose the direct path on a 2-core machine).
    run(3, _zero_copy_body, env={"CCL_ZERO_COPY_MIN": "0"})


def test_bad_arguments_are_caught_before_sending():
    def body(comm):
        x = np.zeros(8, np.float32)
        bad = [
            (lambda: comm.all_reduce(np.zeros(8, np.float32), np.zeros(9, np.float32)), "recvbuf 9"),
            (lambda: comm.all_reduce(np.zeros((4, 4), np.float32)[:, 1]), "contiguous"),
            (lambda: comm.all_reduce(b"12345678"), "read-only"),
            (lambda: comm.all_reduce(x, dtype="int64"), "float32"),
            (lambda: comm.all_reduce(np.zeros(3, np.int16)), "pass dtype"),
            (lambda: comm.all_reduce(x, op="mean"), "not a libccl op"),
            (lambda: comm.all_reduce(x, dtype="complex64"), "not a libccl dtype"),
            (lambda: comm.all_gather(x, np.zeros(7, np.float32)), "not 3 (ranks)"),
            (lambda: comm.reduce_scatter(x, np.zeros(3, np.float32)), "not 3 (ranks)"),
            (lambda: comm.all_to_all(x, x), "other than sendbuf"),
            (lambda: comm.all_to_all_v(x, [1, 1], np.zeros(8, np.float32), [1, 1, 1]), "3 entries"),
            (lambda: comm.all_to_all_v(x, [8, 1, 0], np.zeros(8, np.float32), [1, 1, 1]), "reach element 9"),
            (lambda: comm.send(x, 3), "peer 3"),
            (lambda: comm.broadcast(x, root=-1), "root -1"),
            (lambda: comm.all_reduce(object()), "not a buffer"),
            # integers that do not fit the C argument (ctypes would wrap them to a valid rank)
            (lambda: comm.broadcast(x, root=2**32 + 1), "root = 4294967297 does not fit"),
            (lambda: comm.send(x, 2**32 + 1), "peer = 4294967297 does not fit"),
            (lambda: comm.recv(x, -2**40), "does not fit"),
            (lambda: comm.reduce(x, root=2**31), "does not fit"),
            (lambda: comm.gather(x, np.zeros(24, np.float32), root=2**33), "does not fit"),
            (lambda: comm.scatter(np.zeros(24, np.float32), x, root=2**33), "does not fit"),
            (lambda: comm.all_to_all_v(x, [2**64 + 4, 0, 0], np.zeros(8, np.float32), [1, 1, 1]),
             "sendcounts[0] = 18446744073709551620 does not fit"),
            (lambda: comm.all_to_all_v(x, [1.0, 1, 1], np.zeros(8, np.float32), [1, 1, 1]), "must be an integer"),
            (lambda: comm.broadcast(x, root=0.0), "must be an integer"),
            (lambda: comm.split(2**32), "does not fit"),
            (lambda: comm.create_group([comm.rank, 2**32]), "does not fit"),
            (lambda: comm.create_group([comm.rank, comm.rank]), "are both"),
            (lambda: ccl.Comm(2**32 + 1, 0, ccl.get_unique_id()), "nranks = 4294967297 does not fit"),
        ]
        for call, words in bad:
            with pytest.raises(ccl.InvalidArgument) as e:
                call()
            assert words in str(e.value), (words, str(e.value))
        # Nothing was sent: the next collective is exact.
        y = np.full(4, comm.rank, np.int64)
        comm.all_reduce(y)
        assert (y == 3).all()
        # numpy integers are taken where Python ints are
        z = np.full(3, comm.rank, np.int32)
        comm.broadcast(z, root=np.int64(2))
        assert (z == 2).all()
        counts = np.ones(3, np.uint64)
        out = np.zeros(3, np.int32)
        comm.all_to_all_v(np.full(3, comm.rank, np.int32), counts, out, counts, np.arange(3), np.arange(3))
        assert out.tolist() == [0, 1, 2]
    run(3, body)


def test_errors_carry_the_sentence():
    def body(comm):
        x = np.zeros(10 + comm.rank, np.float32)
        with pytest.raises(ccl.Error) as e:
            comm.all_reduce(x)
        assert e.value.status in (-2, -4), e.value.status
        if comm.rank == 0:
            assert "count" in str(e.value) or "rank" in str(e.value), str(e.value)
    run(2, body, timeout=10)


def test_algo_per_communicator():
    def body(comm):
        x = np.arange(100, dtype=np.float64) * (comm.rank + 1)
        comm.all_reduce(x)
        assert (x == np.arange(100) * 6).all()
        d = comm.describe()
        assert "algo=allreduce:tree" in d and "all_reduce:tree (config.algo)" in d, d
    run(3, body, algo="allreduce:tree")
    with pytest.raises(ccl.InvalidArgument):
        ccl.Comm(1, 0, ccl.get_unique_id(), algo=3)


def test_init_errors_say_why():
    """An init the library refuses raises with its sentence, not only a status."""
    uid = ccl.get_unique_id()
    with pytest.raises(ccl.InvalidArgument) as e:
        ccl.Comm(3, 5, uid)
    assert "rank 5 is out of range for 3 ranks" in str(e.value), str(e.value)
    with pytest.raises(ccl.InvalidArgument) as e:
        ccl.Comm(1, 0, uid, timeout=float("nan"))
    assert "timeout_s nan is not a number of seconds" in str(e.value), str(e.value)


def test_set_algo():
    def body(comm):
        comm.set_algo("allreduce:rd")
        x = np.arange(100, dtype=np.float64) * (comm.rank + 1)
        comm.all_reduce(x)
        assert (x == np.arange(100) * 6).all()
        assert "all_reduce:rd (ccl_comm_set_algo)" in comm.describe(), comm.describe()
        with pytest.raises(ccl.InvalidArgument) as e:
            comm.set_algo("allreduce:spiral")
        assert "'allreduce:spiral' is not an algorithm" in str(e.value), str(e.value)
        with pytest.raises(ccl.InvalidArgument):
            comm.set_algo(None)
    run(3, body)


def test_gil_is_released_while_waiting():
    def body(comm):
        if comm.rank == 1:
            time.sleep(1.0)
        ticks = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                ticks[0] += 1
        t = threading.Thread(target=spin)
        t.start()
        x = np.ones(4, np.float32)
        t0 = time.time()
        comm.all_reduce(x)
        waited = time.time() - t0
        stop.set()
        t.join()
        if comm.rank == 0:
            assert waited > 0.5 and ticks[0] > 10000, (waited, ticks[0])
    run(2, body)


def test_abort_from_another_thread():
    def body(comm):
        if comm.rank == 0:
            threading.Timer(0.5, comm.abort).start()
            with pytest.raises(ccl.Aborted):
                comm.all_reduce(np.ones(4, np.float32))  # rank 1 never joins
        else:
            # Only after the abort: issued at once, the barrier could meet
            # rank 0's all-reduce (a message, where the planner picks an
            # algorithm that sends one) and fail on the mismatch first.
            time.sleep(2)
            with pytest.raises(ccl.Error):
                comm.barrier()  # fails once rank 0 aborted
    run(2, body, deadline=60)


def test_timeout_is_honoured():
    def body(comm):
        if comm.rank == 0:
            t0 = time.time()
            with pytest.raises(ccl.Timeout):
                comm.all_reduce(np.ones(4, np.float32))
            assert time.time() - t0 < 10
        else:
            time.sleep(4)  # alive but not calling
    run(2, body, timeout=1.5)


def test_killed_rank_raises_on_the_others():
    def body(comm):
        if comm.rank == 2:
            os._exit(9)
        with pytest.raises(ccl.RemoteError) as e:
            for _ in range(100):
                comm.all_reduce(np.ones(1 << 16, np.float32))
        # one survivor hears of rank 2 first; the other may hear of it through that one
        assert "rank 2" in str(e.value) or f"rank {1 - comm.rank}" in str(e.value), str(e.value)
    with pytest.raises(AssertionError) as e:
        run(3, body, timeout=20, deadline=15)
    # only the killed rank is reported
    assert "rank 0 ---" not in str(e.value) and "rank 1 ---" not in str(e.value) and "[2]" in str(e.value), \
        str(e.value)


def test_unique_id_pickles_and_init_errors():
    uid = pickle.loads(pickle.dumps(ccl.get_unique_id()))
    assert isinstance(uid, bytes) and len(uid) == 128
    with pytest.raises(ccl.InvalidArgument):
        ccl.Comm(2, 0, b"short")
    with pytest.raises(ccl.InvalidArgument):
        ccl.Comm(2, 5, uid)
    assert ccl.version()[0] == 0


def _address_rank(rank, n, addr, q):
    try:
        os.environ["CCL_SECRET"] = "ab" * 32
        c = ccl.Comm(n, rank, ccl.unique_id_from_address(addr))
        x = np.array([rank + 1], np.int64)
        c.all_reduce(x)
        c.destroy()
        q.put((rank, int(x[0])))
    except BaseException as e:  # the parent reports it
        q.put((rank, repr(e)))


def test_unique_id_from_address():
    """Every rank makes its own id from one address (and CCL_SECRET): nothing is handed around."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_address_rank, args=(r, 3, addr, q)) for r in range(3)]
    for p in procs:
        p.start()
    got = dict(q.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(10)
    assert got == {0: 6, 1: 6, 2: 6}, got
    with pytest.raises(ccl.InvalidArgument):
        ccl.unique_id_from_address("not an address")
    with pytest.raises(ccl.InvalidArgument):
        ccl.unique_id_from_address("")


def cclrun_or_skip():
    cclrun = os.environ.get("CCL_CCLRUN")
    if not cclrun:
        pytest.skip("CCL_CCLRUN (the path of build/tools/cclrun) is not set")
    return cclrun


def test_from_env_under_cclrun():
    cclrun = cclrun_or_skip()
    script = ("import ccl, numpy as np\n"
              "c = ccl.Comm.from_env()\n"
              "x = np.array([c.rank + 1], np.int64)\n"
              "c.all_reduce(x)\n"
              "print('rank', c.rank, 'of', c.size, 'sum', x[0])\n"
              "c.destroy()\n")
    out = subprocess.run([cclrun, "-n", "3", sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    for r in range(3):
        assert f"rank {r} of 3 sum 6" in out.stdout, out.stdout


def test_cclrun_holds_the_root_port_for_rank_0():
    """cclrun keeps the root's port bound until rank 0 takes the socket over
    (CCL_ROOT_FD): another process that tries the port in between is
    refused, and the port lies outside the kernel's ephemeral range, where
    connect() and bind(0) of other processes never land."""
    cclrun = cclrun_or_skip()
    script = ("import ccl, os, socket, time, numpy as np\n"
              "port = int(os.environ['CCL_ROOT_ADDR'].rsplit(':', 1)[1])\n"
              "if os.environ['CCL_RANK'] == '0':\n"
              "    time.sleep(1.0)\n"
              "else:\n"
              "    s = socket.socket()\n"
              "    try:\n"
              "        s.bind(('127.0.0.1', port)); print('stranger bound', port)\n"
              "    except OSError:\n"
              "        print('stranger refused', port)\n"
              "    s.close()\n"
              "c = ccl.Comm.from_env()\n"
              "x = np.array([c.rank + 1], np.int64)\n"
              "c.all_reduce(x)\n"
              "print('rank', c.rank, 'sum', x[0])\n"
              "c.destroy()\n")
    env = dict(os.environ, CCL_DEBUG="INFO", CCL_DEBUG_SUBSYS="INIT")
    out = subprocess.run([cclrun, "-n", "3", sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    for r in range(3):
        assert f"rank {r} sum 6" in out.stdout, out.stdout
    assert out.stdout.count("stranger refused") == 2, out.stdout
    assert "listens on the launcher's socket (CCL_ROOT_FD=" in out.stdout + out.stderr, out.stderr
    port = int(out.stdout.split("stranger refused ")[1].split()[0])
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = map(int, f.read().split())
    assert not lo <= port <= hi, (port, lo, hi)


def test_root_fd_that_is_no_listener_is_ignored(tmp_path):
    """A CCL_ROOT_FD naming something else (a file) is refused with a
    warning, and rank 0 binds the address itself."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = ("import ccl, numpy as np\n"
              "c = ccl.Comm.from_env()\n"
              "x = np.array([5], np.int32)\n"
              "c.all_reduce(x)\n"
              "print('sum', x[0], 'size', c.size)\n"
              "c.destroy()\n")
    f = open(tmp_path / "not-a-socket", "w")
    fd = f.fileno()
    try:
        launch = ("CCL_RANK", "CCL_WORLD_SIZE", "CCL_ROOT_ADDR", "CCL_ROOT_FD", "CCL_SECRET", "CCL_SECRET_FILE",
                  "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
        env = {k: v for k, v in os.environ.items() if k not in launch}
        env.update(CCL_RANK="0", CCL_WORLD_SIZE="1", CCL_ROOT_ADDR=f"127.0.0.1:{port}",
                   CCL_ROOT_FD=str(fd), CCL_SECRET="ab" * 32)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env,
                             pass_fds=(fd,))
    finally:
        f.close()
    assert out.returncode == 0, out.stderr
    assert "sum 5 size 1" in out.stdout, out.stdout
    assert f"CCL_ROOT_FD={fd} is not a socket listening on 127.0.0.1:{port}" in out.stderr, out.stderr
