"""The native boundary (docs/decisions/024-the-native-boundary.md): the names the compiled path
(router/native/_fastpath.c) reads, writes or calls on Python objects are public, and each is
declared in a Protocol of router/native/_fastpath.pyi, the contract mypy checks the real objects
against. Message accessors and Producer methods are confluent-kafka's public API."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from confluent_kafka import Message, Producer

NATIVE = Path(__file__).resolve().parents[2] / "router" / "native"
C_FILES = [NATIVE / "_fastpath.c", NATIVE / "_plugin.h", NATIVE / "_produce.h"]


def names_table() -> list[str]:
    """The names of the table in PyInit__fastpath, interned once and used for every lookup."""
    src = (NATIVE / "_fastpath.c").read_text()
    block = re.search(r"names\[\]\s*=\s*\{(.*?)\};", src, re.S)
    assert block is not None, "no names[] table in PyInit__fastpath"
    names = re.findall(r'\{\s*&\w+\s*,\s*"([^"]*)"\s*\}', block.group(1))
    assert names, "the names[] table parsed empty"
    return names


def literal_lookups() -> list[str]:
    """Names passed as string literals to the attribute and method getters anywhere in the C."""
    found = []
    pattern = re.compile(r'Py\w*(?:AttrString|CallMethod\w*)\s*\([^,()]+,\s*"([^"]*)"')
    for path in C_FILES:
        found.extend(pattern.findall(path.read_text()))
    return found


def protocol_members() -> dict[str, set[str]]:
    """Protocol name -> its declared attributes, properties and methods (_fastpath.pyi)."""
    tree = ast.parse((NATIVE / "_fastpath.pyi").read_text())
    members: dict[str, set[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        if not any(isinstance(b, ast.Name) and b.id == "Protocol" for b in node.bases):
            continue
        names = members.setdefault(node.name, set())
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
            elif isinstance(item, ast.FunctionDef):
                names.add(item.name)
    return members


def confluent_public(name: str) -> bool:
    return not name.startswith("_") and (hasattr(Message, name) or hasattr(Producer, name))


def test_the_c_reads_no_private_name() -> None:
    private = [n for n in names_table() + literal_lookups() if n.startswith("_")]
    assert not private, f"_fastpath.c reads private names {private}: make them public and " \
                        "declare them in a Protocol of _fastpath.pyi"


def test_every_name_is_declared_in_a_protocol() -> None:
    declared = set().union(*protocol_members().values())
    undeclared = [n for n in names_table() + literal_lookups()
                  if n not in declared and not confluent_public(n)]
    assert not undeclared, f"_fastpath.c uses {undeclared}, declared in no Protocol of " \
                           "_fastpath.pyi (nor confluent-kafka's Message or Producer)"


def test_run_is_typed_with_the_protocols() -> None:
    tree = ast.parse((NATIVE / "_fastpath.pyi").read_text())
    run = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Run")
    init = next(n for n in run.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    annotations = {a.arg: ast.unparse(a.annotation) for a in init.args.kwonlyargs
                   if a.annotation is not None}
    protocols = protocol_members()
    for arg in ("router", "store", "durability", "bound", "stream"):
        assert any(p in annotations[arg] for p in protocols), \
            f"Run.__init__'s {arg} is typed {annotations[arg]}, not a Protocol"
    assert "Any" not in ast.unparse(init)


def test_the_parsers_see_a_private_name() -> None:
    """The checks above would fail on a private name (the parser reads what the C has)."""
    assert "primaries" in names_table()
    assert "unflushed" in protocol_members()["StoreView"]
    src = 'PyObject_GetAttrString(obj, "_private")'
    assert re.findall(r'Py\w*(?:AttrString|CallMethod\w*)\s*\([^,()]+,\s*"([^"]*)"', src) \
        == ["_private"]


def test_the_c_lays_out_no_other_package_s_object() -> None:
    """The only Python objects the C reads by layout are its own (Run, Tap): confluent-kafka's
    Message and Producer are read through their methods, librdkafka through its public API
    (router/native/_plugin.h), found in the library confluent-kafka loaded, not searched for
    in the process's memory map."""
    objects = []
    for path in C_FILES:
        src = path.read_text()
        objects += re.findall(r"typedef struct\s*\{\s*PyObject_HEAD.*?\}\s*(\w+);", src, re.S)
        assert "/proc/self/maps" not in src, path
        assert not re.search(r"\(\s*\w+\s*\*\s*\)\s*(?:msg|producer|sample)\b", src), path
    assert sorted(objects) == ["RunObject", "TapObject"]
    compiled_py = (NATIVE / "compiled.py").read_text()
    assert "/proc/self/maps" not in compiled_py
