"""torch.cuda's memory functions, answered from the torch adapter's pools
(pool "torch", one per device) through the C API."""
import collections
import ctypes
import os
import re
import sys

from . import _lib


class DeviceError(ValueError, RuntimeError):
    """A device argument refused where PyTorch raises RuntimeError (a string
    torch.device does not take, a bool, an ordinal its allocator has no
    device for) and this package has always raised ValueError: either
    except clause catches it."""


# torch.device's device types (c10's DeviceType names): a string naming one
# of them other than cuda is a device, but not a CUDA one (PyTorch's
# ValueError); any other name is none at all (torch.device's RuntimeError).
_TORCH_DEVICE_TYPES = frozenset((
    "cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga",
    "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone"))
# A device string as torch.device parses it: a name of ASCII letters and
# '_', then optionally ':' and an index without leading zeros.
_DEVICE_STRING = re.compile(r"([A-Za-z_]+)(?::(0|[1-9][0-9]*))?")


def device_index(device=None, optional=True):
    """A CUDA device ordinal from what torch.cuda's functions accept
    (torch.cuda._utils._get_device_index): None (the current device), an
    int, "cuda", "cuda:N", a torch.device, or a torch.cuda.device (its
    .idx; torch.cuda.device_of too). optional=False, as PyTorch's
    set/get_per_process_memory_fraction parse it: a CUDA device without an
    index ("cuda", torch.device("cuda")) is refused (ValueError), None is
    still the current device. Refused as PyTorch refuses: a device of
    another type ("cpu", torch.device("cpu")) with ValueError; a string
    torch.device does not take ("cuda:x", "cuda:01", "gpu"), a bool, or an
    ordinal outside 0 to 63 with DeviceError (ValueError and RuntimeError).
    Any other object is a ValueError, where PyTorch's memory_stats family
    would read the current device in silence."""
    if device is None:
        return _current_device()
    if isinstance(device, bool):  # an int to Python; PyTorch's C check refuses it
        raise DeviceError(f"gpupool: {device!r} is not a CUDA device (a bool is no ordinal)")
    if isinstance(device, int):
        index = device
    elif isinstance(device, str):
        m = _DEVICE_STRING.fullmatch(device)
        if m is None or m.group(1) not in _TORCH_DEVICE_TYPES:
            raise DeviceError(f"gpupool: {device!r} is not a CUDA device (not a device string "
                              "torch.device takes; expected 'cuda' or 'cuda:N')")
        if m.group(1) != "cuda":
            raise ValueError(f"gpupool: {device!r} is not a CUDA device (expected 'cuda' or "
                             "'cuda:N')")
        index = None if m.group(2) is None else int(m.group(2))
    elif isinstance(getattr(device, "type", None), str):  # torch.device
        if device.type != "cuda":
            raise ValueError(f"gpupool: {device!r} is not a CUDA device")
        index = device.index
    elif hasattr(device, "idx"):  # torch.cuda.device (and device_of): an ordinal, -1 for none
        index = device.idx
    else:
        raise ValueError(f"gpupool: {device!r} is not a CUDA device (expected None, an "
                         "ordinal, 'cuda:N', a torch.device or a torch.cuda.device)")
    if index is None:  # "cuda", torch.device("cuda")
        if not optional:
            raise ValueError(f"gpupool: {device!r} has no device index (this call takes an "
                             "ordinal, 'cuda:N' or None, as PyTorch's does)")
        return _current_device()
    if (not isinstance(index, int) or isinstance(index, bool) or
            not 0 <= index < _lib.MAX_DEVICES):
        raise DeviceError(f"gpupool: device {index!r} is not an ordinal from 0 to "
                          f"{_lib.MAX_DEVICES - 1}")
    return index


def _current_device():
    torch = sys.modules.get("torch")  # never imported here: the package works without torch
    # Reading stats must not initialise CUDA (that would make enable() too late).
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return 0


def pool(device=None):
    """The torch adapter's pool of device (a ctypes address), or None before
    the device's first allocation."""
    return _lib.lib().gpupool_torch_pool(device_index(device))


def any_pool():
    """Whether some device has its pool yet (the adapter creates them at
    their first allocation)."""
    lib = _lib.lib()
    return any(lib.gpupool_torch_pool(d) for d in range(_lib.MAX_DEVICES))


def check_pools_usable():
    """Raises GpupoolError, with the library's reason, where a device's pool
    cannot answer in this process (one inherited over fork())."""
    lib = _lib.lib()
    for d in range(_lib.MAX_DEVICES):
        p = lib.gpupool_torch_pool(d)
        if p:
            _usable(p)


def _usable(p):
    """p, once the library answers for it: a pool inherited over fork() is
    refused (GpupoolError with the library's reason), as memory_stats is,
    rather than the void calls below doing nothing in silence."""
    status = _lib.lib().gpupool_get_stats(p, _lib.Stats())
    if status != 0:
        raise _lib.error(status, _lib.last_error())
    return p


def raw_stats(device=None):
    """The device's gpupool_stats (zeros before its first allocation)."""
    st = _lib.Stats()
    p = pool(device)
    status = _lib.lib().gpupool_get_stats(p, st) if p else 0
    if status != 0:
        raise _lib.error(status, f"gpupool_get_stats: {_lib.last_error()}")
    return st


# The white space the library's GPUPOOL_CONF parser trims around keys and
# values (C's isspace); str.strip() would trim more (Unicode spaces, \x1c-\x1f).
_C_SPACE = " \t\n\v\f\r"


def _max_split_size(p):
    """max_split_size in bytes, -1 when unlimited (PyTorch's figure): the
    limit pool p runs with (gpupool_max_split_size), or, before the device
    has a pool, the one GPUPOOL_CONF gives the pool it will create (the
    torch adapter's pools take their tunables from there), read as the
    library reads it (core/kvconf.c, pool/conf.c): "key:value" entries
    separated by ',', the key and the value trimmed of C's white space, the
    last entry of a key the one that counts; "inf" and "unlimited" mean no
    limit; any other value is a whole number of MiB from 21 to 2^30. With a
    value the library refuses it creates no pool, and -1 is what is left."""
    if p:
        limit = _lib.lib().gpupool_max_split_size(p)
        return -1 if limit == ctypes.c_size_t(-1).value else limit
    value = None
    for item in os.environ.get("GPUPOOL_CONF", "").split(","):
        key, colon, rest = item.partition(":")
        if colon and key.strip(_C_SPACE) == "max_split_size_mb":
            value = rest.strip(_C_SPACE)  # a later entry overrides, as in the library
    # Digits only, as strtoull reads them (leading zeros too), in the
    # library's 1023-byte value; inf, unlimited or a refused value: -1.
    if value is None or len(value) > 1023 or not re.fullmatch(r"[0-9]+", value):
        return -1
    mb = int(value)
    return mb << 20 if 21 <= mb <= 1 << 30 else -1


def memory_stats(device=None):
    """torch.cuda.memory_stats(device) for gpupool: an OrderedDict with
    PyTorch's keys, sorted as PyTorch sorts them. num_sync_all_streams counts
    the pool's device synchronizations (expandable segments); the oversize_*
    keys are present (as zeros, which they are) only when max_split_size_mb
    is unlimited, since the pool does not count blocks above the limit."""
    index = device_index(device)
    return _stats_dict(raw_stats(index), pool(index))


def memory_stats_as_nested_dict(device=None):
    """torch.cuda.memory_stats_as_nested_dict: memory_stats' flat keys
    ("allocated_bytes.all.current") as nested dicts."""
    nested = {}
    for key, value in memory_stats(device).items():
        *path, leaf = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def _stats_dict(st, p):
    """memory_stats' OrderedDict of a gpupool_stats, of pool p (None: the
    device has none yet)."""
    out = []
    for name in _lib.STAT_ARRAYS:
        for i, kind in enumerate(_lib.STAT_TYPES):
            s = getattr(st, name)[i]
            for field in ("current", "peak", "allocated", "freed"):
                out.append((f"{name}.{kind}.{field}", getattr(s, field)))
    out += [("num_alloc_retries", st.num_alloc_retries), ("num_ooms", st.num_ooms),
            ("num_device_alloc", st.num_device_alloc), ("num_device_free", st.num_device_free),
            ("num_sync_all_streams", st.num_device_syncs)]
    max_split = _max_split_size(p)
    out.append(("max_split_size", max_split))
    if max_split == -1:
        for name in ("oversize_allocations", "oversize_segments"):
            out += [(f"{name}.{field}", 0) for field in ("current", "peak", "allocated", "freed")]
    out.sort()
    return collections.OrderedDict(out)


def memory_allocated(device=None):
    """torch.cuda.memory_allocated: the bytes of the device's live blocks
    (allocated_bytes.all.current)."""
    return raw_stats(device).allocated_bytes[0].current


def max_memory_allocated(device=None):
    """torch.cuda.max_memory_allocated: the peak of memory_allocated since
    the pool began or reset_peak_memory_stats (allocated_bytes.all.peak)."""
    return raw_stats(device).allocated_bytes[0].peak


def memory_reserved(device=None):
    """torch.cuda.memory_reserved: the bytes the device's pool holds from
    the device (reserved_bytes.all.current)."""
    return raw_stats(device).reserved_bytes[0].current


def max_memory_reserved(device=None):
    """torch.cuda.max_memory_reserved: the peak of memory_reserved
    (reserved_bytes.all.peak)."""
    return raw_stats(device).reserved_bytes[0].peak


def reset_peak_memory_stats(device=None):
    """torch.cuda.reset_peak_memory_stats: every peak of the device's pool
    is set to its current value (gpupool_reset_peak_stats)."""
    p = pool(device)
    if p:
        _lib.lib().gpupool_reset_peak_stats(_usable(p))


def reset_accumulated_memory_stats(device=None):
    """torch.cuda.reset_accumulated_memory_stats: the device's
    allocated/freed totals and its counters (num_alloc_retries, num_ooms,
    ...) start again from zero (gpupool_reset_accumulated_stats)."""
    p = pool(device)
    if p:
        _lib.lib().gpupool_reset_accumulated_stats(_usable(p))


def empty_cache():
    """Returns the cached segments of every device's pool that hold no live
    block to the device, as torch.cuda.empty_cache() does for PyTorch's
    allocator; returns the bytes released."""
    lib = _lib.lib()
    released = 0
    for d in range(_lib.MAX_DEVICES):
        p = lib.gpupool_torch_pool(d)
        if p:
            released += lib.gpupool_empty_cache(_usable(p))
    return released


def set_per_process_memory_fraction(fraction, device=None):
    """torch.cuda.set_per_process_memory_fraction for the device's pool: its
    reserved memory stays within fraction x the device's memory (an
    allocation past it fails as out of memory once the cache is returned).
    Before the device's first allocation, the pool is created with it."""
    index = device_index(device, optional=False)  # first, as PyTorch checks them
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    p = pool(index)
    if p:
        _usable(p)
    _lib.lib().gpupool_torch_set_memory_fraction(fraction, index)


def get_per_process_memory_fraction(device=None):
    """The fraction set for the device's pool, 1.0 when none (as
    torch.cuda.get_per_process_memory_fraction answers)."""
    return _lib.lib().gpupool_torch_memory_fraction(device_index(device, optional=False))


# The observers handed to the library, as ctypes callbacks: they must live as
# long as the library may call them, the process.
_OOM_OBSERVER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t,
                                 ctypes.c_size_t)
_oom_observers = []


def attach_out_of_memory_observer(observer):
    """torch._C._cuda_attach_out_of_memory_observer for the torch adapter's
    pools: observer(device, alloc, device_total, device_free) is called on
    the failing thread before each out-of-memory error is raised, as PyTorch's
    allocator calls it (device_total is the memory_fraction cap where one is
    set); it may take a snapshot (torch.cuda.memory._snapshot()). An exception
    it raises is printed and the OOM goes on."""
    if not callable(observer):
        raise TypeError(f"gpupool: the out-of-memory observer {observer!r} is not callable")
    callback = _OOM_OBSERVER(lambda device, alloc, total, free: observer(device, alloc, total,
                                                                         free))
    status = _lib.lib().gpupool_torch_attach_oom_observer(
        ctypes.cast(callback, ctypes.c_void_p).value)
    if status != 0:
        raise _lib.error(status, f"gpupool: attach_out_of_memory_observer: {_lib.last_error()}")
    _oom_observers.append(callback)


# memory_summary's cells, formatted as torch.cuda.memory_summary formats
# them: every cell of a column is in the unit its first ("all") row picks, the
# value truncated to it, so a column's figures read against each other.
_SIZE_UNITS = ("B  ", "KiB", "MiB", "GiB", "TiB", "PiB")
_COUNT_UNITS = (" ", "K", "M")


def _size_cell(n, ref):
    """n bytes in the unit of ref (the column's "all" figure): the next unit
    up while ref is still 768 or more of it ("  5120 KiB")."""
    unit = 0
    while unit + 1 < len(_SIZE_UNITS) and ref >= 768 * 1024:
        unit, n, ref = unit + 1, n // 1024, ref / 1024
    return f"{n:6d} {_SIZE_UNITS[unit]}"


def _count_cell(n, ref):
    """A count in the unit of ref: thousands (K), then millions (M), while ref
    is still 750 thousand or more of the unit ("     12   ")."""
    unit = 0
    while unit + 1 < len(_COUNT_UNITS) and ref >= 750 * 1000:
        unit, n, ref = unit + 1, n // 1000, ref / 1000
    return f"{n:7d} {_COUNT_UNITS[unit]} "


_SUMMARY_ROWS = (("Allocated memory", "allocated_bytes", _size_cell),
                 ("Active memory", "active_bytes", _size_cell),
                 ("Requested memory", "requested_bytes", _size_cell),
                 ("GPU reserved memory", "reserved_bytes", _size_cell),
                 ("Non-releasable memory", "inactive_split_bytes", _size_cell),
                 ("Allocations", "allocation", _count_cell),
                 ("Active allocs", "active", _count_cell),
                 ("GPU reserved segments", "segment", _count_cell),
                 ("Non-releasable allocs", "inactive_split", _count_cell))
_OVERSIZE_ROWS = (("Oversize allocations", "oversize_allocations"),
                  ("Oversize GPU segments", "oversize_segments"))
_FIELDS = ("current", "peak", "allocated", "freed")
_WIDTH = 75  # between the side bars


def _summary_table(stats, index, abbreviated=False):
    """The lines of torch.cuda.memory_summary's table (side bars included)
    for stats, a memory_stats() dict: its rows, labels, units and widths, so
    that the two allocators' tables diff line by line. The Oversize rows come
    only when stats has them (max_split_size_mb unlimited)."""
    def row(label, cells):
        return f" {label:<21} | " + " | ".join(cells) + " "

    rule, double = "-" * _WIDTH, "=" * _WIDTH
    lines = [double, f"{'gpupool memory summary, device ID':>56} {index:<17d} ", rule,
             f"{'CUDA OOMs:':>22} {stats['num_ooms']:<12d} | {'cudaMalloc retries:':>26} "
             f"{stats['num_alloc_retries']:<8d}  ", double,
             row("       Metric", ("Cur Usage ", "Peak Usage", "Tot Alloc ", "Tot Freed "))]
    for label, name, cell in _SUMMARY_ROWS:
        lines.append(rule)  # PyTorch draws a rule above every group
        refs = [stats[f"{name}.all.{f}"] for f in _FIELDS]  # each column's unit
        kinds = (("all", label),) if abbreviated else (
            ("all", label), ("large_pool", "      from large pool"),
            ("small_pool", "      from small pool"))
        for kind, text in kinds:
            lines.append(row(text, [cell(stats[f"{name}.{kind}.{f}"], ref)
                                    for f, ref in zip(_FIELDS, refs)]))
    for label, name in _OVERSIZE_ROWS:
        if f"{name}.current" in stats:
            values = [stats[f"{name}.{f}"] for f in _FIELDS]
            lines += [rule, row(label, [_count_cell(v, v) for v in values])]
    lines.append(double)
    return ["|" + line + "|" for line in lines]


def memory_summary(device=None, abbreviated=False):
    """torch.cuda.memory_summary for gpupool: PyTorch's table, line for line
    (its rows, labels, units and widths; the Oversize rows only when
    max_split_size_mb is unlimited, where they are exact zeros), then
    gpupool's own lines: the pool, its cache hits, device calls and largest
    free block."""
    index = device_index(device)
    st = raw_stats(index)
    p = pool(index)
    lib = _lib.lib()
    pool_desc = (f"pool {lib.gpupool_name(p).decode()}, {lib.gpupool_backend_name(p).decode()}, "
                 f"{lib.gpupool_strategy_name(p).decode()}" if p else "no pool yet")
    largest = _size_cell(st.largest_free_block, st.largest_free_block).strip()
    half = (_WIDTH - 1) // 2
    lines = _summary_table(_stats_dict(st, p), index, abbreviated)  # one read: the lines agree
    lines += ["| " + f"gpupool ({pool_desc})".ljust(_WIDTH - 1) + "|",
              "| " + f"Cache hits: {st.num_cache_hits}".ljust(half) +
              f"From the device: {st.num_device_sourced}".ljust(_WIDTH - 1 - half) + "|",
              "| " + f"Largest free block: {largest}".ljust(half) +
              f"Device allocs/frees: {st.num_device_alloc}/{st.num_device_free}".ljust(
                  _WIDTH - 1 - half) + "|",
              "|" + "=" * _WIDTH + "|"]
    return "\n".join(lines) + "\n"
