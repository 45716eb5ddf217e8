"""The C allocator's fastbins turned off in the router's process (glibc only).

Every forwarded record is a librdkafka message allocated on the data path's thread and freed on
a broker thread once delivered, and every consumed batch frees its fetch buffers there; with
glibc's fastbins, those frees pile small chunks up that the next large allocation stops to
consolidate, a large share of the data path's CPU. With fastbins off (``mallopt(M_MXFAST,
0)``) small chunks still come from the per-thread cache. Nothing else in the process depends on
fastbins; another C library (musl) is left as it is. Why and what it saved:
docs/decisions/009-gc-and-allocator.md.
"""

from __future__ import annotations

import ctypes
import platform

M_MXFAST = 1  # glibc's malloc.h


def fastbins_off() -> str:
    """Turn glibc's fastbins off for the whole process; says what was done, for the start-up
    log line."""
    lib, _version = platform.libc_ver()
    if lib != "glibc":
        return f"as the C library has it ({lib or 'not glibc'})"
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return "as glibc has it (mallopt not found)"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(M_MXFAST, 0) != 1:
        return "as glibc has it (mallopt refused M_MXFAST)"
    return "glibc, fastbins off"
