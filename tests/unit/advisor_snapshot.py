#!/usr/bin/env python3
"""Writes a synthetic PyTorch memory snapshot (the dict that
torch.cuda.memory._dump_snapshot() pickles) and the same history as a
GPUPOOL_RECORD file, for tests/unit/test_advisor_inputs.c. Standard library
only: no torch needed.

usage: advisor_snapshot.py OUT.pickle OUT.record PROTOCOL"""
import collections
import datetime
import pickle
import random
import sys


def main():
    out_pickle, out_record, protocol = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rnd = random.Random(7)
    base = 0x7F3A00000000
    stream2 = 0x55D0C0DE0000
    entries, record = [], []
    live = []
    t = 1_700_000_000_000_000
    frames = [{"filename": "train.py", "line": 42, "name": "forward"},
              {"filename": "model.py", "line": 7, "name": "lstm"}]

    def entry(action, addr, size, stream=0):
        nonlocal t
        t += rnd.randint(1, 50)
        return {"action": action, "addr": addr, "size": size, "stream": stream,
                "time_us": t, "frames": frames, "compile_context": None,
                "user_metadata": ""}

    # Allocator-side entries the reader must skip, first.
    entries.append(entry("segment_alloc", base, 20 << 20))
    next_addr = base
    for step in range(40):
        seq = rnd.randint(10, 120)
        for _ in range(30):
            size = seq * rnd.randint(1000, 9000) + rnd.randint(1, 511)
            next_addr += 1 << 24
            entries.append(entry("alloc", next_addr, size))
            record.append("a 0x%x %d 0x0" % (next_addr, size))
            live.append((next_addr, size))
        rnd.shuffle(live)
        while len(live) > 5:
            addr, size = live.pop()
            deferred = rnd.random() < 0.1
            entries.append(entry("free_requested", addr, size))
            if deferred:  # waited on another stream: completed later
                entries.append(entry("alloc", addr + 4096, 512))
                entries.append(entry("free_requested", addr + 4096, 512))
                entries.append(entry("free_completed", addr + 4096, 512))
                entries.append(entry("free_completed", addr, size))
                record += ["r 0x%x 0x%x" % (addr, stream2), "f 0x%x" % addr,
                           "a 0x%x 512 0x0" % (addr + 4096), "f 0x%x" % (addr + 4096)]
            else:
                entries.append(entry("free_completed", addr, size))
                record.append("f 0x%x" % addr)
    entries.append(entry("oom", 0, 1 << 30))
    entries[-1]["device_free"] = 123
    snapshot = {
        "segments": [{"device": 0, "address": base, "total_size": 20 << 20,
                      "stream": 0, "segment_type": "large", "blocks": [],
                      "allocated_size": 0, "active_size": 0, "requested_size": 0}],
        "device_traces": [[], entries],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None,
                               "expandable_segments": False,
                               "roundup_power2_divisions": [1, 2, 4],
                               "when": datetime.datetime(2026, 11, 23, 12, 0),
                               "ordered": collections.OrderedDict(a=1),
                               "blob": b"\x00\x01", "ratio": 0.5,
                               "pair": (1, 2), "set": {3}, "big": 1 << 80},
        "external_annotations": [],
    }
    with open(out_pickle, "wb") as f:
        pickle.dump(snapshot, f, protocol=protocol)
    with open(out_record, "w") as f:
        f.write("\n".join(record) + "\n")


if __name__ == "__main__":
    main()
