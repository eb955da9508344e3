"""Unit tests for ml.data and ml.ingest: search order, download, IDX reading, tfds preparation.

Offline: every download goes to a loopback server or a refusing loopback port.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import re
import socket
import struct
from pathlib import Path

import numpy as np
import pytest

from ml import data, ingest, raw
from ml.contract import IngestResult, read_ingest_line

pytestmark = pytest.mark.usefixtures("isolated_data_places")

ALL_FILES = tuple(data.FILES)


def _link_files(src: Path, dst: Path, names=ALL_FILES) -> Path:
    """Make ``dst`` hold symlinks to ``names`` in ``src``."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        (dst / name).symlink_to(src / name)
    return dst


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


# --------------------------------------------------------------------------- constants


def test_constants_match_the_published_files():
    assert len(data.CLASS_NAMES) == 10
    assert data.CLASS_NAMES[0] == "T-shirt/top" and data.CLASS_NAMES[9] == "Ankle boot"
    assert set(data.FILES) == {
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    }
    assert data.FILES["train-images-idx3-ubyte.gz"].size == 26_421_880
    assert all(len(spec.sha256) == 64 for spec in data.FILES.values())


def test_files_agree_with_tfds_checksums():
    """Our table must be what the tfds builder will check the manual dir against."""
    import tensorflow_datasets as tfds

    table = Path(tfds.__file__).parent / "url_checksums" / "fashion_mnist.txt"
    rows = [line.split("\t") for line in table.read_text().splitlines() if line.strip()]
    tfds_files = {Path(url).name: (int(size), sha) for url, size, sha, *_ in rows}
    assert tfds_files == {name: (s.size, s.sha256) for name, s in data.FILES.items()}
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
    assert data.locate_raw_files(log=lines.append) == keras
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
    assert data.locate_raw_files(log=lines.append) == env_dir
    assert lines == [f"data: {env_dir} (DISTML_DATA_DIR): found, sizes and sha256 ok"]


def test_locate_source_dir_beats_env(isolated_data_places, shared_data_dir, monkeypatch, tmp_path):
    env_dir = _link_files(shared_data_dir, tmp_path / "env")
    arg_dir = _link_files(shared_data_dir, tmp_path / "arg")
    monkeypatch.setenv("DISTML_DATA_DIR", str(env_dir))
    lines: list[str] = []
    assert data.locate_raw_files(source_dir=arg_dir, log=lines.append) == arg_dir
    assert "--source-dir" in lines[0]


def test_nothing_anywhere_lists_every_place_tried(isolated_data_places, tmp_path, dead_url):
    debian, keras = isolated_data_places
    src = tmp_path / "src"
    lines: list[str] = []
    with pytest.raises(data.DataError) as err:
        data.locate_raw_files(source_dir=src, download_dir=tmp_path / "dl", log=lines.append)
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
    with pytest.raises(data.DataError) as err:
        data.locate_raw_files(source_dir=src, log=lambda _: None)
    msg = str(err.value)
    assert str(bad) in msg
    assert data.FILES[bad.name].sha256 in msg
    assert hashlib.sha256(bad.read_bytes()).hexdigest() in msg
    assert "Delete" in msg


# --------------------------------------------------------------------------- download


def test_download_from_mirror(
    isolated_data_places, shared_data_dir, http_mirror, tmp_path, dead_url
):
    url = http_mirror(shared_data_dir)
    dest = tmp_path / "dl"
    lines: list[str] = []
    assert data.locate_raw_files(mirror=url, download_dir=dest, log=lines.append) == dest
    assert _leftovers(dest) == sorted(ALL_FILES)
    for name, spec in data.FILES.items():
        assert hashlib.sha256((dest / name).read_bytes()).hexdigest() == spec.sha256
    downloads = [line for line in lines if "downloading" in line]
    assert len(downloads) == 4 and all(url in line for line in downloads)
    # The files are in the download dir now: a second call reuses them, downloads nothing.
    lines.clear()
    assert data.locate_raw_files(mirror=dead_url, download_dir=dest, log=lines.append) == dest
    assert not [line for line in lines if "downloading" in line]


def test_download_defaults_to_keras_dir_and_env_mirror(
    isolated_data_places, shared_data_dir, http_mirror, monkeypatch
):
    _, keras = isolated_data_places
    monkeypatch.setenv("DISTML_DATA_MIRROR", http_mirror(shared_data_dir).rstrip("/"))
    assert data.locate_raw_files(log=lambda _: None) == keras
    assert _leftovers(keras) == sorted(ALL_FILES)


def test_download_completes_a_partial_download_dir(
    isolated_data_places, shared_data_dir, http_mirror, tmp_path
):
    dest = _link_files(shared_data_dir, tmp_path / "dl", ALL_FILES[:3])
    lines: list[str] = []
    data.locate_raw_files(mirror=http_mirror(shared_data_dir), download_dir=dest, log=lines.append)
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
    with pytest.raises(data.DataError) as err:
        data.locate_raw_files(mirror=url, download_dir=dest, log=lambda _: None)
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
    with pytest.raises(data.DataError, match=r"truncated download: got 123,456 of 26,421,880"):
        data.locate_raw_files(mirror=url, download_dir=tmp_path / "dl", log=lambda _: None)
    assert _leftovers(tmp_path / "dl") == []


def test_checksum_mismatch_from_mirror(
    isolated_data_places, shared_data_dir, http_mirror, tmp_path
):
    name = "t10k-images-idx3-ubyte.gz"
    modified = bytearray((shared_data_dir / name).read_bytes())
    modified[5000] ^= 0xFF  # same size, different bytes
    url = http_mirror(_mirror_copy(shared_data_dir, tmp_path / "mirror", name, bytes(modified)))
    dest = tmp_path / "dl"
    with pytest.raises(data.DataError) as err:
        data.locate_raw_files(mirror=url, download_dir=dest, log=lambda _: None)
    msg = str(err.value)
    assert f"{name}: sha256 mismatch" in msg
    assert data.FILES[name].sha256 in msg and hashlib.sha256(modified).hexdigest() in msg
    assert name not in _leftovers(dest)
    assert not [n for n in _leftovers(dest) if n.endswith(".part")]


def test_http_error_from_mirror(isolated_data_places, http_mirror, tmp_path):
    url = http_mirror(tmp_path / "empty-mirror")
    (tmp_path / "empty-mirror").mkdir()
    with pytest.raises(data.DataError, match=r"HTTP 404"):
        data.locate_raw_files(mirror=url, download_dir=tmp_path / "dl", log=lambda _: None)
    assert _leftovers(tmp_path / "dl") == []


def test_unreachable_mirror(isolated_data_places, dead_url, tmp_path):
    with pytest.raises(data.DataError) as err:
        data.locate_raw_files(mirror=dead_url, download_dir=tmp_path / "dl", log=lambda _: None)
    assert "cannot reach the mirror" in str(err.value) and dead_url in str(err.value)
    assert _leftovers(tmp_path / "dl") == []


def test_silent_mirror_times_out(isolated_data_places, tmp_path):
    """A server that accepts the connection but never answers is cut off by the timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # the kernel completes the handshake; nobody ever responds
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        with pytest.raises(data.DataError, match=r"timed out"):
            data.locate_raw_files(
                mirror=url, download_dir=tmp_path / "dl", log=lambda _: None, timeout=0.3
            )
    assert _leftovers(tmp_path / "dl") == []


# --------------------------------------------------------------------------- IDX reading


def _idx(magic: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    return struct.pack(f">I{len(dims)}I", magic, *dims) + payload


def _write(path: Path, raw: bytes, compress: bool = True) -> Path:
    path.write_bytes(gzip.compress(raw) if compress else raw)
    return path


def test_read_idx_images_gz_and_labels_plain(tmp_path):
    pixels = bytes(range(2 * 3 * 4))
    images = data.read_idx(_write(tmp_path / "i.gz", _idx(0x803, (2, 3, 4), pixels)))
    assert images.dtype == np.uint8 and images.shape == (2, 3, 4)
    assert images[1, 2, 3] == 23
    images[0, 0, 0] = 7  # writable
    labels = data.read_idx(_write(tmp_path / "l", _idx(0x801, (3,), b"\x01\x02\x09"), False))
    assert labels.tolist() == [1, 2, 9]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_idx(0x802, (3, 1), b"\0\0\0"), r"magic 0x00000802"),
        (_idx(0x00000D03, (1, 1, 1), b"\0"), r"magic 0x00000d03"),  # float32 images
        (_idx(0x803, (2, 2, 2), b"\0" * 7), r"truncated: dimensions \(2, 2, 2\) need 8 .* found 7"),
        (_idx(0x801, (3,), b"\0" * 4), r"extra data: dimensions \(3,\) need 3 .* found 4"),
        (struct.pack(">II", 0x803, 2), r"header truncated"),
        (b"\0\0", r"too short"),
    ],
    ids=["wrong type", "float data", "truncated payload", "extra bytes", "short header", "tiny"],
)
def test_read_idx_rejects(tmp_path, raw, message):
    path = _write(tmp_path / "bad-idx1-ubyte.gz", raw)
    with pytest.raises(data.DataError, match=message) as err:
        data.read_idx(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("damage", ["cut stream", "garbage after header", "bad crc"])
def test_read_idx_bad_gzip(tmp_path, damage):
    good = gzip.compress(_idx(0x801, (100,), bytes(100)))
    if damage == "cut stream":
        raw = good[: len(good) // 2]
    elif damage == "garbage after header":
        raw = good[:10] + b"\xff" * 40
    else:
        raw = good[:-8] + b"\0\0\0\0" + good[-4:]
    path = tmp_path / "bad.gz"
    path.write_bytes(raw)
    with pytest.raises(data.DataError, match=r"corrupt gzip") as err:
        data.read_idx(path)
    assert str(path) in str(err.value)


def test_read_idx_missing_file(tmp_path):
    with pytest.raises(data.DataError, match=r"cannot read"):
        data.read_idx(tmp_path / "nope.gz")


# --------------------------------------------------------------------------- load_arrays


def _synthetic_raw_dir(directory: Path, n_train=6, n_test=4, train_labels=None, size=28) -> Path:
    """Four small IDX .gz files with the real names (checksums will not match)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, n, n_labels in (
        ("train", n_train, n_train if train_labels is None else train_labels),
        ("t10k", n_test, n_test),
    ):
        images = rng.integers(0, 256, (n, size, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n_labels, dtype=np.uint8)
        _write(
            directory / f"{prefix}-images-idx3-ubyte.gz",
            _idx(0x803, images.shape, images.tobytes()),
        )
        _write(
            directory / f"{prefix}-labels-idx1-ubyte.gz",
            _idx(0x801, labels.shape, labels.tobytes()),
        )
    return directory


def test_load_arrays_synthetic(tmp_path):
    (x_train, y_train), (x_test, y_test) = data.load_arrays(
        _synthetic_raw_dir(tmp_path / "raw"), verify=False
    )
    assert x_train.shape == (6, 28, 28) and y_train.shape == (6,)
    assert x_test.shape == (4, 28, 28) and y_test.shape == (4,)
    assert {a.dtype for a in (x_train, y_train, x_test, y_test)} == {np.dtype(np.uint8)}


def test_load_arrays_count_mismatch(tmp_path):
    raw = _synthetic_raw_dir(tmp_path / "raw", train_labels=5)
    with pytest.raises(data.DataError, match=r"train split has 6 images .* but 5 labels"):
        data.load_arrays(raw, verify=False)


def test_load_arrays_wrong_image_size(tmp_path):
    raw = _synthetic_raw_dir(tmp_path / "raw", size=27)
    with pytest.raises(data.DataError, match=r"\(N, 28, 28\), got \(6, 27, 28\)"):
        data.load_arrays(raw, verify=False)


def test_load_arrays_verify_rejects_synthetic_files(tmp_path):
    raw = _synthetic_raw_dir(tmp_path / "raw")
    with pytest.raises(data.DataError, match=r"not the original Fashion-MNIST file"):
        data.load_arrays(raw)


def test_load_arrays_missing_file(tmp_path):
    raw = _synthetic_raw_dir(tmp_path / "raw")
    (raw / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(data.DataError, match=r"t10k-labels-idx1-ubyte.gz does not exist"):
        data.load_arrays(raw, verify=False)


def test_load_arrays_real(shared_data_dir):
    (x_train, y_train), (x_test, y_test) = data.load_arrays(shared_data_dir)
    assert x_train.shape == (60000, 28, 28) and x_test.shape == (10000, 28, 28)
    assert np.bincount(y_train).tolist() == [6000] * 10
    assert np.bincount(y_test).tolist() == [1000] * 10


# --------------------------------------------------------------------------- tfds


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


def test_prepare_real_files(prepared_volume, shared_data_dir):
    import tensorflow as tf
    import tensorflow_datasets as tfds

    volume, result, lines = prepared_volume
    assert result is True
    assert any(str(shared_data_dir) in line and "found" in line for line in lines)
    assert lines[-1].startswith("prepared fashion_mnist at ")
    assert data.is_prepared(volume)
    # Only the dataset is left: no temporary download dir, nothing beside datasets/.
    assert _leftovers(volume) == ["datasets"]
    assert _leftovers(data.datasets_dir(volume)) == ["fashion_mnist"]

    kwargs = dict(data_dir=str(data.datasets_dir(volume)), download=False, as_supervised=True)
    train = tfds.load("fashion_mnist", split="train", **kwargs)
    test = tfds.load("fashion_mnist", split="test", **kwargs)
    assert int(train.cardinality()) == 60000
    assert sum(1 for _ in test) == 10000
    image, label = next(iter(test))
    assert image.shape == (28, 28, 1) and image.dtype == tf.uint8
    assert label.dtype == tf.int64


def test_prepare_again_does_nothing(prepared_volume, shared_data_dir):
    volume, _, _ = prepared_volume
    before = _snapshot(volume)
    lines: list[str] = []
    assert data.prepare(volume, source_dir=shared_data_dir, log=lines.append) is False
    assert lines == [f"dataset already prepared at {data.datasets_dir(volume) / 'fashion_mnist'}"]
    assert _snapshot(volume) == before


def test_load_split_from_prepared_volume(prepared_volume):
    import tensorflow as tf

    volume, _, _ = prepared_volume
    lines: list[str] = []
    ds = data.load_split(volume, "test", log=lines.append)
    assert lines == []  # no fallback
    assert int(ds.cardinality()) == 10000
    image_spec, label_spec = ds.element_spec
    assert image_spec.shape == (28, 28, 1) and image_spec.dtype == tf.uint8
    assert label_spec.shape == () and label_spec.dtype == tf.int64


def test_ingest_cli_on_prepared_volume(prepared_volume, capsys):
    volume, _, _ = prepared_volume
    assert ingest.main(["--volume", str(volume)]) == 0
    out = capsys.readouterr().out
    assert "already prepared" in out and str(volume) in out
    assert read_ingest_line(out) == IngestResult(
        IngestResult.ALREADY_PREPARED, str(data.datasets_dir(volume) / "fashion_mnist")
    )


def test_is_prepared_false_for_empty_volume(tmp_path):
    assert data.is_prepared(tmp_path) is False
    assert data.datasets_dir(tmp_path) == tmp_path / "datasets"


@pytest.mark.parametrize("via", ["source_dir", "DISTML_DATA_DIR"])
def test_load_split_falls_back_to_raw_files(shared_data_dir, tmp_path, monkeypatch, via):
    import tensorflow as tf

    if via == "DISTML_DATA_DIR":
        monkeypatch.setenv("DISTML_DATA_DIR", str(shared_data_dir))
        source_dir = None
    else:
        source_dir = shared_data_dir
    lines: list[str] = []
    counts = {}
    for split in ("train", "test"):
        ds = data.load_split(tmp_path / "volume", split, source_dir=source_dir, log=lines.append)
        counts[split] = int(ds.cardinality())
        image, label = next(iter(ds))
        assert image.shape == (28, 28, 1) and image.dtype == tf.uint8
        assert label.shape == () and label.dtype == tf.int64
    assert counts == {"train": 54961, "test": 10000}
    assert "no prepared dataset" in lines[0] and "ml.ingest" in lines[0]
    origin = "--source-dir" if via == "source_dir" else via
    assert any(f"({origin}): found" in line for line in lines)
    assert not (tmp_path / "volume").exists()  # reading never writes to the volume


def test_load_split_unknown_split(tmp_path):
    with pytest.raises(
        data.DataError, match=r"unknown split 'val': use one of train, validation, test"
    ):
        data.load_split(tmp_path, "val")


# --------------------------------------------------------------------------- CLI


def test_ingest_cli_error_exit_code(tmp_path, capsys):
    code = ingest.main(["--volume", str(tmp_path / "v"), "--source-dir", str(tmp_path / "none")])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: cannot find the Fashion-MNIST files")
    assert "Traceback" not in captured.err
    assert str(tmp_path / "none") in captured.out  # the search is reported as it happens


@pytest.mark.parametrize(
    ("prepared_now", "status"),
    [(True, IngestResult.PREPARED), (False, IngestResult.ALREADY_PREPARED)],
)
def test_ingest_cli_ends_with_its_result_as_one_json_line(
    tmp_path, capsys, monkeypatch, prepared_now, status
):
    def fake_prepare(volume, source_dir=None, mirror=None, log=print):
        log("what prepare says")
        return prepared_now

    monkeypatch.setattr(data, "prepare", fake_prepare)
    assert ingest.main(["--volume", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "what prepare says"  # the human lines stay
    dataset = str(tmp_path / "datasets" / "fashion_mnist")
    assert json.loads(lines[-1]) == {"ingest": status, "dataset": dataset}
    result = read_ingest_line("\n".join(lines))
    assert (result.status, result.dataset, result.changed) == (status, dataset, prepared_now)


def test_ingest_cli_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        ingest.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--volume", "--source-dir", "--mirror"):
        assert flag in out


def test_every_flag_the_fix_list_says_to_pass_is_a_flag_of_invoke_up():
    # The list is printed by `invoke up` (through ml.ingest): a flag it names must exist there.
    import inspect

    import tasks
    from ml.raw import FIXES

    up_flags = {name.replace("_", "-") for name in inspect.signature(tasks.up.body).parameters}
    told = re.findall(r"pass (--[a-z-]+)", FIXES)
    assert told, FIXES
    assert [flag for flag in told if flag[2:] not in up_flags] == []
