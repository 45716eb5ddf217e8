#!/usr/bin/env python3
"""A stand-in for kubectl that keeps the objects it is given in a JSON file (FAKE_KUBE_STATE)
and logs each call (one JSON array per line in FAKE_KUBE_STATE.log). It answers the few
commands deploy/spark-k8s/spark_job.py runs, as a cluster whose drivers start at once:

    apply -f -              store each document; a Deployment gets availableReplicas 1, a
                            SparkApplication the state RUNNING
    rollout status KIND/N   0 when available, else 1
    wait --for=jsonpath=... 0 when the field has the value, else 1
    wait --for=delete ...   0
    get KIND/N -o jsonpath= the field, or NotFound (exit 1)
    delete KIND/N           remove it (NotFound unless --ignore-not-found)

Tests change an object's status in the file to play a driver that dies.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

STATE = Path(os.environ["FAKE_KUBE_STATE"])


def load() -> dict[str, Any]:
    return json.loads(STATE.read_text()) if STATE.exists() else {}


def save(objects: dict[str, Any]) -> None:
    STATE.write_text(json.dumps(objects))


def field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.strip("{}").strip(".").split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def main(argv: list[str]) -> int:
    with Path(f"{STATE}.log").open("a") as log:
        log.write(json.dumps(argv) + "\n")
    objects = load()
    verb, rest = argv[0], argv[1:]
    if verb == "apply":
        for doc in yaml.safe_load_all(sys.stdin.read()):
            key = f"{doc['kind'].lower()}/{doc['metadata']['name']}"
            if doc["kind"] == "Deployment":
                doc["status"] = {"availableReplicas": 1}
            elif doc["kind"] == "SparkApplication":
                doc["status"] = {"applicationState": {"state": "RUNNING"}}
            print(f"{key} {'configured' if key in objects else 'created'}")
            objects[key] = doc
        save(objects)
        return 0
    if verb == "rollout" and rest[0] == "status":
        obj = objects.get(rest[1])
        return 0 if obj and field(obj, "status.availableReplicas") not in ("", "0") else 1
    if verb == "wait":
        condition = next(a for a in rest if a.startswith("--for="))
        if condition == "--for=delete":
            return 0
        m = re.fullmatch(r"--for=jsonpath=(\{[^}]+\})=(\S+)", condition)
        assert m is not None, condition
        obj = objects.get(rest[1])
        return 0 if obj and field(obj, m.group(1)) == m.group(2) else 1
    if verb == "get":
        obj = objects.get(rest[0])
        if obj is None:
            print(f'Error from server (NotFound): "{rest[0]}" not found', file=sys.stderr)
            return 1
        path = next(a for a in rest if a.startswith("jsonpath=")).removeprefix("jsonpath=")
        print(field(obj, path), end="")
        return 0
    if verb == "delete":
        if rest[0] not in objects:
            if "--ignore-not-found" in rest:
                return 0
            print(f'Error from server (NotFound): "{rest[0]}" not found', file=sys.stderr)
            return 1
        del objects[rest[0]]
        save(objects)
        print(f'{rest[0]} deleted')
        return 0
    print(f"fake kubectl: {verb} is not served", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
