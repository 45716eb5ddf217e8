"""docs/configuration.md names every setting of the settings models with its default, and
nothing else: the reference cannot fall behind the code."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from cutover.settings import DedupSettings, RouterSettings, RouteSettings, StoreMemorySettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
TABLES = {"Top level": RouterSettings, "Routes (`routes[]`)": RouteSettings,
          "Dedup (`routes[].dedup`)": DedupSettings,
          "Store memory (`store_memory`)": StoreMemorySettings}


def _rows(section: str) -> dict[str, str]:
    """setting -> its default cell, from the table under ``### section``."""
    text = DOC.read_text()
    start = text.index(f"### {section}\n")
    end = text.find("\n#", start + 4)
    rows: dict[str, str] = {}
    for line in text[start:end if end > 0 else None].splitlines():
        m = re.match(r"^\| `([a-z_]+)` \| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def _shown(default: object) -> str:
    if isinstance(default, Enum):
        return str(default.value)
    if default is None:
        return "null"
    if isinstance(default, dict):
        return "{}" if not default else str(default)
    return str(default)


def _default(model: type[BaseModel], name: str) -> object:
    field = model.model_fields[name]
    if field.default_factory is not None:
        return field.default_factory()  # type: ignore[call-arg]
    return field.default


def test_every_setting_is_documented_with_its_default_and_nothing_else() -> None:
    for section, model in TABLES.items():
        rows = _rows(section)
        assert set(rows) == set(model.model_fields), (
            f"{section}: undocumented {sorted(set(model.model_fields) - set(rows))}, "
            f"no such setting {sorted(set(rows) - set(model.model_fields))}")
        for name in model.model_fields:
            default = _default(model, name)
            cell = rows[name]
            if default is PydanticUndefined:
                assert cell == "required", f"{section} {name}: required, the doc says {cell!r}"
            elif isinstance(default, BaseModel):
                assert cell == "(below)", f"{section} {name}: a group of settings, documented below"
            else:
                assert cell.startswith(f"`{_shown(default)}`"), \
                    f"{section} {name}: default {_shown(default)!r}, the doc says {cell!r}"


def test_the_worker_flags_and_the_two_workers_on_one_host_are_documented() -> None:
    text = DOC.read_text()
    assert "`--instance-id ID` | `CUTOVER_INSTANCE_ID`" in text
    assert "**Two workers on one host**" in text and "`http_port`" in text \
        and "`state_dir`" in text
