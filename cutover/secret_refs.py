"""Secrets for Kafka clients come from files or environment variables, never in clear.

Settings files are committed, copied into images and printed in reviews; command lines show
up in ``ps`` and shell history. So a client setting that holds a secret (a SASL password, a
key's pass phrase) is written as a reference, resolved only when a client is built, and a
secret written in clear is refused with a sentence saying how to write it instead::

    kafka:
      sasl.username: cutover-router
      sasl.password: ${file:/run/secrets/cutover-router-password}   # or ${env:ROUTER_PASSWORD}

``${file:PATH}`` is the file's content without its trailing newline (Docker and Kubernetes
secrets are files); ``${env:NAME}`` is an environment variable. Any setting may use a
reference; only those in :data:`SECRET_SETTINGS` must. Errors name the setting and the
reference, never a value. The plan signing key follows the same rule:
``CUTOVER_PLAN_KEY`` or ``CUTOVER_PLAN_KEY_FILE``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cutover.settings import SettingsError

# librdkafka (and Java client) settings whose value is a secret.
SECRET_SETTINGS = frozenset({
    "sasl.password", "sasl.oauthbearer.client.secret", "ssl.key.password",
    "ssl.keystore.password", "ssl.key.pem", "ssl.truststore.password", "sasl.jaas.config",
})
REFERENCE = re.compile(r"^\$\{(?P<kind>env|file):(?P<target>[^}]+)\}$")
PLAN_KEY_ENV = "CUTOVER_PLAN_KEY"
PLAN_KEY_FILE_ENV = "CUTOVER_PLAN_KEY_FILE"


class SecretError(SettingsError):
    """A secret that cannot be had, or one written in clear; the message never holds it."""


def resolve(value: str, setting: str) -> str:
    """The value a ``${env:NAME}`` / ``${file:PATH}`` reference stands for (else ``value``)."""
    m = REFERENCE.match(value.strip())
    if m is None:
        return value
    kind, target = m.group("kind"), m.group("target").strip()
    if kind == "env":
        found = os.environ.get(target)
        if not found:
            raise SecretError(f"kafka setting {setting!r} refers to environment variable "
                              f"{target}, which is not set (or empty); export it before "
                              "starting")
        return found
    try:
        return Path(target).read_text().rstrip("\r\n")
    except OSError as exc:
        raise SecretError(f"kafka setting {setting!r} refers to file {target}, which cannot "
                          f"be read ({exc.strerror}); create it or fix the path") from None


def resolve_secrets(kafka: Mapping[str, Any]) -> dict[str, Any]:
    """Client settings with every reference resolved; a secret in clear is a SecretError."""
    out: dict[str, Any] = {}
    for key, value in kafka.items():
        if isinstance(value, str):
            if key.lower() in SECRET_SETTINGS and REFERENCE.match(value.strip()) is None:
                raise SecretError(
                    f"kafka setting {key!r} holds a secret in clear; keep it in a file or an "
                    f"environment variable and write {key}: ${{file:/path/to/secret}} or "
                    f"{key}: ${{env:NAME}}")
            out[key] = resolve(value, key)
        else:
            out[key] = value
    return out


def plan_signing_key() -> bytes | None:
    """The plan signing key from ``CUTOVER_PLAN_KEY``, or the file ``CUTOVER_PLAN_KEY_FILE``
    names; None when neither is set."""
    value = os.environ.get(PLAN_KEY_ENV)
    if value:
        return value.encode()
    path = os.environ.get(PLAN_KEY_FILE_ENV)
    if not path:
        return None
    try:
        key = Path(path).read_bytes().rstrip(b"\r\n")
    except OSError as exc:
        raise SecretError(f"{PLAN_KEY_FILE_ENV} names {path}, which cannot be read "
                          f"({exc.strerror}); create it or fix the path") from None
    if not key:
        raise SecretError(f"{PLAN_KEY_FILE_ENV} names {path}, which is empty; write the "
                          "signing key (32+ random bytes) into it")
    return key
