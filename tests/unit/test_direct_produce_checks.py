"""The checks before forwards are produced straight into librdkafka (router/native/_produce.h): each
refusal names what differs, and the router then produces through ``Producer.produce``."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from router.native import compiled


@pytest.mark.skipif(not compiled.available(), reason="the compiled extension is not built")
def test_a_refused_direct_produce_says_why() -> None:
    fp = compiled._fastpath
    assert fp is not None
    lib = compiled._loaded_librdkafka()
    assert lib is not None
    try:
        assert fp.use_direct_produce(producer_type=dict, rdkafka=lib) == \
            f"confluent_kafka.Producer is {dict.__basicsize__} bytes, not " \
            f"{Producer.__basicsize__}"
        assert fp.use_direct_produce(producer_type=Producer, rdkafka=None) == \
            "librdkafka was not found among the loaded libraries"
        assert fp.use_direct_produce(producer_type=Producer,
                                     rdkafka="/nowhere/librdkafka.so.1") == \
            "/nowhere/librdkafka.so.1 is not loaded"
    finally:  # on again, for the tests after this one
        assert fp.use_direct_produce(producer_type=Producer, rdkafka=lib) is None
