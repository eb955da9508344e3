"""k8s.install.preflight with a fake ``run`` and ``which``: no Docker, kind, k3d or kubectl
needed."""

from __future__ import annotations

import json

import pytest

from k8s.install import capacity, versions
from k8s.install import preflight as pf
from k8s.providers.settings import Settings

GIB = 2**30
K3D_OUT = "k3d version v5.8.3\nk3s version v1.31.5-k3s1 (default)\n"
KIND_OUT = "kind v0.29.0 go1.24.2 linux/amd64\n"
MINIKUBE_OUT = "v1.36.0\n"
DAEMON_DOWN = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?\n"
)
PERMISSION_DENIED = (
    "permission denied while trying to connect to the Docker daemon socket at "
    'unix:///var/run/docker.sock: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.49/info": '
    "dial unix /var/run/docker.sock: connect: permission denied\n"
)


def kubectl_json(git_version: str = "v1.33.1") -> str:
    return json.dumps(
        {"clientVersion": {"major": "1", "gitVersion": git_version}, "kustomizeVersion": "v5"}
    )


class Machine:
    """A fake machine: which tools are on PATH and what each command answers."""

    def __init__(self, **answers: tuple[int, str, str]):
        self.answers = {
            "docker": (0, f"28.2.2 {16 * GIB} 8\n", ""),
            "k3d": (0, K3D_OUT, ""),
            "kind": (0, KIND_OUT, ""),
            "minikube": (0, MINIKUBE_OUT, ""),
            "kubectl": (0, kubectl_json(), ""),
        }
        self.answers.update(answers)
        self.path = set(self.answers) | {"git"}
        self.calls: list[list[str]] = []

    def run(self, cmd):
        self.calls.append(list(cmd))
        return self.answers[cmd[0]]

    def which(self, name):
        return f"/usr/bin/{name}" if name in self.path else None

    def check(self, provider="kind", mode="knative", tmp_path=None, **kw):
        return pf.preflight(
            provider, mode, run=self.run, which=self.which, inotify_dir=tmp_path, **kw
        )


@pytest.fixture
def inotify(tmp_path):
    (tmp_path / "max_user_instances").write_text("8192\n")
    (tmp_path / "max_user_watches").write_text("1048576\n")
    return tmp_path


def one(lines: list[str]) -> str:
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("provider", "found"), [("k3d", "5.8.3"), ("kind", "0.29.0"), ("minikube", "1.36.0")]
)
def test_all_good_records_versions(provider, found, inotify):
    m = Machine()
    result = m.check(provider, "knative", inotify)
    assert result.ok and result.problems == [] and result.notes == []
    assert result.versions == {
        "docker": "28.2.2",
        "docker_memory_gib": "16.0",
        "docker_cpus": "8",
        provider: found,
        "kubectl": "1.33.1",
    }
    assert ["docker", "info", "--format", pf.DOCKER_INFO_FORMAT] in m.calls
    assert pf.VERSION_COMMANDS[provider] in m.calls
    assert ["kubectl", "version", "--client", "-o", "json"] in m.calls


def test_lines_for_printing(inotify):
    m = Machine()
    m.path.discard("kind")
    (inotify / "max_user_instances").write_text("128\n")
    result = m.check("kind", "knative", inotify)
    lines = result.lines()
    assert lines[0].startswith("error: kind: not found on PATH")
    assert lines[1].startswith("note: inotify:")


@pytest.mark.parametrize(
    ("tool", "url"),
    [
        ("k3d", "https://k3d.io/#installation"),
        ("kind", "https://kind.sigs.k8s.io/docs/user/quick-start/#installation"),
        ("minikube", "https://minikube.sigs.k8s.io/docs/start/"),
    ],
)
def test_provider_missing(tool, url, inotify):
    m = Machine()
    m.path.discard(tool)
    result = m.check(tool, "standard", inotify)
    problem = one(result.problems)
    assert problem.startswith(f"{tool}: not found on PATH")
    assert url in problem and pf.fmt(pf.MINIMUMS[tool]) in problem
    assert not any(c[0] == tool for c in m.calls)  # never run what is not there


def test_kubectl_missing(inotify):
    m = Machine()
    m.path.discard("kubectl")
    problem = one(m.check("kind", "knative", inotify).problems)
    assert "kubectl: not found on PATH" in problem
    assert "https://kubernetes.io/docs/tasks/tools/" in problem


def test_docker_missing(inotify):
    m = Machine()
    m.path.discard("docker")
    result = m.check("kind", "knative", inotify)
    problem = one(result.problems)
    assert "`docker` not found on PATH" in problem and "https://docs.docker.com/" in problem
    assert "docker" not in result.versions
    assert not any(c[0] == "docker" for c in m.calls)


def test_everything_missing_one_line_each(inotify):
    m = Machine()
    m.path.clear()
    problems = m.check("k3d", "knative", inotify).problems
    assert len(problems) == 4
    assert [p.split(":")[0] for p in problems] == ["Docker", "k3d", "kubectl", "git"]


def test_git_missing_is_named_because_kubectl_apply_k_needs_it(inotify):
    m = Machine()
    m.path.discard("git")
    problem = one(m.check("k3d", "knative", inotify).problems)
    assert problem.startswith("git: not found on PATH") and "kubectl apply -k" in problem


def test_docker_client_path_is_used(inotify):
    m = Machine(**{"/usr/bin/docker": (0, f"20.10.24 {16 * GIB} 8", "")})
    result = m.check("kind", "knative", inotify, docker="/usr/bin/docker")
    assert result.ok and result.versions["docker"] == "20.10.24"


def test_daemon_down(inotify):
    m = Machine(docker=(1, "0 0\n", DAEMON_DOWN))
    result = m.check("kind", "knative", inotify)
    problem = one(result.problems)
    assert "the daemon is not running" in problem
    assert "sudo systemctl start docker" in problem and "Docker Desktop" in problem
    assert "docker_memory_gib" not in result.versions  # no memory verdict from a dead daemon


def test_daemon_down_old_client_exit_zero(inotify):
    m = Machine(docker=(0, " 0 0\n", ""))  # no server version: nothing answered
    problem = one(m.check("kind", "knative", inotify).problems)
    assert "not running" in problem and "systemctl start docker" in problem


def test_daemon_timeout(inotify):
    m = Machine(docker=(124, "", "no answer within 20 s"))
    assert "not running" in one(m.check("kind", "knative", inotify).problems)


def test_permission_denied(inotify):
    m = Machine(docker=(1, "", PERMISSION_DENIED))
    problem = one(m.check("kind", "knative", inotify).problems)
    assert "permission denied" in problem
    assert "docker group" in problem and "usermod -aG docker" in problem
    assert "systemctl start" not in problem


def test_docker_info_other_failure_is_named(inotify):
    m = Machine(docker=(1, "", "some unexpected failure\n"))
    problem = one(m.check("kind", "knative", inotify).problems)
    assert "some unexpected failure" in problem and "docker info" in problem


@pytest.mark.parametrize(
    ("provider", "output", "found"),
    [
        ("k3d", "k3d version v5.4.9\nk3s version v1.25.7-k3s1 (default)\n", "5.4.9"),
        ("kind", "kind v0.20.0 go1.20.4 linux/amd64\n", "0.20.0"),
        ("minikube", "v1.30.1\n", "1.30.1"),
    ],
)
def test_provider_too_old(provider, output, found, inotify):
    m = Machine(**{provider: (0, output, "")})
    result = m.check(provider, "knative", inotify)
    problem = one(result.problems)
    assert f"version {found} found" in problem
    assert f">= {pf.fmt(pf.MINIMUMS[provider])}" in problem
    assert pf.INSTALL_URLS[provider] in problem
    assert result.versions[provider] == found


def test_kubectl_too_old(inotify):
    m = Machine(kubectl=(0, kubectl_json("v1.27.3"), ""))
    problem = one(m.check("kind", "knative", inotify).problems)
    assert "kubectl: version 1.27.3 found" in problem
    assert pf.fmt(versions.MIN_KUBECTL) in problem


def test_kubectl_vendor_suffix_parses(inotify):
    m = Machine(kubectl=(0, kubectl_json("v1.32.4-dispatcher"), ""))
    result = m.check("kind", "knative", inotify)
    assert result.ok and result.versions["kubectl"] == "1.32.4"


def test_minimum_versions_pass():
    assert pf.parse_version("kind", f"kind v{pf.fmt(versions.MIN_KIND)} go1 linux/amd64") == (
        versions.MIN_KIND
    )
    assert pf.parse_version("k3d", f"k3d version v{pf.fmt(versions.MIN_K3D)}") == versions.MIN_K3D


@pytest.mark.parametrize(
    ("tool", "output"),
    [
        ("k3d", "k3d version unknown\n"),
        ("kind", "kind version: dev\n"),
        ("minikube", "minikube version: HEAD\n"),
        ("kubectl", "Client Version: something odd\n"),  # not JSON
        ("kubectl", json.dumps({"clientVersion": {"gitVersion": "vX"}})),
        ("kubectl", "[]"),
    ],
)
def test_unparseable_version_is_a_clear_note(tool, output, inotify):
    provider = "kind" if tool == "kubectl" else tool
    m = Machine(**{tool: (0, output, "")})
    result = m.check(provider, "knative", inotify)
    assert result.problems == []  # the tool runs: do not block on a version we cannot read
    note = one(result.notes)
    assert note.startswith(f"{tool}: could not read a version")
    assert pf.fmt(pf.MINIMUMS[tool]) in note
    assert tool not in result.versions


def test_version_command_fails(inotify):
    m = Machine(kind=(1, "", "kind: cannot execute binary file: Exec format error\n"))
    problem = one(m.check("kind", "knative", inotify).problems)
    assert "`kind version` failed" in problem and "Exec format error" in problem


def engine(cpus: int, need_mi: int) -> tuple[int, str, str]:
    """`docker info` of an engine whose one-node cluster offers pods ``need_mi`` MiB."""
    memory = (need_mi + capacity.KUBELET_EVICTION_MI) * 2**20
    return (0, f"28.2.2 {memory} {cpus}\n", "")


def need(provider: str, mode: str, jobs: int) -> capacity.Need:
    return capacity.requirement(Settings(image="", provider=provider, serving_mode=mode), jobs)


def test_too_small_for_knative_fine_for_standard(inotify):
    short = need("kind", "knative", 1).memory_mi - 1  # not even one job fits
    assert short >= need("kind", "standard", 1).memory_mi  # ...but standard runs
    m = Machine(docker=engine(8, short))
    problem = one(m.check("kind", "knative", inotify).problems)
    assert f"needs {need('kind', 'knative', 1)} of requests" in problem
    assert f"{need('kind', 'knative', 3)} for train-all's 3 jobs at once" in problem
    assert "use `--serving-mode standard`" in problem and "Docker Desktop" in problem
    assert m.check("kind", "standard", inotify).ok


def test_too_little_memory_even_for_standard(inotify):
    m = Machine(docker=(0, f"28.2.2 {2 * GIB} 8\n", ""))
    for mode in ("knative", "standard"):
        problem = one(m.check("kind", mode, inotify).problems)
        assert "offers pods 8.00 CPU / 1.9 GiB" in problem
        assert "use `--serving-mode standard`" not in problem
        assert "Docker Desktop" in problem


@pytest.mark.parametrize("provider", ["k3d", "kind", "minikube"])
@pytest.mark.parametrize("mode", ["knative", "standard"])
def test_the_documented_engine_runs_everything_at_once(provider, mode, inotify):
    # 4 CPUs and 8 GB set in Docker Desktop: MemTotal about 7.7 GiB.
    result = Machine(docker=(0, "28.2.2 8232525824 4\n", "")).check(provider, mode, inotify)
    assert result.ok and result.notes == []


def test_room_for_fewer_jobs_is_a_note_that_train_all_runs_in_waves(inotify):
    two = need("kind", "knative", 2)
    result = Machine(docker=engine(8, two.memory_mi)).check("kind", "knative", inotify)
    assert result.ok
    note = one(result.notes)
    assert "train-all will run 2 of its 3 jobs at a time" in note
    assert f"3 at once need {need('kind', 'knative', 3)}" in note


def test_too_few_cpus_is_a_problem_that_names_the_cpu_figure(inotify):
    m = Machine(docker=(0, f"28.2.2 {16 * GIB} 2\n", ""))
    problem = one(m.check("kind", "knative", inotify).problems)
    assert "offers pods 2.00 CPU" in problem
    assert f"needs {need('kind', 'knative', 1)}" in problem
    # k3s's own pods ask for far less CPU than kind's control plane: 2 CPUs are enough.
    assert m.check("k3d", "standard", inotify).ok


def test_smaller_cpu_requests_let_this_2_cpu_machine_run_kind_standard(inotify):
    # What the integration run does here: our pods ask for 100m each (docs/cluster.md).
    m = Machine(docker=(0, f"28.2.2 {24 * GIB} 2\n", ""))
    refused = one(m.check("kind", "standard", inotify).problems)
    assert "lower our pods' CPU requests (INVOKE_CLUSTER_WORKER_CPU" in refused
    small = {"worker_cpu": "100m", "predictor_cpu": "100m"}
    assert m.check("kind", "standard", inotify, cpu_requests=small).ok


def test_unreadable_docker_info_is_a_note(inotify):
    m = Machine(docker=(0, "28.2.2 lots many\n", ""))
    result = m.check("kind", "knative", inotify)
    assert result.ok and "not checked" in one(result.notes)


def test_low_inotify_limits_are_notes(inotify):
    (inotify / "max_user_instances").write_text("128\n")
    (inotify / "max_user_watches").write_text("8192\n")
    result = Machine().check("kind", "knative", inotify)
    assert result.ok and len(result.notes) == 2
    assert "sudo sysctl fs.inotify.max_user_instances=512" in result.notes[0]
    assert "too many open files" in result.notes[0]
    assert "fs.inotify.max_user_watches=524288" in result.notes[1]


def test_no_inotify_files_no_note(tmp_path):
    assert Machine().check("kind", "knative", tmp_path).notes == []


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown provider"):
        pf.preflight("local", "knative", run=Machine().run, which=Machine().which)
    with pytest.raises(ValueError, match="unknown serving mode"):
        pf.preflight("kind", "serverless", run=Machine().run, which=Machine().which)


def test_run_command_never_raises():
    rc, _, err = pf.run_command(["distml-no-such-program-xyz"])
    assert rc == 127 and err


def test_main_exit_codes(monkeypatch, capsys):
    assert pf.main(["kind"]) == 2
    monkeypatch.setattr(
        pf, "preflight", lambda p, s: pf.Preflight(problems=["kind: not found on PATH"])
    )
    assert pf.main(["kind", "knative"]) == 1
    assert "error: kind: not found on PATH" in capsys.readouterr().out
    monkeypatch.setattr(pf, "preflight", lambda p, s: pf.Preflight(versions={"kind": "0.29.0"}))
    assert pf.main(["kind", "standard"]) == 0
    assert "found: kind 0.29.0" in capsys.readouterr().out


def test_minikube_is_asked_its_version_with_distmls_home_never_the_users(inotify):
    # Any minikube command, `version` too, creates its home: ~/.minikube unless told.
    machine = Machine()
    machine.run = lambda cmd: (
        machine.calls.append(list(cmd))
        or machine.answers[next(w for w in cmd if w != "env" and "=" not in w)]
    )
    result = machine.check("minikube", "standard", inotify, minikube_home="/wd/minikube")
    assert result.versions["minikube"] == "1.36.0", result.problems
    asked = [c for c in machine.calls if "minikube" in c]
    assert asked == [["env", "MINIKUBE_HOME=/wd/minikube", "minikube", "version", "--short"]]


def test_monitoring_and_argo_are_counted_beside_the_stack(inotify):
    # A node with room for one job beside the plain stack, but not beside distml's
    # Prometheus and KEDA too: `up --with-monitoring` is refused before anything is made.
    plain = need("kind", "standard", 1)
    m = Machine(docker=engine(8, plain.memory_mi))
    assert m.check("kind", "standard", inotify).ok
    problem = one(m.check("kind", "standard", inotify, with_monitoring=True).problems)
    watched = capacity.requirement(
        Settings(image="", provider="kind", serving_mode="standard", with_monitoring=True), 1
    )
    assert f"needs {watched} of requests" in problem and watched.memory_mi > plain.memory_mi
    # Argo's pods request nothing (its install.yaml sets no requests): the same room.
    with_argo = capacity.requirement(
        Settings(image="", provider="kind", serving_mode="standard", with_argo=True), 1
    )
    assert with_argo == plain and m.check("kind", "standard", inotify, with_argo=True).ok
