"""runtime/image.py without Docker: the tag, the context, and exact build commands."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from invoke import Config, MockContext, Result

from runtime import image as img

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def context(tmp_path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("Dockerfile", "requirements-image.txt", ".dockerignore"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "ml", root / "ml", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_the_tag_is_a_content_hash_that_ignores_what_the_image_ignores(context):
    tag = img.image_tag(context)
    assert tag.startswith("distml:") and len(tag.split(":")[1]) == 12
    assert img.image_tag(context) == tag  # stable
    (context / "README.md").write_text("not in the image")
    (context / "ml" / "__pycache__").mkdir(exist_ok=True)
    (context / "ml" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert img.image_tag(context) == tag
    (context / "ml" / "model" / "architectures.py").write_text(
        (context / "ml" / "model" / "architectures.py").read_text() + "\n"
    )
    assert img.image_tag(context) != tag


def test_hashed_files_match_the_dockerignore_allowlist():
    allow = [
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    assert sorted(allow) == sorted(img.CONTEXT_FILES + img.CONTEXT_DIRS)


def ctx(results: dict[str, Result], dry: bool = False) -> MockContext:
    config = Config(overrides={"run": {"dry": dry}})
    return MockContext(config=config, run=results, repeat=True)


OK, FAIL = Result(exited=0), Result(exited=1)


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        ({"/usr/local/bin/docker buildx version": OK}, "/usr/local/bin/docker"),
        (
            {
                "/usr/local/bin/docker buildx version": FAIL,
                "/usr/local/bin/docker version --format '{{.Client.Version}}'": Result(
                    "28.2.2\n", exited=0
                ),
                "/usr/bin/docker buildx version": FAIL,
                "/usr/bin/docker version --format '{{.Client.Version}}'": Result(
                    "20.10.24+dfsg1\n", exited=1
                ),
            },
            "/usr/bin/docker",
        ),
    ],
    ids=["the client on PATH has buildx", "a new client without buildx, Debian's old one works"],
)
def test_find_docker_picks_a_buildkit_capable_client(results, expected):
    found = {
        "docker": "/usr/local/bin/docker",
        "/usr/local/bin/docker": "/usr/local/bin/docker",
        "/usr/bin/docker": "/usr/bin/docker",
    }
    assert img.find_docker(ctx(results), which=found.get) == expected


def test_find_docker_explains_what_to_install():
    c = ctx(
        {
            "docker buildx version": FAIL,
            "docker version --format '{{.Client.Version}}'": Result("27.0.1\n"),
        }
    )
    with pytest.raises(img.ImageError, match="Install the buildx plugin"):
        img.find_docker(c, configured="docker", which=lambda name: "/x/docker")


def test_build_runs_exactly_these_commands(context, tmp_path, monkeypatch):
    monkeypatch.setattr(img, "CA_DIR", tmp_path / "no-cas")
    monkeypatch.setattr(img.shutil, "which", lambda name: name)  # any client "exists"
    tag = img.image_tag(context)
    c = ctx(
        {
            "/usr/bin/docker buildx version": FAIL,
            "/usr/bin/docker version --format '{{.Client.Version}}'": Result("20.10.24\n"),
            "/usr/bin/docker info": OK,
            f"DOCKER_BUILDKIT=1 /usr/bin/docker build --progress=plain --build-arg "
            f"BASE_IMAGE=python:3.11-slim-bookworm -t {tag} {context}": OK,
            f"/usr/bin/docker image inspect --format '{{{{.Size}}}}' {tag}": Result("2180000000\n"),
        }
    )
    lines = []
    assert (
        img.build(
            c, context, tmp_path / "build", docker="/usr/bin/docker", out=lines.append, env={}
        )
        == tag
    )
    assert f"built {tag}: 2.18 GB" in lines


def test_build_passes_extra_cas_as_a_secret_and_makes_the_local_base(
    context, tmp_path, monkeypatch
):
    cas = tmp_path / "cas"
    cas.mkdir()
    (cas / "corp.crt").write_text("-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n")
    monkeypatch.setattr(img, "CA_DIR", cas)
    monkeypatch.setattr(img.shutil, "which", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(img.os, "geteuid", lambda: 0)
    work = tmp_path / "build"
    rootfs = work / "base-rootfs"
    tag = img.image_tag(context)
    expected = [
        "docker buildx version",
        "docker info",
        "docker image inspect distml-base:bookworm",
        f"rm -rf {rootfs}",
        "debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "
        f"bookworm {rootfs} http://deb.debian.org/debian",
        f"rm -rf {rootfs}/var/cache/apt/archives/*.deb {rootfs}/var/lib/apt/lists/* "
        f"{rootfs}/usr/share/doc {rootfs}/usr/share/man",
        f"tar -C {rootfs} -c . | docker import -c 'ENV LANG=C.UTF-8' - distml-base:bookworm",
        f"rm -rf {rootfs}",
        "DOCKER_BUILDKIT=1 docker build --progress=plain --build-arg "
        f"BASE_IMAGE=distml-base:bookworm --secret id=extra_ca,src={work}/extra-ca.pem "
        f"-t {tag} {context}",
        f"docker image inspect --format '{{{{.Size}}}}' {tag}",
    ]
    results = {cmd: OK for cmd in expected}
    results["docker image inspect distml-base:bookworm"] = FAIL  # not there yet
    c = ctx(results)
    img.build(c, context, work, base="local", docker="docker", out=lambda line: None, env={})
    assert [call.args[0] for call in c.run.call_args_list] == expected
    assert "BEGIN CERTIFICATE" in (work / "extra-ca.pem").read_text()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base": "remote"}, "--base accepts only 'local'"),
        ({"base": "local", "base_image": "python:3.11"}, "not both"),
    ],
    ids=["unknown base", "both base options"],
)
def test_build_rejects_contradictory_options(context, tmp_path, kwargs, message):
    with pytest.raises(img.ImageError, match=message):
        img.build(ctx({}), context, tmp_path, **kwargs)


def test_no_engine_is_a_clear_error():
    c = ctx(
        {
            "docker info": Result(
                "Server:\nERROR: Cannot connect to the Docker daemon at unix:///x.sock.\n", exited=1
            )
        }
    )
    with pytest.raises(img.ImageError, match=r"Cannot connect to the Docker daemon.*dockerd"):
        img.require_engine(c, "docker")
