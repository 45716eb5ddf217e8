"""A bare Faust pass-through agent (raw -> out, per event), for the router benchmark.

Usage: python router_faust_agent.py BOOTSTRAP RAW OUT COUNT DATADIR; prints "records_per_s=<x>"."""

from __future__ import annotations

import os
import sys
import time

import faust

bootstrap, raw, out, count, datadir = (*sys.argv[1:4], int(sys.argv[4]), sys.argv[5])
app = faust.App(f"bench-agent-{int(time.time())}", broker=f"kafka://{bootstrap}",
                store="memory://", web_enabled=False,
                datadir=datadir, topic_disable_leader=True,
                broker_session_timeout=6, broker_heartbeat_interval=1,
                consumer_auto_offset_reset="earliest", producer_acks=1)
raw_topic = app.topic(raw, value_serializer="raw", key_serializer="raw")
out_topic = app.topic(out, value_serializer="raw", key_serializer="raw")
state = {"n": 0, "t0": 0.0}


@app.agent(raw_topic)
async def passthrough(stream):
    async for event in stream.events():
        if state["n"] == 0:
            state["t0"] = time.monotonic()
        msg = event.message
        await out_topic.send(key=msg.key, value=msg.value, headers=msg.headers,
                             partition=msg.partition)
        state["n"] += 1
        if state["n"] >= count:
            await app.producer.flush()
            elapsed = time.monotonic() - state["t0"]
            print(f"records_per_s={count / elapsed:.0f}", flush=True)
            os._exit(0)  # app.stop() from inside an agent waits for that agent forever


if __name__ == "__main__":
    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    app.main()
