"""How the operator commands read a share of the keys typed by a person: ``5%``, ``0.05``,
a canary ``green:5%`` (``cutover switch --canary``) and a list of steps ``5%,25%,100%``
(``cutover rollout --canary``)."""

from __future__ import annotations

from itertools import pairwise

from pydantic import ValidationError

from cutover.cli.errors import CliError
from cutover.key_primary import Canary


def parse_share(text: str, flag: str) -> float:
    """``5%`` or ``0.05``: a share of the keys in (0, 1]."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise CliError(f"{flag} {text!r} is not a share of the keys; write e.g. 5% or 0.05 "
                       "(above 0, at most 100%)")
    return _whole(value, flag, text)


def _whole(value: float, flag: str, text: str) -> float:
    """The share as the plan takes it (a whole number of basis points), or the refusal."""
    try:
        return Canary(version="v", share=value).share
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise CliError(f"{flag} {text!r}: {reason}") from None


def parse_canary(text: str) -> Canary:
    """``VERSION:SHARE``, e.g. ``green:5%``."""
    version, sep, share = text.rpartition(":")
    if not sep or not version:
        raise CliError(f"--canary {text!r} names no version; write VERSION:SHARE, e.g. "
                       "--canary green:5%")
    value = parse_share(share, "--canary")
    try:
        return Canary(version=version, share=value)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise CliError(f"--canary {text!r}: version {version!r}: {reason}") from None


def parse_steps(text: str) -> tuple[float, ...]:
    """``5%,25%,100%``: the shares of a canary rollout, each larger than the one before, the
    last every key."""
    steps = tuple(parse_share(part, "--canary") for part in text.split(",") if part.strip())
    if not steps:
        raise CliError(f"--canary {text!r} gives no share; write the steps, e.g. "
                       "--canary 5%,25%,100%")
    for before, after in pairwise(steps):
        if after <= before:
            raise CliError(f"--canary {text!r}: {after:.2%} after {before:.2%}; shares only "
                           "grow, so give each step a larger share than the one before")
    if steps[-1] != 1:
        raise CliError(f"--canary {text!r} ends at {steps[-1]:.2%}: a rollout ends with every "
                       "key on the new version; end the steps with 100%, e.g. "
                       f"--canary {text},100%")
    return steps
