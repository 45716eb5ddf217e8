"""The import layers, kept by a test: a newcomer can rely on the direction of every import.

    CLI and demo (cutover.cli, and the `tag` command's spark_tagger.cli)
        ^ uses
    the operator's library (cutover.control)
        ^ uses
    router/ (the worker)                            spark_tagger/ (the tagger)
        ^ use
    contract (cutover/: models, headers, plan, settings, status, readiness, topic admin)

Nothing imports upwards, router and spark_tagger do not import each other, no product
module takes part in an import cycle (lazy imports inside functions included: they are cycles
too, only later; and imports by name, ``importlib.import_module("...")`` or a table of module
names a module loads, as the CLI's commands), and no product module imports the test ground
(testground/) or the tests.

Inside router/, every module lives in a room, and the rooms import downwards only:

    worker      the Faust app, the data path and what it runs with       imports every room
      ^
    native      the compiled per-record path                               durability, dedup,
      ^                                                                    rule, base
    durability  resume offsets, checkpoints, takeover, the batch's output  dedup, rule, base
      ^
    dedup       the dedup store, its front filter, the stores' memory      rule, base
      ^
    rule        the routing rule and what it decides with                  base
      ^
    base        Kafka client helpers, the output record, named failures,   nothing
                test seams, metrics

An import against it would be named in ``ROOM_EXCEPTIONS``, with why; there is none, and an
exception no longer used fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cutover", "router", "spark_tagger")
CLI = ("cutover.cli", "spark_tagger.cli")   # the `tag` command's module lives with the tagger
CONTROL = "cutover.control"   # the operator's library
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


TREES = {name: ast.parse(path.read_text()) for name, path in MODULES.items()}
IMPORT_BY_NAME = ("import_module", "__import__")
NOT_PRODUCT = ("testground", "tests")


def statement_imports(tree: ast.Module, name: str = "") -> set[str]:
    """Every module an ``import`` statement of ``tree`` names (at any level of the file); a
    relative import is resolved from module ``name``'s package."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{module}" if module else base
            if module:
                found |= {module} | {f"{module}.{a.name}" for a in node.names}
    return found


def string_imports(tree: ast.Module) -> set[str]:
    """The modules ``tree`` imports by name: the literal argument of ``import_module`` or
    ``__import__``; where one of these takes a computed name, every dotted string of the file
    (the table it loads from, as the CLI's ``COMMAND_MODULES``)."""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and (node.func.attr if isinstance(node.func, ast.Attribute)
                  else getattr(node.func, "id", None)) in IMPORT_BY_NAME]
    literal = [c.args[0].value for c in calls if c.args and isinstance(c.args[0], ast.Constant)
               and isinstance(c.args[0].value, str)]
    if len(literal) == len(calls):
        return set(literal)
    return set(literal) | {node.value for node in ast.walk(tree)
                           if isinstance(node, ast.Constant) and isinstance(node.value, str)
                           and "." in node.value}


def imports(name: str) -> set[str]:
    """The product modules ``name`` imports, by statement or by name."""
    tree = TREES[name]
    return {t for t in statement_imports(tree, name) | string_imports(tree)
            if t in MODULES} - {name}


def layer(name: str) -> str:
    if any(name == c or name.startswith(c + ".") for c in CLI):
        return "cli"
    if name == CONTROL or name.startswith(CONTROL + "."):
        return "control"
    if name.startswith("cutover"):
        return "contract"
    return name.split(".")[0]   # router | spark_tagger


ALLOWED = {
    "contract": {"contract"},
    "router": {"contract", "router"},
    "spark_tagger": {"contract", "spark_tagger"},
    "control": {"contract", "router", "control"},
    "cli": {"contract", "router", "spark_tagger", "control", "cli"},
}


# router/'s rooms, each with the rooms it may import (its own included).
ROOMS = {
    "base": {"base"},
    "rule": {"rule", "base"},
    "dedup": {"dedup", "rule", "base"},
    "durability": {"durability", "dedup", "rule", "base"},
    "native": {"native", "durability", "dedup", "rule", "base"},
    "worker": {"worker", "native", "durability", "dedup", "rule", "base"},
}
# Imports that go against the rooms' direction, each with why it is still there.
ROOM_EXCEPTIONS: dict[str, set[str]] = {}


def room(name: str) -> str | None:
    """The room of a router module (``router.rule.decision`` -> ``rule``); None outside."""
    parts = name.split(".")
    return parts[1] if parts[0] == "router" and len(parts) > 1 else None


def test_the_layers_hold_every_product_module() -> None:
    assert {"cutover.plan", "cutover.cli", "cutover.cli.switch", "router.worker.datapath",
            "spark_tagger.tagger", "cutover.control.routes"} <= set(MODULES)
    assert layer("cutover.control.routes") == "control" and layer("cutover.plan") == "contract"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_upwards_or_sideways(name: str) -> None:
    wrong = sorted(t for t in imports(name) - SHIMS.get(name, set())
                   if layer(t) not in ALLOWED[layer(name)])
    assert not wrong, (f"{name} ({layer(name)}) imports {wrong}; allowed: "
                       f"{sorted(ALLOWED[layer(name)])}")


def test_imports_by_name_are_seen() -> None:
    # The CLI loads each command's module from a table of names (cutover.cli.COMMAND_MODULES).
    assert {"spark_tagger.cli", "cutover.cli.demo", "cutover.cli.rollout"} <= imports("cutover.cli")
    tree = ast.parse('import importlib\nimportlib.import_module("router.rule.decision")\n')
    assert string_imports(tree) == {"router.rule.decision"}


def test_every_router_module_lives_in_a_room() -> None:
    router = [name for name in MODULES if name.startswith("router.")]
    assert {"router.rule.decision", "router.durability.resume", "router.native.compiled",
            "router.worker.datapath"} <= set(router)
    outside = sorted(name for name in router if room(name) not in ROOMS)
    assert not outside, f"{outside} are in no room of router/: {sorted(ROOMS)}"
    assert imports("router") == set(), "router/__init__.py loads no room"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if room(n) in ROOMS))
def test_router_rooms_import_downwards(name: str) -> None:
    wrong = sorted(t for t in imports(name) - ROOM_EXCEPTIONS.get(name, set())
                   if room(t) is not None and room(t) not in ROOMS[str(room(name))])
    assert not wrong, (f"{name} ({room(name)}) imports {wrong}; allowed: "
                       f"{sorted(ROOMS[str(room(name))])}")


def test_the_output_record_is_a_leaf() -> None:
    # Every room names the one output record type (router.base.output_record), the rule's size
    # limits included: it stands on the contract's header type alone.
    assert imports("router.base.output_record") == {"cutover.headers"}


def test_room_exceptions_are_still_needed() -> None:
    stale = {name: sorted(targets - imports(name))
             for name, targets in ROOM_EXCEPTIONS.items() if not targets <= imports(name)}
    assert not stale, f"remove these from ROOM_EXCEPTIONS, nothing imports them now: {stale}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.count(".") == 1
                                        and room(n) in ROOMS))
def test_each_room_says_what_it_holds(name: str) -> None:
    tree = TREES[name]
    assert ast.get_docstring(tree), f"{MODULES[name]} needs a docstring: what the room holds"
    assert statement_imports(tree, name) == set(), f"{MODULES[name]} re-exports nothing"


def test_relative_imports_are_resolved() -> None:
    tree = ast.parse("from . import bloom\nfrom ..rule.identity import record_identity\n")
    assert {"router.dedup.bloom", "router.rule.identity"} <= statement_imports(
        tree, "router.dedup.store")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_product_module_imports_the_test_ground(name: str) -> None:
    wrong = sorted(t for t in statement_imports(TREES[name], name) | string_imports(TREES[name])
                   if t.split(".")[0] in NOT_PRODUCT)
    assert not wrong, f"{name} imports {wrong}: the wheel does not ship them"


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
