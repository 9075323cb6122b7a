"""Allocation tags (include/gpupool/tag.h): `with gpupool.tag("kv_cache"):`."""
import contextlib
import threading

from . import _lib, _stats


UNTAGGED = "untagged"  # memory_allocated_by_tag's key for the bytes of no tag

# The tags this thread entered from Python and has not left, innermost last:
# C keeps one tag stack per thread, and a tag left out of order (a generator
# suspended inside one, an ExitStack) must take its own entry off it, not the
# innermost one. One object may appear more than once (it nests: a recursive
# decorated function) and be shared by threads.
_entered = threading.local()


def _thread_stack():
    stack = getattr(_entered, "stack", None)
    if stack is None:
        stack = _entered.stack = []
    return stack


class tag(contextlib.ContextDecorator):
    """Attributes the pool allocations this thread makes inside the block (or
    the decorated function) to `name`. Tags nest; a tag is 1 to 63
    characters of A-Z a-z 0-9 _ . : / -, other than "untagged" (refused with
    ValueError: memory_allocated_by_tag reports the bytes of no tag under
    that name). The first 15 distinct names of the process are counted
    apart, later ones as "other"; the name "other" itself is that bucket (it
    takes none of the 15, and its bytes are added up with the later names')."""

    def __init__(self, name):
        if not isinstance(name, str):
            raise TypeError(f"gpupool.tag: the name must be a str, not {type(name).__name__}")
        if name == UNTAGGED:
            raise ValueError(f"gpupool.tag: {name!r} is reserved: memory_allocated_by_tag() "
                             "reports the bytes allocated under no tag by that name")
        self.name = name

    def __enter__(self):
        lib = _lib.lib()
        try:
            encoded = self.name.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            encoded = None
        # C would read the name up to a NUL: say no to it, as for any bad name.
        if encoded is None or b"\0" in encoded:
            raise ValueError(f"gpupool.tag: {self.name!r}: a tag is 1 to 63 characters of "
                             "A-Z a-z 0-9 _ . : / -")
        if lib.gpupool_tag_push(encoded) != 0:
            raise ValueError(_lib.last_error())
        _thread_stack().append((self, encoded))
        return self

    def __exit__(self, *exc):
        stack = _thread_stack()
        at = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] is self), None)
        if at is None:  # popping now would take off another tag of this thread
            raise RuntimeError(f"gpupool.tag({self.name!r}).__exit__ without its __enter__ on "
                               "this thread: no tag was popped")
        lib = _lib.lib()
        # Left out of order: the tags entered after it come off with it and go
        # back on (each was pushed before, at a greater depth: they cannot fail).
        above = stack[at + 1:]
        for _ in range(len(above) + 1):
            lib.gpupool_tag_pop()
        del stack[at:]
        for entry in above:
            lib.gpupool_tag_push(entry[1])
            stack.append(entry)
        return False


def current_tag():
    """This thread's tag (as counted: "other" past the limit), or None."""
    name = _lib.lib().gpupool_tag_current()
    return name.decode() if name is not None else None


def memory_allocated_by_tag(device=None):
    """{tag: allocated bytes} of the device's pool for every tag the process
    has used, plus "untagged" (the pool's allocated bytes less the tags';
    gpupool.tag refuses that name; a C caller's gpupool_tag_push("untagged")
    pushes no tag, so its bytes are counted in it).
    The tags' bytes and the pool's are two reads: while other threads
    allocate, "untagged" can be off by what they did in between (it is
    never reported below 0)."""
    p = _stats.pool(device)
    out = {}
    if p:
        arr = (_lib.TagStat * _lib.TAG_MAX)()
        n = _lib.lib().gpupool_get_tag_stats(p, arr, _lib.TAG_MAX)
        if n < 0:
            raise _lib.GpupoolError(f"gpupool_get_tag_stats: {_lib.last_error()}")
        out = {arr[i].tag.decode(): arr[i].allocated_bytes for i in range(n)}
    allocated = _stats.raw_stats(device).allocated_bytes[0].current
    # "untagged" pushed from C (gpupool_tag_push) is no tag: its bytes are
    # in the computed figure.
    out[UNTAGGED] = max(0, allocated - sum(out.values()))
    return out
