"""The house rules, checked: which layer may import which, file and function sizes, and
every pod-contract command and volume path built in one place (``ml/contract/__init__.py``)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ORCHESTRATION = ("common", "k8s", "runtime", "loadtest")
OURS = ("common", "k8s", "runtime", "loadtest", "ml", "tasks", "benchmarks", "tools", "integration")
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60
CONTRACT = REPO / "ml" / "contract" / "__init__.py"


def _sources(*packages: str) -> list[Path]:
    files = []
    for package in packages:
        path = REPO / package
        files += sorted(path.rglob("*.py")) if path.is_dir() else [REPO / f"{package}.py"]
    return files


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, dotted (``from ml import contract`` -> ml.contract)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {m for m in found if m.split(".")[0] in OURS}


def _violations(files: list[Path], allowed) -> list[str]:
    return [
        f"{f.relative_to(REPO)} imports {m}"
        for f in files
        for m in sorted(_imports(f))
        if not allowed(m)
    ]


def _top(module: str) -> str:
    return module.split(".")[0]


def test_k8s_imports_nothing_from_runtime_loadtest_or_tasks():
    bad = _violations(_sources("k8s"), lambda m: _top(m) not in ("runtime", "loadtest", "tasks"))
    assert bad == []


def test_common_is_a_leaf():
    assert _violations(_sources("common"), lambda m: _top(m) == "common") == []


def test_orchestration_imports_only_the_contract_from_ml():
    def allowed(module: str) -> bool:
        return _top(module) != "ml" or module == "ml" or module.startswith("ml.contract")

    assert _violations(_sources(*ORCHESTRATION, "tasks"), allowed) == []


def test_pod_code_imports_nothing_from_the_orchestration_side():
    # ml/ is all the image holds (Dockerfile: COPY ml/): it can import nothing else of ours.
    assert _violations(_sources("ml"), lambda m: _top(m) == "ml") == []


def test_the_orchestration_side_has_one_error_family():
    # Every exception class defined in common/, k8s/, runtime/, loadtest/ or tasks.py derives
    # from DistmlError (tasks.py prints it as ``error: ...``), by name through its bases.
    bases: dict[str, list[str]] = {}
    for path in _sources(*ORCHESTRATION, "tasks"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [ast.unparse(b).split(".")[-1] for b in node.bases]

    def family(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == "DistmlError":
            return True
        return name not in seen and any(family(b, seen | {name}) for b in bases.get(name, []))

    def is_exception(name: str) -> bool:
        return name.endswith(("Error", "Exception")) or any(
            is_exception(b) for b in bases.get(name, []) if b != name
        )

    outside = [n for n in bases if n != "DistmlError" and is_exception(n) and not family(n)]
    assert outside == []


def test_the_orchestration_side_loads_no_tensorflow_numpy_or_kserve():
    code = (
        "import sys; import tasks, runtime.local, runtime.cluster, runtime.requests, "
        "k8s.manifests, loadtest.runner, loadtest.__main__; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'numpy', 'kserve', 'keras', 'tf_keras')); "
        "ml = sorted(m for m in sys.modules if m.split('.')[0] == 'ml'); "
        "print(heavy, ml); ok = {'ml', 'ml.contract', 'ml.contract.serving_metrics', "
        "'ml.contract.training_metrics', 'ml.contract.volume_lock', "
        "'ml.contract.canary_commands', 'ml.contract.records'}; "
        "sys.exit(1 if heavy or not set(ml) <= ok else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_pod_command_is_built_by_the_contract():
    # Code, not prose: an argv element "-m" followed by "ml" or "ml.<module>", or a helper
    # given one.
    pattern = re.compile(r"""["']-m["'],\s*["']ml[."']|_command\(\s*["']ml[."']""")
    offenders = [
        f"{f.relative_to(REPO)}:{f.read_text()[: m.start()].count(chr(10)) + 1}"
        for f in _sources(*ORCHESTRATION, "tasks", "benchmarks", "ml")
        if f != CONTRACT
        for m in pattern.finditer(f.read_text())
    ]
    assert offenders == []


# Literals that name a volume directory but are not a path in the volume: (file, literal).
NOT_VOLUME_PATHS = {
    ("runtime/workdir/__init__.py", "reports"),  # <workdir>/reports: beside the volume, not in it
}
PATH_CALLS = {"Path", "PurePosixPath", "joinpath", "join", "_p"}


def _volume_dirs() -> set[str]:
    """The volume's top-level directories: the first segment of every ``_p(volume, ...)``
    path contract.py builds (a literal, or a module constant)."""
    tree = ast.parse(CONTRACT.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    dirs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_p":
            for arg in node.args[1:2]:
                value = arg.value if isinstance(arg, ast.Constant) else constants.get(arg.id)
                dirs.add(value.split("/")[0])
    return dirs


def _path_literals(tree: ast.AST, dirs: set[str]) -> list[tuple[int, str]]:
    """String literals that use a volume directory as a path: ``"serving/x"``,
    ``f"{v}/serving/{s}"``, or the bare name joined on (``v / "serving"``,
    ``joinpath("serving")``). Docstrings and prose ("/usr/share/datasets") are not."""
    names = "|".join(sorted(dirs))
    segment = re.compile(rf"^/?(?:{names})/|^/(?:{names})$")
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    joined: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            joined |= {id(node.left), id(node.right)}
        elif isinstance(node, ast.Call):
            func = getattr(node.func, "id", None) or getattr(node.func, "attr", "")
            joined |= {id(a) for a in node.args} if func in PATH_CALLS else set()
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if id(node) in docstrings:
            continue
        value = node.value
        if segment.match(value) or (value in dirs and id(node) in joined):
            found.append((node.lineno, value))
    return found


def test_volume_paths_come_from_the_contract():
    dirs = _volume_dirs()
    assert {"datasets", "candidates", "checkpoints", "tensorboard", "serving", "reports"} <= dirs
    offenders = [
        f"{f.relative_to(REPO)}:{line} {value!r}"
        for f in _sources("runtime", "k8s", "loadtest", "tasks")
        for line, value in _path_literals(ast.parse(f.read_text()), dirs)
        if (str(f.relative_to(REPO)), value) not in NOT_VOLUME_PATHS
    ]
    assert offenders == [], "build volume paths with ml/contract/__init__.py's functions"


@pytest.mark.parametrize(
    "code",
    ['volume / "candidates"', 'f"pvc://{s.volume}/serving/{s.service}"', 'Path(v, "reports")'],
)
def test_a_hand_built_volume_path_is_caught(code):
    assert _path_literals(ast.parse(code), _volume_dirs())


@pytest.mark.parametrize(
    "code",
    ['"""candidates/<model>/metrics.json"""', '"/usr/share/datasets/x"', 'meta("tensorboard")'],
)
def test_prose_and_other_names_are_not(code):
    assert _path_literals(ast.parse(code), _volume_dirs()) == []


@pytest.mark.parametrize("path", _sources(*OURS), ids=lambda p: str(p.relative_to(REPO)))
def test_files_stay_readable_in_one_sitting(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_FILE_LINES, f"{path.name}: {lines} lines; split it by concern"


def test_functions_fit_on_a_screen():
    long = []
    for path in _sources(*OURS):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length})")
    assert long == []


# The runtimes' step rooms share names on purpose: runtime/local/up.py and
# runtime/cluster/up.py are the same step on two runtimes (and runtime/tensorboard.py what
# both rooms of that step share).
SHARED_ROOM_NAMES = ("runtime/", "runtime/local/", "runtime/cluster/")


def test_no_two_modules_share_a_name_across_packages():
    by_name: dict[str, list[str]] = {}
    for path in _sources(*OURS):
        if path.name not in ("__init__.py", "__main__.py"):
            by_name.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    clashes = {
        name: paths
        for name, paths in by_name.items()
        if len(paths) > 1 and not all(p.rsplit("/", 1)[0] + "/" in SHARED_ROOM_NAMES for p in paths)
    }
    assert clashes == {}, "rename so the file's name says its layer and job"


# Modules without a test file of their own, and why (every other module has one:
# tests/<package>/test_<module>.py, or test_<module>_<aspect>.py). Modules that hold only a
# docstring need none.
UNTESTED_ON_PURPOSE = {
    "common/errors.py": "one base class; the error-family test above holds it",
    "runtime/api.py": "the Runtime Protocol and Capabilities; tests/runtime/test_requests.py",
    "runtime/cluster/apply.py": "the cluster rooms' tests drive it (up, down, volume)",
    "runtime/cluster/cluster_error.py": "one exception; every cluster room's test asserts it",
    "integration/byo_cluster.py": "names and run(): tests/integration/test_byo.py drives them",
    "k8s/providers/base.py": "what the providers share: tests/k8s/providers/test_lab.py and "
    "test_existing.py drive it through each provider",
    "k8s/install/optional_operators.py": "part of Installer: tests/k8s/install/test_operators*.py",
    "runtime/cluster/submit.py": "the training and workflow rooms' tests drive it",
    "runtime/local/up.py": "tests/runtime/local/test_executor.py (--dry) and the e2e tier",
    "loadtest/chart.py": "drawn by the real runs in tests/loadtest/ (their chart.png)",
    "ml/__init__.py": "sets TF_USE_LEGACY_KERAS only; every TF test runs with it",
    "ml/__main__.py": "a usage text; tests/image/test_image.py reads it from the image",
    "ml/data/preprocess.py": "inside every signature: tests/ml/model/test_export.py and "
    "tests/ml/data/test_pipeline.py",
    "ml/server/body_limit.py": "over HTTP: tests/ml/server/test_serve_http.py (413s)",
    "ml/server/client_error.py": "one exception; every parser test asserts its status",
    "ml/server/fast_predict.py": "every V1 predict in tests/ml/server/test_serve_http.py",
    "ml/server/header_timeout.py": "over HTTP: tests/ml/server/test_serve_http.py (slow headers)",
    "benchmarks/bench_serving.py": "measures with hey and real servers (nox -s bench)",
    "benchmarks/bench_training.py": "measures real training (nox -s bench)",
    "benchmarks/pod_memory.py": "measures pods in Docker, by hand",
    "integration/kindbuild/": "builds from Go modules and Docker for minutes; its pure parts "
    "(gomodule, kindsource, kubernetes, cache) are tested",
}


def _test_files_for(module: Path) -> list[Path]:
    rel = module.relative_to(REPO)
    folder = REPO / "tests" / rel.parent
    if rel.stem == "__init__":
        return [folder / "test_init.py", folder.parent / f"test_{rel.parent.name}.py"]
    stem = "main" if rel.stem == "__main__" else rel.stem
    return [folder / f"test_{stem}.py", *folder.glob(f"test_{stem}_*.py")]


def _only_a_docstring(module: Path) -> bool:
    return all(
        isinstance(node, ast.Expr | ast.ImportFrom)
        and (isinstance(node, ast.ImportFrom) or isinstance(node.value, ast.Constant))
        for node in ast.parse(module.read_text()).body
    )


def test_every_module_has_a_test_file_or_says_why_not():
    untested = [
        str(m.relative_to(REPO))
        for m in [*_sources(*OURS), REPO / "noxfile.py"]
        if not any(f.is_file() for f in _test_files_for(m)) and not _only_a_docstring(m)
    ]
    listed = [
        m
        for m in untested
        if m not in UNTESTED_ON_PURPOSE and m.rsplit("/", 1)[0] + "/" not in UNTESTED_ON_PURPOSE
    ]
    assert listed == [], "add tests/<package>/test_<module>.py (or say why not above)"
    stale = [m for m in UNTESTED_ON_PURPOSE if not m.endswith("/") and m not in untested]
    assert stale == [], "these have a test file now: take them off the list"


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_edges(path: Path, modules: set[str]) -> set[str]:
    """The modules of ours ``path`` imports at run time (``if TYPE_CHECKING:`` blocks are
    not imports), each resolved to the module itself: ``from pkg import mod`` is an edge to
    ``pkg.mod``, not to the package."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for n in ast.walk(stmt)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{alias.name}" for alias in node.names}
            found |= subs if subs <= modules else {node.module, *subs}
    edges = set()
    for name in found:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        edges |= {name} if name else set()
    return edges - {_module_name(path)}


def _import_cycles() -> list[list[str]]:
    """Every group of our modules that import each other, directly or round a circle
    (Tarjan's strongly connected components)."""
    files = {_module_name(p): p for p in [*_sources(*OURS), REPO / "noxfile.py"]}
    graph = {m: _import_edges(p, set(files)) for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_two_modules_import_each_other():
    # A circle makes import order matter and hides which module is the lower layer: move
    # what both need into a third (as runtime.cluster.cluster_error and integration.byo_cluster).
    assert _import_cycles() == []
