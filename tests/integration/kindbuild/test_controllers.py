"""The controller images the kind build makes, held against the real upstream manifests
(``../shared/k8s-upstream``, found through INDEX.json by the URLs `up` applies; KEDA's, which
the kind build makes itself, through the pinned files' cache): every
image those manifests run is built, under exactly the tag they name (never a digest),
with the binary at the path they exec and a numeric user where they demand a non-root
one. Pure: nothing is built (``python -m integration.kindbuild controllers`` builds)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from integration.kindbuild import __main__ as cli
from integration.kindbuild import controllers, gomodule, mirror
from k8s.install import versions
from tests.support import upstream

# The URL (or kustomize ref) `up` applies -> the group of images its workloads need.
MANIFESTS = {
    versions.TRAINING_OPERATOR_KUSTOMIZE: "standard",
    versions.CERT_MANAGER_URL: "standard",
    versions.METRICS_SERVER_URL: "standard",
    versions.KSERVE_URL: "standard",
    versions.ARGO_WORKFLOWS_URL: "argo",
    versions.KEDA_URL: "monitoring",
}
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")
# kserve.yaml's DaemonSet runs only on nodes labelled kserve/localmodel=worker (none here).
NEVER_SCHEDULED = {"kserve/kserve-localmodelnode-agent:v0.20.0"}
SPECS = controllers.controllers()
BY_IMAGE = {c.image: c for c in SPECS}


@cache
def workloads(url: str) -> tuple[dict, ...]:
    """The workloads in the file behind ``url``; only their documents are parsed (the
    CRDs around them are megabytes)."""
    text = upstream.file_of(url).read_text()
    found = []
    for doc in re.split(r"^---\s*$", text, flags=re.M):
        if re.search(rf"^kind:\s*({'|'.join(WORKLOADS)})\s*$", doc, re.M):
            obj = yaml.load(doc, Loader=yaml.CSafeLoader)
            if obj and obj.get("kind") in WORKLOADS:
                found.append(obj)
    return tuple(found)


def containers(url: str):
    """(workload, pod spec, container) for every container of every workload."""
    for obj in workloads(url):
        spec = upstream.pod_spec(obj)
        for c in [*(spec.get("initContainers") or []), *spec["containers"]]:
            yield obj, spec, c


def manifest_images(group: str) -> set[str]:
    return {
        c["image"]
        for url, g in MANIFESTS.items()
        if g == group
        for _, _, c in containers(url)
        if c["image"] not in NEVER_SCHEDULED
    }


@pytest.mark.parametrize("group", ["standard", "argo", "monitoring"])
def test_every_image_the_manifests_run_is_built_under_their_exact_tag(group):
    built = {c.image for c in controllers.group(group)}
    assert manifest_images(group) <= built, "images the manifests run that are not built"
    for image in manifest_images(group):
        assert "@" not in image, f"{image}: pinned by digest, a local build cannot satisfy it"


def test_the_argo_executor_is_the_one_the_built_controller_defaults_to():
    """install.yaml names no executor image (its controller ConfigMap is empty): the
    controller runs quay.io/argoproj/argoexec:<the version linked into it>."""
    url = versions.ARGO_WORKFLOWS_URL
    text = upstream.file_of(url).read_text()
    (configmap,) = [
        yaml.load(doc, Loader=yaml.CSafeLoader)
        for doc in re.split(r"^---\s*$", text, flags=re.M)
        if re.search(r"^  name: workflow-controller-configmap$", doc, re.M)
    ]
    assert not configmap.get("data"), "install.yaml configures the executor: check its image"
    by_name = controllers.by_name()
    controller, executor = by_name["argo-workflow-controller"], by_name["argo-argoexec"]
    linked = re.search(
        r"v4\.version=(\S+)", controller.ldflags.format(version=controller.version, commit="")
    )
    assert executor.image == f"quay.io/argoproj/argoexec:{linked.group(1)}"


def test_each_image_is_named_by_the_manifest_it_says():
    for spec in SPECS:
        if spec.name == "argo-argoexec" or not spec.manifest:
            continue
        url = next(u for u in MANIFESTS if upstream.file_of(u).name == Path(spec.manifest).name)
        assert upstream.index()[url].name == spec.manifest
        assert spec.image in {c["image"] for _, _, c in containers(url)}, spec.name


def test_prometheus_and_alertmanager_are_the_images_distmls_own_manifests_name():
    """distml's own monitoring manifests run versions.PROMETHEUS_IMAGE and
    versions.ALERTMANAGER_IMAGE; no upstream manifest names either."""
    own = {c.image: c for c in SPECS if not c.manifest}
    assert set(own) == {versions.PROMETHEUS_IMAGE, versions.ALERTMANAGER_IMAGE}
    assert {c.group for c in own.values()} == {"monitoring"}


def test_prometheus_is_built_from_its_module_version_of_the_release():
    """Its module version is the release's (3.16.0 is v0.316.0); the image tag is that
    release."""
    own = controllers.by_name()["prometheus"]
    assert own.image == versions.PROMETHEUS_IMAGE
    major, minor, patch = map(int, versions.PROMETHEUS_VERSION.removeprefix("v").split("."))
    assert own.version == f"v0.{major * 100 + minor}.{patch}"
    assert f"common/version.Version={major}.{minor}.{patch} " in own.ldflags
    assert "builtinassets" not in own.tags  # the compiled UI is not in the module


def test_prometheus_image_is_laid_out_as_upstreams_dockerfile():
    spec = controllers.by_name()["prometheus"]
    dockerfile = controllers.dockerfile(spec, "base")
    assert "COPY promtool /bin/promtool" in dockerfile
    assert 'ENTRYPOINT ["/bin/prometheus"]' in dockerfile and "USER 65534:65534" in dockerfile
    assert "COPY --chown=65534:65534 data/ /\n" in dockerfile  # /prometheus, group-writable
    assert "WORKDIR /prometheus" in dockerfile
    cmd = '"--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"'
    assert f"CMD [{cmd}]" in dockerfile
    context = dict(spec.files)
    assert context["etc-prometheus/prometheus.yml"] == "documentation/examples/prometheus.yml"
    assert context["data/prometheus"] == ""  # an empty directory


def test_alertmanager_is_built_from_the_release_with_promus_version_flags():
    """Its module is versioned as the release; the linked version is its VERSION file's
    (the tag without "v"), and its UI needs no build tag (the assets are Go source)."""
    spec = controllers.by_name()["alertmanager"]
    assert spec.image == versions.ALERTMANAGER_IMAGE
    assert spec.version == versions.ALERTMANAGER_VERSION
    version = versions.ALERTMANAGER_VERSION.removeprefix("v")
    assert f"common/version.Version={version} " in spec.ldflags
    assert spec.tags == "netgo"


def test_alertmanager_image_is_laid_out_as_upstreams_dockerfile():
    spec = controllers.by_name()["alertmanager"]
    dockerfile = controllers.dockerfile(spec, "base")
    assert "COPY alertmanager /bin/alertmanager\nCOPY amtool /bin/amtool\n" in dockerfile
    assert 'ENTRYPOINT ["/bin/alertmanager"]' in dockerfile and "USER 65534:65534" in dockerfile
    assert "COPY --chown=65534:65534 etc-alertmanager/ /etc/alertmanager/\n" in dockerfile
    assert "COPY --chown=65534:65534 data/ /\n" in dockerfile  # /alertmanager, nobody's
    assert "WORKDIR /alertmanager" in dockerfile and "EXPOSE 9093" in dockerfile
    assert 'VOLUME ["/alertmanager"]' in dockerfile
    cmd = '"--config.file=/etc/alertmanager/alertmanager.yml", "--storage.path=/alertmanager"'
    assert f"CMD [{cmd}]" in dockerfile
    context = dict(spec.files)
    assert context["etc-alertmanager/alertmanager.yml"] == "examples/ha/alertmanager.yml"
    assert context["data/alertmanager"] == ""  # an empty directory


def test_promu_version_flags_name_the_release_without_its_v():
    flags = controllers.promu_ldflags("quay.io/prometheus/alertmanager:v0.28.1")
    assert flags.startswith("-X github.com/prometheus/common/version.Version=0.28.1 ")
    assert "version.Revision={commit} " in flags and flags.endswith("version.BuildDate={date}")


def test_the_build_date_is_the_commits_time_as_promu_writes_it():
    assert controllers._date({"Time": "2026-11-20T10:11:12Z"}) == "20261120-10:11:12"
    assert controllers._date({}) == ""


def _needs_non_root(spec: dict, container: dict) -> bool:
    pod = spec.get("securityContext") or {}
    own = container.get("securityContext") or {}
    non_root = own.get("runAsNonRoot", pod.get("runAsNonRoot", False))
    return non_root and "runAsUser" not in own and "runAsUser" not in pod


@pytest.mark.parametrize("url", list(MANIFESTS))
def test_the_manifests_commands_and_users_fit_the_images(url):
    for _, spec, container in containers(url):
        built = BY_IMAGE.get(container["image"])
        if built is None:
            continue
        dockerfile = controllers.dockerfile(built, "base")
        path = re.search(r"^ENV PATH=(\S+)", dockerfile, re.M).group(1).split(":")
        command = (container.get("command") or [built.entrypoint])[0]
        found = command if command.startswith("/") else f"{path[0]}/{command}"
        assert found == built.entrypoint, f"{container['image']}: the manifest execs {command}"
        assert f'ENTRYPOINT ["{built.entrypoint}"]' in dockerfile
        user = re.search(r"^USER (\S+)$", dockerfile, re.M).group(1)
        assert re.fullmatch(r"\d+:\d+", user), f"{built.name}: USER {user} is not numeric"
        if _needs_non_root(spec, container):
            assert not user.startswith("0:"), f"{built.name}: runAsNonRoot needs a non-0 USER"


def test_every_user_the_images_run_as_is_in_the_base_passwd():
    uids = {line.split(":")[2] for line in controllers.PASSWD.splitlines()}
    for spec in SPECS:
        assert spec.user.split(":")[0] in uids, spec.name


def test_a_changed_recipe_is_a_new_cache_entry_and_the_same_one_is_not():
    spec = controllers.by_name()["metrics-server"]
    same = controllers.recipe_key(spec, "base:1")
    assert controllers.recipe_key(spec, "base:1") == same
    assert controllers.recipe_key(spec, "base:2") != same
    for change in ({"user": "1000:1000"}, {"image": "example.com/m:v1"}):
        other = controllers.Controller(**{**spec.__dict__, **change})
        assert controllers.recipe_key(other, "base:1") != same, change
    moved = controllers.Controller(**{**spec.__dict__, "pull_always": True})
    assert controllers.recipe_key(moved, "base:1") == same
    for change in ({"tags": "netgo"}, {"also": (("p", "/bin/p"),)}, {"files": (("d", ""),)}):
        other = controllers.Controller(**{**spec.__dict__, **change})
        assert controllers.recipe_key(other, "base:1") != same, change


def test_the_keys_of_the_images_built_before_monitoring_stay_the_same():
    """A recipe key made before tags/also/files existed must not change (else every image
    of a warm cache is built again): metrics-server's key, as it was then."""
    spec = controllers.by_name()["metrics-server"]
    assert controllers.recipe_key(spec, "distml-kind/static:0123456789") == "3eb53dad"


def test_prometheus_key_stays_the_same_with_alertmanager_beside_it():
    """Its version flags are now made by promu_ldflags, shared with Alertmanager: the same
    string, so a warm cache keeps its Prometheus (about 8 minutes to build again)."""
    spec = controllers.by_name()["prometheus"]
    assert controllers.recipe_key(spec, "distml-kind/static:0123456789") == "b91747f6"


def test_cert_managers_mains_are_ours_and_named_inside_its_import_path():
    """Its cmd modules are not on the proxy; ours import its internal/ packages, which Go
    allows only below github.com/cert-manager/cert-manager."""
    for name in ("controller", "cainjector", "webhook"):
        spec = controllers.by_name()[f"cert-manager-{name}"]
        assert spec.module_path.startswith(spec.module + "/")
        main = controllers.HERE / "files" / spec.main / "main.go"
        assert main.read_text().startswith("// A cert-manager"), main
        assert "package main" in main.read_text()


def test_group_steps_expand_into_their_images_once():
    assert cli.plan(["controllers", "kserve-controller"]) == [
        c.name for c in controllers.group("standard")
    ]
    assert cli.plan(["argo-images"]) == [
        "argo-workflow-controller",
        "argo-argocli",
        "argo-argoexec",
    ]
    assert cli.plan(["monitoring-images"]) == [
        "prometheus",
        "alertmanager",
        "keda-operator",
        "keda-metrics-apiserver",
        "keda-admission-webhooks",
    ]
    # The default is the offline node, last, after every image it holds (Argo's too).
    default = cli.plan([])
    assert default[-1] == "node-stack"
    assert {c.name for c in controllers.controllers()} <= set(default)
    assert default.index("node-image") < default.index("node-stack")
    # KEDA's install file is not in the node (the host applies it), but offline runs need it.
    assert default.index("kustomize") < default.index("keda-manifest") < default.index("node-stack")


def test_our_module_asks_for_the_go_version_the_dependency_needs(tmp_path):
    gomod = tmp_path / "go.mod"
    gomod.write_text("module x\n\ngo 1.25.8\n")
    assert gomodule.go_directive(gomod) == "1.25.8"
    gomod.write_text("module x\n\ngo 1.23\n")
    assert gomodule.go_directive(gomod) == "1.24.0"


@pytest.mark.parametrize("url", list(MANIFESTS))
def test_images_pulled_always_are_the_ones_the_mirror_serves(url):
    """A manifest's imagePullPolicy: Always makes the kubelet pull even when the image is
    in the node: those images, and only those, go to the mirror."""
    for _, _, container in containers(url):
        built = BY_IMAGE.get(container["image"])
        if built is not None:
            always = container.get("imagePullPolicy") == "Always"
            assert built.pull_always == always, built.name


def test_the_mirror_serves_each_image_under_its_registry_path():
    assert mirror.split("kserve/kserve-controller:v0.20.0") == (
        "docker.io",
        "kserve/kserve-controller:v0.20.0",
    )
    assert mirror.split("quay.io/brancz/kube-rbac-proxy:v0.18.0") == (
        "quay.io",
        "brancz/kube-rbac-proxy:v0.18.0",
    )
    assert mirror.split("registry.k8s.io/metrics-server/metrics-server:v0.7.2")[0] == (
        "registry.k8s.io"
    )
    hosts = mirror.hosts_toml("docker.io")
    assert 'server = "https://registry-1.docker.io"' in hosts
    assert '[host."http://127.0.0.1:5000"]' in hosts
    assert 'capabilities = ["pull", "resolve"]' in hosts


def test_a_module_copy_gets_back_the_symlinks_and_ui_its_zip_dropped(tmp_path):
    module = tmp_path / "module"
    (module / "workflow/executor/osspecific").mkdir(parents=True)
    (module / controllers.ARGO_SIGNAL_LINK[1]).write_text("package osspecific\n")
    spec = controllers.by_name()["argo-argoexec"]
    both = controllers.Controller(**{**spec.__dict__, "ui_stub": True})
    controllers._source_copy(both, module, tmp_path / "src")
    link = tmp_path / "src" / controllers.ARGO_SIGNAL_LINK[0]
    assert link.is_symlink() and link.read_text() == "package osspecific\n"
    assert (tmp_path / "src/ui/dist/app/index.html").is_file()
