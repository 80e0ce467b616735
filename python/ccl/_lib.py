"""Loads libccl and declares the C functions this package calls.

ctypes releases the GIL around every foreign call, so a blocking
collective never stops the interpreter's other threads.
"""
import ctypes
import ctypes.util
import os

_here = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("CCL_LIBRARY")
    if env:
        yield env
        return
    # The copy inside the package (pip install ./python builds it into the wheel).
    yield os.path.join(_here, "libccl.so.0")
    # The build tree, when running in place from a checkout (python/ccl).
    for build in ("build", "build-py"):
        yield os.path.join(_here, "..", "..", build, "libccl.so.0")
    yield "libccl.so.0"  # the system loader: cmake --install, LD_LIBRARY_PATH
    found = ctypes.util.find_library("ccl")
    if found:
        yield found


def _loaded_file(name):
    """The file the loader mapped for name: a bare "libccl.so.0" is found
    through LD_LIBRARY_PATH, the loader's cache or an rpath, and whoever links
    against this library (ccl.torch's extension) needs the real path."""
    base = os.path.basename(name)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                f = line.split(None, 5)
                if len(f) == 6 and os.path.basename(f[5].strip()).startswith(base.split(".so")[0] + ".so"):
                    real = f[5].strip()
                    if os.path.exists(real):
                        return real
    except OSError:
        pass
    return name


def _load():
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            return lib, _loaded_file(path) if os.sep not in path else os.path.abspath(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise ImportError("ccl: cannot load libccl (set CCL_LIBRARY to the path of libccl.so, or install it "
                      "with cmake --install); tried:\n  " + "\n  ".join(tried))


lib, path = _load()

c_size_p = ctypes.POINTER(ctypes.c_size_t)
_comm = ctypes.c_void_p
_req_p = ctypes.POINTER(ctypes.c_void_p)
_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_i = ctypes.c_int


class UniqueIdStruct(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class ConfigStruct(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("timeout_s", ctypes.c_double), ("algo", ctypes.c_char_p)]


_protos = {
    "ccl_status_string": (ctypes.c_char_p, [_i]),
    "ccl_comm_last_error": (ctypes.c_char_p, [_comm]),
    "ccl_version": (_i, []),
    "ccl_get_unique_id": (_i, [ctypes.POINTER(UniqueIdStruct)]),
    "ccl_unique_id_from_address": (_i, [ctypes.c_char_p, ctypes.POINTER(UniqueIdStruct)]),
    "ccl_comm_init_rank_config": (_i, [ctypes.POINTER(_comm), _i, UniqueIdStruct, _i, ctypes.POINTER(ConfigStruct)]),
    "ccl_comm_init_env": (_i, [ctypes.POINTER(_comm)]),
    "ccl_comm_split": (_i, [_comm, _i, _i, ctypes.POINTER(_comm)]),
    "ccl_comm_create_group": (_i, [_comm, ctypes.POINTER(_i), _i, ctypes.POINTER(_comm)]),
    "ccl_comm_destroy": (_i, [_comm]),
    "ccl_comm_abort": (_i, [_comm]),
    "ccl_comm_revoke": (_i, [_comm]),
    "ccl_comm_shrink": (_i, [_comm, ctypes.POINTER(_i), _i, ctypes.POINTER(_comm)]),
    "ccl_comm_failed_ranks": (_i, [_comm, ctypes.POINTER(_i), _i, ctypes.POINTER(_i)]),
    "ccl_comm_grow_id": (_i, [_comm, ctypes.POINTER(UniqueIdStruct)]),
    "ccl_comm_grow": (_i, [_comm, _i, ctypes.POINTER(UniqueIdStruct), _i, ctypes.POINTER(_comm)]),
    "ccl_comm_rank": (_i, [_comm, ctypes.POINTER(_i)]),
    "ccl_comm_size": (_i, [_comm, ctypes.POINTER(_i)]),
    "ccl_comm_describe": (_i, [_comm, ctypes.c_char_p, _sz]),
    "ccl_comm_bind_thread": (_i, [_comm]),
    "ccl_comm_set_algo": (_i, [_comm, ctypes.c_char_p]),
    "ccl_comm_register": (_i, [_comm, _vp, _sz, ctypes.POINTER(_vp)]),
    "ccl_comm_deregister": (_i, [_comm, _vp]),
    "ccl_mem_alloc": (_i, [_comm, _sz, ctypes.POINTER(_vp)]),
    "ccl_mem_free": (_i, [_comm, _vp]),
    "ccl_mem_release": (_i, [_comm, _vp]),
    "ccl_group_start": (_i, []),
    "ccl_group_end": (_i, []),
    "ccl_test": (_i, [_vp, ctypes.POINTER(_i)]),
    "ccl_wait": (_i, [_vp]),
}
for _async in ("", "_async"):
    _r = [_req_p] if _async else []
    _protos.update({
        "ccl_all_reduce" + _async: (_i, [_vp, _vp, _sz, _i, _i, _comm] + _r),
        "ccl_reduce_scatter" + _async: (_i, [_vp, _vp, _sz, _i, _i, _comm] + _r),
        "ccl_all_gather" + _async: (_i, [_vp, _vp, _sz, _i, _comm] + _r),
        "ccl_broadcast" + _async: (_i, [_vp, _vp, _sz, _i, _i, _comm] + _r),
        "ccl_reduce" + _async: (_i, [_vp, _vp, _sz, _i, _i, _i, _comm] + _r),
        "ccl_all_to_all" + _async: (_i, [_vp, _vp, _sz, _i, _comm] + _r),
        "ccl_all_to_all_v" + _async: (_i, [_vp, c_size_p, c_size_p, _vp, c_size_p, c_size_p, _i, _comm] + _r),
        "ccl_gather" + _async: (_i, [_vp, _vp, _sz, _i, _i, _comm] + _r),
        "ccl_scatter" + _async: (_i, [_vp, _vp, _sz, _i, _i, _comm] + _r),
        "ccl_barrier" + _async: (_i, [_comm] + _r),
        "ccl_send" + _async: (_i, [_vp, _sz, _i, _i, _comm] + _r),
        "ccl_recv" + _async: (_i, [_vp, _sz, _i, _i, _comm] + _r),
    })
for _name, (_res, _args) in _protos.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args
