"""No product module is named like a standard-library module: inside its package an absolute
import still finds the standard library's, but a reader, a tool run from inside the package
folder, or ``python path/to/module.py`` (the folder first on ``sys.path``) gets the wrong one.

``router/operator.py`` is the one left, named here until the operator's library moves out of
router/ under a name of its own; the list may only shrink.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cutover", "router", "spark_tagger")
KNOWN_SHADOWS = {"router.operator"}


def product_modules() -> dict[str, str]:
    """Every module and package of the three packages -> its last name."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = parts[-1]
    return found


def test_no_product_module_is_named_like_a_standard_library_module() -> None:
    shadows = {name for name, last in product_modules().items()
               if last in sys.stdlib_module_names}
    assert shadows - KNOWN_SHADOWS == set(), (
        f"{sorted(shadows - KNOWN_SHADOWS)} take a standard-library module's name: rename them "
        f"after the rule they hold")


def test_the_known_shadow_is_still_there_until_it_is_renamed() -> None:
    # When router/operator.py is renamed, this fails: drop it from KNOWN_SHADOWS.
    modules = product_modules()
    assert {name for name in KNOWN_SHADOWS if modules.get(name) in sys.stdlib_module_names} \
        == KNOWN_SHADOWS


def test_the_names_are_checked_against_the_standard_library() -> None:
    assert {"secrets", "operator", "types", "logging"} <= sys.stdlib_module_names
    assert "cutover.secret_refs" in product_modules()
