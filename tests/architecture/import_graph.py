"""The project's import graph, read from the source with `ast` (nothing is imported).

A node is a module of the project's packages (`common`, `storage` and the registered benchmarks);
an edge A -> B says A imports B, at the top of the file or inside a function. A
`from P import x` is an edge to `P.x` when that is a module of the project, else to `P`.
Imports under `if TYPE_CHECKING:` are left out: they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

from common.registry import packages

LAYERS = ("common", "storage")  # the runtime, then the storage toolkit above it
BENCHMARKS = packages()
PACKAGES = LAYERS + BENCHMARKS


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            modules[module_name(path, root)] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, importer: str, is_package: bool) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement that can run."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, []) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: resolved against the importer's package
                    package = importer if is_package else importer.rpartition(".")[0]
                    for _ in range(child.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}".strip(".")
                found.append((base, [alias.name for alias in child.names]))
            visit(child)

    visit(tree)
    return found


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = project_modules(root, packages)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for base, names in _imports(tree, name, path.name == "__init__.py"):
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules] or [base]
            for target in targets:
                while target and target not in modules and "." in target:
                    target = target.rpartition(".")[0]  # `import a.b.c` of a name inside a module
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def package_graph(graph: dict[str, set[str]], top: str) -> dict[str, set[str]]:
    """The arrows between the packages directly under `top` (a module directly in `top` is its own
    node): `common.run.loop -> common.data.loader` is `common.run -> common.data`."""
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    packages: dict[str, set[str]] = {}
    for module, imported in graph.items():
        if module.split(".")[0] != top:
            continue
        node = packages.setdefault(package(module), set())
        node.update(package(t) for t in imported if t.split(".")[0] == top and package(t) != package(module))
    return packages


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                connect(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in sorted(graph):
            if node not in index:
                connect(node)
    finally:
        sys.setrecursionlimit(limit)
    return found
