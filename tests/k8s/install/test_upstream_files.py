"""The pinned upstream files (``k8s/install/upstream.lock.json``, ``k8s.install.upstream_files``):
the lock pins every URL the cluster path applies and reads back as written (that it agrees with
the local mirrors: tests/tools/test_upstream_lock.py); a file comes from the mirror, the cache or
a verified download, and a bad or cut-off download is refused and never cached; what cannot be
had says, in one line, what to set."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8s.install import upstream_files as uf
from k8s.install import versions
from ml import contract

REPO = Path(__file__).resolve().parents[3]
BODY = b"kind: ConfigMap\n" * 1000
PROPERTY = settings(
    max_examples=60, derandomize=True, database=None, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)  # fmt: skip


def pin_of(body: bytes, url: str, **kw) -> uf.Pin:
    digest = hashlib.sha256(body).hexdigest()
    return uf.Pin(name=kw.pop("name", "demo/file.yaml"), url=url, sha256=digest,
                  size=len(body), mirror="manifest", **kw)  # fmt: skip


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache under tmp_path, no mirror named, no host remembered as unreachable."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for env in uf.MIRROR_ENV.values():
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setattr(uf, "_UNREACHABLE", {})
    return tmp_path / "xdg" / "distml" / "upstream"


def cached_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file()) if cache.exists() else []


# --------------------------------------------------------------------------- the lock


def test_the_lock_pins_every_url_the_cluster_path_applies():
    urls = [v for k, v in vars(versions).items() if k.endswith(("_URL", "_KUSTOMIZE"))]
    assert len(urls) >= 10
    assert sorted(set(urls) - set(uf.by_url())) == []


def test_ci_names_every_local_mirror():
    ci = (REPO / ".ci" / "run").read_text()
    for env in (*uf.MIRROR_ENV.values(), contract.DATA_DIR_ENV):
        assert f'export {env}="${{{env}:-$shared/' in ci, env


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=70),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["files", "name", "url", "sha256", "size", "mirror", "aliases",
                         "kustomize", "group", "kind", "x"]), inner, max_size=9),
    max_leaves=30,
))  # fmt: skip
@PROPERTY
def test_any_json_is_pins_or_one_clear_error(value):
    try:
        found = uf.parse_lock(json.dumps(value))
    except uf.UpstreamError as e:
        assert str(e).startswith(uf.LOCK_FILE.name) and "\n" not in str(e)
    else:
        assert all(isinstance(p, uf.Pin) for p in found)


_pins = st.builds(
    uf.Pin,
    name=st.from_regex(r"[a-z0-9_-]{1,8}(/[a-z0-9_-]{1,8})?(\.yaml)?", fullmatch=True),
    url=st.text(min_size=1, max_size=30),
    sha256=st.from_regex(r"[0-9a-f]{64}", fullmatch=True),
    size=st.integers(0, 2**40),
    mirror=st.sampled_from(sorted(uf.MIRROR_ENV)),
    aliases=st.lists(st.text(min_size=1, max_size=20), max_size=2).map(tuple),
    kustomize=st.booleans(),
    group=st.text(max_size=10),
    kind=st.text(max_size=10),
)


def _urls_unique(found: list[uf.Pin]) -> bool:
    urls = [u for p in found for u in (p.url, *p.aliases)]
    return len(set(urls)) == len(urls)


@given(st.lists(_pins, max_size=4, unique_by=lambda p: p.name).filter(_urls_unique))
@PROPERTY
def test_a_dumped_lock_reads_back_the_same(found):
    assert uf.parse_lock(uf.dump_lock(found, "about")) == tuple(found)


def test_the_committed_lock_reads_back_the_same():
    about = json.loads(uf.LOCK_FILE.read_text())["about"]
    assert uf.dump_lock(uf.pins(), about) == uf.LOCK_FILE.read_text()


# --------------------------------------------------------------------------- getting a file


def test_a_named_mirror_is_used_and_its_file_verified(tmp_path, monkeypatch, dead_url):
    pin = pin_of(BODY, dead_url + "file.yaml")
    (tmp_path / "mirror" / "demo").mkdir(parents=True)
    monkeypatch.setenv("DISTML_UPSTREAM_DIR", str(tmp_path / "mirror"))
    with pytest.raises(uf.Unavailable, match=r"demo/file.yaml is not in \$DISTML_UPSTREAM_DIR"):
        uf.path(pin)  # the mirror is the only place tried: no download
    (tmp_path / "mirror" / pin.name).write_bytes(BODY)
    assert uf.path(pin) == tmp_path / "mirror" / pin.name
    (tmp_path / "mirror" / pin.name).write_bytes(BODY[:-1] + b"!")
    with pytest.raises(uf.UpstreamError, match="is not the pinned file: sha256"):
        uf.path(pin)


def test_a_named_mirror_lacking_a_file_falls_back_to_the_cache_never_a_download(
    isolated, tmp_path, monkeypatch, dead_url
):
    """What the offline run needs for a file the kind build rebuilt (KEDA's): the mirror
    lacks it, the cache holds it verified; a damaged cached copy is deleted, not used."""
    pin = pin_of(BODY, dead_url + "file.yaml", made="not the published bytes: rebuilt by X")
    (tmp_path / "mirror").mkdir()
    monkeypatch.setenv("DISTML_UPSTREAM_DIR", str(tmp_path / "mirror"))
    with pytest.raises(uf.Unavailable) as e:
        uf.path(pin)
    message = str(e.value)
    assert "\n" not in message and "nor in the cache" in message
    assert message.endswith("add it there; not the published bytes: rebuilt by X")
    saved = isolated / pin.sha256 / "file.yaml"
    saved.parent.mkdir(parents=True)
    saved.write_bytes(BODY)
    assert uf.path(pin) == saved
    saved.write_bytes(BODY[:-1] + b"!")
    with pytest.raises(uf.Unavailable, match="nor in the cache"):
        uf.path(pin)
    assert not saved.exists()


def test_the_wrong_download_of_a_rebuilt_file_says_the_pin_is_a_rebuild(isolated, tmp_path):
    source = tmp_path / "published.yaml"
    source.write_bytes(BODY + b"# published with other bytes\n")
    pin = pin_of(BODY, source.as_uri(), made="not the published bytes: rebuilt by X")
    with pytest.raises(uf.UpstreamError, match="not cached; not the published bytes: rebuilt by"):
        uf.path(pin)
    assert cached_files(isolated) == []


def test_every_pin_made_here_says_what_makes_it_again_and_whether_it_is_the_published_file():
    made = {p.url: p.made for p in uf.pins() if p.made}
    assert [*made] == [versions.KEDA_URL, *versions.PROMETHEUS_OPERATOR_CRDS.values()]
    assert all("python -m integration.kindbuild" in m for m in made.values())
    assert made[versions.KEDA_URL].startswith("not the published bytes: ")
    for url in versions.PROMETHEUS_OPERATOR_CRDS.values():
        assert made[url].startswith("the published file, ") and "operator-crds" in made[url]


def test_a_file_made_here_is_stored_in_the_cache_only_when_it_is_the_pinned_one(isolated, tmp_path):
    pin = pin_of(BODY, "https://example.invalid/file.yaml", made="made by X")
    made = tmp_path / "made.yaml"
    with pytest.raises(uf.UpstreamError, match="not made"):
        uf.store(pin, made)
    made.write_bytes(BODY + b"!")
    with pytest.raises(uf.UpstreamError, match=r"is not the pinned demo/file\.yaml: "):
        uf.store(pin, made)
    assert cached_files(isolated) == []
    made.write_bytes(BODY)
    assert uf.store(pin, made) == isolated / pin.sha256 / "file.yaml"
    assert uf.path(pin).read_bytes() == BODY  # found there, never downloaded
    assert uf.store(pin, made) == isolated / pin.sha256 / "file.yaml"  # again: unchanged


def test_a_local_copy_is_the_named_mirrors_else_the_pins_own(tmp_path, monkeypatch, dead_url):
    pin = pin_of(BODY, dead_url + "file.yaml")
    monkeypatch.setattr(uf, "by_url", lambda: {pin.url: pin})
    for where in ("setting", "env"):
        (tmp_path / where / "demo").mkdir(parents=True)
        (tmp_path / where / pin.name).write_bytes(BODY)
    monkeypatch.setenv("DISTML_UPSTREAM_DIR", str(tmp_path / "env"))
    named = uf.local_copy(pin.url, str(tmp_path / "setting"), "cluster.manifest_mirror")
    assert named == tmp_path / "setting" / pin.name
    assert uf.local_copy(pin.url) == tmp_path / "env" / pin.name
    with pytest.raises(uf.Unavailable, match=r"not in cluster\.manifest_mirror"):
        uf.local_copy(pin.url, str(tmp_path / "empty"), "cluster.manifest_mirror")
    with pytest.raises(uf.UpstreamError, match="is not pinned"):
        uf.local_copy(dead_url + "other.yaml")


def test_a_download_is_verified_cached_and_then_needs_no_server(isolated, tmp_path, http_mirror):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "file.yaml").write_bytes(BODY)
    pin = pin_of(BODY, http_mirror(tmp_path / "site") + "file.yaml")
    got = uf.path(pin)
    assert got == isolated / pin.sha256 / "file.yaml" and got.read_bytes() == BODY
    assert cached_files(isolated) == [got]
    (tmp_path / "site" / "file.yaml").unlink()  # the server has nothing now
    assert uf.path(pin) == got
    got.write_bytes(b"damaged")  # a damaged cache entry is fetched again
    (tmp_path / "site" / "file.yaml").write_bytes(BODY)
    assert uf.path(pin).read_bytes() == BODY


@pytest.mark.parametrize("how", ["cut-off", "short", "corrupt", "longer"])
def test_a_bad_download_is_refused_and_not_cached(isolated, tmp_path, http_mirror, how):
    """Cut off (the connection drops, or a short body): unavailable for now; other bytes,
    however many: refused as the wrong file. Neither is cached."""
    served = {"short": BODY[:-100], "corrupt": b"X" + BODY[1:], "longer": BODY + b"more"}
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "file.yaml").write_bytes(served.get(how, BODY))
    url = http_mirror(tmp_path / "site", truncate={"file.yaml": 100} if how == "cut-off" else {})
    pin = pin_of(BODY, url + "file.yaml")
    error = uf.Unavailable if how in ("cut-off", "short") else uf.UpstreamError
    with pytest.raises(error) as e:
        uf.path(pin)
    assert "\n" not in str(e.value)
    assert cached_files(isolated) == []


@given(st.binary(max_size=300))
@PROPERTY
def test_any_other_bytes_are_refused_and_nothing_is_cached(isolated, tmp_path, served):
    body = b"the pinned bytes\n" * 10
    source = tmp_path / "served.yaml"
    source.write_bytes(served)
    pin = pin_of(body, source.as_uri())
    if served == body:
        assert uf.path(pin).read_bytes() == body
        shutil.rmtree(isolated)  # the next example starts with an empty cache again
        return
    with pytest.raises(uf.UpstreamError):  # the wrong file, or (shorter) cut off
        uf.path(pin)
    assert cached_files(isolated) == []


def test_an_unreachable_host_is_one_fast_line_naming_the_mirror_variable(isolated, dead_url):
    pins = [pin_of(BODY, f"{dead_url}{n}.yaml", name=f"demo/{n}.yaml") for n in range(3)]
    start = time.monotonic()
    for pin in pins:
        with pytest.raises(uf.Unavailable) as e:
            uf.path(pin)
        message = str(e.value)
        assert "\n" not in message and "set DISTML_UPSTREAM_DIR to a directory holding" in message
    assert time.monotonic() - start < uf.TIMEOUT
    assert cached_files(isolated) == [] and not isolated.exists()


def test_a_kustomize_build_is_never_downloaded_but_taken_from_the_cache(isolated):
    pin = pin_of(BODY, "github.com/example/repo.git/overlay?ref=v1", kustomize=True)
    with pytest.raises(uf.Unavailable, match=r"built by `kubectl kustomize github\.com/example"):
        uf.path(pin)
    saved = isolated / pin.sha256 / "file.yaml"
    saved.parent.mkdir(parents=True)
    saved.write_bytes(BODY)
    assert uf.path(pin) == saved
