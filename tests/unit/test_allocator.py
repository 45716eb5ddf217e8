"""router.worker.allocator: glibc's fastbins turned off, its arenas capped and free pages given
back, or the reason each was left alone.

Whether fastbins are on is read from glibc itself: after many small chunks are freed (more than
its per-thread cache keeps), ``mallinfo2().fsmblks`` counts the bytes held in fastbins; the arenas
are counted in ``malloc_info``'s report, and pages given back in the process's resident set. Each
case runs in a fresh interpreter, because the setting holds for the whole process.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from router.worker import allocator

# Each probe's C allocator, as ctypes sees it.
LIBC = """
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
"""

PROBE = LIBC + """
import sys
from router.worker.allocator import fastbins_off
if sys.argv[1] == "off":
    print(fastbins_off())
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]
libc.mallinfo2.restype = MallInfo2
chunks = [libc.malloc(48) for _ in range(200)]
keep = [libc.malloc(48) for _ in range(200)]   # so that freed chunks do not merge into the top
for p in chunks:
    libc.free(p)
print(libc.mallinfo2().fsmblks)
"""


def _fastbin_bytes(mode: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.splitlines()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt and mallinfo2")
def test_glibc_keeps_no_chunk_in_fastbins_once_they_are_off() -> None:
    assert int(_fastbin_bytes("default")[-1]) > 0   # glibc's default: freed chunks in fastbins
    said, held = _fastbin_bytes("off")[-2:]
    assert said == "glibc, fastbins off" and int(held) == 0


def test_another_c_library_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert allocator.fastbins_off() == "as the C library has it (musl)"


ARENAS_PROBE = LIBC + """
import os, sys, tempfile, threading
from router.worker.allocator import cap_arenas
if sys.argv[1] == "capped":
    print(cap_arenas())
held = threading.Barrier(9)
def allocate():
    chunks = [libc.malloc(4096) for _ in range(50)]
    held.wait()   # all eight threads alive at once, each holding its chunks
    for p in chunks:
        libc.free(p)
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads:
    t.start()
held.wait()
with tempfile.TemporaryFile() as f:
    libc.fdopen.restype, libc.fdopen.argtypes = ctypes.c_void_p, [ctypes.c_int, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fflush.argtypes = [ctypes.c_void_p]
    stream = libc.fdopen(os.dup(f.fileno()), b"w")
    libc.malloc_info(0, stream)
    libc.fflush(stream)
    f.seek(0)
    print(f.read().decode().count("<heap nr="))
for t in threads:
    t.join()
"""


def _arenas(mode: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run([sys.executable, "-c", ARENAS_PROBE, mode], capture_output=True,
                          text=True, timeout=60, check=True, env=env)
    return done.stdout.splitlines()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt and malloc_info")
def test_threads_share_the_capped_arenas_instead_of_one_each() -> None:
    assert int(_arenas("default")[-1]) > allocator.ARENA_MAX   # glibc's default: one per thread
    said, arenas = _arenas("capped")[-2:]
    assert said == f"{allocator.ARENA_MAX} arenas" and int(arenas) <= allocator.ARENA_MAX


TRIM_PROBE = LIBC + """
import threading
from router.worker.allocator import give_back_free_memory
def rss_kb():
    status = open("/proc/self/status").read().splitlines()
    return int(next(line for line in status if line.startswith("VmRSS")).split()[1])
def churn():   # a client's thread: buffers freed, one kept above them, so none is at the top
    chunks = [libc.malloc(64 * 1024) for _ in range(1600)]
    for p in chunks:
        ctypes.memset(p, 1, 64 * 1024)
    keep.append(libc.malloc(64 * 1024))
    for p in chunks:
        libc.free(p)
keep = []
t = threading.Thread(target=churn)
t.start(); t.join()
before = rss_kb()
print(give_back_free_memory())
print(before - rss_kb())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_memory_a_thread_freed_below_a_live_chunk_goes_back_to_the_system() -> None:
    done = subprocess.run([sys.executable, "-c", TRIM_PROBE], capture_output=True, text=True,
                          timeout=60, check=True)
    trimmed, released_kb = done.stdout.splitlines()[-2:]
    assert trimmed == "True"
    assert int(released_kb) > 80 * 1024   # of the 100 MiB the thread freed


def test_an_operators_arena_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert allocator.cap_arenas() == "4 arenas (MALLOC_ARENA_MAX)"


def test_another_c_library_has_no_arena_cap_or_trim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert allocator.cap_arenas() == "as the C library has it (musl)"
    assert allocator.give_back_free_memory() is False
