"""ml.data.raw: finding the Fashion-MNIST files: the search order (--source-dir, DISTML_DATA_DIR,
Debian's package, Keras's cache), each place reported, a corrupt copy an error; the download
from a mirror with truncated, corrupt, failing, unreachable and silent mirrors; the checksum
table against tfds's, and the fix list against ``invoke up``'s flags.

Offline: every download goes to a loopback server or a refusing loopback port.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import socket
from pathlib import Path

import pytest

from ml.data import dataset, raw
from tests.support.listing import leftovers as _leftovers

pytestmark = pytest.mark.usefixtures("isolated_data_places")

ALL_FILES = tuple(dataset.FILES)


def _link_files(src: Path, dst: Path, names=ALL_FILES) -> Path:
    """Make ``dst`` hold symlinks to ``names`` in ``src``."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        (dst / name).symlink_to(src / name)
    return dst


def test_files_agree_with_tfds_checksums():
    """Our table must be what the tfds builder will check the manual dir against."""
    import tensorflow_datasets as tfds

    table = Path(tfds.__file__).parent / "url_checksums" / "fashion_mnist.txt"
    rows = [line.split("\t") for line in table.read_text().splitlines() if line.strip()]
    tfds_files = {Path(url).name: (int(size), sha) for url, size, sha, *_ in rows}
    assert tfds_files == {name: (s.size, s.sha256) for name, s in dataset.FILES.items()}
    assert all(url.startswith(raw.DEFAULT_MIRROR) for url, *_ in rows)


# --------------------------------------------------------------------------- search order


def test_search_places_default_order(isolated_data_places):
    debian, keras = isolated_data_places
    assert raw.search_places() == [debian, keras]


def test_search_places_env_first(isolated_data_places, monkeypatch, tmp_path):
    debian, keras = isolated_data_places
    monkeypatch.setenv("DISTML_DATA_DIR", str(tmp_path / "env"))
    assert raw.search_places() == [tmp_path / "env", debian, keras]


def test_search_places_source_dir_beats_env(isolated_data_places, monkeypatch, tmp_path):
    debian, keras = isolated_data_places
    monkeypatch.setenv("DISTML_DATA_DIR", str(tmp_path / "env"))
    assert raw.search_places(tmp_path / "arg") == [tmp_path / "arg", debian, keras]


def test_system_places_defaults():
    """The real (unpatched) constants, from a private copy of the module."""
    spec = importlib.util.spec_from_file_location("_pristine_ml_raw", raw.__file__)
    pristine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pristine)
    assert str(pristine.DEBIAN_DIR) == "/usr/share/datasets/fashion-mnist"
    assert pristine.KERAS_DIR.expanduser() == Path.home() / ".keras/datasets/fashion-mnist"


def test_locate_reports_each_place_and_uses_the_first_complete_one(
    isolated_data_places, shared_data_dir
):
    debian, keras = isolated_data_places
    _link_files(shared_data_dir, debian, ALL_FILES[:2])  # partial: skipped, reported
    _link_files(shared_data_dir, keras)
    lines: list[str] = []
    assert dataset.locate_raw_files(log=lines.append) == keras
    assert len(lines) == 2
    assert str(debian) in lines[0] and "missing: t10k-images-idx3-ubyte.gz" in lines[0]
    assert "train-images" not in lines[0]
    assert str(keras) in lines[1] and "found" in lines[1]


def test_locate_env_beats_system_places(
    isolated_data_places, shared_data_dir, monkeypatch, tmp_path
):
    debian, _ = isolated_data_places
    _link_files(shared_data_dir, debian)
    env_dir = _link_files(shared_data_dir, tmp_path / "env")
    monkeypatch.setenv("DISTML_DATA_DIR", str(env_dir))
    lines: list[str] = []
    assert dataset.locate_raw_files(log=lines.append) == env_dir
    assert lines == [f"data: {env_dir} (DISTML_DATA_DIR): found, sizes and sha256 ok"]


def test_locate_source_dir_beats_env(isolated_data_places, shared_data_dir, monkeypatch, tmp_path):
    env_dir = _link_files(shared_data_dir, tmp_path / "env")
    arg_dir = _link_files(shared_data_dir, tmp_path / "arg")
    monkeypatch.setenv("DISTML_DATA_DIR", str(env_dir))
    lines: list[str] = []
    assert dataset.locate_raw_files(source_dir=arg_dir, log=lines.append) == arg_dir
    assert "--source-dir" in lines[0]


def test_nothing_anywhere_lists_every_place_tried(isolated_data_places, tmp_path, dead_url):
    debian, keras = isolated_data_places
    src = tmp_path / "src"
    lines: list[str] = []
    with pytest.raises(dataset.DataError) as err:
        dataset.locate_raw_files(source_dir=src, download_dir=tmp_path / "dl", log=lines.append)
    msg = str(err.value)
    for place in (src, debian, keras):
        assert f"{place} (" in msg
    assert msg.index(str(src)) < msg.index(str(debian)) < msg.index(str(keras))
    assert f"download from {dead_url}" in msg and "cannot reach" in msg
    assert "--source-dir" in msg and "apt-get install dataset-fashion-mnist" in msg
    assert "DISTML_DATA_MIRROR" in msg
    assert len(lines) == 4  # three places + the download attempt
    assert not (tmp_path / "dl").exists()  # a failed download leaves no directory behind


def test_corrupted_file_in_a_place_is_an_error_not_skipped(
    isolated_data_places, shared_data_dir, tmp_path
):
    _, keras = isolated_data_places
    _link_files(shared_data_dir, keras)  # a good later place must not hide the problem
    src = _link_files(shared_data_dir, tmp_path / "src", ALL_FILES[1:])
    bad = src / "train-images-idx3-ubyte.gz"
    bad.write_bytes(b"\x1f\x8b not really fashion-mnist")
    with pytest.raises(dataset.DataError) as err:
        dataset.locate_raw_files(source_dir=src, log=lambda _: None)
    msg = str(err.value)
    assert str(bad) in msg
    assert dataset.FILES[bad.name].sha256 in msg
    assert hashlib.sha256(bad.read_bytes()).hexdigest() in msg
    assert "Delete" in msg


# --------------------------------------------------------------------------- download


def test_download_from_mirror(
    isolated_data_places, shared_data_dir, http_mirror, tmp_path, dead_url
):
    url = http_mirror(shared_data_dir)
    dest = tmp_path / "dl"
    lines: list[str] = []
    assert dataset.locate_raw_files(mirror=url, download_dir=dest, log=lines.append) == dest
    assert _leftovers(dest) == sorted(ALL_FILES)
    for name, spec in dataset.FILES.items():
        assert hashlib.sha256((dest / name).read_bytes()).hexdigest() == spec.sha256
    downloads = [line for line in lines if "downloading" in line]
    assert len(downloads) == 4 and all(url in line for line in downloads)
    # The files are in the download dir now: a second call reuses them, downloads nothing.
    lines.clear()
    assert dataset.locate_raw_files(mirror=dead_url, download_dir=dest, log=lines.append) == dest
    assert not [line for line in lines if "downloading" in line]


def test_download_defaults_to_keras_dir_and_env_mirror(
    isolated_data_places, shared_data_dir, http_mirror, monkeypatch
):
    _, keras = isolated_data_places
    monkeypatch.setenv("DISTML_DATA_MIRROR", http_mirror(shared_data_dir).rstrip("/"))
    assert dataset.locate_raw_files(log=lambda _: None) == keras
    assert _leftovers(keras) == sorted(ALL_FILES)


def test_download_completes_a_partial_download_dir(
    isolated_data_places, shared_data_dir, http_mirror, tmp_path
):
    dest = _link_files(shared_data_dir, tmp_path / "dl", ALL_FILES[:3])
    lines: list[str] = []
    dataset.locate_raw_files(
        mirror=http_mirror(shared_data_dir), download_dir=dest, log=lines.append
    )
    assert [line for line in lines if "downloading" in line] == [
        line for line in lines if "t10k-labels" in line and "downloading" in line
    ]
    assert _leftovers(dest) == sorted(ALL_FILES)


def _mirror_copy(shared: Path, directory: Path, name: str, content: bytes) -> Path:
    """A mirror directory with the real files except ``name``, which holds ``content``."""
    _link_files(shared, directory, [n for n in ALL_FILES if n != name])
    (directory / name).write_bytes(content)
    return directory


@pytest.mark.parametrize("how", ["connection dropped", "short file on the mirror"])
def test_truncated_download(isolated_data_places, shared_data_dir, http_mirror, tmp_path, how):
    name = "train-labels-idx1-ubyte.gz"
    real = (shared_data_dir / name).read_bytes()
    if how == "connection dropped":
        url = http_mirror(shared_data_dir, truncate={name: 1000})
    else:
        url = http_mirror(_mirror_copy(shared_data_dir, tmp_path / "mirror", name, real[:1000]))
    dest = tmp_path / "dl"
    with pytest.raises(dataset.DataError) as err:
        dataset.locate_raw_files(mirror=url, download_dir=dest, log=lambda _: None)
    msg = str(err.value)
    assert name in msg
    assert "truncated" in msg
    assert f"{len(real):,}" in msg
    # The verified file before it stays; nothing partial under the real name, no temp files.
    assert _leftovers(dest) == ["train-images-idx3-ubyte.gz"]


def test_truncated_download_with_full_content_length_says_truncated(
    isolated_data_places, shared_data_dir, http_mirror, tmp_path
):
    name = "train-images-idx3-ubyte.gz"
    url = http_mirror(shared_data_dir, truncate={name: 123_456})
    with pytest.raises(dataset.DataError, match=r"truncated download: got 123,456 of 26,421,880"):
        dataset.locate_raw_files(mirror=url, download_dir=tmp_path / "dl", log=lambda _: None)
    assert _leftovers(tmp_path / "dl") == []


def test_checksum_mismatch_from_mirror(
    isolated_data_places, shared_data_dir, http_mirror, tmp_path
):
    name = "t10k-images-idx3-ubyte.gz"
    modified = bytearray((shared_data_dir / name).read_bytes())
    modified[5000] ^= 0xFF  # same size, different bytes
    url = http_mirror(_mirror_copy(shared_data_dir, tmp_path / "mirror", name, bytes(modified)))
    dest = tmp_path / "dl"
    with pytest.raises(dataset.DataError) as err:
        dataset.locate_raw_files(mirror=url, download_dir=dest, log=lambda _: None)
    msg = str(err.value)
    assert f"{name}: sha256 mismatch" in msg
    assert dataset.FILES[name].sha256 in msg and hashlib.sha256(modified).hexdigest() in msg
    assert name not in _leftovers(dest)
    assert not [n for n in _leftovers(dest) if n.endswith(".part")]


def test_http_error_from_mirror(isolated_data_places, http_mirror, tmp_path):
    url = http_mirror(tmp_path / "empty-mirror")
    (tmp_path / "empty-mirror").mkdir()
    with pytest.raises(dataset.DataError, match=r"HTTP 404"):
        dataset.locate_raw_files(mirror=url, download_dir=tmp_path / "dl", log=lambda _: None)
    assert _leftovers(tmp_path / "dl") == []


def test_unreachable_mirror(isolated_data_places, dead_url, tmp_path):
    with pytest.raises(dataset.DataError) as err:
        dataset.locate_raw_files(mirror=dead_url, download_dir=tmp_path / "dl", log=lambda _: None)
    assert "cannot reach the mirror" in str(err.value) and dead_url in str(err.value)
    assert _leftovers(tmp_path / "dl") == []


def test_silent_mirror_times_out(isolated_data_places, tmp_path):
    """A server that accepts the connection but never answers is cut off by the timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # the kernel completes the handshake; nobody ever responds
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        with pytest.raises(dataset.DataError, match=r"timed out"):
            dataset.locate_raw_files(
                mirror=url, download_dir=tmp_path / "dl", log=lambda _: None, timeout=0.3
            )
    assert _leftovers(tmp_path / "dl") == []


def test_every_flag_the_fix_list_says_to_pass_is_a_flag_of_invoke_up():
    # The list is printed by `invoke up` (through ml.data.ingest): a flag it names must exist there.
    import inspect

    import tasks
    from ml.data.raw import FIXES

    up_flags = {name.replace("_", "-") for name in inspect.signature(tasks.up.body).parameters}
    told = re.findall(r"pass (--[a-z-]+)", FIXES)
    assert told, FIXES
    assert [flag for flag in told if flag[2:] not in up_flags] == []
