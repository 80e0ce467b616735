"""One exception class per libccl status; each carries the status and the
communicator's sentence (ccl_comm_last_error) saying what failed and why."""


class Error(Exception):
    """A libccl call failed. status: the ccl_status_t value; message: why."""

    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class InvalidArgument(Error, ValueError):
    status = -1


class InvalidUsage(Error, RuntimeError):
    status = -2


class SystemCallError(Error, RuntimeError):
    status = -3


class RemoteError(Error, RuntimeError):
    """Another rank failed, left, or its link went down."""
    status = -4


class Timeout(Error, TimeoutError):
    status = -5


class Aborted(Error, RuntimeError):
    status = -6


class Unsupported(Error, NotImplementedError):
    status = -7


class NoMemory(Error, MemoryError):
    status = -8


class InternalError(Error, RuntimeError):
    status = -9


class Revoked(Error, RuntimeError):
    """The communicator was revoked (Communicator.revoke on some rank, or a
    shrink), or this rank was left out of a shrink: shrink it, or drop it."""
    status = -10


_by_status = {cls.status: cls for cls in
              (InvalidArgument, InvalidUsage, SystemCallError, RemoteError, Timeout, Aborted, Unsupported, NoMemory,
               InternalError, Revoked)}


def from_status(status, message):
    """The exception for a negative status."""
    cls = _by_status.get(status, Error)
    return cls(message, status)
