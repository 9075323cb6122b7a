"""memory_snapshot(), snapshot() and dump_snapshot(filename) in PyTorch's
snapshot format (the pickle torch.cuda._memory_viz reads), written by the
library's gpupool_snapshot_write_torch(FILE *f, const char *pool) for the
torch adapter's pools (pool "torch", every device)."""
import ctypes
import os
import pickle
import tempfile

from . import _lib, _stats

_libc = None


def _writer():
    global _libc
    fn = getattr(_lib.lib(), _lib.SNAPSHOT_SYMBOL, None)
    if fn is None:
        raise NotImplementedError(
            f"gpupool: {_lib.loaded_path()} has no {_lib.SNAPSHOT_SYMBOL} (a library built "
            "without PyTorch-format snapshots); the agent's /snapshot serves the JSON form")
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)  # fopen's errno for the OSError
        libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p] * 2
        libc.fclose.restype, libc.fclose.argtypes = ctypes.c_int, [ctypes.c_void_p]
        _libc = libc
    return fn


# What the library writes when no pool has a block yet, and PyTorch's
# allocator gives before its first allocation.
_EMPTY = {"segments": [], "device_traces": []}


def dump_snapshot(filename="dump_snapshot.pickle"):
    """Writes the torch adapter's pools (every device) as PyTorch's memory
    snapshot pickle, as torch.cuda.memory._dump_snapshot(filename) does; an
    empty snapshot before the first allocation."""
    write = _writer()
    # A path (str, bytes or os.PathLike) and nothing else, whichever branch
    # writes it: open() would take an int as a descriptor to write and close,
    # and C would read the name only up to a NUL.
    path = os.fsencode(filename)
    if b"\0" in path:
        raise ValueError(f"gpupool.dump_snapshot: {filename!r}: embedded null byte")
    if not _stats.any_pool():  # the library's writer wants a pool named "torch"
        with open(filename, "wb") as f:
            pickle.dump(_EMPTY, f, protocol=4)
        return
    _stats.check_pools_usable()  # else a forked child's pools read as none at all
    f = _libc.fopen(path, b"wb")
    if not f:
        err = ctypes.get_errno()
        raise OSError(err, f"gpupool.dump_snapshot: cannot open {filename}")
    status = write(f, b"torch")
    closed = _libc.fclose(f)
    if status != 0:
        raise _lib.error(status, _lib.last_error())
    if closed != 0:
        raise OSError(f"gpupool.dump_snapshot: cannot write {filename}")


def snapshot():
    """The snapshot dict ("segments", "device_traces"), as
    torch.cuda.memory._snapshot() returns it."""
    _writer()
    fd, path = tempfile.mkstemp(prefix="gpupool-snapshot-", suffix=".pickle")
    os.close(fd)
    try:
        dump_snapshot(path)
        with open(path, "rb") as f:
            return pickle.load(f)  # the library's own output
    finally:
        os.unlink(path)


def memory_snapshot():
    """The segments of every device, as torch.cuda.memory_snapshot() returns
    them."""
    return snapshot()["segments"]
