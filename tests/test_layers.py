"""The package layers: no module imports from a layer above its own (function-local imports
included), so each layer can be read, tested and reused without the ones above it."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"webrl": ROOT / "webrl", "webrl.envs": ROOT / "envs", "webrl.algos": ROOT / "algos",
            "webrl.kernels": ROOT / "kernels"}
# lowest first; a module may import its own layer and the ones before it
LAYERS = [
    {"webrl", "webrl.config", "webrl.actions", "webrl.types"},
    {"webrl.kernels"}, {"webrl.algos"}, {"webrl.envs"}, {"webrl.models"}, {"webrl.chat"},
    {"webrl.reward"}, {"webrl.policy", "webrl.engines"}, {"webrl.datasets"}, {"webrl.learner"}, {"webrl.rollout"},
    {"webrl.skills", "webrl.synth"}, {"webrl.recipes"}, {"webrl.serve"}, {"webrl.evaluation"},
    {"webrl.run"}, {"webrl.cli"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def unit(module: str) -> str:
    """webrl.run.trainer -> webrl.run; webrl.config -> webrl.config; webrl -> webrl."""
    parts = module.split(".")
    return ".".join(parts[:2])


def modules():
    for root_name, folder in PACKAGES.items():
        for f in folder.rglob("*.py"):
            parts = [p for p in f.relative_to(folder).with_suffix("").parts if p != "__init__"]
            yield ".".join([root_name, *parts]), f


def imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno
        elif isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)


def test_every_package_has_a_layer():
    units = {unit(m) for m, _ in modules()}
    assert units - set(RANK) == set(), "place the new package in LAYERS"


def test_no_module_imports_a_higher_layer():
    upward = []
    for module, path in modules():
        own = RANK[unit(module)]
        for target, line in imports(path):
            if target.split(".")[0] == "webrl" and RANK.get(unit(target), -1) > own:
                upward.append(f"{path.relative_to(ROOT)}:{line} ({unit(module)}) imports {target}")
    assert upward == []


def test_the_checker_sees_an_upward_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from webrl.run.trainer import Trainer\n")
    assert [t for t, _ in imports(f)] == ["webrl.run.trainer"] and RANK[unit("webrl.run.trainer")] > RANK["webrl.envs"]
