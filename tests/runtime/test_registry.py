"""runtime.registry: the registry the project image is pushed to (``invoke build --push
REGISTRY[/REPO]``, ``cluster.registry``): what is accepted and what is refused with a
reason, the name the pods run, and the docker commands a push runs."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from invoke import Result

from runtime.image import ImageError
from runtime.registry import check_registry, push, pushed_digest, pushed_name

LOCAL = "distml:0123456789ab"
# The distribution spec's reference grammar (distribution/reference/regexp.go): a domain
# (DNS-ish components, an optional port), lower-case path components, a tag.
_DOMAIN = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(
    rf"{_DOMAIN}(?:\.{_DOMAIN})*(?::[0-9]+)?(?:/{_PATH})+:[\w][\w.-]{{0,127}}", re.ASCII
)


def is_docker_reference(name: str) -> bool:
    return bool(REFERENCE.fullmatch(name)) and len(name.rsplit(":", 1)[0]) <= 255


@pytest.mark.parametrize(
    "registry",
    [
        "localhost:5001",
        "registry.example.com/ml/team",
        "10.0.0.1:5000",
        "ghcr.io/team",
        "registry-1.example.com:443/a_b/c-d/e.f",
        "host:65535",
        "localhost",
    ],
)
def test_a_registry_with_an_optional_port_and_path_is_accepted(registry):
    assert check_registry(registry) == registry


def test_surrounding_blanks_are_dropped():
    assert check_registry("  localhost:5001\n") == "localhost:5001"


@pytest.mark.parametrize(
    ("registry", "reason"),
    [
        ("http://localhost:5001", "leave out the scheme"),
        ("https://ghcr.io/team", "leave out the scheme"),
        ("localhost:5001/", "is not REGISTRY"),  # a trailing slash
        ("registry.example.com/ML/team", "lower-case path"),
        ("registry.example.com/ml:v1", "is not REGISTRY"),  # a tag
        ("host/repo:tag", "is not REGISTRY"),
        ("", "is not REGISTRY"),
        ("   ", "is not REGISTRY"),
        ("local host:5001", "is not REGISTRY"),
        ("localhost:5001/my repo", "is not REGISTRY"),
        ("localhost:0", "port 0 is not a TCP port"),
        ("localhost:99999", "port 99999 is not a TCP port"),
        ("localhost:123456", "is not REGISTRY"),  # more than 5 digits
        ("-bad.example.com", "is not REGISTRY"),
        ("ghcr.io//team", "is not REGISTRY"),
        ("ghcr.io/team@sha256:" + "a" * 64, "is not REGISTRY"),
        ("r.example.com/" + "a" * 230, "is not REGISTRY"),  # too long a name
    ],
)
def test_what_is_not_a_registry_is_refused_with_a_reason(registry, reason):
    with pytest.raises(ValueError, match=re.escape(reason)) as e:
        check_registry(registry)
    assert repr(registry.strip()) in str(e.value)


def test_a_port_is_not_taken_for_a_tag():
    assert check_registry("host:5000") == "host:5000"
    with pytest.raises(ValueError):
        check_registry("host/repo:5000")


def test_the_pushed_name_is_the_registry_then_the_local_name():
    assert pushed_name("localhost:5001", LOCAL) == f"localhost:5001/{LOCAL}"
    assert pushed_name(" ghcr.io/team ", LOCAL) == f"ghcr.io/team/{LOCAL}"
    with pytest.raises(ValueError):
        pushed_name("http://localhost:5001", LOCAL)


@given(st.text(max_size=80) | st.from_regex(r"[a-zA-Z0-9.:/_-]{0,40}", fullmatch=True))
@settings(max_examples=400, deadline=None, derandomize=True, database=None)
def test_any_text_is_a_registry_that_names_a_valid_image_or_a_value_error(text):
    try:
        registry = check_registry(text)
    except ValueError as e:
        assert str(e)
        return
    name = pushed_name(registry, "distml:abc")
    assert not any(ch.isspace() for ch in name)
    assert is_docker_reference(name), name


# ------------------------------------------------------------------ push
class Recorder:
    """A ``c`` whose ``run`` records each command; ``push`` fails when asked."""

    def __init__(self, push_exit: int = 0) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self.push_exit = push_exit

    def run(self, command: str, **kwargs: Any) -> Result:
        self.ran.append((command, kwargs))
        failed = " push " in command and self.push_exit
        return Result(command=command, exited=self.push_exit if failed else 0)


def test_push_tags_then_pushes_and_returns_the_pushed_name():
    c, said = Recorder(), []
    remote = push(c, "docker", LOCAL, "registry.example.com/ml", said.append)
    assert remote == f"registry.example.com/ml/{LOCAL}"
    assert [cmd for cmd, _ in c.ran] == [
        f"docker tag {LOCAL} registry.example.com/ml/{LOCAL}",
        f"docker push registry.example.com/ml/{LOCAL}",
    ]
    assert said == [f"pushing {remote}"]


def test_push_uses_the_docker_it_is_given():
    c = Recorder()
    push(c, "podman", LOCAL, "localhost:5001", lambda _: None)
    assert [cmd.split()[0] for cmd, _ in c.ran] == ["podman", "podman"]


def test_a_failed_push_says_what_to_check():
    c = Recorder(push_exit=1)
    with pytest.raises(ImageError) as e:
        push(c, "docker", LOCAL, "registry.example.com:5000/ml", lambda _: None)
    message = str(e.value)
    assert f"registry.example.com:5000/ml/{LOCAL}" in message
    assert "exit 1" in message
    assert "insecure-registries" in message
    assert "`docker login registry.example.com:5000`" in message


def test_a_bad_registry_pushes_nothing():
    c = Recorder()
    with pytest.raises(ValueError):
        push(c, "docker", LOCAL, "http://localhost:5001", lambda _: None)
    assert c.ran == []


DIGEST = "sha256:" + "ab" * 32
PUSH_OUTPUT = (
    "The push refers to repository [localhost:5001/distml]\n"
    "5f70bf18a086: Layer already exists\n"
    f"fb1a765b8c9c: digest: {DIGEST} size: 2416\n"
)


def test_push_returns_the_name_pinned_to_the_digest_docker_printed():
    class Pushing(Recorder):
        def run(self, command: str, **kwargs: Any) -> Result:
            self.ran.append((command, kwargs))
            return Result(command=command, stdout=PUSH_OUTPUT if " push " in command else "")

    assert push(Pushing(), "docker", LOCAL, "localhost:5001", lambda _: None) == (
        f"localhost:5001/{LOCAL}@{DIGEST}"
    )


@pytest.mark.parametrize(
    "output, digest",
    [
        (PUSH_OUTPUT, DIGEST),
        ("", None),
        ("digest: sha256:abc size: 1", None),  # too short: not a digest
        (
            f"x: digest: {DIGEST} size: 1\ny: digest: sha256:{'cd' * 32} size: 2",
            "sha256:" + "cd" * 32,
        ),
    ],
)
def test_pushed_digest(output, digest):
    assert pushed_digest(output) == digest


@given(st.text())
def test_pushed_digest_of_any_output_is_none_or_a_digest(output):
    found = pushed_digest(output)
    assert found is None or (found.startswith("sha256:") and len(found) == 71 and found in output)
