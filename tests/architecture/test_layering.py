"""The project's layering, checked on its source.

    scripts -> benchmarks -> storage -> common -> (torch, gin, ...),   benchmarks -> common

- `common/` imports neither `storage/` nor a benchmark; `storage/` imports no benchmark; no
  benchmark imports another;
- no import cycle among the modules, and none among the packages of `common/` or of `storage/`
  (an arrow that runs back up inside a layer);
- no benchmark is named in the code of `common/` or `storage/`: they learn what they need of one
  from its spec, through the registry (common.registry);
- the loop's small constructor.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from common import registry
from common.run.loop import TrainLoop
from tests.architecture.benchmark_names import names_in_code
from tests.architecture.import_graph import BENCHMARKS, LAYERS, cycles, import_graph, package_graph
from tests.trainers.trainer_process import REPO

OBSERVERS = ("observers", "tracker", "tracer", "metrics", "load_profile", "profile", "sample_log")


def _layer_violations(graph: dict[str, set[str]], benchmarks: tuple[str, ...] = BENCHMARKS) -> list[str]:
    wrong = []
    for module, imported in sorted(graph.items()):
        top = module.split(".")[0]
        for target in sorted(imported):
            other = target.split(".")[0]
            if top == "common" and other == "storage":
                wrong.append(f"{module} -> {target} (common/ imports the storage layer above it)")
            elif top in LAYERS and other in benchmarks:
                wrong.append(f"{module} -> {target} ({top}/ imports a benchmark)")
            elif top in benchmarks and other in benchmarks and other != top:
                wrong.append(f"{module} -> {target} (one benchmark imports another)")
    return wrong


def _package_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles among the packages (and top modules) of each layer and each benchmark: an arrow back up, as
    recommendation_v4/parallel/'s train pipeline once imported the task above it."""
    return [cycle for top in (*LAYERS, *BENCHMARKS) for cycle in cycles(package_graph(graph, top))]


def _names_in_layers(root: Path, names: set[str]) -> list[str]:
    return [hit for layer in LAYERS for path in sorted((root / layer).rglob("*.py"))
            for hit in names_in_code(path, names)]


def test_the_layers_import_downwards_only():
    assert _layer_violations(import_graph(REPO)) == []


def test_no_import_cycle_among_the_modules_nor_among_the_packages_of_a_layer_or_a_benchmark():
    graph = import_graph(REPO)
    assert cycles(graph) == []
    assert _package_cycles(graph) == []


def test_no_benchmark_is_named_in_the_code_of_common_or_storage():
    names = {name for spec in registry.specs() for name in spec.names()}
    assert set(BENCHMARKS) <= names and len(names) > len(BENCHMARKS)  # packages, and their other names
    assert _names_in_layers(REPO, names) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checks_see_cycles_layer_breaks_and_names_and_skip_what_is_no_code(tmp_path):
    root = _tree(tmp_path, {
        "common/__init__.py": "",
        "common/a.py": "from common import b\n",
        "common/b.py": "def f():\n    import common.c\n",  # an import inside a function counts
        "common/c.py": "from common.a import x\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import flux.model\n",
        "common/d.py": "from flux.model import M\n",
        "common/run/__init__.py": "",
        "common/run/loop.py": "from common.data import loader\n",
        "common/data/__init__.py": "",
        "common/data/loader.py": "from common.run.events import E\nfrom storage.profile import P\n",
        "common/run/events.py": "",
        "storage/__init__.py": "",
        "storage/profile.py": "import common.a\nDLRM_ROWS = 1  # a flux comment is prose\n",
        "storage/plan.py": '"""A docstring may say retinanet."""\nfrom recommendation_v4 import spec\nNAME = "retinanet_b200.yaml"\n',
        "flux/__init__.py": "",
        "flux/model.py": "from retinanet import data\n",
        "retinanet/__init__.py": "",
        "retinanet/data.py": "from .. import common\n",
        "recommendation_v4/__init__.py": "",
        "recommendation_v4/spec.py": "",
    })
    graph = import_graph(root)
    assert graph["common.c"] == {"common.a"}  # the TYPE_CHECKING import is not an edge
    assert cycles(graph) == [["common.a", "common.b", "common.c"]]
    # common.run.loop -> common.data.loader -> common.run.events: no module cycle, but the packages' arrows loop
    assert _package_cycles(graph) == [["common.a", "common.b", "common.c"], ["common.data", "common.run"]]
    assert _layer_violations(graph, benchmarks=("recommendation_v4", "retinanet", "flux")) == [
        "common.d -> flux.model (common/ imports a benchmark)",
        "common.data.loader -> storage.profile (common/ imports the storage layer above it)",
        "flux.model -> retinanet.data (one benchmark imports another)",
        "storage.plan -> recommendation_v4.spec (storage/ imports a benchmark)",
    ]
    found = _names_in_layers(root, {"flux", "retinanet", "dlrm", "recommendation_v4"})
    assert [hit.split(": ", 1)[1] for hit in found] == [
        "flux (flux)", "flux (flux)",  # common/c.py's and common/d.py's imports name it
        "recommendation_v4 (recommendation_v4)", "retinanet (\"retinanet_b200.yaml\")",  # storage/plan.py
        "dlrm (DLRM_ROWS)",  # storage/profile.py; its comment is prose
    ]


def test_the_loop_takes_at_most_eight_parameters_and_never_asks_whether_an_observer_is_there():
    parameters = [p for p in inspect.signature(TrainLoop.__init__).parameters if p != "self"]
    assert len(parameters) <= 8, parameters
    source = (REPO / "common" / "run" / "loop.py").read_text()
    guards = [ast.unparse(node) for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
              and any(name in ast.unparse(node.left) for name in OBSERVERS)]
    assert guards == []
