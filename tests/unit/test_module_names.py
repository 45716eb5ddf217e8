"""No product module is named like a standard-library module: inside its package an absolute
import still finds the standard library's, but a reader, a tool run from inside the package
folder, or ``python path/to/module.py`` (the folder first on ``sys.path``) gets the wrong one.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cutover", "router", "spark_tagger")


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
    assert shadows == set(), (
        f"{sorted(shadows)} take a standard-library module's name: rename them after the rule "
        f"they hold")


def test_the_names_are_checked_against_the_standard_library() -> None:
    assert {"secrets", "operator", "types", "logging"} <= sys.stdlib_module_names
    assert "cutover.secret_refs" in product_modules()
