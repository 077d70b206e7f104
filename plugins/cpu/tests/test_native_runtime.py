"""ember-cpu's allocator (alignment, statistics, the large-block reuse cache) and thread count."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from native_util import ffi, lib

MIB = 1 << 20


def stats() -> dict[str, int]:
    s = ffi.new("int64_t[4]")
    lib.ember_cpu_memory_stats(s)
    return {"live": s[0], "peak": s[1], "cached": s[2], "count": s[3]}


def addr(p) -> int:
    return int(ffi.cast("uintptr_t", p))


def test_alignment_and_usable_memory():
    for n in (0, 1, 63, 64, 1000, MIB - 1, MIB, 3 * MIB + 5, 64 * MIB):
        p = lib.ember_cpu_alloc(n)
        assert p != ffi.NULL and addr(p) % 64 == 0, n
        if n:
            ffi.memmove(p, b"\xab" * min(n, 4096), min(n, 4096))   # writable at both ends
            ffi.memmove(ffi.cast("char *", p) + n - 1, b"\xcd", 1)
        lib.ember_cpu_free(p)


def test_zero_negative_and_null():
    ps = [lib.ember_cpu_alloc(0) for _ in range(3)]
    assert all(p != ffi.NULL for p in ps) and len({addr(p) for p in ps}) == 3
    for p in ps:
        lib.ember_cpu_free(p)
    assert lib.ember_cpu_alloc(-1) == ffi.NULL
    lib.ember_cpu_free(ffi.NULL)   # a no-op


def test_statistics_follow_allocations():
    lib.ember_cpu_empty_cache()
    before = stats()
    small = lib.ember_cpu_alloc(1000)
    large = lib.ember_cpu_alloc(5 * MIB)
    during = stats()
    assert during["live"] - before["live"] == 1000 + 5 * MIB
    assert during["count"] - before["count"] == 2
    assert during["peak"] >= during["live"]
    lib.ember_cpu_free(small)
    lib.ember_cpu_free(large)
    after = stats()
    assert after["live"] == before["live"] and after["count"] == before["count"]
    assert after["peak"] == during["peak"]
    assert after["cached"] >= 5 * MIB          # the large block is kept, not counted as live
    lib.ember_cpu_empty_cache()
    assert stats()["cached"] == 0


def test_cache_reuses_large_blocks_of_similar_size():
    lib.ember_cpu_empty_cache()
    p = lib.ember_cpu_alloc(64 * MIB)
    lib.ember_cpu_free(p)
    cached = stats()["cached"]
    assert cached >= 64 * MIB
    q = lib.ember_cpu_alloc(64 * MIB)           # the same size: the same block
    assert addr(q) == addr(p) and stats()["cached"] == cached - 64 * MIB
    lib.ember_cpu_free(q)
    r = lib.ember_cpu_alloc(60 * MIB)           # a little smaller: still fits within 1/8
    assert addr(r) == addr(p)
    lib.ember_cpu_free(r)
    s = lib.ember_cpu_alloc(32 * MIB)           # half the size: a fresh block, the cache kept
    assert addr(s) != addr(p) and stats()["cached"] == cached
    lib.ember_cpu_free(s)
    t = lib.ember_cpu_alloc(100 * MIB)          # larger than anything cached
    assert addr(t) not in (addr(p), addr(s))
    lib.ember_cpu_free(t)
    lib.ember_cpu_empty_cache()
    assert stats()["cached"] == 0


def test_small_blocks_are_not_cached():
    lib.ember_cpu_empty_cache()
    p = lib.ember_cpu_alloc((128 << 10) - 64)
    lib.ember_cpu_free(p)
    assert stats()["cached"] == 0


def test_blocks_from_128_kib_are_cached():
    """glibc maps and trims blocks of this size itself: a page fault per 4 KiB on every reuse."""
    lib.ember_cpu_empty_cache()
    p = lib.ember_cpu_alloc(256 << 10)
    lib.ember_cpu_free(p)
    assert stats()["cached"] >= 256 << 10
    q = lib.ember_cpu_alloc(256 << 10)
    assert addr(q) == addr(p)
    lib.ember_cpu_free(q)
    lib.ember_cpu_empty_cache()


def test_concurrent_allocations_keep_statistics_exact():
    lib.ember_cpu_empty_cache()
    before = stats()

    def work(seed: int) -> None:
        sizes = [(seed * 7919 + i * 104729) % (3 * MIB) for i in range(300)]
        live = []
        for i, n in enumerate(sizes):
            live.append(lib.ember_cpu_alloc(n))
            if i % 3 == 2:
                lib.ember_cpu_free(live.pop(0))
        for p in live:
            lib.ember_cpu_free(p)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = stats()
    assert after["live"] == before["live"] and after["count"] == before["count"]
    lib.ember_cpu_empty_cache()


def test_cache_size_from_environment():
    """EMBER_CPU_CACHE_BYTES is read when the module loads: 0 disables the cache, a small limit
    keeps only what fits."""
    script = (
        "from native_util import ffi, lib\n"
        "s = ffi.new('int64_t[4]')\n"
        "for n in (4 << 20, 2 << 20):\n"
        "    lib.ember_cpu_free(lib.ember_cpu_alloc(n))\n"
        "lib.ember_cpu_memory_stats(s)\n"
        "print(s[2])\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    for limit, expect in (("0", 0), (str(3 << 20), 2 << 20)):
        env["EMBER_CPU_CACHE_BYTES"] = limit
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        assert int(out.stdout.split()[-1]) == expect, (limit, out.stdout)


def test_thread_count():
    old = lib.ember_cpu_get_num_threads()
    assert old >= 1
    try:
        lib.ember_cpu_set_num_threads(1)
        assert lib.ember_cpu_get_num_threads() == 1
        lib.ember_cpu_set_num_threads(0)           # clamped
        assert lib.ember_cpu_get_num_threads() == 1
        lib.ember_cpu_set_num_threads(3)
        assert lib.ember_cpu_get_num_threads() == 3
    finally:
        lib.ember_cpu_set_num_threads(old)


def test_thread_count_holds_on_every_python_thread():
    """ember_cpu_set_num_threads is process-wide: kernels called from another Python thread (whose
    OpenMP default omp_set_num_threads never touched) start no more threads than it allows.
    Counted as the OS threads that appeared while the kernels ran (OpenMP keeps its workers; an
    earlier Python thread may still be exiting, so the ids are compared, not the counts)."""
    if not os.path.isdir("/proc/self/task"):
        import pytest

        pytest.skip("needs /proc to count threads")
    script = """
import os, threading
import numpy as np
from native_util import desc, ffi, lib

def kernels():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 512)).astype(np.float32)
    out = np.empty_like(x)
    col = np.empty(512, np.float32)
    count = ffi.new("int64_t *")
    yield lambda: lib.ember_cpu_binary(lib.EMBER_CPU_BINARY_ADD, desc(out), desc(x), desc(x))
    yield lambda: lib.ember_cpu_binary(lib.EMBER_CPU_BINARY_ADD, desc(out), desc(x.T), desc(x))
    yield lambda: lib.ember_cpu_reduce(lib.EMBER_CPU_REDUCE_SUM, desc(col), desc(x), 1)
    yield lambda: lib.ember_cpu_reduce(lib.EMBER_CPU_REDUCE_SUM, desc(col), desc(x.T), 1)
    yield lambda: lib.ember_cpu_scan(lib.EMBER_CPU_SCAN_SUM, desc(out), desc(x))
    yield lambda: lib.ember_cpu_sort(desc(out), desc(x), 0)
    yield lambda: lib.ember_cpu_count_nonzero(desc(x), count)
    yield lambda: lib.ember_cpu_matmul(desc(out), desc(x), desc(x))
    yield lambda: lib.ember_cpu_random(lib.EMBER_CPU_RANDOM_UNIFORM, desc(out), 1, 0, 0.0, 1.0, 0, 0)

def grown(n):
    lib.ember_cpu_set_num_threads(n)
    result = []
    def work():
        before = set(os.listdir("/proc/self/task"))
        for k in kernels():
            assert k() == lib.EMBER_OK
        result.append(len(set(os.listdir("/proc/self/task")) - before))
    t = threading.Thread(target=work)
    t.start()
    t.join()
    return result[0]

print(grown(1), grown(2))
"""
    env = dict(os.environ, OMP_NUM_THREADS="4",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    one, two = map(int, out.stdout.split())
    assert one == 0, out.stdout
    assert two >= 1, out.stdout   # the count is observable: 2 threads do start a worker
