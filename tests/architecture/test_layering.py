"""The project's layering, checked on its source: `common/` imports no benchmark, no benchmark
imports another, no import cycle anywhere, and the loop's small constructor."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from common.run.loop import TrainLoop
from tests.architecture.import_graph import BENCHMARKS, cycles, import_graph
from tests.trainers.trainer_process import REPO

OBSERVERS = ("observers", "tracker", "tracer", "metrics", "load_profile", "profile", "sample_log")


def _layer_violations(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, imported in sorted(graph.items()):
        top = module.split(".")[0]
        for target in sorted(imported):
            other = target.split(".")[0]
            if top == "common" and other in BENCHMARKS:
                wrong.append(f"{module} -> {target} (common/ imports a benchmark)")
            elif top in BENCHMARKS and other in BENCHMARKS and other != top:
                wrong.append(f"{module} -> {target} (one benchmark imports another)")
    return wrong


def test_common_imports_no_benchmark_and_no_benchmark_imports_another():
    assert _layer_violations(import_graph(REPO)) == []


def test_no_import_cycle_among_the_project_modules():
    assert cycles(import_graph(REPO)) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checks_see_a_cycle_a_layer_break_and_skip_type_checking_imports(tmp_path):
    root = _tree(tmp_path, {
        "common/__init__.py": "",
        "common/a.py": "from common import b\n",
        "common/b.py": "def f():\n    import common.c\n",  # an import inside a function counts
        "common/c.py": "from common.a import x\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import flux.model\n",
        "common/d.py": "from flux.model import M\n",
        "flux/__init__.py": "",
        "flux/model.py": "from retinanet import data\n",
        "retinanet/__init__.py": "",
        "retinanet/data.py": "from .. import common\n",
        "recommendation_v4/__init__.py": "",
    })
    graph = import_graph(root)
    assert graph["common.c"] == {"common.a"}  # the TYPE_CHECKING import is not an edge
    assert cycles(graph) == [["common.a", "common.b", "common.c"]]
    assert _layer_violations(graph) == [
        "common.d -> flux.model (common/ imports a benchmark)",
        "flux.model -> retinanet.data (one benchmark imports another)",
    ]


def test_the_loop_takes_at_most_eight_parameters_and_never_asks_whether_an_observer_is_there():
    parameters = [p for p in inspect.signature(TrainLoop.__init__).parameters if p != "self"]
    assert len(parameters) <= 8, parameters
    source = (REPO / "common" / "run" / "loop.py").read_text()
    guards = [ast.unparse(node) for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
              and any(name in ast.unparse(node.left) for name in OBSERVERS)]
    assert guards == []
