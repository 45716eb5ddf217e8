"""Every relative link of the README and docs/ leads somewhere: the file exists and, when the
link names a heading, the heading does too (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Pages of the docs tree kept by the Kubernetes and soak work; checked once they are present.
ELSEWHERE = {"docs/kubernetes.md", "docs/soak.md"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    out = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_every_relative_link_leads_to_a_page_and_heading_that_exist() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue   # http(s), mailto
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
            if not dest.exists():
                if rel not in ELSEWHERE:
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
                continue
            if anchor and dest.is_file() and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
