"""libccl as a torch.distributed backend named "libccl":

    import ccl.torch            # registers the backend
    torch.distributed.init_process_group("libccl", ...)

"ccl" names it too, unless Intel's oneCCL bindings for PyTorch
(oneccl_bindings_for_pytorch, which DeepSpeed picks by the name "ccl") are
installed: then "ccl" stays theirs and "libccl" is this backend's only name.

Works under torchrun and with an explicit store; rank 0 makes libccl's
unique id and shares it through the store. new_group (and DeviceMesh)
make sub-groups on the default group's communicator, by their members
alone (ccl_comm_create_group). The process group's timeout is the
communicator's. CPU and CUDA tensors. Runs on Debian's torch 1.13 and on
torch 2.x (tested with 2.11, which tools/install-deps.sh installs from
PyPI).

The C++ part (torch_backend.cpp) is compiled against the installed
PyTorch and the libccl that `import ccl` loaded the first time it is
needed (a line on stderr says so), and cached: in CCL_TORCH_BUILD_DIR,
else under ~/.cache/ccl/torch-<version>.
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
        from . import _torch_backend  # built ahead of time, where a build did
        return _torch_backend
    except ImportError:
        pass
    import sys
    import time
    from torch.utils import cpp_extension
    # Link against the very file `import ccl` loaded (_lib.path is always a
    # real path), wherever it came from: the wheel, a build tree,
    # LD_LIBRARY_PATH or an installed prefix.
    libdir, libname = os.path.split(os.path.abspath(_lib.path))
    ldflags = [f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-l:" + libname]
    build = os.environ.get("CCL_TORCH_BUILD_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "ccl", f"torch-{torch.__version__}")
    os.makedirs(build, exist_ok=True)
    # A built extension is reused (ninja finds nothing to do); a first
    # build takes about half a minute, so say so instead of sitting silent.
    built = any(f.startswith("ccl_torch_backend") and f.endswith(".so") for f in os.listdir(build))
    if not built:
        print(f"ccl.torch: compiling the torch backend against torch {torch.__version__} and {_lib.path} "
              f"(once, about half a minute; cached in {build})", file=sys.stderr, flush=True)
    start = time.monotonic()
    ext = cpp_extension.load(name="ccl_torch_backend", sources=[os.path.join(_here, "torch_backend.cpp")],
                             extra_include_paths=[_include_dir()], extra_ldflags=ldflags,
                             extra_cflags=["-O2"], build_directory=build,
                             verbose=os.environ.get("CCL_TORCH_BUILD_VERBOSE") == "1")
    if not built:
        print(f"ccl.torch: compiled in {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    return ext


_ext = _load_extension()


def _default_backend():
    """The default group's libccl backend object, or None."""
    try:
        pg = dist.distributed_c10d._get_default_group()
    except (RuntimeError, ValueError):
        return None
    if hasattr(pg, "_get_backend"):  # torch 2.x: the backend behind the group
        try:
            return pg._get_backend(torch.device("cpu"))
        except RuntimeError:
            return None
    return pg  # torch 1.13: the group is the backend


def _create(opts, backend_options=None):
    """torch's extended creator: the default group rendezvous through the
    store; a sub-group (new_group, DeviceMesh) is made on the default
    group's communicator by its members alone, where that group is libccl."""
    ranks = list(opts.global_ranks_in_group)
    if ranks and len(ranks) == opts.group_size:
        parent = _default_backend()
        if parent is not None:
            group = _ext.create_group(parent, ranks, opts.timeout)
            if group is not None:
                return group
    return _ext.create_process_group(opts.store, opts.group_rank, opts.group_size, opts.timeout, ranks)


def origin(group):
    """How a process group's libccl communicator was made: "store" (a
    rendezvous through torch's store), "ccl_comm_split" (split_group) or
    "ccl_comm_create_group" (new_group, DeviceMesh); None where the group
    is not this backend's."""
    backend = group._get_backend(torch.device("cpu")) if hasattr(group, "_get_backend") else group
    return _ext.origin(backend)


def describe(group):
    """ccl_comm_describe of a process group's libccl communicator (its
    transports, ring, the algorithm each collective last ran, and on one
    host single_copy=on|off and zero_copy_calls=N); None where the group
    is not this backend's."""
    backend = group._get_backend(torch.device("cpu")) if hasattr(group, "_get_backend") else group
    return _ext.describe(backend)


def flight_recorder_dump():
    """This process's flight recorder (the last calls of every libccl
    process group), pickled in the format of torch's own recorder, as
    torch._C._distributed_c10d._dump_nccl_trace() gives NCCL's. Its size is
    torch's TORCH_FR_BUFFER_SIZE (2000 calls by default; 0: off). The
    first failed call also writes it to $TORCH_FR_DUMP_TEMP_FILE<rank>,
    where that variable is set; python -m ccl.fr_trace DIR analyzes the
    files of every rank with torch's analyzer."""
    return _ext.flight_recorder_dump()


def _register(name):
    if name.upper() in dist.Backend._plugins:
        return
    if int(torch.__version__.split(".")[0]) >= 2:
        # torch 2.x asks which devices a backend serves. "cuda" too, though
        # CUDA tensors are refused with a sentence: torch's split_group
        # looks for the process group's "cuda" backend to split.
        dist.Backend.register_backend(name, _create, extended_api=True, devices=["cpu", "cuda"])
    else:
        dist.Backend.register_backend(name, _create, extended_api=True)


def oneccl_installed():
    """Intel's oneCCL bindings are installed: they register "ccl", and
    DeepSpeed picks them by that name."""
    import importlib.util
    return importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None


# libccl's own name, always; "ccl" too (programs written for the earlier
# name) unless Intel's oneCCL bindings are installed, whose name it is.
_register("libccl")
if not oneccl_installed():
    _register("ccl")
