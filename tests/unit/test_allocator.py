"""router.allocator: glibc's fastbins turned off, or the reason it was left alone.

Whether fastbins are on is read from glibc itself: after many small chunks are freed (more than
its per-thread cache keeps), ``mallinfo2().fsmblks`` counts the bytes held in fastbins. Each
case runs in a fresh interpreter, because the setting holds for the whole process.
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from router import allocator

PROBE = """
import ctypes, sys
from router.allocator import fastbins_off
if sys.argv[1] == "off":
    print(fastbins_off())
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
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
