"""The gpupool Python package on the host backend, without torch: the torch
adapter's pools are driven through ctypes exactly as PyTorch's pluggable
allocator drives them (gpupool_torch_malloc/free), and the package's
torch.cuda-named functions are checked against known values and the C
struct's layout. Run by tests/e2e/python_package.sh, which sets
GPUPOOL_LIBRARY, GPUPOOL_CONF=backend:host,... and GPUPOOL_TEST_STATS_LAYOUT.

The torch adapter keeps one pool per device for the life of the process, so
each test uses devices of its own."""
import contextlib
import ctypes
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import types
import unittest
import urllib.request
import warnings
import zipfile

import _gpupool_build
import gpupool
import gpupool.torch
from gpupool import _lib

MiB = 1 << 20
L = _lib.lib()


def malloc(size, device):
    return L.gpupool_torch_malloc(size, device, None)


def free(ptr, device):
    L.gpupool_torch_free(ptr, 0, device, None)


@contextlib.contextmanager
def captured_stderr():
    """What C code writes on fd 2 inside the block (list, filled on exit)."""
    out = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            out.append(f.read().decode("utf-8", "replace"))



@contextlib.contextmanager
def environ(**env):
    """os.environ with env set (None: unset) inside the block."""
    saved = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def loaded_libc():
    """The path of the C library this process has loaded: an ELF shared
    object that is not gpupool."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            name = os.path.basename(path)
            if name.startswith("libc.so") or (name.startswith("libc-") and ".so" in name):
                return path
    raise unittest.SkipTest("no libc.so in /proc/self/maps")

# torch.cuda.memory_stats' keys with PyTorch's default allocator settings.
TORCH_KEYS = sorted(
    [f"{s}.{k}.{f}" for s in ("active", "active_bytes", "allocated_bytes", "allocation",
                              "inactive_split", "inactive_split_bytes", "requested_bytes",
                              "reserved_bytes", "segment")
     for k in ("all", "large_pool", "small_pool") for f in ("allocated", "current", "freed", "peak")]
    + [f"{s}.{f}" for s in ("oversize_allocations", "oversize_segments")
       for f in ("allocated", "current", "freed", "peak")]
    + ["max_split_size", "num_alloc_retries", "num_device_alloc", "num_device_free", "num_ooms",
       "num_sync_all_streams"])


class Stats(unittest.TestCase):
    def test_layout_matches_c(self):
        layout = os.environ.get("GPUPOOL_TEST_STATS_LAYOUT")
        if not layout:
            self.skipTest("GPUPOOL_TEST_STATS_LAYOUT not set (tests/e2e/python_package.sh sets it)")
        size, num_ooms, largest, syncs, tag_stat = (int(v) for v in layout.split(","))
        self.assertEqual(ctypes.sizeof(_lib.Stats), size)
        self.assertEqual(_lib.Stats.num_ooms.offset, num_ooms)
        self.assertEqual(_lib.Stats.largest_free_block.offset, largest)
        self.assertEqual(_lib.Stats.num_device_syncs.offset, syncs)
        self.assertEqual(ctypes.sizeof(_lib.TagStat), tag_stat)

    def test_keys_and_values(self):
        d = 0
        self.assertEqual(gpupool.memory_stats(d)["allocated_bytes.all.current"], 0)  # no pool yet
        small = [malloc(1000, d) for _ in range(3)]  # 1024 each, one 2 MiB segment
        big = malloc(3 * MiB, d)  # one 20 MiB segment
        self.assertTrue(all(small) and big)
        s = gpupool.memory_stats(d)
        self.assertEqual(list(s), TORCH_KEYS)  # PyTorch's keys, in its (sorted) order
        self.assertEqual(s["allocated_bytes.all.current"], 3 * 1024 + 3 * MiB)
        self.assertEqual(s["allocated_bytes.small_pool.current"], 3 * 1024)
        self.assertEqual(s["allocated_bytes.large_pool.current"], 3 * MiB)
        self.assertEqual(s["requested_bytes.all.current"], 3000 + 3 * MiB)
        self.assertEqual(s["reserved_bytes.all.current"], 22 * MiB)
        self.assertEqual(s["segment.all.current"], 2)
        self.assertEqual(s["allocation.all.current"], 4)
        self.assertEqual(s["active.all.current"], 4)
        self.assertEqual(s["num_device_alloc"], 2)
        self.assertEqual(s["num_device_free"], 0)
        self.assertEqual(s["num_ooms"], 0)
        self.assertEqual(s["max_split_size"], -1)
        free(big, d)
        s = gpupool.memory_stats(d)
        self.assertEqual(s["allocated_bytes.all.current"], 3 * 1024)
        self.assertEqual(s["allocated_bytes.all.peak"], 3 * 1024 + 3 * MiB)
        self.assertEqual(s["allocated_bytes.all.freed"], 3 * MiB)
        self.assertEqual(s["allocation.large_pool.freed"], 1)
        # The named shortcuts read the same numbers.
        self.assertEqual(gpupool.memory_allocated(d), 3 * 1024)
        self.assertEqual(gpupool.max_memory_allocated(d), 3 * 1024 + 3 * MiB)
        self.assertEqual(gpupool.memory_reserved(d), 22 * MiB)
        self.assertEqual(gpupool.max_memory_reserved(d), 22 * MiB)
        self.assertEqual(gpupool.memory_allocated(f"cuda:{d}"), 3 * 1024)
        gpupool.reset_peak_memory_stats(d)
        self.assertEqual(gpupool.max_memory_allocated(d), 3 * 1024)
        gpupool.reset_accumulated_memory_stats(d)
        self.assertEqual(gpupool.memory_stats(d)["allocated_bytes.all.freed"], 0)
        # empty_cache returns the unused large segment, as PyTorch's does (and
        # what other tests' pools cache).
        self.assertGreaterEqual(gpupool.empty_cache(), 20 * MiB)
        self.assertEqual(gpupool.memory_reserved(d), 2 * MiB)
        self.assertEqual(gpupool.memory_stats(d)["num_device_free"], 1)
        for p in small:
            free(p, d)
        self.assertEqual(gpupool.memory_allocated(d), 0)

    def test_oom_counts(self):
        d = 1
        a = malloc(40 * MiB, d)
        self.assertTrue(a)
        with captured_stderr():
            self.assertIsNone(malloc(30 * MiB, d))  # 64 MiB simulated device
        s = gpupool.memory_stats(d)
        self.assertEqual(s["num_ooms"], 1)
        self.assertEqual(s["num_alloc_retries"], 1)
        free(a, d)

    def test_summary(self):
        d = 2
        self.assertIn("no pool yet", gpupool.memory_summary(d))
        p = malloc(5 * MiB, d)
        text = gpupool.memory_summary(d)
        self.assertIn("gpupool memory summary, device ID 2", text)
        self.assertIn("(pool torch, host, bfc)", text)
        rows = [line for line in text.splitlines() if line.startswith("| Allocated memory")]
        self.assertEqual(len(rows), 1)
        self.assertEqual(rows[0].split("|")[2].strip(), "5120 KiB")
        self.assertEqual(len({len(line) for line in text.splitlines()}), 1)  # a straight table
        self.assertNotIn("from small pool", gpupool.memory_summary(d, abbreviated=True))
        # PyTorch's layout: a rule above every group's first row
        lines = text.splitlines()
        groups = [i for i, line in enumerate(lines)
                  if line.startswith("| ") and not line.startswith("|      ") and "|" in line[2:]
                  and line.split("|")[1].strip() in (
                      "Allocated memory", "Active memory", "Requested memory",
                      "GPU reserved memory", "Non-releasable memory", "Allocations",
                      "Active allocs", "GPU reserved segments", "Non-releasable allocs")]
        self.assertEqual(len(groups), 9)
        for i in groups:
            self.assertTrue(set(lines[i - 1]) == {"|", "-"}, lines[i - 1])
        free(p, d)

    def test_devices(self):
        self.assertEqual(gpupool._stats.device_index("cuda:7"), 7)
        self.assertEqual(gpupool._stats.device_index(None), 0)  # no torch: device 0
        for bad in ("cpu", "cuda:x", -1, 64, 1.5):
            with self.assertRaises(ValueError):
                gpupool.memory_stats(bad)
        with self.assertRaisesRegex(ValueError, "is not a CUDA device"):
            gpupool.memory_stats("cuda:\u00b2")  # a digit to str.isdigit, not to int()
        for index in (100, -5, 1 << 40):  # a torch.device-like object is range-checked too
            with self.assertRaisesRegex(ValueError, "is not an ordinal"):
                gpupool.memory_allocated(types.SimpleNamespace(type="cuda", index=index))
        self.assertEqual(gpupool._stats.device_index(types.SimpleNamespace(type="cuda", index=5)), 5)

    def test_devices_as_pytorch_takes_them(self):
        """device as torch.cuda._utils._get_device_index takes it, in every
        call that has one: a torch.cuda.device (the context manager; PyTorch
        reads its .idx, the package looks for that attribute), a
        torch.device (.type, .index), "cuda:N", an int; refused with the
        exception PyTorch raises: ValueError for another device type, and
        for a string torch.device does not take, a bool or an ordinal
        PyTorch's allocator has no device for its RuntimeError (also a
        ValueError, as the package raised before)."""
        class CudaDevice:  # torch.cuda.device(d): .idx the ordinal, -1 for none
            def __init__(self, idx):
                self.idx, self.prev_idx = idx, -1

        d = 50
        p = malloc(3 * MiB, d)
        self.assertTrue(p)
        given = (d, f"cuda:{d}", types.SimpleNamespace(type="cuda", index=d), CudaDevice(d))
        for device in given:
            self.assertEqual(gpupool._stats.device_index(device), d, device)
            self.assertEqual(gpupool.memory_allocated(device), 3 * MiB, device)
            self.assertEqual(gpupool.memory_stats(device)["allocated_bytes.all.peak"], 3 * MiB)
            self.assertEqual(
                gpupool.memory_stats_as_nested_dict(device)["allocated_bytes"]["all"]["current"],
                3 * MiB)
            self.assertEqual(gpupool.max_memory_allocated(device), 3 * MiB)
            self.assertEqual(gpupool.memory_reserved(device), gpupool.memory_reserved(d))
            self.assertEqual(gpupool.max_memory_reserved(device), gpupool.max_memory_reserved(d))
            self.assertIn(f"gpupool memory summary, device ID {d} ", gpupool.memory_summary(device))
            self.assertEqual(gpupool.memory_allocated_by_tag(device)["untagged"], 3 * MiB)
            gpupool.reset_peak_memory_stats(device)
            gpupool.reset_accumulated_memory_stats(device)
            gpupool.set_per_process_memory_fraction(0.75, device)
            self.assertEqual(gpupool.get_per_process_memory_fraction(device), 0.75)
        self.assertEqual(gpupool.memory_stats(d)["allocated_bytes.all.allocated"], 0)  # reset
        self.assertEqual(gpupool._stats.device_index("cuda:0"), 0)
        # What PyTorch refuses with ValueError: another device type, and (in
        # set/get_per_process_memory_fraction, which want an index) "cuda".
        for bad in ("cpu", "meta", "mps:0", types.SimpleNamespace(type="cpu", index=None), 1.5,
                    object()):
            with self.assertRaisesRegex(ValueError, "is not a CUDA device") as caught:
                gpupool.memory_stats(bad)
            self.assertNotIsInstance(caught.exception, RuntimeError)
        for bad in ("cuda", types.SimpleNamespace(type="cuda", index=None)):
            self.assertEqual(gpupool._stats.device_index(bad), 0)  # no torch: device 0
            with self.assertRaisesRegex(ValueError, "has no device index"):
                gpupool.set_per_process_memory_fraction(0.5, bad)
            with self.assertRaisesRegex(ValueError, "has no device index"):
                gpupool.get_per_process_memory_fraction(bad)
        # What torch.device refuses (RuntimeError: "Invalid device string",
        # "Expected one of cpu, cuda, ..."), a bool (PyTorch's C check), an
        # ordinal out of range (its allocator's "Invalid device argument").
        for bad in ("cuda:x", "cuda:01", "cuda:-1", "cuda:0 ", "CUDA:0", "gpu", "gpu:0",
                    "cuda:\u00b2", "", True, -1, 64, CudaDevice(-1), CudaDevice(64),
                    types.SimpleNamespace(type="cuda", index=64)):
            for call in (gpupool.memory_stats, gpupool.memory_summary,
                         gpupool.reset_peak_memory_stats, gpupool.get_per_process_memory_fraction):
                with self.assertRaises(RuntimeError) as caught:
                    call(bad)
                self.assertIsInstance(caught.exception, ValueError)
        with self.assertRaises(RuntimeError):  # the device is checked first, as in PyTorch
            gpupool.set_per_process_memory_fraction(2.0, "cuda:x")
        free(p, d)

    def test_devices_with_torch_present(self):
        """With torch imported and CUDA initialised: "cuda", a torch.device
        without an index and None are the current device, and a
        torch.cuda.device object is read by its .idx."""
        d = 51
        cuda = types.SimpleNamespace(is_initialized=lambda: True, current_device=lambda: d)

        class device:  # torch.cuda.device's shape
            def __init__(self, idx):
                self.idx, self.prev_idx = idx, -1

        cuda.device = device
        torch = types.ModuleType("torch")
        torch.cuda = cuda
        saved = sys.modules.get("torch")
        sys.modules["torch"] = torch
        try:
            p = malloc(2 * MiB, d)
            for given in (None, "cuda", types.SimpleNamespace(type="cuda", index=None),
                          torch.cuda.device(d)):
                self.assertEqual(gpupool.memory_allocated(given), 2 * MiB, given)
            self.assertEqual(gpupool.memory_allocated(torch.cuda.device(d - 1)), 0)
            free(p, d)
        finally:
            if saved is None:
                sys.modules.pop("torch", None)
            else:
                sys.modules["torch"] = saved

    def test_unlimited_split_spelt_in_capitals(self):
        saved = os.environ.get("GPUPOOL_CONF", "")
        os.environ["GPUPOOL_CONF"] = saved + ",max_split_size_mb:INF"
        try:
            self.assertEqual(gpupool.memory_stats(11)["max_split_size"], -1)
        finally:
            os.environ["GPUPOOL_CONF"] = saved

    def test_max_split_size_read_as_the_library_reads_it(self):
        base = os.environ.get("GPUPOOL_CONF", "")
        cases = [  # GPUPOOL_CONF's end: the last entry of a key counts, C's white space trimmed
            ("max_split_size_mb:100,max_split_size_mb:inf", -1),
            ("max_split_size_mb:100, max_split_size_mb : unlimited", -1),
            ("max_split_size_mb:inf,max_split_size_mb:100", 100 * MiB),
            (" max_split_size_mb\t:\v64 \n", 64 * MiB),
            ("max_split_size_mb:64.5", -1),  # refused by the library (no pool): the default
            # leading zeros, as strtoull reads them, up to the library's 1023-byte value
            ("max_split_size_mb:" + "0" * 20 + "64", 64 * MiB),
            ("max_split_size_mb:" + "0" * 1021 + "64", 64 * MiB),
            ("max_split_size_mb:" + "0" * 1022 + "64", -1),  # too long: refused
        ]
        for conf, expected in cases:
            with environ(GPUPOOL_CONF=f"{base},{conf}"):
                s = gpupool.memory_stats(13)
            self.assertEqual(s["max_split_size"], expected, conf)
            self.assertEqual("oversize_segments.current" in s, expected == -1, conf)

    def test_max_split_size_is_what_the_pool_does(self):
        """In a fresh process per GPUPOOL_CONF: a cached 50 MiB block serves a
        10 MiB request only when max_split_size_mb (the library's reading)
        is unlimited; memory_stats' max_split_size must say the same."""
        code = ("import gpupool\nfrom gpupool import _lib\nL = _lib.lib()\n"
                "p = L.gpupool_torch_malloc(50 << 20, 0, None)\n"
                "L.gpupool_torch_free(p, 0, 0, None)\n"
                "assert L.gpupool_torch_malloc(10 << 20, 0, None)\n"
                "s = gpupool.memory_stats(0)\n"
                "print(s['num_device_alloc'], s['max_split_size'])\n")
        for conf in ("max_split_size_mb:40,max_split_size_mb:inf",
                     "max_split_size_mb:inf, max_split_size_mb :\t40"):
            env = dict(os.environ, GPUPOOL_CONF=f"backend:host,host_capacity_mb:128,{conf}")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 env=env, check=True).stdout.split()
            device_allocs, max_split = int(out[0]), int(out[1])
            self.assertEqual(max_split == -1, device_allocs == 1, (conf, out))


def summary_stats(**values):
    """A memory_stats() dict of zeros with PyTorch's keys, values set from
    name=(all, large_pool, small_pool) tuples of (current, peak, allocated,
    freed)."""
    stats = dict.fromkeys(TORCH_KEYS, 0)
    stats["max_split_size"] = -1
    for name, kinds in values.items():
        if isinstance(kinds, int):
            stats[name] = kinds
            continue
        for kind, fields in zip(("all", "large_pool", "small_pool"), kinds):
            for field, v in zip(("current", "peak", "allocated", "freed"), fields):
                stats[f"{name}.{kind}.{field}"] = v
    return stats


class Summary(unittest.TestCase):
    """memory_summary's table is torch.cuda.memory_summary's for the same
    stats: every cell of a column in the unit its "all" row picks (up a unit
    from 768 of it; counts from 750 thousand), values truncated, PyTorch's
    labels and widths."""
    GiB = 1 << 30
    STATS = summary_stats(
        num_ooms=2, num_alloc_retries=7,
        allocated_bytes=((3 * MiB + 3072, 3 * MiB + 3072, 5 * GiB + 3072, 5 * GiB - 3 * MiB),
                         (3 * MiB, 3 * MiB, 5 * GiB, 5 * GiB - 3 * MiB), (3072, 3072, 3072, 0)),
        reserved_bytes=((22 * MiB, 22 * MiB, 22 * MiB, 0), (20 * MiB, 20 * MiB, 20 * MiB, 0),
                        (2 * MiB, 2 * MiB, 2 * MiB, 0)),
        allocation=((4, 1000004, 1234567, 1234563), (1, 1000001, 1000000, 999999),
                    (3, 3, 234567, 234564)))

    def test_table_of_fixed_stats(self):
        lines = gpupool._stats._summary_table(self.STATS, 5)
        expected = [
            "|            CUDA OOMs: 2            |        cudaMalloc retries: 7         |",
            "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |",
            "| Allocated memory      |   3075 KiB |   3075 KiB |   5120 MiB |   5117 MiB |",
            "|       from large pool |   3072 KiB |   3072 KiB |   5120 MiB |   5117 MiB |",
            "|       from small pool |      3 KiB |      3 KiB |      0 MiB |      0 MiB |",
            "| Active memory         |      0 B   |      0 B   |      0 B   |      0 B   |",
            "| GPU reserved memory   |  22528 KiB |  22528 KiB |  22528 KiB |      0 B   |",
            "|       from small pool |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |",
            "| Allocations           |       4    |    1000 K  |    1234 K  |    1234 K  |",
            "|       from large pool |       1    |    1000 K  |    1000 K  |     999 K  |",
            "|       from small pool |       3    |       0 K  |     234 K  |     234 K  |",
            "| GPU reserved segments |       0    |       0    |       0    |       0    |",
            "| Oversize allocations  |       0    |       0    |       0    |       0    |",
            "| Oversize GPU segments |       0    |       0    |       0    |       0    |",
        ]
        for line in expected:
            self.assertIn(line, lines)
        self.assertEqual(lines[0], "|" + "=" * 75 + "|")
        self.assertEqual(lines[-1], "|" + "=" * 75 + "|")
        self.assertEqual(lines[1], "|" + " " * 23 + "gpupool memory summary, device ID 5" +
                         " " * 17 + "|")  # the device ID where PyTorch has it
        self.assertEqual({len(line) for line in lines}, {77})
        self.assertEqual(len(lines), 6 + 9 * 4 + 2 * 2 + 1)  # PyTorch's line count
        # The groups in PyTorch's order, each under a rule.
        labels = [i for i, line in enumerate(lines) if line.startswith("| ") and line[2] != " "]
        self.assertTrue(all(set(lines[i - 1]) == {"|", "-"} for i in labels))
        self.assertEqual([lines[i][2:23].rstrip() for i in labels], [
            "Allocated memory", "Active memory", "Requested memory", "GPU reserved memory",
            "Non-releasable memory", "Allocations", "Active allocs", "GPU reserved segments",
            "Non-releasable allocs", "Oversize allocations", "Oversize GPU segments"])

    def test_abbreviated_and_without_oversize(self):
        stats = {k: v for k, v in self.STATS.items() if not k.startswith("oversize_")}
        stats["max_split_size"] = 512 * MiB  # the pool does not count oversize blocks then
        lines = gpupool._stats._summary_table(stats, 0, abbreviated=True)
        self.assertNotIn("from large pool", "".join(lines))
        self.assertNotIn("Oversize", "".join(lines))
        self.assertIn(
            "| Allocated memory      |   3075 KiB |   3075 KiB |   5120 MiB |   5117 MiB |", lines)
        self.assertEqual(len(lines), 6 + 9 * 2 + 1)

    def test_live_pool(self):
        d = 15
        small = [malloc(1000, d) for _ in range(3)]  # 1024 each
        big = malloc(3 * MiB, d)
        text = gpupool.memory_summary(d)
        lines = text.splitlines()
        self.assertIn(
            "|       from small pool |      3 KiB |      3 KiB |      3 KiB |      0 B   |", lines)
        self.assertIn("cudaMalloc retries: 0", text)
        self.assertIn("| gpupool (pool torch, host, bfc)", text)
        self.assertEqual(lines[:len(lines) - 4],
                         gpupool._stats._summary_table(gpupool.memory_stats(d), d))
        for p in small + [big]:
            free(p, d)


class Tags(unittest.TestCase):
    def test_tags(self):
        d = 3
        self.assertIsNone(gpupool.current_tag())
        with gpupool.tag("weights"):
            self.assertEqual(gpupool.current_tag(), "weights")
            w = malloc(3 * MiB, d)
            with gpupool.tag("kv_cache"):
                k = malloc(1000, d)
            self.assertEqual(gpupool.current_tag(), "weights")
        u = malloc(512, d)
        by_tag = gpupool.memory_allocated_by_tag(d)
        self.assertEqual(by_tag["weights"], 3 * MiB)
        self.assertEqual(by_tag["kv_cache"], 1024)
        self.assertEqual(by_tag["untagged"], 512)
        self.assertEqual(sum(by_tag.values()), gpupool.memory_allocated(d))

        @gpupool.tag("activations")
        def forward():
            return malloc(2048, d)

        a = forward()
        self.assertIsNone(gpupool.current_tag())
        self.assertEqual(gpupool.memory_allocated_by_tag(d)["activations"], 2048)
        for p in (w, k, u, a):
            free(p, d)
        self.assertEqual(set(gpupool.memory_allocated_by_tag(d).values()), {0})

    def test_bad_tag(self):
        with self.assertRaisesRegex(ValueError, "gpupool_tag_push: a tag is 1 to 63"):
            with gpupool.tag("has space"):
                pass
        with self.assertRaises(TypeError):
            gpupool.tag(3)
        with self.assertRaisesRegex(ValueError, "a tag is 1 to 63"):
            with gpupool.tag("kv\0x"):  # C would stop at the NUL and count "kv"
                pass
        self.assertIsNone(gpupool.current_tag())

    def test_untagged_never_below_zero(self):
        d = 12
        with gpupool.tag("weights"):
            p = malloc(MiB, d)
        real = gpupool._stats.raw_stats
        try:  # the pool's figure read after another thread freed tagged bytes
            gpupool._stats.raw_stats = lambda device=None: _lib.Stats()
            self.assertEqual(gpupool.memory_allocated_by_tag(d)["untagged"], 0)
        finally:
            gpupool._stats.raw_stats = real
        self.assertEqual(gpupool.memory_allocated_by_tag(d)["untagged"], 0)
        free(p, d)

    def test_untagged_is_reserved(self):
        d = 14
        with self.assertRaisesRegex(ValueError, "'untagged' is reserved"):
            with gpupool.tag("untagged"):
                malloc(MiB, d)  # never reached: its bytes would vanish from the table
        with self.assertRaisesRegex(ValueError, "reserved"):
            gpupool.tag("untagged")(lambda: None)  # as a decorator too
        self.assertIsNone(gpupool.current_tag())
        # Pushed from C, the name cannot be refused: its bytes count in "untagged".
        self.assertEqual(L.gpupool_tag_push(b"untagged"), 0)
        try:
            p = malloc(MiB, d)
        finally:
            L.gpupool_tag_pop()
        u = malloc(512, d)
        by_tag = gpupool.memory_allocated_by_tag(d)
        self.assertEqual(by_tag["untagged"], MiB + 512)
        self.assertEqual(by_tag["untagged"], gpupool.memory_allocated(d))
        free(p, d)
        free(u, d)

    def test_bad_tag_with_a_lone_surrogate(self):
        # "\ud800" cannot be encoded as UTF-8: the library's ValueError, not
        # Python's UnicodeEncodeError.
        with self.assertRaisesRegex(ValueError, "a tag is 1 to 63") as caught:
            with gpupool.tag("kv\ud800"):
                pass
        self.assertNotIsInstance(caught.exception, UnicodeError)
        self.assertIsNone(gpupool.current_tag())

    def test_exit_without_enter_raises_and_pops_nothing(self):
        with gpupool.tag("outer"):
            stray = gpupool.tag("stray")
            with self.assertRaisesRegex(RuntimeError, "without its __enter__"):
                stray.__exit__(None, None, None)
            self.assertEqual(gpupool.current_tag(), "outer")
            with stray:  # entered, it leaves as any tag; a second exit is refused
                self.assertEqual(gpupool.current_tag(), "stray")
            self.assertEqual(gpupool.current_tag(), "outer")
            with self.assertRaises(RuntimeError):
                stray.__exit__(None, None, None)
            self.assertEqual(gpupool.current_tag(), "outer")
            # Entered on another thread, it cannot be left on this one.
            other = threading.Thread(target=stray.__enter__)
            other.start()
            other.join()
            with self.assertRaises(RuntimeError):
                stray.__exit__(None, None, None)
            self.assertEqual(gpupool.current_tag(), "outer")
        self.assertIsNone(gpupool.current_tag())

    def test_one_tag_object_nests(self):
        t = gpupool.tag("again")
        with t:
            with t:
                self.assertEqual(gpupool.current_tag(), "again")
            self.assertEqual(gpupool.current_tag(), "again")
        self.assertIsNone(gpupool.current_tag())

        @gpupool.tag("recursive")
        def depth(n):
            return depth(n - 1) if n else gpupool.current_tag()

        self.assertEqual(depth(3), "recursive")
        self.assertIsNone(gpupool.current_tag())

    def test_tag_left_out_of_order_takes_its_own_entry(self):
        # A generator suspended inside a tag, resumed and closed inside
        # another: the tag it leaves is its own, and the other stays current.
        def produce():
            with gpupool.tag("producer"):
                yield gpupool.current_tag()
                yield gpupool.current_tag()

        g = produce()
        self.assertEqual(next(g), "producer")
        with gpupool.tag("consumer"):
            self.assertEqual(gpupool.current_tag(), "consumer")
            g.close()  # leaves "producer", entered before "consumer"
            self.assertEqual(gpupool.current_tag(), "consumer")
        self.assertIsNone(gpupool.current_tag())
        # The same with an ExitStack's contexts left by hand, and bytes counted.
        d = 13
        a, b, c = gpupool.tag("a"), gpupool.tag("b"), gpupool.tag("c")
        for t in (a, b, c):
            t.__enter__()
        b.__exit__(None, None, None)
        self.assertEqual(gpupool.current_tag(), "c")
        c.__exit__(None, None, None)
        self.assertEqual(gpupool.current_tag(), "a")
        ptr = malloc(4096, d)
        try:
            self.assertEqual(gpupool.memory_allocated_by_tag(d)["a"], 4096)
        finally:
            free(ptr, d)
        a.__exit__(None, None, None)
        self.assertIsNone(gpupool.current_tag())
        with self.assertRaisesRegex(RuntimeError, "without its __enter__"):
            b.__exit__(None, None, None)

    def test_tag_exits_on_exception(self):
        with self.assertRaises(KeyError):
            with gpupool.tag("t"):
                raise KeyError
        self.assertIsNone(gpupool.current_tag())


class Snapshot(unittest.TestCase):
    def test_snapshot(self):
        d = 4
        p = malloc(MiB, d)
        if not hasattr(L, _lib.SNAPSHOT_SYMBOL):
            with self.assertRaisesRegex(NotImplementedError, _lib.SNAPSHOT_SYMBOL):
                gpupool.memory_snapshot()
            with self.assertRaisesRegex(NotImplementedError, _lib.SNAPSHOT_SYMBOL):
                gpupool.dump_snapshot(os.path.join(tempfile.gettempdir(), "never.pickle"))
            free(p, d)
            self.skipTest(f"the library has no {_lib.SNAPSHOT_SYMBOL}: only its absence checked")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "snap.pickle")
            gpupool.dump_snapshot(path)
            with open(path, "rb") as f:
                snap = pickle.load(f)
            with self.assertRaises(FileNotFoundError):  # fopen's errno, ENOENT
                gpupool.dump_snapshot(os.path.join(tmp, "no", "such", "dir.pickle"))
            # A name with a NUL is refused, not cut short at it by C.
            with self.assertRaisesRegex(ValueError, "embedded null byte"):
                gpupool.dump_snapshot(os.path.join(tmp, "cut") + "\0.pickle")
            self.assertFalse(os.path.exists(os.path.join(tmp, "cut")))
            with self.assertRaises(TypeError):
                gpupool.dump_snapshot(None)
        segments = [s for s in snap["segments"] if s["device"] == d]
        self.assertEqual(sum(s["total_size"] for s in segments), gpupool.memory_reserved(d))
        self.assertEqual(sum(s["allocated_size"] for s in segments), gpupool.memory_allocated(d))
        self.assertIn("device_traces", snap)
        self.assertEqual(gpupool.memory_snapshot(), gpupool.snapshot()["segments"])
        free(p, d)


def find_executable_batch_size(function, starting_batch_size):
    """What accelerate.utils.find_executable_batch_size does (accelerate is
    not installed here): call with a batch size, halve it on an exception
    whose text says CUDA out of memory, try again."""
    batch_size = starting_batch_size
    while True:
        if batch_size == 0:
            raise RuntimeError("No executable batch size found, reached zero.")
        try:
            return function(batch_size)
        except RuntimeError as e:
            if len(e.args) == 1 and "CUDA out of memory." in e.args[0]:
                batch_size //= 2
                continue
            raise


class OutOfMemory(unittest.TestCase):
    def test_batch_size_finder_recovers(self):
        d = 5
        tried = []

        def step(batch_size):
            """A training step: 1 MiB of activations per sample, on a 64 MiB
            device. gpupool_torch_malloc raises this very text in PyTorch (a
            C++ exception); called from C it returns NULL and writes it on
            stderr, which is where it is read here."""
            tried.append(batch_size)
            with captured_stderr() as err:
                p = malloc(batch_size * MiB, d)
            if not p:
                raise RuntimeError(err[0].strip())
            free(p, d)
            return batch_size

        self.assertEqual(find_executable_batch_size(step, 256), 64)
        self.assertEqual(tried, [256, 128, 64])
        self.assertEqual(gpupool.memory_stats(d)["num_ooms"], 2)

    def test_memory_fraction(self):
        """set_per_process_memory_fraction before the device's first
        allocation caps its pool (64 MiB device, 0.25: 16 MiB), and the OOM
        names the cap; bad values are refused as PyTorch refuses them."""
        d = 40
        self.assertEqual(gpupool.get_per_process_memory_fraction(d), 1.0)
        gpupool.set_per_process_memory_fraction(0.25, d)
        self.assertEqual(gpupool.get_per_process_memory_fraction(d), 0.25)
        self.assertEqual(gpupool.get_per_process_memory_fraction(d + 1), 1.0)
        a = malloc(12 * MiB, d)
        self.assertTrue(a)
        with captured_stderr() as err:
            self.assertIsNone(malloc(12 * MiB, d))
        self.assertIn("memory_fraction 0.25", err[0])
        self.assertIn("memory_fraction 0.375 would allow it", err[0])  # (12 + 12) of 64
        with self.assertRaises(TypeError):
            gpupool.set_per_process_memory_fraction(1, d)  # PyTorch's check: a float
        for bad in (1.5, -0.1, float("nan")):
            with self.assertRaises(ValueError):
                gpupool.set_per_process_memory_fraction(bad, d)
        with self.assertRaises(ValueError):
            gpupool.set_per_process_memory_fraction(0.5, "cpu")
        self.assertEqual(gpupool.get_per_process_memory_fraction(d), 0.25)
        gpupool.set_per_process_memory_fraction(0.5, f"cuda:{d}")
        b = malloc(12 * MiB, d)
        self.assertTrue(b)
        free(a, d)
        free(b, d)

    def test_oom_observer(self):
        """torch._C._cuda_attach_out_of_memory_observer's stand-in: called
        before each OOM with PyTorch's arguments (device, bytes asked, the
        device's memory, its free memory), one that raises changes nothing."""
        d = 42
        seen = []
        gpupool.attach_out_of_memory_observer(lambda *args: seen.append(args))
        gpupool.attach_out_of_memory_observer(lambda *args: 1 / 0)
        a = malloc(4 * MiB, d)
        with captured_stderr() as err:
            self.assertIsNone(malloc(1 << 40, d))
        self.assertIn((d, 1 << 40, 64 * MiB, 64 * MiB - gpupool.memory_reserved(d)), seen)
        self.assertIn("ZeroDivisionError", err[0])  # printed by ctypes; the OOM went on
        self.assertIn("CUDA out of memory.", err[0])
        with self.assertRaises(TypeError):
            gpupool.attach_out_of_memory_observer(None)
        free(a, d)

    def test_message(self):
        with captured_stderr() as err:
            self.assertIsNone(malloc(1 << 40, 6))
        self.assertTrue(err[0].startswith("CUDA out of memory."), err[0])
        self.assertIn("'torch'", err[0])  # gpupool's explanation: the pool, its numbers


def fake_torch(version="2.11.0+cu130", initialized=False, swap_error=None, available=True):
    """A stand-in for the parts of torch that gpupool.torch.enable touches."""
    calls = []

    class Native:  # torch._C's pluggable allocator: takes functions by address
        record_stream_fn = memory_fraction_fn = reset_fn = begin_allocate_to_pool = None

        def set_record_stream_fn(self, address):
            self.record_stream_fn = address

        def set_memory_fraction_fn(self, address):
            self.memory_fraction_fn = address

        def set_reset_fn(self, address):
            self.reset_fn = address

        def set_begin_allocate_to_pool(self, address):
            self.begin_allocate_to_pool = address

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc, free):
            lib = ctypes.CDLL(path)  # as PyTorch does; the names must resolve
            getattr(lib, alloc), getattr(lib, free)
            self.args = (path, alloc, free)
            self.native = Native()

        def allocator(self):
            return self.native

    def change_current_allocator(a):
        if swap_error:
            raise RuntimeError(swap_error)
        calls.append(a)

    def unsupported(what):
        def call(*args, **kwargs):  # what torch.cuda's calls do under a pluggable allocator
            raise RuntimeError(f"CUDAPluggableAllocator does not yet support {what}.")
        return call

    memory = types.SimpleNamespace(CUDAPluggableAllocator=CUDAPluggableAllocator,
                                   change_current_allocator=change_current_allocator,
                                   memory_stats=unsupported("getDeviceStats"),
                                   memory_reserved=unsupported("getDeviceStats"),
                                   max_memory_allocated=unsupported("getDeviceStats"),
                                   reset_peak_memory_stats=unsupported("resetPeakStats"),
                                   empty_cache=lambda: None,  # reset_fn unset: nothing
                                   set_per_process_memory_fraction=lambda f, device=None: None,
                                   get_per_process_memory_fraction=unsupported(
                                       "getMemoryFraction"),
                                   _dump_snapshot=unsupported("snapshot"),
                                   _record_memory_history=unsupported("recordHistory"))
    # As in torch.cuda.memory: a deprecated name that calls another through the module.
    memory.memory_cached = lambda device=None: memory.memory_reserved(device=device)
    cuda = types.SimpleNamespace(memory=memory, is_initialized=lambda: initialized,
                                 is_available=lambda: available, current_device=lambda: 0,
                                 memory_stats=memory.memory_stats,
                                 memory_reserved=memory.memory_reserved,
                                 max_memory_allocated=memory.max_memory_allocated,
                                 memory_cached=memory.memory_cached,
                                 set_per_process_memory_fraction=(
                                     memory.set_per_process_memory_fraction),
                                 get_per_process_memory_fraction=(
                                     memory.get_per_process_memory_fraction),
                                 empty_cache=memory.empty_cache)
    torch = types.ModuleType("torch")
    torch.__version__, torch.cuda = version, cuda
    torch._C = types.SimpleNamespace(
        _cuda_attach_out_of_memory_observer=unsupported("attachOutOfMemoryObserver"))
    return torch, calls


class Enable(unittest.TestCase):
    def setUp(self):
        self.saved_env = {k: os.environ.get(k) for k in
                          ("GPUPOOL_CONF", "GPUPOOL_AGENT_CONF", "RANK", "LOCAL_RANK",
                           "PYTORCH_CUDA_ALLOC_CONF")}
        self.saved_torch = sys.modules.get("torch")
        gpupool.torch._enabled = None

    def tearDown(self):
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if self.saved_torch is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = self.saved_torch
        gpupool.torch._enabled = None

    def enable(self, torch, **kw):
        sys.modules["torch"] = torch
        return gpupool.torch.enable(**kw)

    def test_too_old(self):
        for version in ("1.13.1+cu117", "1.9.0", "0.4.1"):
            torch, calls = fake_torch(version)
            with self.assertRaisesRegex(RuntimeError, r"PyTorch 2\.0 or newer.*" +
                                        version.replace(".", r"\.").replace("+", r"\+")):
                self.enable(torch)
            self.assertEqual(calls, [])
        torch, calls = fake_torch("2.11.0")
        del torch.cuda.memory.CUDAPluggableAllocator  # a build without the API
        with self.assertRaisesRegex(RuntimeError, "2.0 or newer"):
            self.enable(torch)

    def test_no_cuda(self):
        torch, calls = fake_torch(available=False)
        with self.assertRaisesRegex(RuntimeError, "sees no CUDA device"):
            self.enable(torch)
        self.assertEqual(calls, [])

    def test_cuda_already_initialised(self):
        torch, calls = fake_torch(initialized=True)
        with self.assertRaisesRegex(RuntimeError, "already initialised"):
            self.enable(torch)
        self.assertEqual(calls, [])
        self.assertFalse(gpupool.torch.enabled())
        torch, calls = fake_torch(swap_error="Can't swap an already initialized allocator")
        with self.assertRaisesRegex(RuntimeError, "cannot be swapped.*Can't swap"):
            self.enable(torch)

    def test_enable(self):
        for version in ("2.0.0", "2.0.0a0+gitabc", "2.11.0+cu130", "10.1"):
            gpupool.torch._enabled = None
            torch, calls = fake_torch(version)
            a = self.enable(torch, conf="strategy:round")
            self.assertEqual(calls, [a])
            self.assertEqual(a.args, (_lib.loaded_path(), "gpupool_torch_malloc",
                                      "gpupool_torch_free"))
            self.assertEqual(os.environ["GPUPOOL_CONF"], "strategy:round")
            self.assertIs(self.enable(torch), a)  # once
            self.assertEqual(len(calls), 1)
            self.assertTrue(gpupool.torch.enabled())

    def test_pytorch_cuda_alloc_conf(self):
        cases = [  # PYTORCH_CUDA_ALLOC_CONF, GPUPOOL_CONF before, conf, GPUPOOL_CONF after, warns
            ("expandable_segments:True,max_split_size_mb:128", None, None,
             "expandable_segments:True,max_split_size_mb:128", None),
            (" garbage_collection_threshold:0.6 ,roundup_power2_divisions:4,", None, None,
             "garbage_collection_threshold:0.6,roundup_power2_divisions:4", None),
            ("backend:cudaMallocAsync,roundup_power2_divisions:[256:1,512:2,>:4],"
             "expandable_segments:True", None, None, "expandable_segments:True",
             r"left out backend:cudaMallocAsync \(not a gpupool setting\), "
             r"roundup_power2_divisions:\[256:1,512:2,>:4\] \(.+\); "
             r"the pools take expandable_segments:True"),
            ("max_split_size_mb:1", None, None, None,
             r"left out max_split_size_mb:1 \(.*max_split_size_mb.*\); the pools take none"),
            ("expandable_segments:True", "strategy:round", None, "strategy:round", None),
            ("expandable_segments:True", None, "strategy:naive", "strategy:naive", None),
        ]
        for pytorch, before, conf, after, warns in cases:
            gpupool.torch._enabled = None
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = pytorch
            if before is None:
                os.environ.pop("GPUPOOL_CONF", None)
            else:
                os.environ["GPUPOOL_CONF"] = before
            torch, calls = fake_torch()
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                self.enable(torch, conf=conf)
            self.assertEqual(os.environ.get("GPUPOOL_CONF"), after, pytorch)
            self.assertEqual(len(calls), 1)
            texts = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
            if warns is None:
                self.assertEqual(texts, [], pytorch)
            else:
                self.assertEqual(len(texts), 1, pytorch)
                self.assertRegex(texts[0], "PYTORCH_CUDA_ALLOC_CONF: " + warns)
                self.assertEqual(seen[0].filename, __file__)  # the warning points at the caller

    def test_max_split_size_of_each_source(self):
        """memory_stats' max_split_size is the pool's own, wherever enable()'s
        pools take it from: enable(conf=...) (over GPUPOOL_CONF), GPUPOOL_CONF
        set after enable() but before the device's first allocation (the
        library reads it when it creates the pool), GPUPOOL_CONF alone,
        PYTORCH_CUDA_ALLOC_CONF's entry, and none of them (-1). What the pool
        does says which: a cached 50 MiB block serves a 10 MiB request, with
        no second device allocation, only without a limit (40 MiB keeps it
        whole). A GPUPOOL_CONF changed after the pool exists is not the pool's,
        nor its figure's."""
        base = "backend:host,host_capacity_mb:64"

        def reads(d):
            p = malloc(50 * MiB, d)
            free(p, d)
            q = malloc(10 * MiB, d)
            self.assertTrue(q)
            s = gpupool.memory_stats(d)
            free(q, d)
            split = s["num_device_alloc"] == 1
            self.assertEqual(split, s["max_split_size"] == -1, (d, s["max_split_size"]))
            self.assertEqual("oversize_segments.current" in s, split)
            return s["max_split_size"]

        def enable(conf=None, env=None):
            gpupool.torch._enabled = None
            if env is not None:
                os.environ["GPUPOOL_CONF"] = env
            self.enable(fake_torch()[0], conf=conf)

        enable(f"{base},max_split_size_mb:40", env=f"{base},max_split_size_mb:inf")
        self.assertEqual(reads(52), 40 * MiB)  # enable(conf=...) over GPUPOOL_CONF
        enable(f"{base},max_split_size_mb:inf")
        os.environ["GPUPOOL_CONF"] = f"{base},max_split_size_mb:40"  # before the pool exists
        self.assertEqual(reads(53), 40 * MiB)
        enable(env=f"{base},max_split_size_mb:40")
        self.assertEqual(reads(54), 40 * MiB)  # GPUPOOL_CONF
        enable(env=base)
        self.assertEqual(reads(55), -1)  # none: unlimited, as PyTorch reports it
        # GPUPOOL_CONF changed once the pool exists: the pool keeps its limit,
        # and so does the figure (gpupool_max_split_size)
        os.environ["GPUPOOL_CONF"] = f"{base},max_split_size_mb:40"
        self.assertEqual(reads(55), -1)
        os.environ["GPUPOOL_CONF"] = f"{base},max_split_size_mb:inf"
        self.assertEqual(reads(54), 40 * MiB)
        # PYTORCH_CUDA_ALLOC_CONF's entry becomes the pools' GPUPOOL_CONF: read
        # before the device's first allocation (on the cuda backend, which
        # this machine may lack), the value the pool is to be created with.
        os.environ.pop("GPUPOOL_CONF")
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:40"
        enable()
        self.assertEqual(os.environ["GPUPOOL_CONF"], "max_split_size_mb:40")
        self.assertEqual(gpupool.memory_stats(56)["max_split_size"], 40 * MiB)

    def test_torch_cuda_memory_calls(self):
        d = 20
        torch, _ = fake_torch()
        self.enable(torch)
        p = malloc(3 * MiB, d)
        self.assertEqual(torch.cuda.memory_stats(d), gpupool.memory_stats(d))
        self.assertEqual(torch.cuda.memory.memory_stats(f"cuda:{d}")["allocated_bytes.all.current"],
                         3 * MiB)
        self.assertEqual(torch.cuda.max_memory_allocated(d), 3 * MiB)
        self.assertEqual(torch.cuda.memory_cached(d), gpupool.memory_reserved(d))  # through memory
        self.assertGreater(torch.cuda.memory_reserved(d), 0)
        free(p, d)
        torch.cuda.memory.reset_peak_memory_stats(d)
        self.assertEqual(gpupool.max_memory_allocated(d), 0)
        self.assertIsNone(torch.cuda.empty_cache())  # PyTorch's returns None
        self.assertEqual(gpupool.memory_reserved(d), 0)  # the cache went back to the device
        torch.cuda.set_per_process_memory_fraction(0.5, d)
        self.assertEqual(torch.cuda.memory.get_per_process_memory_fraction(d), 0.5)
        self.assertEqual(gpupool.get_per_process_memory_fraction(d), 0.5)
        torch.cuda.memory.set_per_process_memory_fraction(1.0, d)
        self.assertIs(torch._C._cuda_attach_out_of_memory_observer,
                      gpupool.attach_out_of_memory_observer)
        if hasattr(L, _lib.SNAPSHOT_SYMBOL):
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "snap.pickle")
                torch.cuda.memory._dump_snapshot(path)
                with open(path, "rb") as f:
                    self.assertIn("segments", pickle.load(f))
        # Only the names this torch has: none is added.
        self.assertFalse(hasattr(torch.cuda, "memory_summary"))
        self.assertFalse(hasattr(torch.cuda.memory, "memory_stats_as_nested_dict"))

    def test_record_memory_history(self):
        d = 22
        os.environ.pop("GPUPOOL_AGENT_CONF", None)
        torch, _ = fake_torch()
        self.enable(torch)
        p = malloc(MiB, d)  # a pool: the adapter's agent start was tried (no GPUPOOL_AGENT_CONF)
        record = torch.cuda.memory._record_memory_history
        record(max_entries=1000, stacks="python")
        self.assertEqual(os.environ["GPUPOOL_AGENT_CONF"],
                         "listen:off,cupti:off,trace_events:1000")
        record()  # again: nothing more
        q = malloc(3 * MiB, d)
        free(q, d)
        if hasattr(L, _lib.SNAPSHOT_SYMBOL):
            traces = gpupool.snapshot()["device_traces"]
            sizes = [(e["action"], e["size"]) for t in traces for e in t]
            self.assertIn(("alloc", 3 * MiB), sizes)
            self.assertIn(("free_requested", 3 * MiB), sizes)
        record(enabled=None)
        self.assertNotIn("GPUPOOL_AGENT_CONF", os.environ)
        q = malloc(5 * MiB, d)  # not recorded: the agent stopped
        free(q, d)
        if hasattr(L, _lib.SNAPSHOT_SYMBOL):
            sizes = [e["size"] for t in gpupool.snapshot()["device_traces"] for e in t]
            self.assertNotIn(5 * MiB, sizes)
        # Where GPUPOOL_AGENT_CONF is set, the adapter's agent is the one: nothing is changed.
        os.environ["GPUPOOL_AGENT_CONF"] = "listen:off,trace_events:64"
        record()
        record(enabled=None)
        self.assertEqual(os.environ["GPUPOOL_AGENT_CONF"], "listen:off,trace_events:64")
        free(p, d)

    def test_torch_cuda_memory_calls_left_alone(self):
        torch, _ = fake_torch()
        self.enable(torch, torch_memory_calls=False)
        with self.assertRaisesRegex(RuntimeError, "does not yet support getDeviceStats"):
            torch.cuda.memory_stats()
        with self.assertRaisesRegex(RuntimeError, "does not yet support getDeviceStats"):
            torch.cuda.memory_cached()

    def test_nested_stats(self):
        """gpupool.memory_stats_as_nested_dict, with torch or without (the
        one enable() installs is the same function)."""
        flat = gpupool.memory_stats(21)
        nested = gpupool.memory_stats_as_nested_dict(21)
        self.assertEqual(nested["allocated_bytes"]["all"]["current"],
                         flat["allocated_bytes.all.current"])
        self.assertEqual(nested["num_ooms"], flat["num_ooms"])
        leaves = []
        def walk(node, path):
            for k, v in node.items():
                walk(v, path + [k]) if isinstance(v, dict) else leaves.append(".".join(path + [k]))
        walk(nested, [])
        self.assertEqual(sorted(leaves), sorted(flat))

    def test_memory_snapshot_takes_pytorchs_arguments(self):
        """torch.cuda.memory_snapshot(mempool_id=None, include_traces=True), as
        current PyTorch has it: the one enable() installs takes both."""
        calls = gpupool.torch._torch_cuda_memory_calls()
        self.assertEqual(calls["memory_snapshot"](include_traces=False), gpupool.memory_snapshot())
        self.assertEqual(calls["memory_snapshot"](None, True), gpupool.memory_snapshot())
        self.assertIs(calls["memory_stats_as_nested_dict"], gpupool.memory_stats_as_nested_dict)

    def test_record_stream_is_passed(self):
        torch, calls = fake_torch()
        a = self.enable(torch)
        want = ctypes.cast(ctypes.CDLL(_lib.loaded_path()).gpupool_torch_record_stream,
                           ctypes.c_void_p).value
        self.assertEqual(a.native.record_stream_fn, want)
        library = ctypes.CDLL(_lib.loaded_path())
        for field, function in (("memory_fraction_fn", "gpupool_torch_set_memory_fraction"),
                                ("reset_fn", "gpupool_torch_empty_cache"),
                                ("begin_allocate_to_pool",
                                 "gpupool_torch_begin_allocate_to_pool")):
            self.assertEqual(getattr(a.native, field),
                             ctypes.cast(getattr(library, function), ctypes.c_void_p).value)
        # A torch whose pluggable allocator takes no such function: a warning, and it goes on.
        gpupool.torch._enabled = None
        torch, calls = fake_torch()
        del torch.cuda.memory.CUDAPluggableAllocator.allocator
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            self.enable(torch)
        self.assertEqual(len(calls), 1)
        self.assertTrue(any("set_record_stream_fn" in str(w.message) for w in seen))

    def test_agent_conf_and_rank(self):
        cases = [  # agent, GPUPOOL_AGENT_CONF before, RANK, after
            (None, None, "3", None),
            (None, "listen:0.0.0.0:9477", "3", "listen:0.0.0.0:9477,labels:rank=3"),
            (True, None, None, ""),
            (True, None, "0", "labels:rank=0"),
            ("listen:127.0.0.1:1", None, "2", "listen:127.0.0.1:1,labels:rank=2"),
            ("labels:team=a", None, "2", "labels:team=a;rank=2"),
            ("labels:rank=9", None, "2", "labels:rank=9"),
            # the agent takes the last labels entry: the rank joins that one
            ("labels:team=a,labels:team=b", None, "2", "labels:team=a,labels:team=b;rank=2"),
            ("labels:rank=1,labels:team=b", None, "2", "labels:rank=1,labels:team=b;rank=2"),
            ("listen:127.0.0.1:1,", None, "2", "listen:127.0.0.1:1,labels:rank=2"),
            (False, "listen:0.0.0.0:9477", "1", None),
        ]
        for agent, before, rank, after in cases:
            gpupool.torch._enabled = None
            for k, v in (("GPUPOOL_AGENT_CONF", before), ("RANK", rank)):
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            torch, _ = fake_torch()
            self.enable(torch, agent=agent)
            self.assertEqual(os.environ.get("GPUPOOL_AGENT_CONF"), after, (agent, before, rank))

    def assert_refused(self, torch, calls, env, **kw):
        """enable(**kw) raises ValueError carrying the library's reason and
        changes nothing: the environment is env, no allocator is swapped."""
        with self.assertRaises(ValueError) as cm:
            self.enable(torch, **kw)
        reason = _lib.last_error()
        self.assertTrue(reason, "the library gave no reason")
        self.assertEqual(str(cm.exception), f"gpupool.torch.enable: {reason}")
        self.assertEqual(calls, [])
        self.assertFalse(gpupool.torch.enabled())
        for k, v in env.items():
            self.assertEqual(os.environ.get(k), v, k)
        return reason

    def test_bad_conf_is_refused_before_anything_changes(self):
        os.environ["GPUPOOL_AGENT_CONF"] = "listen:127.0.0.1:1"
        env = {"GPUPOOL_CONF": os.environ["GPUPOOL_CONF"],
               "GPUPOOL_AGENT_CONF": "listen:127.0.0.1:1"}
        for conf, expected in [
                ("strategy:nope",
                 "GPUPOOL_CONF: strategy: unknown value 'nope' (valid: bfc, round, naive)"),
                ("max_split_size_mb:-1",
                 "GPUPOOL_CONF: max_split_size_mb: '-1' is not a whole number (21 to 1073741824, or inf)"),
                ("garbage", "GPUPOOL_CONF: 'garbage' is not key:value"),
                ("no_such_key:1", "GPUPOOL_CONF: unknown key 'no_such_key'"),
                ("backend:host,expandable_segments:True,strategy:round",
                 "pool 'torch': expandable_segments needs strategy bfc"),
                ("fault_rate:0.5", "pool 'torch': fault_rate: fault injection needs backend host")]:
            torch, calls = fake_torch()
            reason = self.assert_refused(torch, calls, env, conf=conf, agent="listen:127.0.0.1:2")
            self.assertTrue(reason.startswith(expected), (conf, reason))

    def test_bad_conf_in_the_environment_is_refused_the_same_way(self):
        os.environ["GPUPOOL_CONF"] = "strategy:nope"
        os.environ.pop("GPUPOOL_AGENT_CONF", None)
        torch, calls = fake_torch()
        reason = self.assert_refused(torch, calls, {"GPUPOOL_CONF": "strategy:nope",
                                                    "GPUPOOL_AGENT_CONF": None}, agent=True)
        self.assertEqual(reason, "GPUPOOL_CONF: strategy: unknown value 'nope' "
                                 "(valid: bfc, round, naive)")
        # A conf given replaces the environment's: only that one is checked.
        torch, calls = fake_torch()
        self.enable(torch, conf="backend:host,strategy:round")
        self.assertEqual(os.environ["GPUPOOL_CONF"], "backend:host,strategy:round")
        self.assertEqual(len(calls), 1)

    def test_bad_agent_conf_is_refused_before_anything_changes(self):
        os.environ["GPUPOOL_AGENT_CONF"] = "listen:127.0.0.1:1"
        env = {"GPUPOOL_CONF": os.environ["GPUPOOL_CONF"],
               "GPUPOOL_AGENT_CONF": "listen:127.0.0.1:1"}
        for agent, expected in [
                ("garbage", "gpupool agent: GPUPOOL_AGENT_CONF: 'garbage' is not key:value"),
                ("sample_interval_ms:0", "gpupool agent: GPUPOOL_AGENT_CONF: sample_interval_ms: "
                                         "0 is out of range"),
                ("listen:host:65536", "gpupool agent: GPUPOOL_AGENT_CONF: listen: 'host:65536': "
                                      "the port must be"),
                ("listen:off,sd_dir:/tmp", "gpupool agent: sd_dir needs the HTTP server")]:
            torch, calls = fake_torch()
            reason = self.assert_refused(torch, calls, env, conf="strategy:round", agent=agent)
            self.assertTrue(reason.startswith(expected), (agent, reason))
        # The environment's, when it is to be used, is checked the same way.
        os.environ["GPUPOOL_AGENT_CONF"] = env["GPUPOOL_AGENT_CONF"] = "cupti:sometimes"
        torch, calls = fake_torch()
        reason = self.assert_refused(torch, calls, env, agent=True)
        self.assertIn("cupti: unknown value 'sometimes'", reason)
        # Left to the environment (agent=None, an operator's setting), a bad
        # one warns and costs the job only its agent, as before.
        torch, calls = fake_torch()
        with self.assertWarnsRegex(RuntimeWarning, "cupti: unknown value 'sometimes'.*without it"):
            self.enable(torch, agent=None)
        self.assertTrue(gpupool.torch.enabled())
        self.assertEqual(os.environ["GPUPOOL_AGENT_CONF"], "cupti:sometimes")
        gpupool.torch._enabled = None  # a fresh process
        torch, calls = fake_torch()
        self.enable(torch, agent=False)  # not used: nothing to check
        self.assertNotIn("GPUPOOL_AGENT_CONF", os.environ)

    def test_conf_that_is_not_a_string_changes_nothing(self):
        before = os.environ["GPUPOOL_CONF"]
        for kw, error in [({"conf": 5}, TypeError), ({"conf": "strategy:round\0x"}, ValueError),
                          ({"conf": "strategy:round", "agent": 5}, TypeError)]:
            torch, calls = fake_torch()
            with self.assertRaises(error):
                self.enable(torch, **kw)
            self.assertEqual(os.environ["GPUPOOL_CONF"], before, kw)
            self.assertEqual(calls, [])

    def test_torch_not_installed(self):
        sys.modules["torch"] = None  # import torch raises ImportError
        with self.assertRaisesRegex(RuntimeError, "PyTorch is not installed"):
            gpupool.torch.enable()


def free_port_pair():
    """Two consecutive free loopback ports in this test's range 25000-25499."""
    for base in range(25000 + os.getpid() % 400, 25498, 2):
        try:
            for port in (base, base + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise unittest.SkipTest("no free ports in 25000-25499")


RANK_SCRIPT = r"""
import os, sys, types, urllib.request
sys.path.insert(0, os.environ["TEST_DIR"])
from test_gpupool import fake_torch
import gpupool.torch
from gpupool import _lib
sys.modules["torch"], _ = fake_torch()
gpupool.torch.enable(agent="listen:127.0.0.1:" + os.environ["BASE_PORT"])
# What PyTorch's first CUDA allocation does: the pool, then the agent, start.
p = _lib.lib().gpupool_torch_malloc(4096, 0, None)
assert p
port = int(os.environ["BASE_PORT"]) + int(os.environ["LOCAL_RANK"])
with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
    sys.stdout.write(r.read().decode())
"""


class Ranks(unittest.TestCase):
    def test_two_ranks_two_ports_with_rank_labels(self):
        base = free_port_pair()
        procs = []
        for rank in (0, 1):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), BASE_PORT=str(base),
                       TEST_DIR=os.path.dirname(os.path.abspath(__file__)))
            env.pop("GPUPOOL_AGENT_CONF", None)
            procs.append(subprocess.Popen([sys.executable, "-c", RANK_SCRIPT], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        for rank, proc in enumerate(procs):
            out, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 0, err)
            lines = [l for l in out.splitlines() if l.startswith("gpupool_allocated_bytes{")]
            self.assertTrue(lines, out[:2000])
            self.assertIn(f'rank="{rank}"', lines[0])
            self.assertIn('pool="torch"', lines[0])
            self.assertTrue(lines[0].endswith(" 4096"), lines[0])


class Fork(unittest.TestCase):
    def test_a_forked_child_is_refused_the_parents_pool(self):
        """A DataLoader-style fork: in the child, the parent's pool answers
        with GpupoolError saying why (it never waits on a lock the parent
        held), and the parent's pool goes on as before."""
        d = 21
        p = malloc(4096, d)
        self.assertTrue(p)
        fraction = gpupool.get_per_process_memory_fraction(d)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: reports through the pipe, never returns
            try:
                os.close(r)
                signal.alarm(10)  # a hang ends the child with SIGALRM
                # Every call on the parent's pool: those that return nothing
                # refuse too, rather than doing nothing in silence.
                calls = [lambda: gpupool.memory_stats(d),
                         lambda: gpupool.reset_peak_memory_stats(d),
                         lambda: gpupool.reset_accumulated_memory_stats(d),
                         lambda: gpupool.empty_cache(),
                         lambda: gpupool.set_per_process_memory_fraction(0.5, d),
                         lambda: gpupool.snapshot()]
                messages = []
                for call in calls:
                    try:
                        call()
                        messages.append("no error")
                    except gpupool.GpupoolError as e:
                        messages.append(str(e))
                os.write(w, "\n".join(messages).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            message = f.read().decode()
        _, status = os.waitpid(pid, 0)
        self.assertEqual(status, 0, "the child was killed (SIGALRM: a hang)")
        messages = message.split("\n")
        self.assertEqual(len(messages), 6, message)
        for m in messages:
            self.assertIn("pool 'torch' was created before this process was forked", m)
            self.assertIn("create a pool in the child", m)
        self.assertEqual(gpupool.memory_stats(d)["allocated_bytes.all.current"], 4096)
        self.assertEqual(gpupool.get_per_process_memory_fraction(d), fraction,
                         "the child's call changed the parent's pool")
        free(p, d)
        self.assertEqual(gpupool.memory_stats(d)["allocated_bytes.all.current"], 0)


class FreshProcess(unittest.TestCase):
    def run_code(self, code, **env):
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=dict(os.environ, **env), check=True).stdout

    def test_snapshot_before_the_first_allocation(self):
        if not hasattr(L, _lib.SNAPSHOT_SYMBOL):
            self.skipTest(f"the library has no {_lib.SNAPSHOT_SYMBOL}")
        code = ("import gpupool, os, pickle, tempfile\n"
                "print(gpupool.memory_snapshot(), gpupool.snapshot())\n"
                "path = os.path.join(tempfile.mkdtemp(), 'empty.pickle')\n"
                "gpupool.dump_snapshot(path)\n"
                "print(pickle.load(open(path, 'rb')))\n")
        self.assertEqual(self.run_code(code).splitlines(),
                         ["[] {'segments': [], 'device_traces': []}",
                          "{'segments': [], 'device_traces': []}"])

    def test_dump_snapshot_takes_a_path_only(self):
        """Before the first allocation as after it, dump_snapshot takes a path:
        an int is a TypeError, not a descriptor to write the pickle to and
        close (it was stdout, fd 1, here), and a NUL in the name a
        ValueError."""
        if not hasattr(L, _lib.SNAPSHOT_SYMBOL):
            self.skipTest(f"the library has no {_lib.SNAPSHOT_SYMBOL}")
        code = ("import gpupool, os, sys\n"
                "for bad in (1, True, 'x\\0y'):\n"
                "    try:\n"
                "        gpupool.dump_snapshot(bad)\n"
                "    except (TypeError, ValueError) as e:\n"
                "        print(type(e).__name__)\n"
                "print(os.path.exists('x'), flush=True)\n")
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=tmp,
                                 env=os.environ, check=True).stdout
        self.assertEqual(out.decode("latin-1").split(),
                         ["TypeError", "TypeError", "ValueError", "False"])

    def test_other_is_the_overflow_bucket(self):
        """docs/python.md: the name "other" is the bucket of the names past the
        15th (it takes none of the 15), and current_tag() inside a 16th name
        says "other". A fresh process: the tag table is the process's."""
        code = ("import gpupool\nfrom gpupool import _lib\nL = _lib.lib()\n"
                "with gpupool.tag('other'):\n"
                "    a = L.gpupool_torch_malloc(1 << 20, 0, None)\n"
                "for i in range(15):\n"
                "    with gpupool.tag(f't{i}'):\n"
                "        pass\n"
                "with gpupool.tag('t15'):\n"
                "    print(gpupool.current_tag())\n"
                "    b = L.gpupool_torch_malloc(2 << 20, 0, None)\n"
                "by_tag = gpupool.memory_allocated_by_tag(0)\n"
                "print(by_tag['other'], 't14' in by_tag, 't15' in by_tag)\n")
        self.assertEqual(self.run_code(code).split(), ["other", str(3 * MiB), "True", "False"])

    def test_a_named_library_that_cannot_load_is_an_error(self):
        """GPUPOOL_LIBRARY that cannot be loaded is an error, not skipped for
        the copy the package was installed with; a shared object that is not
        gpupool is said to be one."""
        code = ("import gpupool\ntry:\n    gpupool.memory_stats(0)\n"
                "except gpupool.GpupoolError as e:\n    print(e)\n"
                "else:\n    print('loaded', gpupool.library_path())\n")
        with tempfile.TemporaryDirectory() as tmp:
            installed = os.path.join(tmp, "gpupool")  # the package as pip installs it
            shutil.copytree(os.path.dirname(gpupool.__file__), installed,
                            ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copy(_lib.loaded_path(), os.path.join(installed, "libgpupool.so"))
            text = os.path.join(tmp, "hostname")
            with open(text, "w") as f:
                f.write("localhost\n")
            libc = loaded_libc()
            out = self.run_code(code, PYTHONPATH=tmp, GPUPOOL_LIBRARY=text)
            self.assertTrue(out.startswith(f"gpupool: cannot load {text}: "), out)
            self.assertEqual(self.run_code(code, PYTHONPATH=tmp, GPUPOOL_LIBRARY=libc).strip(),
                             f"gpupool: {libc} is not a gpupool library (it has no "
                             "gpupool_last_error)")
            env = dict(os.environ, PYTHONPATH=tmp)
            env.pop("GPUPOOL_LIBRARY")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 env=env, check=True).stdout.strip()
            self.assertEqual(out, f"loaded {os.path.join(installed, 'libgpupool.so')}")

    def test_library_path_is_the_one_loaded(self):
        code = ("import gpupool, os\n"
                "gpupool.memory_allocated(0)\n"
                "before = gpupool.library_path()\n"
                "os.environ['GPUPOOL_LIBRARY'] = '/nonexistent/libgpupool.so'\n"
                "print(gpupool.library_path() == before, os.path.isfile(before))\n")
        self.assertEqual(self.run_code(code).split(), ["True", "True"])


class BuildBackend(unittest.TestCase):
    """python/_gpupool_build.py, what `pip install ./python` runs: it copies
    GPUPOOL_LIBRARY into the wheel, and refuses a file that is not an ELF
    shared object exporting gpupool's C API."""

    def build(self, library):
        with tempfile.TemporaryDirectory() as out, environ(GPUPOOL_LIBRARY=library):
            name = _gpupool_build.build_wheel(out)
            with zipfile.ZipFile(os.path.join(out, name)) as wheel:
                return wheel.namelist()

    def test_refuses_what_is_not_a_gpupool_library(self):
        with tempfile.TemporaryDirectory() as tmp:
            text = os.path.join(tmp, "hostname")
            with open(text, "w") as f:
                f.write("localhost\n")
            executable = os.path.join(tmp, "exec")  # an ELF header of e_type ET_EXEC
            with open(executable, "wb") as f:
                f.write(b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x02\x00" + bytes(46) +
                        b"gpupool_last_error\0")
            empty = os.path.join(tmp, "empty.so")
            open(empty, "wb").close()
            for path in (text, executable, empty):
                with self.assertRaisesRegex(RuntimeError, f"GPUPOOL_LIBRARY={path}: not an ELF "
                                            "shared object"):
                    self.build(path)
        libc = loaded_libc()
        with self.assertRaisesRegex(RuntimeError, f"GPUPOOL_LIBRARY={libc}: not a gpupool "
                                    r"library \(it has no gpupool_last_error\)"):
            self.build(libc)
        with self.assertRaisesRegex(RuntimeError, "no such file"):
            self.build("/nonexistent/libgpupool.so")

    def test_takes_the_library(self):
        self.assertIn("gpupool/libgpupool.so", self.build(_lib.loaded_path()))


class Import(unittest.TestCase):
    def test_import_without_torch(self):
        code = ("import sys; sys.modules['torch'] = None\n"
                "import gpupool, gpupool.torch\n"
                "print(gpupool.memory_allocated(9), gpupool.memory_stats(9)['num_ooms'])")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout
        self.assertEqual(out.split(), ["0", "0"])

    def test_import_without_library(self):
        code = ("import gpupool\n"
                "try:\n    gpupool.memory_stats(0)\n"
                "except gpupool.GpupoolError as e:\n    print(e)\n")
        env = dict(os.environ, GPUPOOL_LIBRARY="/nonexistent/libgpupool.so")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, check=True).stdout
        self.assertIn("GPUPOOL_LIBRARY=/nonexistent/libgpupool.so: no such file", out)


if __name__ == "__main__":
    unittest.main()
