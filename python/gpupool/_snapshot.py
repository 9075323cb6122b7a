"""memory_snapshot() and dump_snapshot(path) in PyTorch's snapshot format,
written by the library's gpupool_snapshot_write_torch (PyTorch's memory
snapshot pickle, which torch.cuda._memory_viz reads)."""
import ctypes
import os
import pickle
import tempfile

from . import _lib, _stats


def _writer():
    lib = _lib.lib()
    fn = getattr(lib, _lib.SNAPSHOT_SYMBOL, None)
    if fn is None:
        raise NotImplementedError(
            f"gpupool: {_lib.loaded_path()} has no {_lib.SNAPSHOT_SYMBOL} (a library built "
            "without PyTorch-format snapshots); /snapshot on the agent serves the JSON form")
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]
    return fn


def dump_snapshot(filename="dump_snapshot.pickle", device=None):
    """Writes the device's pool (all the torch adapter's pools when device is
    None) as PyTorch's memory snapshot pickle, as
    torch.cuda.memory._dump_snapshot does."""
    write = _writer()
    p = None if device is None else _stats.pool(device)
    if device is not None and not p:
        raise ValueError(f"gpupool: device {_stats.device_index(device)} has no pool yet")
    if write(p, os.fsencode(filename)) != 0:
        raise _lib.GpupoolError(f"{_lib.SNAPSHOT_SYMBOL}: {_lib.last_error()}")


def snapshot(device=None):
    """The whole snapshot dict ("segments", "device_traces"), as
    torch.cuda.memory._snapshot() returns it."""
    fd, path = tempfile.mkstemp(prefix="gpupool-snapshot-", suffix=".pickle")
    os.close(fd)
    try:
        dump_snapshot(path, device)
        with open(path, "rb") as f:
            return pickle.load(f)  # the library's own output
    finally:
        os.unlink(path)


def memory_snapshot(device=None):
    """The segments list, as torch.cuda.memory_snapshot() returns it."""
    return snapshot(device)["segments"]
