"""The upstream controllers the standard-mode stack applies (training operator, KServe and
its kube-rbac-proxy, cert-manager, metrics-server; Argo Workflows for ``up --with-argo``;
Prometheus, Alertmanager and KEDA for ``up --with-monitoring``), built from their Go modules
and tagged exactly as the release manifests (and, for Prometheus and Alertmanager, distml's
own) name them, so those manifests apply unchanged on a cluster with no registry.

Each image is ``FROM`` a small local base (``/etc/passwd`` with the numeric users the
images run as, ``/tmp``, CA certificates) and holds one static binary at the path the
upstream image has it (the path a manifest's ``command`` execs, or the ENTRYPOINT its
``args`` go to), with a numeric ``USER`` wherever a manifest says ``runAsNonRoot``.
Every image is one cache entry: ``<cache>/<name>-<module version>-<recipe>/image.tar``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from integration.kindbuild import cache, docker, gomodule, images, pins
from integration.kindbuild.run import run

HERE = Path(__file__).parent
# Users the upstream images run as: distroless's nonroot (65532) and nobody (65534),
# cert-manager's 1000, Argo's 8737.
PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "cert-manager:x:1000:1000:cert-manager:/home/cert-manager:/sbin/nologin\n"
    "argo:x:8737:8737:argo:/home/argo:/sbin/nologin\n"
    "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
)
GROUP = "root:x:0:\ncert-manager:x:1000:\nargo:x:8737:\nnonroot:x:65532:\nnogroup:x:65534:\n"
NSSWITCH = "hosts: files dns\n"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CERT_MANAGER_LDFLAGS = (
    "-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion={version}"
    " -X github.com/cert-manager/cert-manager/pkg/util.AppGitCommit={commit}"
)
ARGO_SIGNAL_LINK = (
    "workflow/executor/osspecific/signal_linux.go",
    "workflow/executor/osspecific/signal_darwin.go",
)
# KEDA's Makefile: -X version.GitCommit and version.Version (the tag without "v").
KEDA_LDFLAGS = (
    "-s -w -X github.com/kedacore/keda/v2/version.GitCommit={commit}"
    f" -X github.com/kedacore/keda/v2/version.Version={pins.KEDA_TAG}"
)
ARGO_LDFLAGS = (
    "-s -w -X github.com/argoproj/argo-workflows/v4.version={version}"
    " -X github.com/argoproj/argo-workflows/v4.gitCommit={commit}"
    " -X github.com/argoproj/argo-workflows/v4.gitTag={version}"
    " -X github.com/argoproj/argo-workflows/v4.gitTreeState=clean"
)


def promu_ldflags(image: str) -> str:
    """The version flags of a Prometheus project's .promu.yml (Prometheus', Alertmanager's):
    its VERSION file's version (the image tag without "v"), the commit, the branch, who,
    when (the commit's time, so a rebuild links the same bytes)."""
    return " ".join(
        f"-X github.com/prometheus/common/version.{k}={v}"
        for k, v in (
            ("Version", image.rsplit(":v", 1)[1]),
            ("Revision", "{commit}"),
            ("Branch", "HEAD"),
            ("BuildUser", "distml-kindbuild"),
            ("BuildDate", "{date}"),
        )
    )


PROMETHEUS_LDFLAGS = promu_ldflags(pins.PROMETHEUS_IMAGE)
ALERTMANAGER_LDFLAGS = promu_ldflags(pins.ALERTMANAGER_IMAGE)


@dataclass(frozen=True)
class Controller:
    name: str  # the CLI step and the cache component
    image: str  # the tag, exactly as the upstream manifest names it
    manifest: str  # that manifest, relative to k8s-upstream/ ("": distml's own manifests)
    module: str
    version: str  # the module version built (see pins for where it differs from the tag)
    package: str  # the main package built
    entrypoint: str  # the binary's path in the image (what the manifest execs)
    user: str  # the image's USER: numeric (runAsNonRoot cannot check a name)
    ldflags: str = "-s -w"  # {version}, {commit} and {date} (the commit's) are filled in
    # A main package of ours (files/<main>/) in place of a cmd module the proxy does not
    # serve, built inside a module named module_path (see cert_manager_main).
    main: str = ""
    module_path: str = ""
    ui_stub: bool = False  # Argo's CLI embeds ui/dist/app, which the module zip leaves out
    # Symlinks in the repository that module zips drop (path -> target, both in the module):
    # re-made in a copy of the module, which is then built in its place.
    links: tuple[tuple[str, str], ...] = ()
    extra: tuple[str, ...] = field(default=())  # more Dockerfile lines
    group: str = "standard"  # "argo", "monitoring": only for `up --with-argo` / --with-monitoring
    # The manifest says imagePullPolicy: Always: a loaded image is not enough (see mirror).
    pull_always: bool = False
    tags: str = ""  # go build -tags
    also: tuple[tuple[str, str], ...] = ()  # more binaries: (package, path in the image)
    # Build context entries for ``extra``'s COPY lines: (name, path in the module; "" makes
    # an empty directory).
    files: tuple[tuple[str, str], ...] = ()

    @property
    def binary(self) -> str:
        return self.entrypoint.rsplit("/", 1)[1]


def cert_manager(name: str) -> Controller:
    """cert-manager's binaries live in their own modules (cmd/controller, cmd/cainjector,
    cmd/webhook: tags cmd/<name>/v1.17.2) that the proxy does not serve (404), so a main of
    ours (files/cert-manager-<name>/) drives the v1.17.2 library packages. Its module is
    named under cert-manager's import path, as upstream's cmd modules are, which lets it
    import the ``internal/`` packages the wiring needs."""
    path = f"{pins.CERT_MANAGER_MODULE}/cmd/distml-{name}"
    return Controller(
        name=f"cert-manager-{name}",
        image=pins.CERT_MANAGER_IMAGES[name],
        manifest="cert-manager-v1.17.2/cert-manager.yaml",
        module=pins.CERT_MANAGER_MODULE,
        version=pins.CERT_MANAGER,
        package=path,
        entrypoint=f"/app/cmd/{name}/{name}",
        user="1000:1000",
        ldflags=CERT_MANAGER_LDFLAGS,
        main=f"cert-manager-{name}",
        module_path=path,
    )


def argo(name: str, package: str, binary: str, user: str, **kw) -> Controller:
    return Controller(
        name=f"argo-{name}",
        image=pins.ARGO_IMAGES[name],
        manifest="argo-workflows-v4.1.2/install.yaml",
        module=pins.ARGO_MODULE,
        version=pins.ARGO,
        package=f"{pins.ARGO_MODULE}/cmd/{package}",
        entrypoint=f"/bin/{binary}",
        user=user,
        ldflags=ARGO_LDFLAGS,
        group="argo",
        **kw,
    )


def kserve(name: str, cmd: str, image: str) -> Controller:
    return Controller(
        name=name,
        image=image,
        manifest="kserve-v0.20.0/kserve.yaml",
        module=pins.KSERVE_MODULE,
        version=pins.KSERVE,
        package=f"{pins.KSERVE_MODULE}/cmd/{cmd}",
        entrypoint="/manager",
        user="65532:65532",
        pull_always=True,
    )


def keda(name: str, cmd: str, binary: str) -> Controller:
    """KEDA's Dockerfiles: the binary at /, distroless static:nonroot's user."""
    return Controller(
        name=name,
        image=pins.KEDA_IMAGES[name.replace("keda-operator", "keda")],
        manifest=f"keda-{pins.KEDA_TAG}/keda-{pins.KEDA_TAG}.yaml",
        module=pins.KEDA_MODULE,
        version=pins.KEDA,
        package=f"{pins.KEDA_MODULE}/cmd/{cmd}",
        entrypoint=f"/{binary}",
        user="65532:65532",
        ldflags=KEDA_LDFLAGS,
        group="monitoring",
        pull_always=True,
    )


def prometheus() -> Controller:
    """Its Dockerfile at the tag: /bin/prometheus and /bin/promtool, the example config in
    /etc/prometheus, /prometheus (the data) owned by nobody and group-writable, the same
    ENTRYPOINT and CMD. Upstream's base is busybox; this one has no shell (Prometheus's
    probes are HTTP). Built without ``builtinassets`` (the compiled UI is not in the
    module): the API, PromQL, /metrics and /-/ready work; the UI's pages answer 500
    ("Error opening React index.html")."""
    module, nobody = pins.PROMETHEUS_MODULE, "65534:65534"
    return Controller(
        name="prometheus",
        image=pins.PROMETHEUS_IMAGE,
        manifest="",  # distml's own: k8s/monitoring/stack.py
        module=module,
        version=pins.PROMETHEUS,
        package=f"{module}/cmd/prometheus",
        entrypoint="/bin/prometheus",
        user=nobody,
        ldflags=f"-s -w {PROMETHEUS_LDFLAGS}",
        group="monitoring",
        tags="netgo",
        also=((f"{module}/cmd/promtool", "/bin/promtool"),),
        files=(
            ("etc-prometheus/prometheus.yml", "documentation/examples/prometheus.yml"),
            ("LICENSE", "LICENSE"),
            ("NOTICE", "NOTICE"),
            ("data/prometheus", ""),  # mode 775: COPY keeps a directory's own mode
        ),
        extra=(
            f"COPY --chown={nobody} etc-prometheus/ /etc/prometheus/",
            "COPY LICENSE NOTICE /",
            f"COPY --chown={nobody} data/ /",
            "WORKDIR /prometheus",
            "EXPOSE 9090",
            'VOLUME ["/prometheus"]',
            'CMD ["--config.file=/etc/prometheus/prometheus.yml",'
            ' "--storage.tsdb.path=/prometheus"]',
        ),
    )


def alertmanager() -> Controller:
    """Its Dockerfile at the tag: /bin/alertmanager and /bin/amtool, the example config
    (examples/ha/alertmanager.yml) at /etc/alertmanager/alertmanager.yml, /alertmanager
    (the data, the working directory) owned by nobody, the same ENTRYPOINT and CMD.
    Upstream's base is busybox; this one has no shell, and /alertmanager is mode 775, not
    755 (an empty context directory: see prometheus). Its web UI is in the module
    (asset/assets_vfsdata.go), so nothing is left out."""
    module, nobody = pins.ALERTMANAGER_MODULE, "65534:65534"
    return Controller(
        name="alertmanager",
        image=pins.ALERTMANAGER_IMAGE,
        manifest="",  # distml's own, beside Prometheus
        module=module,
        version=pins.ALERTMANAGER,
        package=f"{module}/cmd/alertmanager",
        entrypoint="/bin/alertmanager",
        user=nobody,
        ldflags=f"-s -w {ALERTMANAGER_LDFLAGS}",
        group="monitoring",
        tags="netgo",
        also=((f"{module}/cmd/amtool", "/bin/amtool"),),
        files=(
            ("etc-alertmanager/alertmanager.yml", "examples/ha/alertmanager.yml"),
            ("data/alertmanager", ""),
        ),
        extra=(
            f"COPY --chown={nobody} etc-alertmanager/ /etc/alertmanager/",
            f"COPY --chown={nobody} data/ /",
            "EXPOSE 9093",
            'VOLUME ["/alertmanager"]',
            "WORKDIR /alertmanager",
            'CMD ["--config.file=/etc/alertmanager/alertmanager.yml",'
            ' "--storage.path=/alertmanager"]',
        ),
    )


def controllers() -> tuple[Controller, ...]:
    """Every image, in the order `up` applies their manifests."""
    component_version = "k8s.io/component-base/version"
    metrics_version = f"{pins.METRICS_SERVER_MODULE}/pkg/version"
    return (
        Controller(
            name="training-operator",
            image=pins.TRAINING_OPERATOR_IMAGE,
            manifest="training-operator-v1.9.0/standalone.yaml",
            module=pins.TRAINING_OPERATOR_MODULE,
            version=pins.TRAINING_OPERATOR,
            package=f"{pins.TRAINING_OPERATOR_MODULE}/cmd/training-operator.v1",
            entrypoint="/manager",
            user="0:0",  # upstream's distroless:latest runs as root; the manifest allows it
        ),
        *(cert_manager(n) for n in ("controller", "cainjector", "webhook")),
        Controller(
            name="metrics-server",
            image=pins.METRICS_SERVER_IMAGE,
            manifest="metrics-server-v0.7.2/components.yaml",
            module=pins.METRICS_SERVER_MODULE,
            version=pins.METRICS_SERVER,
            package=f"{pins.METRICS_SERVER_MODULE}/cmd/metrics-server",
            entrypoint="/metrics-server",
            user="65534:65534",
            ldflags=f"-s -w -X {metrics_version}.gitVersion={{version}}"
            f" -X {metrics_version}.gitCommit={{commit}}",
        ),
        kserve("kserve-controller", "manager", pins.KSERVE_CONTROLLER_IMAGE),
        kserve("kserve-llmisvc", "llmisvc", pins.KSERVE_LLMISVC_IMAGE),
        kserve("kserve-localmodel", "localmodel", pins.KSERVE_LOCALMODEL_IMAGE),
        Controller(
            name="kube-rbac-proxy",
            image=pins.RBAC_PROXY_IMAGE,
            manifest="kserve-v0.20.0/kserve.yaml",
            module=pins.RBAC_PROXY_MODULE,
            version=pins.RBAC_PROXY,
            package=f"{pins.RBAC_PROXY_MODULE}/cmd/kube-rbac-proxy",
            entrypoint="/usr/local/bin/kube-rbac-proxy",
            user="65532:65532",
            ldflags=f"-s -w -X {component_version}.gitVersion={{version}}"
            f" -X {component_version}.gitCommit={{commit}}",
        ),
        argo("workflow-controller", "workflow-controller", "workflow-controller", "8737:8737"),
        argo("argocli", "argo", "argo", "8737:8737", ui_stub=True, extra=("WORKDIR /home/argo",)),
        # The executor runs as whatever a workflow's pod asks; upstream's default is root.
        # Its Linux signal handling is signal_linux.go, a symlink to signal_darwin.go.
        argo("argoexec", "argoexec", "argoexec", "0:0", links=(ARGO_SIGNAL_LINK,)),
        prometheus(),
        alertmanager(),
        keda("keda-operator", "operator", "keda"),
        keda("keda-metrics-apiserver", "adapter", "keda-adapter"),
        keda("keda-admission-webhooks", "webhooks", "keda-admission-webhooks"),
    )


def by_name() -> dict[str, Controller]:
    return {c.name: c for c in controllers()}


def dockerfile(spec: Controller, base: str) -> str:
    """The image: the base, the binary at its upstream path, a numeric user."""
    directory = spec.entrypoint.rsplit("/", 1)[0] or "/"
    lines = [
        f"FROM {base}",
        f"COPY {spec.binary} {spec.entrypoint}",
        *(f"COPY {path.rsplit('/', 1)[1]} {path}" for _, path in spec.also),
        f"ENV PATH={directory}:/usr/local/bin:/usr/bin:/bin",
        *spec.extra,
        f"USER {spec.user}",
        f'ENTRYPOINT ["{spec.entrypoint}"]',
        f'LABEL org.opencontainers.image.source="{spec.module}"',
        f'LABEL org.opencontainers.image.version="{spec.version}"',
        f'LABEL org.opencontainers.image.description="built by distml kindbuild from'
        f' {spec.module}@{spec.version}{" with a main of ours" if spec.main else ""}"',
    ]
    return "\n".join(lines) + "\n"


def base_files() -> dict[str, tuple[bytes, int]]:
    """The base image's files: path -> (contents, mode)."""
    return {
        "etc/passwd": (PASSWD.encode(), 0o644),
        "etc/group": (GROUP.encode(), 0o644),
        "etc/nsswitch.conf": (NSSWITCH.encode(), 0o644),
        "etc/ssl/certs/ca-certificates.crt": (CA_BUNDLE.read_bytes(), 0o644),
    }


def base() -> tuple[str, cache.Result]:
    """``distml-kind/static:<key>``: what the distroless static base gives a Go binary."""
    files = base_files()
    digest = hashlib.sha256()
    for path, (data, mode) in sorted(files.items()):
        digest.update(f"{path}:{mode:o}:".encode() + data)
    key = digest.hexdigest()[:10]
    tag = f"distml-kind/static:{key}"

    def build(out: Path) -> None:
        root = out / "rootfs"
        for path, (data, mode) in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)
            (root / path).chmod(mode)
        for name, mode in (("tmp", 0o1777), ("home/argo", 0o755), ("home/nonroot", 0o755)):
            (root / name).mkdir(parents=True, exist_ok=True)
            (root / name).chmod(mode)
        docker.import_rootfs(root, tag, ["ENV PATH=/usr/local/bin:/usr/bin:/bin"])
        shutil.rmtree(root)
        docker.save([tag], out / "image.tar")

    return tag, cache.cached("static-base", key, build)


def recipe_key(spec: Controller, base_tag: str) -> str:
    """What the image is besides the module version (its tag, the Dockerfile, the base,
    the package, the flags, a main of ours): any change gives a new cache entry. Facts
    about the manifests (pull policy, group) are not part of it."""
    made_of = [spec.image, spec.package, spec.ldflags, spec.module_path, spec.ui_stub, base_tag]
    made_of += [spec.links] if spec.links else []
    if spec.tags or spec.also or spec.files:  # absent from the keys made before they were
        made_of += [spec.tags, spec.also, spec.files]
    text = json.dumps([*made_of, dockerfile(spec, base_tag)])
    if spec.main:
        for path in sorted((HERE / "files" / spec.main).rglob("*")):
            text += path.name + path.read_text()
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _source_copy(spec: Controller, module_dir: Path, source: Path) -> None:
    """A writable copy of the module with what its zip leaves out put back: the symlinks
    in ``spec.links`` and, for Argo's CLI, a one-page stand-in for the UI it embeds (the
    way upstream's image build touches ui/dist/app/index.html without a yarn build)."""
    shutil.copytree(module_dir, source)
    run(["chmod", "-R", "u+w", str(source)])
    for path, target in spec.links:
        link = source / path
        link.symlink_to(Path(target).relative_to(Path(path).parent))
    if spec.ui_stub:
        (source / "ui/dist/app").mkdir(parents=True)
        (source / "ui/dist/app/index.html").write_text(
            "<!doctype html><title>Argo Workflows</title><p>UI not built (distml kindbuild)\n"
        )


def _prepare_module(spec: Controller, info: dict, work: Path) -> None:
    """Our module in ``work``: it requires ``spec.module`` at its version and repeats that
    module's replace lines (KServe's pin controller-runtime and k8s.io/*)."""
    gomod = Path(info["GoMod"])
    replaces = gomodule.inherited_replaces(gomod)
    if spec.ui_stub or spec.links:
        replaces[spec.module] = "./src"
        _source_copy(spec, Path(info["Dir"]), work / "src")
    if spec.main:
        target = work / "main"
        shutil.copytree(HERE / "files" / spec.main, target)
    path = spec.module_path or None
    gomodule.write_module(
        work, {spec.module: spec.version}, replaces, gomodule.go_directive(gomod), path
    )
    if spec.main:
        # The package is the module's root: move main.go up beside go.mod.
        for file in (work / "main").iterdir():
            file.rename(work / file.name)
        (work / "main").rmdir()


def _date(info: dict) -> str:
    """The module's commit time as promu writes a build date (20060102-15:04:05)."""
    stamp = info.get("Time", "")  # 2026-11-20T10:11:12Z
    return stamp[:10].replace("-", "") + "-" + stamp[11:19] if stamp else ""


def _build(spec: Controller, base_tag: str, base_result: cache.Result, out: Path) -> None:
    info = gomodule.download(spec.module, spec.version)
    work = out / "module"
    _prepare_module(spec, info, work)
    commit = info.get("Origin", {}).get("Hash", "")
    ldflags = spec.ldflags.format(version=spec.version, commit=commit, date=_date(info))
    context: dict[str, Path | None] = {}
    for package, path in ((spec.package, spec.entrypoint), *spec.also):
        name = path.rsplit("/", 1)[1]
        binary = context[name] = out / "bin" / name
        gomodule.build(work, package, binary, ldflags, spec.tags)
    module_dir = Path(info["Dir"])
    context.update({name: module_dir / p if p else None for name, p in spec.files})
    shutil.rmtree(work / "src", ignore_errors=True)
    docker.ensure_loaded([base_tag], base_result.path / "image.tar")
    images.build_image(out, spec.image, dockerfile(spec, base_tag), context)
    size = (out / "image.tar").stat().st_size
    (out / "image.json").write_text(
        json.dumps(
            {
                "image": spec.image,
                "module": spec.module,
                "version": spec.version,
                "commit": commit,
                "binary": spec.entrypoint,
                **({"tags": spec.tags} if spec.tags else {}),
                "archive_bytes": size,
            },
            indent=2,
        )
        + "\n"
    )


def ensure(spec: Controller) -> cache.Result:
    """``<cache>/<name>-<version>-<recipe>/image.tar``, tagged ``spec.image``."""
    base_tag, base_result = base()
    version = f"{spec.version}-{recipe_key(spec, base_tag)}"
    return cache.cached(spec.name, version, lambda out: _build(spec, base_tag, base_result, out))


def group(name: str) -> list[Controller]:
    return [c for c in controllers() if c.group == name]
