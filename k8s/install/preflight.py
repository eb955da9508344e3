"""Preflight: everything a cluster runtime needs, checked before anything is created.

``preflight(provider, serving_mode)`` runs a handful of read-only commands (``docker
info``, ``<provider> version``, ``kubectl version --client``) and reads the inotify limits,
then returns a :class:`Preflight`: ``problems`` (each line names the missing or too-small
piece and how to fix it; any problem means "do not start"), ``notes`` (worth printing,
never fatal) and the ``versions`` it found. It never raises for what it finds on the
machine; only an unknown provider or serving mode (a caller's bug) raises ``ValueError``.

``python -m k8s.install.preflight PROVIDER SERVING_MODE`` prints the result (``error:`` and
``note:`` lines) and exits 1 when there are problems; it needs only the standard library.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from k8s.install import capacity, versions
from k8s.install.capacity import Need
from k8s.providers.settings import (
    CLUSTER_RUNTIMES,
    EXISTING,
    PROVIDERS,
    SERVING_MODES,
    Settings,
    with_cpu_requests,
)
from ml.contract import MODEL_TYPES

Run = Callable[[Sequence[str]], tuple[int, str, str]]

# What kind's docs ask for on Linux hosts ("too many open files" otherwise).
MIN_INOTIFY = {"max_user_instances": 512, "max_user_watches": 524288}
INOTIFY_DIR = Path("/proc/sys/fs/inotify")

DOCKER_URL = "https://docs.docker.com/get-docker/"
KUBECTL_URL = "https://kubernetes.io/docs/tasks/tools/"
INSTALL_URLS = {
    "k3d": "https://k3d.io/#installation",
    "kind": "https://kind.sigs.k8s.io/docs/user/quick-start/#installation",
    "minikube": "https://minikube.sigs.k8s.io/docs/start/",
}
MINIMUMS = {
    "k3d": versions.MIN_K3D,
    "kind": versions.MIN_KIND,
    "minikube": versions.MIN_MINIKUBE,
    "kubectl": versions.MIN_KUBECTL,
}
VERSION_COMMANDS = {
    "k3d": ["k3d", "version"],  # "k3d version v5.8.3\nk3s version v1.31.5-k3s1 (default)"
    "kind": ["kind", "version"],  # "kind v0.29.0 go1.24.2 linux/amd64"
    "minikube": ["minikube", "version", "--short"],  # "v1.36.0"
}
VERSION_PATTERNS = {
    "k3d": re.compile(r"k3d version v?(\d+)\.(\d+)\.(\d+)"),
    "kind": re.compile(r"kind v?(\d+)\.(\d+)\.(\d+)"),
    "minikube": re.compile(r"(?:^|\s)v?(\d+)\.(\d+)\.(\d+)"),
    "kubectl": re.compile(r"^v?(\d+)\.(\d+)\.(\d+)"),  # gitVersion: v1.33.1, v1.32.4-gke.1
}
DOCKER_INFO_FORMAT = "{{.ServerVersion}} {{.MemTotal}} {{.NCPU}}"


@dataclass
class Preflight:
    """What the preflight found: problems fail, notes are only printed."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """``error: ...`` then ``note: ...`` lines, for printing."""
        return [f"error: {p}" for p in self.problems] + [f"note: {n}" for n in self.notes]


def run_command(cmd: Sequence[str], timeout: float = 20.0) -> tuple[int, str, str]:
    """Run ``cmd``; ``(returncode, stdout, stderr)``. Never raises for a failed command."""
    try:
        p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as e:
        return 127, "", str(e)
    except subprocess.TimeoutExpired:
        return 124, "", f"no answer within {timeout:.0f} s"
    except OSError as e:
        return 126, "", str(e)
    return p.returncode, p.stdout, p.stderr


def fmt(version: tuple[int, ...]) -> str:
    return ".".join(str(n) for n in version)


def parse_version(tool: str, output: str) -> tuple[int, int, int] | None:
    """The first ``X.Y.Z`` version of ``tool`` in its ``version`` output, else None."""
    if tool == "kubectl":
        try:
            output = json.loads(output)["clientVersion"]["gitVersion"]
        except (ValueError, KeyError, TypeError):
            return None
    m = VERSION_PATTERNS[tool].search(output.strip())
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _first_line(text: str, limit: int = 200) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0][:limit] if lines else "(no output)"


def _check_docker(
    result: Preflight,
    run: Run,
    docker: str,
    provider: str,
    serving_mode: str,
    cpu_requests: Mapping[str, str],
    extras: Mapping[str, bool],
) -> None:
    rc, out, err = run([docker, "info", "--format", DOCKER_INFO_FORMAT])
    fields = out.strip("\n").split(" ")
    if rc == 0 and fields[0] == "" and len(fields) > 1:  # old clients: exit 0, no server
        rc, err = 1, err or "Cannot connect to the Docker daemon (no server version)"
    if rc != 0:
        text = f"{err}\n{out}"
        low = text.lower()
        if "permission denied" in low:
            result.problems.append(
                f"Docker: permission denied on the Docker socket ({_first_line(text)}): add "
                "your user to the docker group (`sudo usermod -aG docker $USER`, then log out "
                "and back in, or `newgrp docker`)"
            )
        elif (
            "cannot connect to the docker daemon" in low
            or "is the docker daemon running" in low
            or "error during connect" in low
            or "no answer within" in low
        ):
            result.problems.append(
                f"Docker: the daemon is not running ({_first_line(text)}): start Docker "
                "(Docker Desktop, or `sudo systemctl start docker`)"
            )
        else:
            result.problems.append(
                f"Docker: `{docker} info` failed ({_first_line(text)}): start Docker (Docker "
                f"Desktop, or `sudo systemctl start docker`); install it from {DOCKER_URL}"
            )
        return
    try:
        server, mem_total, ncpu = fields[0], int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        result.notes.append(
            f"Docker: could not read memory and CPUs from `{docker} info` "
            f"({_first_line(out)!r}); not checked"
        )
        return
    result.versions["docker"] = server
    result.versions["docker_memory_gib"] = f"{mem_total / 2**30:.1f}"
    result.versions["docker_cpus"] = str(ncpu)
    if provider == EXISTING:
        return  # the engine only builds and pushes; the cluster's nodes are elsewhere
    node = capacity.node_from_engine(ncpu, mem_total)
    _check_capacity(result, node, provider, serving_mode, cpu_requests, extras)


def _check_capacity(
    result: Preflight,
    node: Need,
    provider: str,
    serving_mode: str,
    cpu_requests: Mapping[str, str],
    extras: Mapping[str, bool],
) -> None:
    """Problem: not even one TFJob fits beside the stack. Note: train-all runs in waves.
    Our pods count with the CPU requests the cluster settings give (``cpu_requests``), and
    the stack with what `up` adds to it (``extras``: ``with_argo``, ``with_monitoring``)."""
    base = Settings(
        image="",
        provider=provider,
        serving_mode=serving_mode,
        with_argo=extras.get("with_argo", False),
        with_monitoring=extras.get("with_monitoring", False),
    )
    s = with_cpu_requests(base, cpu_requests)
    jobs = len(MODEL_TYPES)
    fit = capacity.jobs_at_once(node, s, jobs)
    all_at_once = capacity.requirement(s, jobs)
    if fit == 0:
        fix = (
            "give Docker more CPUs and memory (Docker Desktop: Settings > Resources), or "
            "lower our pods' CPU requests (INVOKE_CLUSTER_WORKER_CPU, "
            "INVOKE_CLUSTER_PREDICTOR_CPU; docs/cluster.md, Resources)"
        )
        standard = replace(s, serving_mode="standard")
        if serving_mode == "knative" and capacity.jobs_at_once(node, standard, jobs):
            fix = (
                "use `--serving-mode standard` (no Istio/Knative; needs "
                f"{capacity.requirement(standard, 1)}), or {fix}"
            )
        result.problems.append(
            f"Docker: a one-node {provider} cluster here offers pods {node}; --serving-mode "
            f"{serving_mode} needs {capacity.requirement(s, 1)} of requests (the cluster's own "
            f"pods, the operators, one TFJob of {s.workers} workers and a predictor), "
            f"{all_at_once} for train-all's {jobs} jobs at once: {fix}"
        )
    elif fit < jobs:
        result.notes.append(
            f"Docker: a one-node {provider} cluster here offers pods {node}: train-all will "
            f"run {fit} of its {jobs} jobs at a time ({jobs} at once need {all_at_once}); "
            "give Docker more CPUs and memory to run them together"
        )


def _check_tool(
    result: Preflight, tool: str, cmd: list[str], run: Run, which: Callable[[str], str | None]
) -> None:
    url = KUBECTL_URL if tool == "kubectl" else INSTALL_URLS[tool]
    need = fmt(MINIMUMS[tool])
    program = next(w for w in cmd if w != "env" and "=" not in w)  # past `env VAR=...`
    if which(program) is None:
        result.problems.append(f"{tool}: not found on PATH: install {tool} >= {need} ({url})")
        return
    rc, out, err = run(cmd)
    if rc != 0:
        result.problems.append(
            f"{tool}: `{' '.join(cmd)}` failed ({_first_line(err or out)}): reinstall "
            f"{tool} >= {need} ({url})"
        )
        return
    found = parse_version(tool, out)
    if found is None:
        result.notes.append(
            f"{tool}: could not read a version from `{' '.join(cmd)}` "
            f"(output: {_first_line(out)!r}); not checked: distml needs {tool} >= {need} ({url})"
        )
        return
    result.versions[tool] = fmt(found)
    if found < MINIMUMS[tool]:
        result.problems.append(
            f"{tool}: version {fmt(found)} found, distml needs >= {need}: upgrade it ({url})"
        )


def _check_inotify(result: Preflight, inotify_dir: Path) -> None:
    for name, want in MIN_INOTIFY.items():
        path = inotify_dir / name
        try:
            have = int(path.read_text().strip())
        except (OSError, ValueError):
            continue  # not Linux (or not readable): nothing to say
        if have < want:
            result.notes.append(
                f"inotify: fs.inotify.{name} is {have}, below {want}: cluster pods may fail "
                f'with "too many open files"; raise it with `sudo sysctl fs.inotify.{name}='
                f"{want}` (persist in /etc/sysctl.d/)"
            )


def preflight(
    provider: str,
    serving_mode: str,
    *,
    run: Run = run_command,
    which: Callable[[str], str | None] = shutil.which,
    docker: str = "docker",
    inotify_dir: Path | None = None,
    cpu_requests: Mapping[str, str] | None = None,
    minikube_home: str | None = None,
    with_argo: bool = False,
    with_monitoring: bool = False,
) -> Preflight:
    """Check Docker, the provider's CLI, kubectl, Docker's memory/CPUs and inotify limits
    (an existing cluster: Docker, kubectl and git; its nodes are not this machine's).

    ``run(cmd) -> (returncode, stdout, stderr)`` and ``which`` are seams for tests;
    ``inotify_dir`` defaults to /proc/sys/fs/inotify on Linux (skipped elsewhere).
    ``minikube_home``: the MINIKUBE_HOME ``minikube version`` runs with (any minikube
    command creates its home, ``~/.minikube`` unless told: distml keeps its own).
    ``with_argo``, ``with_monitoring``: what `up` installs beside the stack, counted in
    the capacity check (Argo's controller; KEDA and distml's Prometheus).
    """
    if provider not in CLUSTER_RUNTIMES:
        valid = ", ".join(CLUSTER_RUNTIMES)
        raise ValueError(f"unknown provider {provider!r}; valid: {valid}")
    if serving_mode not in SERVING_MODES:
        raise ValueError(
            f"unknown serving mode {serving_mode!r}; valid: {', '.join(SERVING_MODES)}"
        )
    result = Preflight()
    if which(docker) is None:
        result.problems.append(
            f"Docker: `{docker}` not found on PATH: install Docker ({DOCKER_URL}; Linux: "
            "Docker Engine or your distribution's docker.io)"
        )
    else:
        extras = {"with_argo": with_argo, "with_monitoring": with_monitoring}
        _check_docker(result, run, docker, provider, serving_mode, cpu_requests or {}, extras)
    if provider in PROVIDERS:
        cmd = VERSION_COMMANDS[provider]
        if provider == "minikube" and minikube_home:
            cmd = ["env", f"MINIKUBE_HOME={minikube_home}", *cmd]
        _check_tool(result, provider, cmd, run, which)
    _check_tool(result, "kubectl", ["kubectl", "version", "--client", "-o", "json"], run, which)
    if which("git") is None:
        # `kubectl apply -k github.com/...?ref=` (the training operator) clones with git.
        result.problems.append(
            "git: not found on PATH: `kubectl apply -k` fetches the training operator's "
            "kustomization with git; install git (https://git-scm.com/downloads)"
        )
    if provider == EXISTING:
        return result  # inotify limits matter to nodes on this machine
    if inotify_dir is None and sys.platform.startswith("linux"):
        inotify_dir = INOTIFY_DIR
    if inotify_dir is not None:
        _check_inotify(result, inotify_dir)
    return result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in PROVIDERS or args[1] not in SERVING_MODES:
        print(
            f"usage: python -m k8s.install.preflight {{{','.join(PROVIDERS)}}} "
            f"{{{','.join(SERVING_MODES)}}}",
            file=sys.stderr,
        )
        return 2
    result = preflight(args[0], args[1])
    for line in result.lines():
        print(line)
    found = ", ".join(f"{k} {v}" for k, v in result.versions.items())
    print(f"found: {found or 'nothing'}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
