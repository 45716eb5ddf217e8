from __future__ import annotations

import gc
import threading
import weakref

from router.worker.gc_pause import batch_gc_pause, freeze_start_up


class _Node:
    def __init__(self) -> None:
        self.me = self   # a reference cycle: only the cyclic collector frees it


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


def test_freeze_collects_start_up_garbage_first_and_later_cycles_are_still_collected() -> None:
    kept = _Node()
    garbage = _Node()
    gone_before = weakref.ref(garbage)
    del garbage
    try:
        freeze_start_up()
        assert gone_before() is None           # collected, not frozen for good
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # frozen: never scanned again
        later = _Node()
        gone_later = weakref.ref(later)
        del later
        gc.collect()
        assert gone_later() is None            # made after the freeze: collected as before
    finally:
        gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())
