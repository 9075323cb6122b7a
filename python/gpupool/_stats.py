"""torch.cuda's memory functions, answered from the torch adapter's pools
(pool "torch", one per device) through the C API."""
import collections
import os
import sys

from . import _lib


def device_index(device=None):
    """A CUDA device ordinal from what torch.cuda's functions accept: None
    (the current device), an int, "cuda", "cuda:N" or a torch.device."""
    if device is None or device == "cuda":
        return _current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    elif isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind != "cuda" or not (index.isascii() and index.isdigit()):
            raise ValueError(f"gpupool: {device!r} is not a CUDA device (expected 'cuda:N')")
        index = int(index)
    elif getattr(device, "type", None) == "cuda":  # torch.device
        if device.index is None:
            return _current_device()
        index = device.index
    else:
        raise ValueError(f"gpupool: {device!r} is not a CUDA device")
    if not 0 <= index < _lib.MAX_DEVICES:
        raise ValueError(f"gpupool: device {index} is not an ordinal from 0 to "
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


def raw_stats(device=None):
    """The device's gpupool_stats (zeros before its first allocation)."""
    st = _lib.Stats()
    p = pool(device)
    status = _lib.lib().gpupool_get_stats(p, st) if p else 0
    if status != 0:
        raise _lib.error(status, f"gpupool_get_stats: {_lib.last_error()}")
    return st


def _max_split_size():
    """max_split_size_mb from GPUPOOL_CONF in bytes, -1 when unlimited (the
    torch adapter's pools take their tunables from there)."""
    for item in os.environ.get("GPUPOOL_CONF", "").split(","):
        key, _, value = item.partition(":")
        if key.strip() == "max_split_size_mb" and value.strip() != "inf":
            try:
                return int(float(value)) * (1 << 20)
            except (ValueError, OverflowError):  # not a number the library takes either
                return -1
    return -1


def memory_stats(device=None):
    """torch.cuda.memory_stats(device) for gpupool: an OrderedDict with
    PyTorch's keys, sorted as PyTorch sorts them. num_sync_all_streams counts
    the pool's device synchronizations (expandable segments); the oversize_*
    keys are present (as zeros, which they are) only when max_split_size_mb
    is unlimited, since the pool does not count blocks above the limit."""
    st = raw_stats(device)
    out = []
    for name in _lib.STAT_ARRAYS:
        for i, kind in enumerate(_lib.STAT_TYPES):
            s = getattr(st, name)[i]
            for field in ("current", "peak", "allocated", "freed"):
                out.append((f"{name}.{kind}.{field}", getattr(s, field)))
    out += [("num_alloc_retries", st.num_alloc_retries), ("num_ooms", st.num_ooms),
            ("num_device_alloc", st.num_device_alloc), ("num_device_free", st.num_device_free),
            ("num_sync_all_streams", st.num_device_syncs)]
    max_split = _max_split_size()
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
        _lib.lib().gpupool_reset_peak_stats(p)


def reset_accumulated_memory_stats(device=None):
    """torch.cuda.reset_accumulated_memory_stats: the device's
    allocated/freed totals and its counters (num_alloc_retries, num_ooms,
    ...) start again from zero (gpupool_reset_accumulated_stats)."""
    p = pool(device)
    if p:
        _lib.lib().gpupool_reset_accumulated_stats(p)


def empty_cache():
    """Returns the cached segments of every device's pool that hold no live
    block to the device, as torch.cuda.empty_cache() does for PyTorch's
    allocator; returns the bytes released."""
    lib = _lib.lib()
    released = 0
    for d in range(_lib.MAX_DEVICES):
        p = lib.gpupool_torch_pool(d)
        if p:
            released += lib.gpupool_empty_cache(p)
    return released


def _bytes(n):
    for unit in ("B  ", "KiB", "MiB", "GiB"):
        if abs(n) < 10240:
            return f"{n} {unit}"
        n //= 1024
    return f"{n} TiB"


def _count(n):
    return str(n)


def memory_summary(device=None, abbreviated=False):
    """A table of the device's pool statistics laid out as
    torch.cuda.memory_summary lays out PyTorch's."""
    index = device_index(device)
    st = raw_stats(index)
    p = pool(index)
    lib = _lib.lib()
    pool_desc = (f"pool {lib.gpupool_name(p).decode()}, {lib.gpupool_backend_name(p).decode()}, "
                 f"{lib.gpupool_strategy_name(p).decode()}" if p else "no pool yet")
    width = 75
    rule, double = "|" + "-" * width + "|", "|" + "=" * width + "|"
    lines = [double, "|" + f"gpupool memory summary, device ID {index}".center(width) + "|",
             "|" + f"({pool_desc})".center(width) + "|", rule,
             "|" + f"CUDA OOMs: {st.num_ooms}".center(37) + "|" +
             f"device alloc retries: {st.num_alloc_retries}".center(37) + "|", double,
             "|" + "Metric".center(23) + "|" +
             "|".join(h.center(12) for h in ("Cur Usage", "Peak Usage", "Tot Alloc",
                                              "Tot Freed")) + "|", rule]
    rows = [("Allocated memory", "allocated_bytes", _bytes),
            ("Active memory", "active_bytes", _bytes),
            ("Requested memory", "requested_bytes", _bytes),
            ("GPU reserved memory", "reserved_bytes", _bytes),
            ("Non-releasable memory", "inactive_split_bytes", _bytes),
            ("Allocations", "allocation", _count), ("Active allocs", "active", _count),
            ("GPU reserved segments", "segment", _count),
            ("Non-releasable allocs", "inactive_split", _count)]
    for i, (label, field, fmt) in enumerate(rows):
        if i:  # PyTorch draws a rule between every two groups
            lines.append(rule)
        kinds = ((0, label),) if abbreviated else ((0, label), (2, "      from large pool"),
                                                   (1, "      from small pool"))
        for k, text in kinds:
            s = getattr(st, field)[k]
            cells = [fmt(v).rjust(10) + "  " for v in (s.current, s.peak, s.allocated, s.freed)]
            lines.append("| " + text.ljust(22) + "|" + "|".join(cells) + "|")
    lines += [rule,
              "| " + f"Cache hits: {st.num_cache_hits}".ljust(37) +
              f"From the device: {st.num_device_sourced}".ljust(37) + "|",
              "| " + f"Largest free block: {_bytes(st.largest_free_block)}".ljust(37) +
              f"Device allocs/frees: {st.num_device_alloc}/{st.num_device_free}".ljust(37) + "|",
              double]
    return "\n".join(lines) + "\n"
