"""The docs name what exists: every page is in docs/README.md, the README links the docs index and the
fidelity page, and docs/architecture.md names every package of common/ and storage/. Each check fails when
a page or a package is added without its line."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _linked_pages(text: str) -> set[str]:
    return set(re.findall(r"\]\(([\w.-]+\.md)(?:#[\w-]+)?\)", text))


def test_every_docs_page_is_in_the_docs_index():
    pages = {page.name for page in DOCS.glob("*.md")} - {"README.md"}
    missing = pages - _linked_pages((DOCS / "README.md").read_text())
    assert not missing, f"docs/README.md does not name {sorted(missing)}"


def test_the_readme_links_the_docs_pages_a_newcomer_needs_first():
    readme = (REPO / "README.md").read_text()
    for page in ("docs/fidelity.md", "docs/testing.md", "docs/architecture.md"):
        assert f"]({page})" in readme, page


def _layer_paragraph(layer: str) -> str:
    text = (DOCS / "architecture.md").read_text()
    start = text.index(f"- **`{layer}/`")
    end = text.index("\n- **", start + 1)
    return text[start:end]


def test_architecture_names_every_package_and_top_module_of_common_and_storage():
    for layer in ("common", "storage"):
        described = _layer_paragraph(layer)
        for entry in sorted((REPO / layer).iterdir()):
            if entry.is_dir() and (entry / "__init__.py").is_file():
                assert f"`{entry.name}/`" in described, f"docs/architecture.md does not describe {layer}/{entry.name}/"
            elif layer == "storage" and entry.suffix == ".py" and entry.name != "__init__.py":
                assert f"`{entry.name}`" in described, f"docs/architecture.md does not describe {layer}/{entry.name}"
