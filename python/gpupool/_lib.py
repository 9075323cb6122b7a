"""Finding and loading libgpupool, and the ctypes declarations of the C API
the package uses (include/gpupool/gpupool.h, tag.h; the torch adapter's
gpupool_torch_* functions)."""
import ctypes
import ctypes.util
import os
import threading

MAX_DEVICES = 64  # the torch adapter's pools, one per device ordinal below this
TAG_MAX = 16  # GPUPOOL_TAG_MAX
SNAPSHOT_SYMBOL = "gpupool_snapshot_write_torch"


class GpupoolError(RuntimeError):
    """The library cannot be found or loaded, or a call failed."""


ERR_INVALID = 2  # GPUPOOL_ERR_INVALID: a bad argument, or a call out of place
ERR_HOST_OOM = 5  # GPUPOOL_ERR_HOST_OOM: the process is out of host memory


def error(status, message):
    """The exception for a failed call's gpupool_status: MemoryError when the
    host ran out of memory (as Python's own allocations raise), else
    GpupoolError."""
    return MemoryError(message) if status == ERR_HOST_OOM else GpupoolError(message)


class Stat(ctypes.Structure):
    _fields_ = [("current", ctypes.c_int64), ("peak", ctypes.c_int64),
                ("allocated", ctypes.c_int64), ("freed", ctypes.c_int64)]


STAT_TYPES = ("all", "small_pool", "large_pool")  # GPUPOOL_STAT_ALL, _SMALL, _LARGE
_Stat3 = Stat * 3
# The gpupool_stat arrays of gpupool_stats, in their order, with the names
# torch.cuda.memory_stats gives them.
STAT_ARRAYS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
               "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
STAT_COUNTERS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
                 "num_cache_hits", "num_device_sourced", "num_frees", "num_gc_runs",
                 "num_sync_events", "largest_free_block", "free_blocks", "pending_free_blocks",
                 "num_pages_moved", "num_device_syncs", "num_alloc_unmaps")


class Stats(ctypes.Structure):  # gpupool_stats
    _fields_ = ([(n, _Stat3) for n in STAT_ARRAYS] +
                [(n, ctypes.c_uint64) for n in STAT_COUNTERS])


class TagStat(ctypes.Structure):  # gpupool_tag_stat
    _fields_ = [("tag", ctypes.c_char_p), ("allocated_bytes", ctypes.c_int64)]


_P = ctypes.c_void_p
_SIGNATURES = {
    "gpupool_last_error": (ctypes.c_char_p, []),
    "gpupool_torch_pool": (_P, [ctypes.c_int]),
    "gpupool_torch_malloc": (_P, [ctypes.c_size_t, ctypes.c_int, _P]),
    "gpupool_torch_free": (None, [_P, ctypes.c_size_t, ctypes.c_int, _P]),
    "gpupool_torch_record_stream": (None, [_P, _P]),
    "gpupool_torch_set_memory_fraction": (None, [ctypes.c_double, ctypes.c_int]),
    "gpupool_torch_memory_fraction": (ctypes.c_double, [ctypes.c_int]),
    "gpupool_torch_empty_cache": (None, []),
    "gpupool_torch_attach_oom_observer": (ctypes.c_int, [ctypes.c_void_p]),
    "gpupool_torch_conf_check": (ctypes.c_int, [ctypes.c_char_p]),
    "gpupool_agent_conf_check": (ctypes.c_int, [ctypes.c_char_p]),
    "gpupool_agent_start": (ctypes.c_int, [_P]),
    "gpupool_agent_stop": (None, []),
    "gpupool_get_stats": (ctypes.c_int, [_P, ctypes.POINTER(Stats)]),
    "gpupool_reset_peak_stats": (None, [_P]),
    "gpupool_reset_accumulated_stats": (None, [_P]),
    "gpupool_empty_cache": (ctypes.c_size_t, [_P]),
    "gpupool_max_split_size": (ctypes.c_size_t, [_P]),
    "gpupool_name": (ctypes.c_char_p, [_P]),
    "gpupool_backend_name": (ctypes.c_char_p, [_P]),
    "gpupool_strategy_name": (ctypes.c_char_p, [_P]),
    "gpupool_tag_push": (ctypes.c_int, [ctypes.c_char_p]),
    "gpupool_tag_pop": (ctypes.c_int, []),
    "gpupool_tag_current": (ctypes.c_char_p, []),
    "gpupool_get_tag_stats": (ctypes.c_int, [_P, ctypes.POINTER(TagStat), ctypes.c_int]),
}

_lock = threading.Lock()
_lib = None
_path = None


def library_path():
    """The libgpupool the package uses: once loaded, the one loaded (a later
    change of GPUPOOL_LIBRARY does not reload it); before, the one it will
    load: GPUPOOL_LIBRARY when set, else the copy installed with the package,
    else one the system's loader finds (then a name, libgpupool.so.0, which
    the loader resolves)."""
    if _path is not None:
        return _path
    return _find_library()


def _find_library():
    named = os.environ.get("GPUPOOL_LIBRARY")
    if named:
        if not os.path.isfile(named):
            raise GpupoolError(f"GPUPOOL_LIBRARY={named}: no such file")
        return os.path.abspath(named)
    shipped = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libgpupool.so")
    if os.path.isfile(shipped):
        return shipped
    found = ctypes.util.find_library("gpupool")
    if found:
        return found
    raise GpupoolError(
        "gpupool: no libgpupool.so: the package was installed without one (no "
        "build/release/libgpupool.so when `pip install ./python` ran) and none is on the "
        "loader's path; build the library and reinstall, or set GPUPOOL_LIBRARY=/path/libgpupool.so")


def lib():
    """The loaded library (loaded once, on first use)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = _find_library()
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                raise GpupoolError(f"gpupool: cannot load {path}: {e}") from None
            for name, (restype, argtypes) in _SIGNATURES.items():
                try:
                    fn = getattr(handle, name)
                except AttributeError:
                    if name == "gpupool_last_error":  # every gpupool library has it
                        raise GpupoolError(f"gpupool: {path} is not a gpupool library (it has "
                                           f"no {name})") from None
                    raise GpupoolError(f"gpupool: {path} has no {name}: a library older than "
                                       "this package") from None
                fn.restype, fn.argtypes = restype, argtypes
            _path, _lib = path, handle
    return _lib


def loaded_path():
    """The path (or name) the library was loaded from."""
    lib()
    return _path


def last_error():
    return (lib().gpupool_last_error() or b"").decode("utf-8", "replace")
