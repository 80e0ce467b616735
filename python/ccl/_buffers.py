"""Any object with the buffer protocol as a libccl buffer, without a copy:
its address (held exported until released), its size and its dtype."""
import ctypes

from .errors import InvalidArgument

# ccl_dtype_t values and sizes, as in include/ccl.h.
DTYPES = {
    "int8": (0, 1), "uint8": (1, 1), "int32": (2, 4), "uint32": (3, 4), "int64": (4, 8), "uint64": (5, 8),
    "float16": (6, 2), "bfloat16": (7, 2), "float32": (8, 4), "float64": (9, 8),
}
DTYPE_NAMES = {code: name for name, (code, _) in DTYPES.items()}

# struct-module format characters (native order) -> dtype, by item size.
_SIGNED = {1: "int8", 4: "int32", 8: "int64"}
_UNSIGNED = {1: "uint8", 4: "uint32", 8: "uint64"}
_RAW = ("B", "b", "c")  # plain bytes: any dtype whose size divides the length
_HALF_BITS = ("H", "h")  # 16-bit integers: how float16/bfloat16 bits are often stored


def _format_dtype(fmt, itemsize):
    f = fmt.lstrip("@=<")
    if fmt[:1] in (">", "!"):
        return None, f"big-endian format {fmt!r}"
    if f in ("b", "h", "i", "l", "q", "n"):
        return _SIGNED.get(itemsize), None
    if f in ("B", "H", "I", "L", "Q", "N", "c", "?"):
        return _UNSIGNED.get(itemsize), None
    return {"e": "float16", "f": "float32", "d": "float64"}.get(f), None


def dtype_name(dtype):
    """A dtype given as 'float32', ccl.FLOAT32, or anything with a .name
    (a numpy dtype); None stays None."""
    if dtype is None:
        return None
    if isinstance(dtype, int) and dtype in DTYPE_NAMES:
        return DTYPE_NAMES[dtype]
    name = dtype if isinstance(dtype, str) else getattr(dtype, "name", None)
    if isinstance(name, str):
        name = name.replace("torch.", "")
        if name in DTYPES:
            return name
    raise InvalidArgument(f"{dtype!r} is not a libccl dtype ({', '.join(DTYPES)})")


class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


_get = ctypes.pythonapi.PyObject_GetBuffer
_get.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get.restype = ctypes.c_int
_release = ctypes.pythonapi.PyBuffer_Release
_release.argtypes = [ctypes.POINTER(_PyBuffer)]
_release.restype = None
_PyBUF_WRITABLE, _PyBUF_C_CONTIGUOUS = 0x1, 0x38


class Buffer:
    """One argument's memory, exported (so it cannot move or shrink) until
    release(). name says which argument in errors."""

    def __init__(self, obj, name, writable, dtype=None):
        try:
            mv = memoryview(obj)
        except TypeError:
            raise InvalidArgument(f"{name}: a {type(obj).__name__} is not a buffer (numpy arrays, bytearray, "
                                  f"memoryview and tensor.numpy() are)") from None
        if not mv.c_contiguous:
            raise InvalidArgument(f"{name} is not C-contiguous (make a contiguous copy first)")
        if writable and mv.readonly:
            raise InvalidArgument(f"{name} is read-only, and this call writes it")
        self.name = name
        self.dtype = self._dtype(mv, dtype_name(dtype))
        self.esize = DTYPES[self.dtype][1]
        if mv.nbytes % self.esize:
            raise InvalidArgument(f"{name}: {mv.nbytes} bytes are not a whole number of {self.dtype} elements")
        self.nbytes = mv.nbytes
        self.count = mv.nbytes // self.esize
        self._view = _PyBuffer()
        flags = _PyBUF_C_CONTIGUOUS | (_PyBUF_WRITABLE if writable else 0)
        _get(mv, ctypes.byref(self._view), flags)  # raises (BufferError) on failure
        self._mv = mv
        self.addr = self._view.buf if self.nbytes else None

    def _dtype(self, mv, given):
        found, why = _format_dtype(mv.format, mv.itemsize)
        if why:
            raise InvalidArgument(f"{self.name}: {why} (libccl works in native byte order)")
        if given is None:
            if found is None:
                raise InvalidArgument(f"{self.name}: its format {mv.format!r} is no libccl dtype; pass dtype=")
            return found
        fmt = mv.format.lstrip("@=<")
        if fmt in _RAW or found == given or (fmt in _HALF_BITS and given in ("float16", "bfloat16")):
            return given
        raise InvalidArgument(f"{self.name} holds {found or repr(mv.format)} elements but dtype={given} was given")

    def at(self, elements):
        """The address `elements` in (None for an empty buffer)."""
        return None if self.addr is None else self.addr + elements * self.esize

    def release(self):
        if self._mv is not None:
            _release(ctypes.byref(self._view))
            self._mv.release()
            self._mv = None
