"""gpupool for PyTorch users.

    import gpupool.torch
    gpupool.torch.enable()        # PyTorch's CUDA tensors now live in gpupool

and torch.cuda's memory calls under the same names, answered by the pool:
memory_stats, memory_allocated, max_memory_allocated, memory_reserved,
max_memory_reserved, reset_peak_memory_stats, reset_accumulated_memory_stats,
empty_cache, memory_summary, memory_snapshot, dump_snapshot; plus allocation
tags (`with gpupool.tag("kv_cache"):`, memory_allocated_by_tag). Importing
the package needs neither torch nor the library; the library is loaded at
the first call (see library_path). docs/python.md has the details.
"""
from ._lib import GpupoolError, library_path
from ._snapshot import dump_snapshot, memory_snapshot, snapshot
from ._stats import (attach_out_of_memory_observer, empty_cache,
                     get_per_process_memory_fraction, max_memory_allocated,
                     max_memory_reserved, memory_allocated, memory_reserved, memory_stats,
                     memory_stats_as_nested_dict, memory_summary,
                     reset_accumulated_memory_stats, reset_peak_memory_stats,
                     set_per_process_memory_fraction)
from ._tags import current_tag, memory_allocated_by_tag, tag

__version__ = "0.1.0"

__all__ = ["GpupoolError", "library_path", "dump_snapshot", "memory_snapshot", "snapshot",
           "empty_cache", "max_memory_allocated", "max_memory_reserved", "memory_allocated",
           "memory_reserved", "memory_stats", "memory_stats_as_nested_dict", "memory_summary",
           "reset_accumulated_memory_stats", "reset_peak_memory_stats", "set_per_process_memory_fraction",
           "get_per_process_memory_fraction", "attach_out_of_memory_observer", "current_tag",
           "memory_allocated_by_tag", "tag"]
