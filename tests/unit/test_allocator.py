"""router.allocator: glibc's fastbins turned off, or the reason it was left alone."""

from __future__ import annotations

import platform

import pytest

from router import allocator


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_glibc_takes_the_setting_and_allocation_still_works() -> None:
    assert allocator.fastbins_off() == "glibc, fastbins off"
    assert allocator.fastbins_off() == "glibc, fastbins off"  # again: idempotent
    blocks = [bytearray(n) for n in range(1, 4096, 7)]  # small chunks, now without fastbins
    assert sum(map(len, blocks)) == sum(range(1, 4096, 7))


def test_another_c_library_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert allocator.fastbins_off() == "as the C library has it (musl)"
