from __future__ import annotations

import gc
import threading

from router.gc_pause import batch_gc_pause


def test_pause_restores_the_collector_after_nested_and_overlapping_blocks() -> None:
    assert gc.isenabled()
    with batch_gc_pause():
        assert not gc.isenabled()
        with batch_gc_pause():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block is still running
    assert gc.isenabled()

    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with batch_gc_pause():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    with batch_gc_pause():
        t.start()
        inside.wait(10)
    assert not gc.isenabled()  # the other thread's block has not ended
    release.set()
    t.join(10)
    assert gc.isenabled()


def test_pause_leaves_a_disabled_collector_disabled_and_survives_errors() -> None:
    gc.disable()
    try:
        with batch_gc_pause():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    try:
        with batch_gc_pause():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()
