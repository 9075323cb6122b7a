"""gpupool as PyTorch's CUDA allocator: gpupool.torch.enable().

PyTorch's CUDAPluggableAllocator is given the library's gpupool_torch_malloc
and gpupool_torch_free; every CUDA tensor then lives in the pool "torch" of
its device (torch/torch_allocator.c), which gpupool.memory_stats() and the
other functions of the package read. enable() also makes torch.cuda's own
memory calls (torch.cuda.memory_stats(), max_memory_allocated(),
empty_cache(), memory._dump_snapshot(), ...) answer from those pools: under
a pluggable allocator PyTorch's raise, or do nothing."""
import ctypes
import os
import re
import sys
import warnings

from . import _lib, _snapshot, _stats

MIN_TORCH = (2, 0)  # torch.cuda.memory.CUDAPluggableAllocator, change_current_allocator

_enabled = None  # the CUDAPluggableAllocator once enable() succeeded
_recording = False  # whether _record_memory_history set GPUPOOL_AGENT_CONF (and started the agent)


def _version_tuple(text):
    m = re.match(r"(\d+)\.(\d+)", str(text))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _check_torch(torch):
    version = getattr(torch, "__version__", "unknown")
    memory = getattr(getattr(torch, "cuda", None), "memory", None)
    if (_version_tuple(version) < MIN_TORCH or
            not hasattr(memory, "CUDAPluggableAllocator") or
            not hasattr(memory, "change_current_allocator")):
        raise RuntimeError(
            f"gpupool.torch needs PyTorch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer "
            f"(torch.cuda.memory.CUDAPluggableAllocator); this is torch {version}")


def _rank_labels(conf):
    """conf (GPUPOOL_AGENT_CONF) with labels:rank=<RANK> added when torchrun
    (or another launcher) set RANK or LOCAL_RANK and conf has no rank label.
    The agent takes the last labels entry of conf (each replaces the ones
    before), so the rank joins that one; the rest of conf is kept as it is,
    for the library to check."""
    rank = os.environ.get("RANK") or os.environ.get("LOCAL_RANK")
    if not rank or not rank.isdigit():
        return conf
    if not conf or not conf.strip():
        return f"labels:rank={rank}"
    items = conf.split(",")
    for n in range(len(items) - 1, -1, -1):
        key, _, value = items[n].partition(":")
        if key.strip() == "labels":
            if re.search(r"(^|;)\s*rank\s*=", value):
                return conf
            items[n] = f"{items[n].rstrip()};rank={rank}"
            return ",".join(items)
    # a new last entry, after the one trailing ',' that the grammar allows
    return f"{conf}{'' if conf.rstrip().endswith(',') else ','}labels:rank={rank}"


def _checked(name, conf, check):
    """conf, the value that the variable name is to take, once check (one of
    the library's gpupool_*_conf_check) took it; else ValueError with the
    library's reason (gpupool_last_error)."""
    if "\0" in conf:  # ctypes would pass what comes before it, the environment refuses it
        raise ValueError(f"gpupool.torch.enable: {name} {conf!r} holds a NUL character")
    if check(os.fsencode(conf)) != 0:
        raise ValueError(f"gpupool.torch.enable: {_lib.last_error()}")
    return conf


# PYTORCH_CUDA_ALLOC_CONF's keys that gpupool's pools take with PyTorch's
# meaning (its other keys name PyTorch's own machinery, or mean something
# else here: PyTorch's backend:cudaMallocAsync is not gpupool's backend).
PYTORCH_KEYS = ("max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
                "expandable_segments")


def _entries(text):
    """A PYTORCH_CUDA_ALLOC_CONF's entries: split at the commas outside
    brackets (roundup_power2_divisions:[256:1,512:2,>:4] is one entry)."""
    entries, depth, start = [], 0, 0
    for i, c in enumerate(text + ","):
        depth += (c == "[") - (c == "]")
        if c == "," and depth <= 0:
            entries.append(text[start:i].strip())
            start = i + 1
    return [e for e in entries if e]


def _from_pytorch_conf():
    """A GPUPOOL_CONF of the entries of PYTORCH_CUDA_ALLOC_CONF that the pools
    take (PYTORCH_KEYS, with values they accept), None when there is none;
    the entries left out are named in a RuntimeWarning."""
    text = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if not text:
        return None
    check = _lib.lib().gpupool_torch_conf_check
    taken, left = [], []
    for entry in _entries(text):
        if entry.partition(":")[0].strip() not in PYTORCH_KEYS:
            left.append(f"{entry} (not a gpupool setting)")
        elif check(os.fsencode(entry)) != 0:
            left.append(f"{entry} ({_lib.last_error()})")
        else:
            taken.append(entry)
    if left:
        warnings.warn(f"gpupool.torch.enable: PYTORCH_CUDA_ALLOC_CONF: left out {', '.join(left)}"
                      f"; the pools take {','.join(taken) or 'none of it'} (GPUPOOL_CONF, or "
                      "enable(conf=...), sets them instead)", RuntimeWarning, stacklevel=4)
    return ",".join(taken) or None


def _pool_conf(conf):
    """What GPUPOOL_CONF is to be, checked as the torch adapter's pools will
    read it: conf, or the environment's when conf is None, or where that is
    unset too what the pools take of PYTORCH_CUDA_ALLOC_CONF (None: unset)."""
    if conf is None:
        conf = os.environ.get("GPUPOOL_CONF")
        if conf is None:
            conf = _from_pytorch_conf()
        if conf is None:
            return None
    elif not isinstance(conf, str):
        raise TypeError("gpupool.torch.enable: conf is None or a GPUPOOL_CONF string")
    return _checked("GPUPOOL_CONF", conf, _lib.lib().gpupool_torch_conf_check)


def _agent_conf(agent):
    """What GPUPOOL_AGENT_CONF is to be for agent (None: unset), checked as
    the agent will read it."""
    if agent is False:
        return None
    if agent is True:
        conf = os.environ.get("GPUPOOL_AGENT_CONF", "")
    elif isinstance(agent, str):
        conf = agent
    elif agent is None:
        conf = os.environ.get("GPUPOOL_AGENT_CONF")
        if conf is None:
            return None
        # Set for the job by someone else (an operator): a mistake there
        # costs the job its agent, never the job itself, as before enable().
        try:
            return _checked("GPUPOOL_AGENT_CONF", _rank_labels(conf),
                            _lib.lib().gpupool_agent_conf_check)
        except ValueError as e:
            warnings.warn(f"{e} (the agent will not start; training goes on without it)",
                          RuntimeWarning, stacklevel=3)
            return _rank_labels(conf)
    else:
        raise TypeError("gpupool.torch.enable: agent is None, True, False or a "
                        "GPUPOOL_AGENT_CONF string")
    return _checked("GPUPOOL_AGENT_CONF", _rank_labels(conf), _lib.lib().gpupool_agent_conf_check)


def _set_env(name, value):
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                           device=None, clear_history=False, **options):
    """torch.cuda.memory._record_memory_history, for gpupool's pools: the
    allocation events a snapshot's device_traces hold are the agent's. With
    enabled ("all", "state", True) the agent records them: when
    GPUPOOL_AGENT_CONF is set, the torch adapter starts (or started) it with
    that, and nothing is done here; else it is started with no HTTP server
    and no CUPTI (GPUPOOL_AGENT_CONF listen:off,cupti:off, with
    trace_events:max_entries, from 16 to 2^24, when max_entries is given),
    now if a pool exists, at the first allocation otherwise. enabled None or
    False stops an agent started here. context, stacks, device,
    clear_history and the rest have no equivalent (gpupool records no
    stacks, and every device's events): taken and ignored."""
    global _recording
    if not enabled:
        if _recording:
            _lib.lib().gpupool_agent_stop()
            os.environ.pop("GPUPOOL_AGENT_CONF", None)
            _recording = False
        return
    if _recording or "GPUPOOL_AGENT_CONF" in os.environ:
        return
    conf = "listen:off,cupti:off"  # the pool's events only: no server, no CUPTI subscriber
    if max_entries != sys.maxsize:
        conf += f",trace_events:{min(max(int(max_entries), 16), 1 << 24)}"
    os.environ["GPUPOOL_AGENT_CONF"] = conf
    # Without a pool the adapter starts the agent with its first one; with
    # one, it has started none (GPUPOOL_AGENT_CONF was unset then) unless the
    # program did: that one is refused as invalid ("already running"), and
    # records the events already.
    status = 0
    if _stats.any_pool():
        status = _lib.lib().gpupool_agent_start(None)
    if status != 0:
        os.environ.pop("GPUPOOL_AGENT_CONF")
        if status != _lib.ERR_INVALID:
            raise _lib.error(status, f"gpupool: _record_memory_history: {_lib.last_error()}")
        return
    _recording = True


def _torch_cuda_memory_calls():
    """torch.cuda's memory calls by name, each answered by the package with
    PyTorch's signature and return value. The ones not here (memory_cached,
    reset_max_memory_allocated, ...) call these through torch.cuda.memory."""
    def empty_cache():
        _stats.empty_cache()

    def memory_snapshot(mempool_id=None, include_traces=True):
        return _snapshot.memory_snapshot()

    def snapshot(device=None, augment_with_fx_traces=False):
        return _snapshot.snapshot()

    def dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
        _snapshot.dump_snapshot(filename)

    return {"memory_stats": _stats.memory_stats,
            "memory_stats_as_nested_dict": _stats.memory_stats_as_nested_dict,
            "memory_allocated": _stats.memory_allocated,
            "max_memory_allocated": _stats.max_memory_allocated,
            "memory_reserved": _stats.memory_reserved,
            "max_memory_reserved": _stats.max_memory_reserved,
            "reset_peak_memory_stats": _stats.reset_peak_memory_stats,
            "reset_accumulated_memory_stats": _stats.reset_accumulated_memory_stats,
            "memory_summary": _stats.memory_summary,
            "set_per_process_memory_fraction": _stats.set_per_process_memory_fraction,
            "get_per_process_memory_fraction": _stats.get_per_process_memory_fraction,
            "empty_cache": empty_cache,
            "memory_snapshot": memory_snapshot,
            "_snapshot": snapshot,
            "_dump_snapshot": dump_snapshot,
            "_record_memory_history": _record_memory_history}


def _answer_torch_cuda_memory_calls(torch):
    """Puts the package's answers in place of torch.cuda's memory calls, in
    torch.cuda and in torch.cuda.memory (where PyTorch's other calls look
    them up), and of torch._C's OOM observer call, for the names this torch
    has."""
    for name, call in _torch_cuda_memory_calls().items():
        for namespace in (torch.cuda, torch.cuda.memory):
            if hasattr(namespace, name):
                setattr(namespace, name, call)
    native = getattr(torch, "_C", None)
    if hasattr(native, "_cuda_attach_out_of_memory_observer"):
        native._cuda_attach_out_of_memory_observer = _stats.attach_out_of_memory_observer


# What PyTorch's pluggable allocator passes on only to a function set for it
# (its setter, the library's function, and what is lost without it).
_ALLOCATOR_FUNCTIONS = (
    ("set_record_stream_fn", "gpupool_torch_record_stream",
     "tensor.record_stream() does not reach the pool, so a block freed while another stream "
     "still uses it can be handed out again at once"),
    ("set_memory_fraction_fn", "gpupool_torch_set_memory_fraction",
     "torch.cuda.set_per_process_memory_fraction() reaches the pool only through the function "
     "enable() puts in torch.cuda"),
    ("set_reset_fn", "gpupool_torch_empty_cache",
     "PyTorch's own empty_cache path (torch._C._cuda_emptyCache) does nothing"),
    ("set_begin_allocate_to_pool", "gpupool_torch_begin_allocate_to_pool",
     "CUDA graph capture (torch.cuda.graph, torch.compile's reduce-overhead mode) is not "
     "refused, and the pool would hand a graph's memory to other tensors after its capture"),
)


def _pass_allocator_functions(allocator):
    """Hands PyTorch's pluggable allocator the library's record_stream,
    memory fraction, empty_cache and private-pool (refusal) functions, which
    it calls only when they are set. A torch without a setter gets a
    RuntimeWarning saying what is lost."""
    native = allocator.allocator() if hasattr(allocator, "allocator") else None
    lib = _lib.lib()
    for setter_name, function, lost in _ALLOCATOR_FUNCTIONS:
        setter = getattr(native, setter_name, None)
        if not callable(setter):
            warnings.warn(f"gpupool.torch.enable: this PyTorch's pluggable allocator has no "
                          f"{setter_name}: {lost}", RuntimeWarning, stacklevel=3)
            continue
        setter(ctypes.cast(getattr(lib, function), ctypes.c_void_p).value)


def enable(conf=None, agent=None, torch_memory_calls=True):
    """Makes gpupool PyTorch's CUDA allocator; call it before the first CUDA
    allocation of the process. conf: a GPUPOOL_CONF string for the pools
    ("strategy:round,max_split_size_mb:512", ...), None to keep the
    environment's (GPUPOOL_CONF, else the entries of PYTORCH_CUDA_ALLOC_CONF
    that the pools share with PyTorch, a warning naming the others). agent:
    None starts the agent only when GPUPOOL_AGENT_CONF is set; True starts
    it, with GPUPOOL_AGENT_CONF's settings when that is set, else the
    defaults (127.0.0.1:9477 + LOCAL_RANK); a string is its
    GPUPOOL_AGENT_CONF ("listen:0.0.0.0:9477"); False keeps it off. Under
    torchrun the agent's metrics carry a rank label (RANK).
    torch_memory_calls: torch.cuda's memory calls (memory_stats,
    memory_allocated, max_memory_allocated, memory_reserved,
    max_memory_reserved, reset_peak_memory_stats,
    reset_accumulated_memory_stats, memory_summary,
    set_per_process_memory_fraction, get_per_process_memory_fraction,
    empty_cache, memory_snapshot, memory._snapshot, memory._dump_snapshot,
    memory._record_memory_history and those that call them) are answered by
    the package's functions of the same names, which read the pools; False
    leaves PyTorch's: the statistics and snapshot calls then raise under a
    pluggable allocator, while empty_cache and set_per_process_memory_fraction
    still reach the pools through the functions enable() hands PyTorch's
    allocator (record_stream's too, whatever torch_memory_calls says).
    A GPUPOOL_CONF the pools would refuse (conf, or the environment's when
    conf is None), or an agent string the agent would refuse (agent, or
    with agent=True the environment's), raises ValueError with the library's
    reason, and nothing is changed; with agent=None a GPUPOOL_AGENT_CONF
    that the agent would refuse only warns (RuntimeWarning): the job runs
    without the agent, as it did before enable() checked it. Returns
    the torch.cuda.memory.CUDAPluggableAllocator; a second call returns the
    same one."""
    global _enabled
    if _enabled is not None:
        return _enabled
    try:
        import torch
    except ImportError:
        raise RuntimeError("gpupool.torch.enable: PyTorch is not installed") from None
    _check_torch(torch)
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"gpupool.torch.enable: torch {torch.__version__} sees no CUDA device "
            "(torch.cuda.is_available() is False)")
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "gpupool.torch.enable: CUDA is already initialised with PyTorch's own allocator "
            "(a CUDA tensor or call came first); call enable() at the top of the script, before "
            "anything touches CUDA")
    path = _lib.loaded_path()  # PyTorch opens the same library, so the stats read its pools
    # Checked before anything changes: a configuration the pools refuse
    # would otherwise fail PyTorch's first CUDA allocation, far from here,
    # and one the agent refuses would leave only a line on stderr there.
    pool_conf = _pool_conf(conf)
    agent_conf = _agent_conf(agent)
    _set_env("GPUPOOL_CONF", pool_conf)
    _set_env("GPUPOOL_AGENT_CONF", agent_conf)
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "gpupool_torch_malloc",
                                                         "gpupool_torch_free")
    _pass_allocator_functions(allocator)
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise RuntimeError(
            "gpupool.torch.enable: PyTorch's CUDA allocator is already in use and cannot be "
            f"swapped ({e}); call enable() before anything touches CUDA") from None
    if torch_memory_calls:
        _answer_torch_cuda_memory_calls(torch)
    _enabled = allocator
    return allocator


def enabled():
    """Whether enable() has made gpupool PyTorch's allocator."""
    return _enabled is not None
