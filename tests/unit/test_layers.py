"""The import layers, kept by a test: a newcomer can rely on the direction of every import.

    CLI and demo (cutover.cli, and the `tag` command's spark_tagger.cli)
        ^ uses
    router/ (the worker, the operator's library)    spark_tagger/ (the tagger)
        ^ use
    contract (cutover/: models, headers, plan, settings, status, readiness; the test brokers)

Nothing imports upwards, router and spark_tagger do not import each other, and no product
module takes part in an import cycle (lazy imports inside functions included: they are cycles
too, only later).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cutover", "router", "spark_tagger")
CLI = ("cutover.cli", "spark_tagger.cli")   # the `tag` command's module lives with the tagger
# Kept only for tests/conformance's imports of the order generator (see its docstring).
SHIMS = {"spark_tagger.testing": {"cutover.cli.orders"}}


def modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = modules()


def imports(name: str) -> set[str]:
    """The product modules ``name`` imports (at any level of the file)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in MODULES}
    return found - {name}


def layer(name: str) -> str:
    if any(name == c or name.startswith(c + ".") for c in CLI):
        return "cli"
    if name.startswith("cutover"):
        return "contract"
    return name.split(".")[0]   # router | spark_tagger


ALLOWED = {
    "contract": {"contract"},
    "router": {"contract", "router"},
    "spark_tagger": {"contract", "spark_tagger"},
    "cli": {"contract", "router", "spark_tagger", "cli"},
}


def test_the_layers_hold_every_product_module() -> None:
    assert {"cutover.plan", "cutover.cli", "cutover.cli.switch", "router.datapath",
            "spark_tagger.tagger"} <= set(MODULES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_upwards_or_sideways(name: str) -> None:
    wrong = sorted(t for t in imports(name) - SHIMS.get(name, set())
                   if layer(t) not in ALLOWED[layer(name)])
    assert not wrong, (f"{name} ({layer(name)}) imports {wrong}; allowed: "
                       f"{sorted(ALLOWED[layer(name)])}")


def test_no_import_cycles() -> None:
    graph = {name: imports(name) for name in MODULES}
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycles.append([*path[path.index(name):], name])
            return
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert not cycles, " ; ".join(" -> ".join(c) for c in cycles)
