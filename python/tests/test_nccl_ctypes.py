"""libccl's drop-in libnccl.so.2 loaded with ctypes, as inference engines'
NCCL wrappers load NCCL: the library by file name, ncclUniqueId as a
128-byte structure passed by value, the communicator as a void pointer,
cudaStream_t as a void pointer (None: the default stream), every call's
ncclResult_t checked and ncclGetErrorString asked when it is not 0. On host
buffers (numpy), on 1 and 3 ranks, each result against numpy."""
import ctypes
import multiprocessing as mp
import os

import numpy as np
import pytest

DROP_IN = os.environ.get("CCL_NCCL_DROP_IN", "")

pytestmark = pytest.mark.skipif(not os.path.exists(DROP_IN),
                                reason="no drop-in libnccl.so.2 (CCL_NCCL_DROP_IN): build the nccl-drop-in target")

ncclFloat32, ncclInt32, ncclFloat8e4m3 = 7, 2, 10
ncclSum, ncclMax = 0, 2


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def load():
    lib = ctypes.CDLL(DROP_IN)
    c_void_p, c_int, c_size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    sig = {
        "ncclGetVersion": [ctypes.POINTER(c_int)],
        "ncclGetUniqueId": [ctypes.POINTER(NcclUniqueId)],
        "ncclCommInitRank": [ctypes.POINTER(c_void_p), c_int, NcclUniqueId, c_int],
        "ncclCommDestroy": [c_void_p],
        "ncclAllReduce": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
        "ncclAllGather": [c_void_p, c_void_p, c_size_t, c_int, c_void_p, c_void_p],
        "ncclReduceScatter": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
        "ncclBroadcast": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
        "ncclSend": [c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
        "ncclRecv": [c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p],
        "ncclGroupStart": [],
        "ncclGroupEnd": [],
    }
    for name, args in sig.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, c_int
    lib.ncclGetErrorString.argtypes, lib.ncclGetErrorString.restype = [c_int], ctypes.c_char_p
    lib.ncclGetLastError.argtypes, lib.ncclGetLastError.restype = [c_void_p], ctypes.c_char_p
    return lib


def check(lib, result, what):
    assert result == 0, "%s: %s (%s)" % (what, lib.ncclGetErrorString(result).decode(),
                                        lib.ncclGetLastError(None).decode())


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def rank_main(rank, nranks, uid_bytes, out):
    try:
        lib = load()
        version = ctypes.c_int()
        check(lib, lib.ncclGetVersion(ctypes.byref(version)), "ncclGetVersion")
        assert version.value >= 22800, version.value
        uid = NcclUniqueId()
        ctypes.memmove(ctypes.byref(uid), uid_bytes, 128)
        comm = ctypes.c_void_p()
        check(lib, lib.ncclCommInitRank(ctypes.byref(comm), nranks, uid, rank), "ncclCommInitRank")
        n = 1031
        x = (np.arange(n, dtype=np.float32) % 13) * (rank + 1)
        y = np.zeros(n, np.float32)
        check(lib, lib.ncclAllReduce(ptr(x), ptr(y), n, ncclFloat32, ncclSum, comm, None), "ncclAllReduce")
        want = sum((np.arange(n, dtype=np.float32) % 13) * (r + 1) for r in range(nranks))
        assert np.array_equal(y, want), "all-reduce"
        g = np.zeros(n * nranks, np.int32)
        xi = np.arange(n, dtype=np.int32) + 1000 * rank
        check(lib, lib.ncclAllGather(ptr(xi), ptr(g), n, ncclInt32, comm, None), "ncclAllGather")
        assert np.array_equal(g, np.concatenate([np.arange(n, dtype=np.int32) + 1000 * r for r in range(nranks)]))
        big = np.arange(n * nranks, dtype=np.int32) * (rank + 1)
        rs = np.zeros(n, np.int32)
        check(lib, lib.ncclReduceScatter(ptr(big), ptr(rs), n, ncclInt32, ncclMax, comm, None), "ncclReduceScatter")
        assert np.array_equal(rs, (np.arange(n * nranks, dtype=np.int32) * nranks)[rank * n:(rank + 1) * n])
        b = np.full(n, rank, np.int32)
        check(lib, lib.ncclBroadcast(ptr(b), ptr(b), n, ncclInt32, nranks - 1, comm, None), "ncclBroadcast")
        assert (b == nranks - 1).all()
        e4m3 = np.full(8, 0x38, np.uint8)  # 1.0
        check(lib, lib.ncclAllReduce(ptr(e4m3), ptr(e4m3), 8, ncclFloat8e4m3, ncclMax, comm, None), "fp8 max")
        assert (e4m3 == 0x38).all()
        nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
        s, r = np.full(n, rank, np.int32), np.zeros(n, np.int32)
        check(lib, lib.ncclGroupStart(), "ncclGroupStart")
        check(lib, lib.ncclSend(ptr(s), n, ncclInt32, nxt, comm, None), "ncclSend")
        check(lib, lib.ncclRecv(ptr(r), n, ncclInt32, prv, comm, None), "ncclRecv")
        check(lib, lib.ncclGroupEnd(), "ncclGroupEnd")
        assert (r == prv).all()
        bad = lib.ncclAllReduce(ptr(x), ptr(y), n, 99, ncclSum, comm, None)
        assert bad == 4 and b"datatype" in lib.ncclGetLastError(comm), lib.ncclGetLastError(comm)
        check(lib, lib.ncclCommDestroy(comm), "ncclCommDestroy")
        out.put((rank, "ok"))
    except BaseException as e:  # the parent reports it
        out.put((rank, "%s: %s" % (type(e).__name__, e)))


@pytest.mark.parametrize("nranks", [1, 3])
def test_ctypes_client(nranks):
    lib = load()
    uid = NcclUniqueId()
    check(lib, lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, nranks, bytes(uid.internal), out)) for r in range(nranks)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0, "rank process exited with %s" % p.exitcode
    assert results == {r: "ok" for r in range(nranks)}, results
