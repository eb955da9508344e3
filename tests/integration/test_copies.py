"""integration.copies, on canned kubectl: the copy check passes only when the copy is
refused and every object of the original keeps its uid and generation; the impostor
carries exactly the labels down selects by."""

from __future__ import annotations

import json

import pytest

from integration import byo_cluster, copies
from k8s import manifests

BEFORE = {
    "PersistentVolumeClaim/strategy-volume": ("u1", None),
    "TFJob/train-cnn": ("u2", 1),
}


def test_compare_names_what_is_gone_replaced_or_changed() -> None:
    assert copies.compare(BEFORE, dict(BEFORE)) == []
    after = {"TFJob/train-cnn": ("u3", 1)}
    assert copies.compare(BEFORE, after) == [
        "PersistentVolumeClaim/strategy-volume is gone",
        "TFJob/train-cnn was replaced (uid u2 -> u3)",
    ]
    assert copies.compare(BEFORE, {**BEFORE, "TFJob/train-cnn": ("u2", 2)}) == [
        "TFJob/train-cnn changed (generation 1 -> 2)"
    ]


def test_the_impostor_is_what_down_selects_by() -> None:
    obj = copies.impostor("abcd1234")
    selector = manifests.selector(instance="abcd1234")
    labels = obj["metadata"]["labels"]
    assert all(labels[k] == v for k, v in (p.split("=") for p in selector.split(",")))
    assert copies.INSTANCE_LABEL == manifests.INSTANCE_LABEL


@pytest.fixture
def original(monkeypatch, tmp_path):
    wd = tmp_path / "distml"
    wd.mkdir()
    (wd / "state.json").write_text(json.dumps({"instance": "abcd1234"}))
    monkeypatch.setenv("INVOKE_WORKDIR", str(wd))
    monkeypatch.setattr(byo_cluster, "workdir", lambda: tmp_path)
    monkeypatch.setattr(copies, "workdir", lambda: tmp_path)
    return wd


def _listing(objs):
    items = [
        {"kind": k.split("/")[0], "metadata": {"name": k.split("/")[1], "uid": u, "generation": g}}
        for k, (u, g) in objs.items()
    ]
    return json.dumps({"items": items})


def test_copied_workdir_passes_when_refused_and_intact(monkeypatch, original, capsys) -> None:
    monkeypatch.setattr(copies, "kubectl", lambda *a: _listing(BEFORE))
    seen = []

    def refused(args, wd):
        seen.append((args[0], wd))
        return 1, f"error: this work dir ({wd}) {copies.REFUSED_COPY} {original} on h"

    monkeypatch.setattr(copies, "_invoke", refused)
    copies.copied_workdir()
    assert [a for a, _ in seen] == ["down", "train"]
    assert all(wd != original and not wd.exists() for _, wd in seen)  # the copy removed
    assert "2 objects of the original" in capsys.readouterr().out


def test_copied_workdir_fails_when_the_copy_acts(monkeypatch, original) -> None:
    listings = iter([BEFORE, {"TFJob/train-cnn": ("u9", 1)}])
    monkeypatch.setattr(copies, "kubectl", lambda *a: _listing(next(listings)))
    monkeypatch.setattr(copies, "_invoke", lambda args, wd: (0, "deleted: TFJob train-cnn"))
    with pytest.raises(SystemExit, match="was not refused"):
        copies.copied_workdir()


def test_copied_workdir_fails_when_the_original_changed(monkeypatch, original) -> None:
    listings = iter([BEFORE, {"TFJob/train-cnn": ("u9", 1)}])
    monkeypatch.setattr(copies, "kubectl", lambda *a: _listing(next(listings)))
    msg = f"{copies.REFUSED_COPY} {original}"
    monkeypatch.setattr(copies, "_invoke", lambda args, wd: (1, msg))
    with pytest.raises(SystemExit, match="replaced"):
        copies.copied_workdir()


def test_main_with_bad_arguments_prints_usage_and_returns_2(capsys) -> None:
    assert copies.main([]) == 2
    assert "usage" in capsys.readouterr().err
