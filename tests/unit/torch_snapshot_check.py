#!/usr/bin/env python3
"""Checks a PyTorch memory snapshot pickle written by gpupool against the
format torch.cuda._memory_viz reads (docs/oom.md), with the standard library
only: protocol 4, the keys and types of segments, blocks and device_traces,
blocks tiling each segment in address order, and a trace that, replayed
backwards from the segments, never leaves a live block outside a segment.

usage: torch_snapshot_check.py FILE [--json SNAPSHOT_JSON] [--pool NAME]
  --json: compare segment count, reserved and allocated totals with gpupool's
          /snapshot JSON (of pool NAME, or of every pool).
Prints one summary line; exits 1 with the first problem found."""
import json
import pickle
import sys

INT64 = (-(1 << 63), (1 << 63) - 1)
STATES = {"active_allocated", "active_pending_free", "inactive"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom"}
SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable",
                "frames", "blocks"}
BLOCK_KEYS = {"size", "requested_size", "address", "state", "frames"}
ENTRY_KEYS = {"action", "addr", "size", "stream", "time_us", "frames"}


class Bad(Exception):
    pass


def need(cond, what):
    if not cond:
        raise Bad(what)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool) and INT64[0] <= v <= INT64[1]


def check_segment(i, seg):
    need(isinstance(seg, dict), f"segment {i} is not a dict")
    missing = SEGMENT_KEYS - seg.keys()
    need(not missing, f"segment {i} lacks {sorted(missing)}")
    for k in ("device", "address", "total_size", "allocated_size", "active_size",
              "requested_size", "stream"):
        need(is_int(seg[k]), f"segment {i}: {k} is not a 64-bit int: {seg[k]!r}")
    need(seg["segment_type"] in ("large", "small"), f"segment {i}: segment_type {seg['segment_type']!r}")
    need(seg["segment_pool_id"] == (0, 0), f"segment {i}: segment_pool_id {seg['segment_pool_id']!r}")
    need(isinstance(seg["is_expandable"], bool), f"segment {i}: is_expandable not a bool")
    need(seg["frames"] == [], f"segment {i}: frames {seg['frames']!r}")
    addr = seg["address"]
    allocated = active = requested = 0
    for j, b in enumerate(seg["blocks"]):
        need(isinstance(b, dict) and not (BLOCK_KEYS - b.keys()),
             f"segment {i} block {j} lacks {sorted(BLOCK_KEYS - set(b))}")
        for k in ("size", "requested_size", "address"):
            need(is_int(b[k]), f"segment {i} block {j}: {k} is not a 64-bit int")
        need(b["state"] in STATES, f"segment {i} block {j}: state {b['state']!r}")
        need(b["address"] == addr, f"segment {i} block {j}: at {b['address']:#x}, expected {addr:#x} (blocks must tile the segment)")
        need(b["size"] > 0, f"segment {i} block {j}: size {b['size']}")
        need(b["frames"] == [], f"segment {i} block {j}: frames")
        addr += b["size"]
        if b["state"] == "active_allocated":
            allocated += b["size"]
        if b["state"] != "inactive":  # PyTorch's rule: pending frees count too
            active += b["size"]
            requested += b["requested_size"]
            need(b["requested_size"] <= b["size"], f"segment {i} block {j}: requested > size")
    need(addr == seg["address"] + seg["total_size"],
         f"segment {i}: blocks cover {addr - seg['address']} of {seg['total_size']} bytes")
    need(allocated == seg["allocated_size"], f"segment {i}: allocated_size {seg['allocated_size']} != {allocated}")
    need(active == seg["active_size"], f"segment {i}: active_size {seg['active_size']} != {active}")
    need(requested == seg["requested_size"], f"segment {i}: requested_size != {requested}")


def find(segs, addr, size):
    """The index of the segment holding [addr, addr + size), else None."""
    for i, (a, s, _) in enumerate(segs):
        if a <= addr and addr + size <= a + s:
            return i
    return None


def overlaps(segs, addr, size):
    return any(a < addr + size and addr < a + s for a, s, _ in segs)


def replay(device, segments, trace):
    """Backwards from the snapshot, as memory_viz's allocator state history
    does: segment_alloc and segment_free take or give back a whole segment;
    segment_map and segment_unmap (expandable segments) cut pages out of the
    one segment holding them or add them back, joined with a neighbour of
    the same stream. Every step must find what it undoes (memory_viz's own
    replay fails on a map outside every segment), and every live block stays
    inside a segment. An allocation's entries carry its requested bytes
    (PyTorch's meaning: the block's requested_size, not its size)."""
    segs = sorted([s["address"], s["total_size"], s["stream"]]
                  for s in segments if s["device"] == device)
    live = {}  # address: requested bytes
    for s in segments:
        if s["device"] != device:
            continue
        for b in s["blocks"]:
            if b["state"] != "inactive":
                live[b["address"]] = b["requested_size"]
    last = None
    for n, e in enumerate(trace):
        need(isinstance(e, dict) and not (ENTRY_KEYS - e.keys()),
             f"device {device} entry {n} lacks {sorted(ENTRY_KEYS - set(e))}")
        need(e["action"] in ACTIONS, f"device {device} entry {n}: action {e['action']!r}")
        for k in ("addr", "size", "stream", "time_us"):
            need(is_int(e[k]), f"device {device} entry {n}: {k} is not a 64-bit int")
        need(e["frames"] == [], f"device {device} entry {n}: frames")
        if e["action"] == "oom":
            need(is_int(e.get("device_free")), f"device {device} entry {n}: oom without device_free")
        need(last is None or e["time_us"] >= last, f"device {device} entry {n}: time goes back")
        last = e["time_us"]
    for n in range(len(trace) - 1, -1, -1):
        e = trace[n]
        a, size, act, stream = e["addr"], e["size"], e["action"], e["stream"]
        where = f"device {device} entry {n} ({act} {a:#x} {size})"
        if act == "alloc":
            need(live.get(a) == size,
                 f"{where}: undoing it finds no live block of {size} requested bytes there")
            need(find(segs, a, size) is not None, f"{where}: the block is outside every segment")
            del live[a]
        elif act == "free_completed":
            need(a not in live, f"{where}: the block is live already")
            need(find(segs, a, size) is not None,
                 f"{where}: the block would be outside every segment")
            live[a] = size
        elif act in ("segment_free", "segment_unmap"):
            need(not overlaps(segs, a, size), f"{where}: the memory is a segment's already")
            segs.append([a, size, stream])
            segs.sort()
            if act == "segment_unmap":  # joined with neighbours of its stream
                i = segs.index([a, size, stream])
                if i + 1 < len(segs) and segs[i + 1][0] == a + size and segs[i + 1][2] == stream:
                    segs[i][1] += segs.pop(i + 1)[1]
                if i > 0 and segs[i - 1][0] + segs[i - 1][1] == a and segs[i - 1][2] == stream:
                    segs[i - 1][1] += segs.pop(i)[1]
        elif act == "segment_alloc":
            i = next((i for i, s in enumerate(segs) if s[0] == a and s[1] == size), None)
            need(i is not None, f"{where}: no such segment to undo")
            del segs[i]
            stray = [b for b in live if a <= b < a + size]
            need(not stray, f"{where}: live blocks {stray} left outside every segment")
        elif act == "segment_map":
            i = find(segs, a, size)
            need(i is not None, f"{where}: the pages are in no one segment")
            sa, ss, st = segs[i]
            need(st == stream, f"{where}: stream {stream}, the segment's is {st}")
            del segs[i]
            if a > sa:
                segs.append([sa, a - sa, st])
            if a + size < sa + ss:
                segs.append([a + size, sa + ss - a - size, st])
            segs.sort()
            stray = [b for b in live if a <= b < a + size]
            need(not stray, f"{where}: live blocks {stray} on pages not mapped yet")
    return len(trace)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = argv[1]
    json_path = argv[argv.index("--json") + 1] if "--json" in argv else None
    pool = argv[argv.index("--pool") + 1] if "--pool" in argv else None
    raw = open(path, "rb").read()
    try:
        need(len(raw) > 2 and raw[0] == 0x80 and raw[1] == 4, "not a protocol 4 pickle")
        data = pickle.loads(raw)
        need(isinstance(data, dict), "the pickle is not a dict")
        need(isinstance(data.get("segments"), list), "no segments list")
        need(isinstance(data.get("device_traces"), list), "no device_traces list")
        for i, seg in enumerate(data["segments"]):
            check_segment(i, seg)
        entries = 0
        for d, trace in enumerate(data["device_traces"]):
            need(isinstance(trace, list), f"device_traces[{d}] is not a list")
            entries += replay(d, data["segments"], trace)
        reserved = sum(s["total_size"] for s in data["segments"])
        allocated = sum(s["allocated_size"] for s in data["segments"])
        if json_path:
            snap = json.load(open(json_path))
            pools = [p for p in snap["pools"] if pool is None or p["name"] == pool]
            jsegs = [s for p in pools for s in p["segments"]]
            # an expandable range is its mapped runs in the pickle, as in PyTorch's
            if not any(s["is_expandable"] for s in data["segments"]):
                need(len(jsegs) == len(data["segments"]),
                     f"{len(data['segments'])} segments, /snapshot has {len(jsegs)}")
            need(sum(s["mapped"] for s in jsegs) == reserved,
                 "total_size differs from /snapshot's reserved (mapped) bytes")
            need(sum(s["allocated"] for s in jsegs) == allocated, "allocated differs from /snapshot")
    except (Bad, pickle.UnpicklingError, KeyError, TypeError, ValueError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 1
    print(f"{path}: ok: {len(data['segments'])} segments, {reserved} bytes, "
          f"{allocated} allocated, {entries} trace entries")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
