"""libccl from Python: collectives and point-to-point on any buffer
(numpy arrays, bytearray, memoryview, CPU tensors through .numpy()),
without copies. The GIL is released while a call waits.

    import ccl, numpy as np
    comm = ccl.Comm.from_env()                  # under cclrun or torchrun
    x = np.ones(1024, dtype=np.float32)
    comm.all_reduce(x)                          # in place, sum
    req = comm.all_gather_async(x, out)         # returns at once
    req.wait()

Errors raise ccl.Error subclasses (ccl.InvalidArgument, ccl.RemoteError,
ccl.Timeout, ...) carrying the library's sentence; bad arguments are
caught before anything is sent.
"""
import ctypes
import operator
import threading

from . import _lib
from ._buffers import DTYPES, Buffer, dtype_name
from .errors import (Aborted, Error, InternalError, InvalidArgument, InvalidUsage, NoMemory, RemoteError, Revoked,
                     SystemCallError, Timeout, Unsupported, from_status)

__all__ = ["Comm", "Request", "SharedMemory", "group", "get_unique_id", "unique_id_from_address", "version", "Error", "InvalidArgument", "InvalidUsage",
           "SystemCallError", "RemoteError", "Timeout", "Aborted", "Unsupported", "NoMemory", "InternalError", "Revoked",
           "DTYPES", "OPS", "SUM", "PROD", "MAX", "MIN", "AVG", "BAND", "BOR", "BXOR"]

_c = _lib.lib
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4, "band": 5, "bor": 6, "bxor": 7}
SUM, PROD, MAX, MIN, AVG = "sum", "prod", "max", "min", "avg"
BAND, BOR, BXOR = "band", "bor", "bxor"  # integer dtypes only
for _name, (_code, _) in DTYPES.items():
    globals()[_name.upper()] = _name
UNIQUE_ID_BYTES = 128


def version():
    """(major, minor, patch) of the loaded libccl."""
    v = _c.ccl_version()
    return v // 10000, v // 100 % 100, v % 100


def _status_text(st):
    return _c.ccl_status_string(st).decode()


def _check(st, comm=None, what="", init=False):
    """Raise for a failed status with the library's sentence: the
    communicator's, or for init (no communicator yet) this thread's last
    init failure, ccl_comm_last_error(NULL)."""
    if st >= 0:
        return st
    msg = _c.ccl_comm_last_error(comm).decode() if comm else ""
    if init:
        msg = f"{what}: {_c.ccl_comm_last_error(None).decode()}"
    if not msg:
        msg = f"{what}: {_status_text(st)}" if what else _status_text(st)
    raise from_status(st, msg)


_INT_MIN, _INT_MAX, _SIZE_MAX = -(1 << 31), (1 << 31) - 1, (1 << 64) - 1


def _whole(v, what, lo, hi):
    """v as a Python int if it is an integer (numpy's included) within
    [lo, hi]; InvalidArgument otherwise, before anything is sent (ctypes
    would wrap 2**32 + 1 to 1)."""
    try:
        x = operator.index(v)
    except TypeError:
        raise InvalidArgument(f"{what} must be an integer, not {v!r}") from None
    if not lo <= x <= hi:
        raise InvalidArgument(f"{what} = {x} does not fit ({lo}..{hi})")
    return x


def _c_int(v, what):
    return _whole(v, what, _INT_MIN, _INT_MAX)


def _op(op):
    if isinstance(op, int) and 0 <= op < len(OPS):
        return op
    code = OPS.get(str(op).lower().replace("reduceop.", ""), None)
    if code is None:
        raise InvalidArgument(f"{op!r} is not a libccl op ({', '.join(OPS)})")
    return code


def get_unique_id():
    """A new rendezvous point in this process: 128 bytes to hand to every
    rank (they pickle, travel through any store, and are used once)."""
    uid = _lib.UniqueIdStruct()
    _check(_c.ccl_get_unique_id(ctypes.byref(uid)), what="get_unique_id", init=True)
    return bytes(uid)  # all 128 bytes (the field itself would stop at a zero byte)


def unique_id_from_address(host_port):
    """An id every rank makes for itself from the same "host:port", with
    nothing handed around: rank 0 starts the root there when it joins, and
    the job's secret comes from CCL_SECRET or CCL_SECRET_FILE (as for
    ccl_comm_init_env). The C call ccl_unique_id_from_address."""
    if not isinstance(host_port, str) or not host_port:
        raise InvalidArgument("host_port must be a non-empty 'host:port' string")
    uid = _lib.UniqueIdStruct()
    _check(_c.ccl_unique_id_from_address(host_port.encode(), ctypes.byref(uid)), what="unique_id_from_address",
           init=True)
    return bytes(uid)


def _uid_struct(uid, maker):
    """The C struct of a 128-byte id, refusing anything else (maker: the call that makes such ids)."""
    if not isinstance(uid, (bytes, bytearray)) or len(uid) != UNIQUE_ID_BYTES:
        raise InvalidArgument(f"uid must be the {UNIQUE_ID_BYTES} bytes {maker} returned")
    cid = _lib.UniqueIdStruct()
    ctypes.memmove(ctypes.addressof(cid), bytes(uid), UNIQUE_ID_BYTES)
    return cid


# ---- groups ----

_group = threading.local()


def _group_depth():
    return getattr(_group, "depth", 0)


class group:
    """with ccl.group(): calls inside are recorded and run together at the
    end (sends and receives in any order cannot deadlock). The buffers of
    the calls inside stay exported until then."""

    def __enter__(self):
        _check(_c.ccl_group_start(), what="group_start")
        _group.depth = _group_depth() + 1
        if _group.depth == 1:
            _group.held = []
        return self

    def __exit__(self, exc_type, exc, tb):
        _group.depth -= 1
        st = _c.ccl_group_end()
        if _group.depth == 0:
            held, _group.held = _group.held, []
            for b in held:
                b.release()
        if exc_type is None and st < 0:
            raise from_status(st, f"group_end: {_status_text(st)} (the failing call's communicator says why: "
                                  f"comm.last_error())")
        return False


class Request:
    """An operation in flight: wait() until it is done (raising its error),
    test() without blocking. Its buffers belong to libccl until then."""

    def __init__(self, comm, handle, buffers, what):
        self._comm, self._h, self._bufs, self.what = comm, handle, buffers, what
        self._status = None
        # One thread waits in libccl; others wait here for its answer, so
        # every waiter returns the request's own status.
        self._lock = threading.Lock()

    def test(self):
        """True once done (raising its error if it failed)."""
        if self._status is not None:
            return self._finish()
        if not self._lock.acquire(blocking=False):
            return False  # another thread is waiting on it: not done yet
        try:
            if self._status is None:
                done = ctypes.c_int(0)
                _c.ccl_test(self._h, ctypes.byref(done))  # its status comes back from wait()
                if not done.value:
                    return False
        finally:
            self._lock.release()
        return self.wait()

    def wait(self):
        """Blocks (without the GIL) until done; raises its error. Returns True."""
        with self._lock:
            if self._status is None:
                self._status = _c.ccl_wait(self._h)
                self._h = None
                for b in self._bufs:
                    b.release()
                self._bufs = []
        return self._finish()

    def _finish(self):
        if self._status < 0:
            _check(self._status, self._comm._ptr if self._comm._ptr else None, self.what)
        return True

    @property
    def done(self):
        return self._status is not None

    def __del__(self):
        if self._status is None and self._h is not None:
            try:
                self.wait()  # never leave libccl writing into memory Python may free
            except Error:
                pass


class SharedMemory:
    """One ccl_mem_alloc allocation (see Comm.mem_alloc)."""

    def __init__(self, comm, ptr, nbytes):
        self.comm, self.ptr, self.nbytes = comm, ptr, nbytes
        self._raw = (ctypes.c_uint8 * nbytes).from_address(ptr)
        self._raw._ccl_shared = self

    def view(self):
        if self.ptr is None:
            raise InvalidUsage("this shared memory was freed")
        return memoryview(self._raw).cast("B")

    def numpy(self, dtype="uint8", shape=None):
        import numpy as np
        dt = np.dtype(dtype)
        a = np.frombuffer(self._raw, dtype=dt, count=self.nbytes // dt.itemsize)
        return a.reshape(shape) if shape is not None else a

    def free(self):
        if self.ptr is None:
            raise InvalidArgument("mem_free: freed already")
        _check(_c.ccl_mem_free(self.comm._p(), self.ptr), self.comm._ptr, "mem_free")
        self.ptr = None

    def release(self):
        """This rank is done with the memory (ccl_mem_release): not
        collective; it goes at a later mem_alloc once every rank released
        it, which may reuse it. Views of it must not be touched after."""
        if self.ptr is None:
            raise InvalidArgument("mem_release: freed or released already")
        _check(_c.ccl_mem_release(self.comm._p(), self.ptr), self.comm._ptr, "mem_release")
        self.ptr = None


class Comm:
    """A communicator: Comm(nranks, rank, uid) with uid from
    get_unique_id() on one rank, or Comm.from_env() under a launcher.
    timeout: seconds (None: CCL_TIMEOUT); algo: the algorithms, in
    CCL_ALGO's syntax ("tree", "allreduce:rhd,broadcast:ring"; None:
    CCL_ALGO), the same on every rank."""

    def __init__(self, nranks, rank, uid, timeout=None, algo=None):
        cid = _uid_struct(uid, "get_unique_id()")
        self._ptr = None
        if algo is not None and not isinstance(algo, str):
            raise InvalidArgument(f"algo must be a string such as 'ring' or 'allreduce:tree', not {algo!r}")
        cfg = _lib.ConfigStruct(ctypes.sizeof(_lib.ConfigStruct), float(timeout or 0),
                                None if algo is None else algo.encode())
        ptr = ctypes.c_void_p()
        nranks, rank = _c_int(nranks, "nranks"), _c_int(rank, "rank")
        _check(_c.ccl_comm_init_rank_config(ctypes.byref(ptr), nranks, cid, rank, ctypes.byref(cfg)),
               what=f"init of rank {rank} of {nranks}", init=True)
        self._adopt(ptr)

    @classmethod
    def from_env(cls):
        """Rank, size and root from the launcher's environment (cclrun's
        CCL_RANK/CCL_WORLD_SIZE/CCL_ROOT_ADDR, torchrun's RANK/WORLD_SIZE/
        MASTER_ADDR/MASTER_PORT, Slurm, Open MPI)."""
        ptr = ctypes.c_void_p()
        _check(_c.ccl_comm_init_env(ctypes.byref(ptr)), what="init from the environment", init=True)
        self = cls.__new__(cls)
        self._adopt(ptr)
        return self

    def _adopt(self, ptr):
        self._ptr = ptr.value
        r, n = ctypes.c_int(), ctypes.c_int()
        _c.ccl_comm_rank(self._ptr, ctypes.byref(r))
        _c.ccl_comm_size(self._ptr, ctypes.byref(n))
        self.rank, self.size = r.value, n.value

    # ---- life cycle ----

    def _p(self):
        if not self._ptr:
            raise InvalidUsage("this communicator was destroyed")
        return self._ptr

    def destroy(self):
        """Waits for queued operations, frees everything. Idempotent."""
        if self._ptr:
            ptr, self._ptr = self._ptr, None
            _c.ccl_comm_destroy(ptr)

    close = destroy

    def abort(self):
        """From any thread: pending and later calls raise ccl.Aborted; the
        other ranks get an error."""
        if self._ptr:
            _c.ccl_comm_abort(self._ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
        return False

    def __del__(self):
        try:
            self.destroy()
        except Exception:
            pass

    def last_error(self):
        return _c.ccl_comm_last_error(self._ptr).decode() if self._ptr else ""

    def describe(self):
        """How this rank is wired: hosts, transports per peer, ring, algorithms."""
        buf = ctypes.create_string_buffer(16384)
        _check(_c.ccl_comm_describe(self._p(), buf, len(buf)), self._ptr, "describe")
        return buf.value.decode()

    def bind_thread(self):
        """Pins the calling thread to the core CCL_BIND=core gives this
        rank (ccl_comm_bind_thread): for a thread that does this rank's
        communication while the others compute unpinned."""
        _check(_c.ccl_comm_bind_thread(self._p()), self._ptr, "bind_thread")

    def set_algo(self, algo):
        """The algorithms from the next call on, in CCL_ALGO's syntax
        ("auto": the planner's); every rank makes the same change between
        the same two calls, with no call in flight."""
        if not isinstance(algo, str):
            raise InvalidArgument(f"algo must be a string such as 'ring' or 'allreduce:tree', not {algo!r}")
        _check(_c.ccl_comm_set_algo(self._p(), algo.encode()), self._ptr, "set_algo")

    def split(self, color, key=0):
        """Collective: ranks with the same color form a new Comm, ordered by
        key then rank; color None or < 0 gives None."""
        ptr = ctypes.c_void_p()
        color = -1 if color is None else _c_int(color, "split: color")
        _check(_c.ccl_comm_split(self._p(), color, _c_int(key, "split: key"), ctypes.byref(ptr)),
               self._ptr, "split")
        if not ptr.value:
            return None
        c = Comm.__new__(Comm)
        c._adopt(ptr)
        return c

    def create_group(self, ranks):
        """Collective over the listed ranks alone (the others make no call):
        ranks[i] becomes rank i of the new Comm. Every member passes the
        same list, in the same order."""
        ranks = [_c_int(r, "create_group: ranks") for r in ranks]
        arr = (ctypes.c_int * max(len(ranks), 1))(*ranks)
        ptr = ctypes.c_void_p()
        _check(_c.ccl_comm_create_group(self._p(), arr, len(ranks), ctypes.byref(ptr)), self._ptr, "create_group")
        c = Comm.__new__(Comm)
        c._adopt(ptr)
        return c

    # ---- elastic (docs/elastic.md) ----

    def revoke(self):
        """From any thread of any rank: every pending and later call on this
        Comm, on every rank, raises ccl.Revoked; it can still be shrunk."""
        _check(_c.ccl_comm_revoke(self._p()), self._ptr, "revoke")

    def shrink(self, exclude=None):
        """Collective over the surviving ranks: a new Comm without the ranks
        in exclude (which make no call; every survivor passes the same), or,
        with exclude None, without the ranks that failed, as the survivors
        agree. Ranks keep their order. A rank that was left out gets
        ccl.Revoked saying so. This Comm must still be destroyed."""
        ptr = ctypes.c_void_p()
        if exclude is None:
            st = _c.ccl_comm_shrink(self._p(), None, 0, ctypes.byref(ptr))
        else:
            ranks = [_c_int(r, "shrink: exclude") for r in exclude]
            arr = (ctypes.c_int * max(len(ranks), 1))(*ranks)
            st = _c.ccl_comm_shrink(self._p(), arr, len(ranks), ctypes.byref(ptr))
        _check(st, self._ptr, "shrink")
        c = Comm.__new__(Comm)
        c._adopt(ptr)
        return c

    def failed_ranks(self):
        """The ranks known lost: after a shrink, those it left out; before,
        those this rank finds gone now."""
        n = ctypes.c_int()
        _check(_c.ccl_comm_failed_ranks(self._p(), None, 0, ctypes.byref(n)), self._ptr, "failed_ranks")
        arr = (ctypes.c_int * max(n.value, 1))()
        _check(_c.ccl_comm_failed_ranks(self._p(), arr, n.value, ctypes.byref(n)), self._ptr, "failed_ranks")
        return list(arr[:n.value])

    def grow_id(self):
        """On rank 0: the id newcomers pass to Comm.join (128 bytes, for
        them alone: it cannot claim one of this Comm's ranks)."""
        uid = _lib.UniqueIdStruct()
        _check(_c.ccl_comm_grow_id(self._p(), ctypes.byref(uid)), self._ptr, "grow_id")
        return bytes(uid)

    def grow(self, nranks, uid=None):
        """Collective over this Comm's ranks (rank 0 passes its grow_id(),
        the others None) and the newcomers (Comm.join): a new Comm of
        nranks, in which this Comm's ranks keep theirs."""
        cid = None
        if uid is not None:
            cid = _uid_struct(uid, "grow_id()")
        ptr = ctypes.c_void_p()
        _check(_c.ccl_comm_grow(self._p(), _c_int(nranks, "grow: nranks"), None if cid is None else ctypes.byref(cid),
                                -1, ctypes.byref(ptr)), self._ptr, "grow")
        c = Comm.__new__(Comm)
        c._adopt(ptr)
        return c

    @classmethod
    def join(cls, nranks, rank, uid):
        """A newcomer's side of Comm.grow: rank (from the old size up) of
        nranks, with the uid rank 0's grow_id() made."""
        cid = _uid_struct(uid, "grow_id()")
        ptr = ctypes.c_void_p()
        nranks, rank = _c_int(nranks, "nranks"), _c_int(rank, "rank")
        _check(_c.ccl_comm_grow(None, nranks, ctypes.byref(cid), rank, ctypes.byref(ptr)),
               what=f"join as rank {rank} of {nranks}", init=True)
        self = cls.__new__(cls)
        self._adopt(ptr)
        return self

    def register(self, buf):
        """Registers a buffer for zero-copy transfers (RDMA) until
        deregister(handle); a no-op handle on shm and tcp."""
        b = Buffer(buf, "buf", False, "uint8")
        h = ctypes.c_void_p()
        try:
            _check(_c.ccl_comm_register(self._p(), b.addr, b.nbytes, ctypes.byref(h)), self._ptr, "register")
        finally:
            b.release()
        return h.value

    def deregister(self, handle):
        _check(_c.ccl_comm_deregister(self._p(), handle), self._ptr, "deregister")

    def mem_alloc(self, nbytes):
        """Memory every rank of the host maps (ccl_mem_alloc): collectives
        whose buffers lie in it on every rank run zero-copy. Collective:
        every rank calls it with the same size, in the same order. A
        SharedMemory: .view() gives a memoryview, .numpy(dtype, shape) a
        numpy array over it; .free() (collective too) or the
        communicator's destroy releases it, after which views of it must
        not be touched."""
        ptr = ctypes.c_void_p()
        _check(_c.ccl_mem_alloc(self._p(), _whole(nbytes, "nbytes", 1, 1 << 48), ctypes.byref(ptr)), self._ptr,
               "mem_alloc")
        return SharedMemory(self, ptr.value, nbytes)

    def empty(self, shape, dtype="float32"):
        """A numpy array of shape and dtype in shared memory (mem_alloc),
        zeroed; free it with comm.mem_free(array) or leave it to destroy."""
        import numpy as np
        dt = np.dtype(dtype)
        n = int(np.prod(shape)) if np.ndim(shape) else int(shape)
        mem = self.mem_alloc(max(1, n * dt.itemsize))
        return mem.numpy(dt, shape)

    @staticmethod
    def _shared_of(mem, what):
        """The SharedMemory that mem is, or lies under (an array of empty,
        or a view of one)."""
        m = mem if isinstance(mem, SharedMemory) else None
        base = mem
        while base is not None and m is None:
            m = getattr(base, "_ccl_shared", None)
            base = getattr(base, "base", None)
        if m is None:
            raise InvalidArgument(f"{what}: not memory of mem_alloc or empty")
        return m

    def mem_free(self, mem):
        """Frees a SharedMemory, or the one under an array of comm.empty
        (collective, after every call issued before it)."""
        self._shared_of(mem, "mem_free").free()

    def mem_release(self, mem):
        """Releases a SharedMemory, or the one under an array of
        comm.empty: this rank alone, at any time (SharedMemory.release)."""
        self._shared_of(mem, "mem_release").release()

    # ---- calling ----

    def _run(self, fn, args, bufs, is_async, what):
        """Calls fn(*args[, &req]); keeps bufs exported while libccl may use
        them: until the request is done, the group ends, or the call returns."""
        if is_async:
            req = ctypes.c_void_p()
            try:
                st = fn(*args, ctypes.byref(req))
                _check(st, self._ptr, what)
            except BaseException:
                for b in bufs:
                    b.release()
                raise
            r = Request(self, req.value, [] if _group_depth() else bufs, what)
            if _group_depth():
                _group.held.extend(bufs)
            return r
        try:
            st = fn(*args)
        finally:
            if _group_depth():
                _group.held.extend(bufs)
            else:
                for b in bufs:
                    b.release()
        _check(st, self._ptr, what)
        return None

    @staticmethod
    def _pair(send, recv, dtype, send_writable=False):
        """Buffers for (send, recv); recv None means in place (send is both)."""
        if recv is None or recv is send:
            b = Buffer(send, "sendbuf", True, dtype)
            return b, b, [b]
        s = Buffer(send, "sendbuf", send_writable, dtype)
        try:
            r = Buffer(recv, "recvbuf", True, dtype or s.dtype)
        except BaseException:
            s.release()
            raise
        if r.dtype != s.dtype:
            s.release(), r.release()
            raise InvalidArgument(f"sendbuf holds {s.dtype} and recvbuf {r.dtype}: pass one dtype=")
        return s, r, [s, r]

    @staticmethod
    def _need(cond, bufs, message):
        if not cond:
            for b in bufs:
                b.release()
            raise InvalidArgument(message)

    def _all_reduce(self, send, recv, op, dtype, is_async):
        s, r, bufs = self._pair(send, recv, dtype)
        self._need(s.count == r.count, bufs, f"all_reduce: sendbuf has {s.count} elements, recvbuf {r.count}")
        fn = _c.ccl_all_reduce_async if is_async else _c.ccl_all_reduce
        return self._run(fn, (s.addr, r.addr, s.count, DTYPES[s.dtype][0], _op(op), self._p()), bufs, is_async,
                         "all_reduce")

    def _reduce_scatter(self, send, recv, op, dtype, is_async):
        s, r, bufs = self._pair(send, recv, dtype)
        self._need(recv is not None, bufs, "reduce_scatter: recvbuf is required (nranks times smaller than sendbuf)")
        self._need(s.count == r.count * self.size, bufs,
                   f"reduce_scatter: sendbuf has {s.count} elements, which is not {self.size} (ranks) x recvbuf's "
                   f"{r.count}")
        fn = _c.ccl_reduce_scatter_async if is_async else _c.ccl_reduce_scatter
        return self._run(fn, (s.addr, r.addr, r.count, DTYPES[s.dtype][0], _op(op), self._p()), bufs, is_async,
                         "reduce_scatter")

    def _all_gather(self, send, recv, dtype, is_async):
        s, r, bufs = self._pair(send, recv, dtype)
        self._need(recv is not None, bufs, "all_gather: recvbuf is required (nranks times larger than sendbuf)")
        self._need(r.count == s.count * self.size, bufs,
                   f"all_gather: recvbuf has {r.count} elements, which is not {self.size} (ranks) x sendbuf's "
                   f"{s.count}")
        fn = _c.ccl_all_gather_async if is_async else _c.ccl_all_gather
        return self._run(fn, (s.addr, r.addr, s.count, DTYPES[s.dtype][0], self._p()), bufs, is_async,
                         "all_gather")

    def _broadcast(self, buf, root, recv, dtype, is_async):
        root = _c_int(root, "broadcast: root")
        s, r, bufs = self._pair(buf, recv, dtype, send_writable=False)
        self._need(s.count == r.count, bufs, f"broadcast: sendbuf has {s.count} elements, recvbuf {r.count}")
        fn = _c.ccl_broadcast_async if is_async else _c.ccl_broadcast
        return self._run(fn, (s.addr, r.addr, r.count, DTYPES[r.dtype][0], int(root), self._p()), bufs, is_async,
                         "broadcast")

    def _reduce(self, send, recv, root, op, dtype, is_async):
        root = _c_int(root, "reduce: root")
        if recv is None or recv is send:
            s, r, bufs = self._pair(send, None, dtype)
        elif self.rank != root:
            s = Buffer(send, "sendbuf", False, dtype)
            r, bufs = None, [s]
        else:
            s, r, bufs = self._pair(send, recv, dtype)
        if r is not None:
            self._need(s.count == r.count, bufs, f"reduce: sendbuf has {s.count} elements, recvbuf {r.count}")
        fn = _c.ccl_reduce_async if is_async else _c.ccl_reduce
        raddr = r.addr if r is not None and self.rank == root else None
        return self._run(fn, (s.addr, raddr, s.count, DTYPES[s.dtype][0], _op(op), int(root), self._p()), bufs,
                         is_async, "reduce")

    def _all_to_all(self, send, recv, dtype, is_async):
        self._need(recv is not None and recv is not send, [], "all_to_all: needs a recvbuf other than sendbuf")
        s, r, bufs = self._pair(send, recv, dtype)
        self._need(s.count == r.count and s.count % self.size == 0, bufs,
                   f"all_to_all: sendbuf and recvbuf need the same count, a multiple of {self.size} (ranks); "
                   f"they have {s.count} and {r.count}")
        fn = _c.ccl_all_to_all_async if is_async else _c.ccl_all_to_all
        return self._run(fn, (s.addr, r.addr, s.count // self.size, DTYPES[s.dtype][0], self._p()), bufs, is_async,
                         "all_to_all")

    def _sizes(self, values, name, bufs):
        vals = list(values) if values is not None else None
        self._need(vals is not None and len(vals) == self.size, bufs,
                   f"all_to_all_v: {name} needs {self.size} entries (one per rank)")
        try:
            vals = [_whole(v, f"all_to_all_v: {name}[{i}]", 0, _SIZE_MAX) for i, v in enumerate(vals)]
        except InvalidArgument as e:
            self._need(False, bufs, str(e))
        return (ctypes.c_size_t * self.size)(*vals)

    def _all_to_all_v(self, send, sendcounts, recv, recvcounts, sdispls, rdispls, dtype, is_async):
        self._need(recv is not None and recv is not send, [], "all_to_all_v: needs a recvbuf other than sendbuf")
        s, r, bufs = self._pair(send, recv, dtype)
        sc = self._sizes(sendcounts, "sendcounts", bufs)
        rc = self._sizes(recvcounts, "recvcounts", bufs)
        packed = lambda counts: [sum(counts[:i]) for i in range(self.size)]
        sd = self._sizes(packed(list(sc)) if sdispls is None else sdispls, "sdispls", bufs)
        rd = self._sizes(packed(list(rc)) if rdispls is None else rdispls, "rdispls", bufs)
        for name, b, counts, displs in (("send", s, sc, sd), ("recv", r, rc, rd)):
            end = max((displs[p] + counts[p] for p in range(self.size) if counts[p]), default=0)
            self._need(end <= b.count, bufs, f"all_to_all_v: {name}counts/{name}displs reach element {end} but "
                                             f"{name}buf has {b.count}")
        fn = _c.ccl_all_to_all_v_async if is_async else _c.ccl_all_to_all_v
        return self._run(fn, (s.addr, sc, sd, r.addr, rc, rd, DTYPES[s.dtype][0], self._p()), bufs, is_async,
                         "all_to_all_v")

    def _gather(self, send, recv, root, dtype, is_async):
        root = _c_int(root, "gather: root")
        me_root = self.rank == root
        in_place = me_root and recv is not None and send is None
        if in_place:
            r = Buffer(recv, "recvbuf", True, dtype)
            self._need(r.count % self.size == 0, [r], f"gather: recvbuf's {r.count} elements are not a multiple of "
                                                        f"{self.size} (ranks)")
            n = r.count // self.size
            s, bufs = None, [r]
            saddr = r.at(self.rank * n)
        elif me_root:
            s, r, bufs = self._pair(send, recv, dtype)
            self._need(recv is not None and r.count == s.count * self.size, bufs,
                       f"gather: the root's recvbuf needs {self.size} (ranks) x sendbuf's {s.count} elements")
            n, saddr = s.count, s.addr
        else:
            s = Buffer(send, "sendbuf", False, dtype)
            r, bufs, n, saddr = None, [s], s.count, s.addr
        dt = (s or r).dtype
        fn = _c.ccl_gather_async if is_async else _c.ccl_gather
        return self._run(fn, (saddr, r.addr if r is not None else None, n, DTYPES[dt][0], int(root), self._p()),
                         bufs, is_async, "gather")

    def _scatter(self, send, recv, root, dtype, is_async):
        root = _c_int(root, "scatter: root")
        me_root = self.rank == root
        if me_root and send is not None and recv is None:  # in place: the root keeps its block in sendbuf
            s = Buffer(send, "sendbuf", True, dtype)
            self._need(s.count % self.size == 0, [s], f"scatter: sendbuf's {s.count} elements are not a multiple of "
                                                        f"{self.size} (ranks)")
            n = s.count // self.size
            r, bufs, raddr = None, [s], s.at(self.rank * n)
        elif me_root:
            s, r, bufs = self._pair(send, recv, dtype)
            self._need(s.count == r.count * self.size, bufs,
                       f"scatter: the root's sendbuf needs {self.size} (ranks) x recvbuf's {r.count} elements")
            n, raddr = r.count, r.addr
        else:
            r = Buffer(recv, "recvbuf", True, dtype)
            s, bufs, n, raddr = None, [r], r.count, r.addr
        dt = (s or r).dtype
        fn = _c.ccl_scatter_async if is_async else _c.ccl_scatter
        return self._run(fn, (s.addr if s is not None else None, raddr, n, DTYPES[dt][0], int(root), self._p()),
                         bufs, is_async, "scatter")

    def _p2p(self, is_send, buf, peer, dtype, is_async):
        peer = _c_int(peer, ("send" if is_send else "recv") + ": peer")
        b = Buffer(buf, "buf", not is_send, dtype)
        if is_send:
            fn = _c.ccl_send_async if is_async else _c.ccl_send
        else:
            fn = _c.ccl_recv_async if is_async else _c.ccl_recv
        return self._run(fn, (b.addr, b.count, DTYPES[b.dtype][0], int(peer), self._p()), [b], is_async,
                         "send" if is_send else "recv")

    # ---- the public calls: blocking, and _async twins returning a Request ----

    def all_reduce(self, send, recv=None, op=SUM, dtype=None):
        """recv = op over ranks of send (recv None: in place in send)."""
        return self._all_reduce(send, recv, op, dtype, False)

    def all_reduce_async(self, send, recv=None, op=SUM, dtype=None):
        return self._all_reduce(send, recv, op, dtype, True)

    def reduce_scatter(self, send, recv, op=SUM, dtype=None):
        """Block `rank` of the reduction of send (nranks blocks) lands in recv."""
        return self._reduce_scatter(send, recv, op, dtype, False)

    def reduce_scatter_async(self, send, recv, op=SUM, dtype=None):
        return self._reduce_scatter(send, recv, op, dtype, True)

    def all_gather(self, send, recv, dtype=None):
        """recv (nranks blocks) gets every rank's send, in rank order."""
        return self._all_gather(send, recv, dtype, False)

    def all_gather_async(self, send, recv, dtype=None):
        return self._all_gather(send, recv, dtype, True)

    def broadcast(self, buf, root=0, recv=None, dtype=None):
        """The root's buf lands in every rank's buf (or recv)."""
        return self._broadcast(buf, root, recv, dtype, False)

    def broadcast_async(self, buf, root=0, recv=None, dtype=None):
        return self._broadcast(buf, root, recv, dtype, True)

    def reduce(self, send, recv=None, root=0, op=SUM, dtype=None):
        """The root's recv (or send, in place) gets op over ranks of send."""
        return self._reduce(send, recv, root, op, dtype, False)

    def reduce_async(self, send, recv=None, root=0, op=SUM, dtype=None):
        return self._reduce(send, recv, root, op, dtype, True)

    def all_to_all(self, send, recv, dtype=None):
        """Block p of send goes to rank p; block p of recv comes from it."""
        return self._all_to_all(send, recv, dtype, False)

    def all_to_all_async(self, send, recv, dtype=None):
        return self._all_to_all(send, recv, dtype, True)

    def all_to_all_v(self, send, sendcounts, recv, recvcounts, sdispls=None, rdispls=None, dtype=None):
        """Uneven all-to-all, counts and displacements in elements
        (displacements None: blocks packed in rank order)."""
        return self._all_to_all_v(send, sendcounts, recv, recvcounts, sdispls, rdispls, dtype, False)

    def all_to_all_v_async(self, send, sendcounts, recv, recvcounts, sdispls=None, rdispls=None, dtype=None):
        return self._all_to_all_v(send, sendcounts, recv, recvcounts, sdispls, rdispls, dtype, True)

    def gather(self, send, recv=None, root=0, dtype=None):
        """Rank p's send lands at block p of the root's recv (root: send
        None gathers in place, its own block already in recv)."""
        return self._gather(send, recv, root, dtype, False)

    def gather_async(self, send, recv=None, root=0, dtype=None):
        return self._gather(send, recv, root, dtype, True)

    def scatter(self, send, recv=None, root=0, dtype=None):
        """Block p of the root's send lands in rank p's recv (root: recv
        None keeps its block in send)."""
        return self._scatter(send, recv, root, dtype, False)

    def scatter_async(self, send, recv=None, root=0, dtype=None):
        return self._scatter(send, recv, root, dtype, True)

    def barrier(self):
        return self._run(_c.ccl_barrier, (self._p(),), [], False, "barrier")

    def barrier_async(self):
        return self._run(_c.ccl_barrier_async, (self._p(),), [], True, "barrier")

    def send(self, buf, peer, dtype=None):
        return self._p2p(True, buf, peer, dtype, False)

    def send_async(self, buf, peer, dtype=None):
        return self._p2p(True, buf, peer, dtype, True)

    def recv(self, buf, peer, dtype=None):
        return self._p2p(False, buf, peer, dtype, False)

    def recv_async(self, buf, peer, dtype=None):
        return self._p2p(False, buf, peer, dtype, True)

    def __repr__(self):
        state = f"rank {self.rank} of {self.size}" if self._ptr else "destroyed"
        return f"<ccl.Comm {state}>"
