"""libccl as a torch.distributed backend named "ccl":

    import ccl.torch            # registers the backend
    torch.distributed.init_process_group("ccl", ...)

Works under torchrun and with an explicit store; rank 0 makes libccl's
unique id and shares it through the store. The process group's timeout is
the communicator's (ccl_comm_init_rank_config). CPU tensors only.

The C++ part (torch_backend.cpp) is built against the installed PyTorch
the first time it is needed and cached: in CCL_TORCH_BUILD_DIR, else under
~/.cache/ccl. `pip install` builds it ahead of time when torch is there.
"""
import os

import torch
import torch.distributed as dist

from . import _lib

_here = os.path.dirname(os.path.abspath(__file__))


def _include_dir():
    for d in (os.path.join(_here, "include"), os.path.join(_here, "..", "..", "include")):
        if os.path.exists(os.path.join(d, "ccl.h")):
            return os.path.abspath(d)
    raise ImportError("ccl.torch: ccl.h not found next to the package or in the source tree")


def _load_extension():
    try:
        from . import _torch_backend  # built by pip install
        return _torch_backend
    except ImportError:
        pass
    from torch.utils import cpp_extension
    libdir = os.path.dirname(os.path.abspath(_lib.path)) if os.path.dirname(_lib.path) else None
    ldflags = ["-lccl"] if libdir is None else [f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-l:" + os.path.basename(
        _lib.path)]
    build = os.environ.get("CCL_TORCH_BUILD_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "ccl", f"torch-{torch.__version__}")
    os.makedirs(build, exist_ok=True)
    return cpp_extension.load(name="ccl_torch_backend", sources=[os.path.join(_here, "torch_backend.cpp")],
                              extra_include_paths=[_include_dir()], extra_ldflags=ldflags,
                              extra_cflags=["-O2"], build_directory=build,
                              verbose=os.environ.get("CCL_TORCH_BUILD_VERBOSE") == "1")


_ext = _load_extension()


def _create(store, rank, size, timeout):
    return _ext.create_process_group(store, rank, size, timeout)


if "CCL" not in dist.Backend._plugins:
    dist.Backend.register_backend("ccl", _create)
