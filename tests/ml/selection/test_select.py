"""ml.selection.select: evaluate every candidate on validation, pick the best, publish
atomically with its lineage, refuse a worse model unless forced, and roll back through the
history; the volume's limits (a full disk, killed publishes, a bad service name); with
--canary, the same choice published beside serving. The fixtures: conftest.py."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from ml import contract
from ml.contract import canary_commands, records
from ml.data.dataset import SPLIT_EXAMPLES
from ml.selection import canary_publish, publishing
from ml.selection import select as sel
from ml.selection.publishing import serving_versions


def add_candidate(volume: Path, name: str, source: Path) -> None:
    shutil.copytree(source, volume / "candidates" / name)


def report(volume: Path) -> dict:
    return json.loads((volume / "reports" / "selection.json").read_text())


def run(volume: Path, *args: str) -> int:
    return sel.main(["--volume", str(volume), *args])


def test_picks_the_best_on_validation_and_reports_test_too(volume, saved_models):
    add_candidate(volume, "cnn", saved_models["good"])
    add_candidate(volume, "cnn_dropout", saved_models["bad"])
    assert run(volume) == 0
    r = report(volume)
    assert r["selected_on"] == "validation"
    assert (r["validation_examples"], r["test_examples"]) == (5039, 10000)
    by_name = {c["model_type"]: c for c in r["candidates"]}
    assert by_name["cnn"]["val_accuracy"] > 0.6 > by_name["cnn_dropout"]["val_accuracy"]
    assert by_name["cnn"]["test_accuracy"] > 0.6 > by_name["cnn_dropout"]["test_accuracy"]
    assert by_name["cnn"]["val_accuracy"] != by_name["cnn"]["test_accuracy"]
    assert (r["winner"], r["published"], r["version"]) == ("cnn", True, 1)
    assert "highest validation accuracy" in r["reason"]
    served = volume / "serving" / "tf-mnist"
    assert (served / "1" / "saved_model.pb").is_file()
    assert json.loads((served / "1" / "publish.json").read_text())["source"] == "candidate cnn"
    assert [p.name for p in served.iterdir()] == ["1"], "no temporary directory is left"


def test_the_test_split_is_read_only_after_the_choice(volume, saved_models, monkeypatch):
    add_candidate(volume, "cnn", saved_models["good"])
    calls: list[str] = []
    load, judge = sel.load_split_arrays, sel._judge
    monkeypatch.setattr(
        sel,
        "load_split_arrays",
        lambda v, split, *a, **k: calls.append(split) or load(v, split, *a, **k),
    )
    monkeypatch.setattr(sel, "_judge", lambda *a: calls.append("decided") or judge(*a))
    assert run(volume) == 0
    assert calls == ["validation", "decided", "test"]


def test_publish_json_holds_the_lineage(volume, saved_models, shared_data_dir, capsys):
    add_candidate(volume, "cnn", saved_models["good"])
    assert run(volume, "--code-version", "distml:0123456789ab") == 0
    record = json.loads((volume / "serving" / "tf-mnist" / "1" / "publish.json").read_text())
    missing = [f for f in records.LINEAGE_FIELDS if record.get(f) in (None, "", {}, [])]
    assert not missing, f"publish.json lacks {missing}"
    candidate = next(c for c in report(volume)["candidates"] if c["model_type"] == "cnn")
    assert record["val_accuracy"] == candidate["val_accuracy"]
    assert record["test_accuracy"] == candidate["test_accuracy"]
    assert record["selected_on"] == "validation" and record["reason"] == report(volume)["reason"]
    assert record["code_version"] == "distml:0123456789ab"
    params = yaml.safe_load((saved_models["good"] / contract.PARAMS_FILE).read_text())
    assert record["params"] == params and params["seed"] == 1
    files = {
        n: hashlib.sha256((shared_data_dir / n).read_bytes()).hexdigest()
        for n in contract.RAW_FILES
    }
    assert record["dataset"]["sha256"] == files, "the hashes of the files the data came from"
    assert record["dataset"]["split_examples"] == dict(SPLIT_EXAMPLES)
    serving_copy = records.read_publish(contract.serving_record(volume, "tf-mnist"))
    assert serving_copy == record
    card = dict(records.model_card(record))
    assert card["accuracy"].startswith(f"validation {record['val_accuracy']:.4f} (chosen on), test")
    assert (
        card["code"] == "distml:0123456789ab"
        and "profile quick, 1 epoch(s) x 50" in card["training"]
    )
    out = capsys.readouterr().out
    assert f"accuracy: {card['accuracy']}" in out and "code: distml:0123456789ab" in out


def test_each_publish_increments_the_version(volume, saved_models):
    add_candidate(volume, "cnn", saved_models["good"])
    assert run(volume) == 0
    assert run(volume, "--service", "tf-mnist") == 0
    assert serving_versions(volume / "serving" / "tf-mnist") == [1, 2]
    assert report(volume)["serving_before"]["version"] == 1


def test_a_plain_publish_and_a_rollback_skip_a_rejected_canarys_number(volume, saved_models):
    # A number is a version's label on every metric: a rejected canary's is never reused.
    add_candidate(volume, "cnn", saved_models["good"])
    assert run(volume) == 0
    (volume / "rejected" / "tf-mnist" / "2").mkdir(parents=True)
    assert run(volume) == 0
    assert serving_versions(volume / "serving" / "tf-mnist") == [1, 3]
    (volume / "serving" / "tf-mnist" / "canary" / "4").mkdir(parents=True)
    assert sel.rollback(volume, "tf-mnist") == (1, 5)


def test_refuses_a_worse_model_unless_forced(volume, saved_models):
    add_candidate(volume, "cnn", saved_models["good"])
    assert run(volume) == 0
    shutil.rmtree(volume / "candidates" / "cnn")
    add_candidate(volume, "cnn", saved_models["bad"])
    assert run(volume) == 0
    r = report(volume)
    assert not r["published"] and r["version"] == 1
    assert "kept version 1" in r["reason"] and "--force" in r["reason"]
    assert serving_versions(volume / "serving" / "tf-mnist") == [1]
    assert run(volume, "--force") == 0
    assert report(volume)["version"] == 2


def test_below_min_accuracy_publishes_nothing_and_fails(volume, saved_models, capsys):
    add_candidate(volume, "cnn", saved_models["good"])
    assert run(volume, "--min-accuracy", "0.99") == 1
    assert "on validation, below --min-accuracy 0.9900" in capsys.readouterr().out
    assert not (volume / "serving" / "tf-mnist").exists()


def test_missing_and_corrupt_candidates_are_reported_and_skipped(volume, saved_models):
    add_candidate(volume, "cnn", saved_models["good"])
    (volume / "candidates" / "cnn_dropout").mkdir()  # never exported
    add_candidate(volume, "cnn_batchnorm", saved_models["bad"])
    (volume / "candidates" / "cnn_batchnorm" / "saved_model.pb").write_bytes(b"garbage")
    assert run(volume) == 0
    by_name = {c["model_type"]: c for c in report(volume)["candidates"]}
    assert by_name["cnn_dropout"]["status"] == "skipped"
    assert "no saved_model.pb" in by_name["cnn_dropout"]["error"]
    assert by_name["cnn_batchnorm"]["status"] == "skipped"
    assert "cannot be loaded" in by_name["cnn_batchnorm"]["error"]
    assert report(volume)["winner"] == "cnn"


def test_a_candidate_that_kills_the_process_judging_it_is_skipped_saying_so(
    volume, saved_models, aborting_model, capsys
):
    # Loading it aborts its process (TensorFlow's Abort op, SIGABRT): no except catches
    # that, and the whole selection used to die with it, publishing and reporting nothing.
    add_candidate(volume, "cnn", saved_models["good"])
    add_candidate(volume, "cnn_aborts", aborting_model)
    add_candidate(volume, "cnn_dropout", saved_models["bad"])  # judged after the crash
    assert run(volume) == 0
    r = report(volume)
    by_name = {c["model_type"]: c for c in r["candidates"]}
    crashed = by_name["cnn_aborts"]
    assert crashed["status"] == "skipped"
    assert crashed["error"].startswith(
        f"{volume / 'candidates' / 'cnn_aborts'}: its evaluation process died with signal "
        "SIGABRT while loading or running the model"
    )
    assert f"candidate cnn_aborts: skipped: {crashed['error']}" in capsys.readouterr().out
    assert by_name["cnn_dropout"]["status"] == "ok" and "test_accuracy" in by_name["cnn_dropout"]
    assert (r["winner"], r["published"], r["version"]) == ("cnn", True, 1)
    assert "test_accuracy" in by_name["cnn"]
    assert (volume / "serving" / "tf-mnist" / "1" / "saved_model.pb").is_file()


def test_no_usable_candidate_fails_and_what_was_serving_stays(volume, saved_models):
    add_candidate(volume, "cnn", saved_models["good"])
    assert run(volume) == 0
    shutil.rmtree(volume / "candidates" / "cnn")
    (volume / "candidates" / "cnn").mkdir()
    assert run(volume) == 1
    assert "no usable candidate" in report(volume)["reason"]
    assert serving_versions(volume / "serving" / "tf-mnist") == [1]


def test_no_candidates_at_all_fails_with_a_hint(volume):
    assert run(volume) == 1
    assert "run training first" in report(volume)["reason"]


def test_a_full_volume_publishes_nothing_and_says_so_in_one_line(
    volume, saved_models, monkeypatch, capsys
):
    add_candidate(volume, "cnn", saved_models["good"])

    def broken_copy(src, dst, **kwargs):  # as shutil.copytree reports a file it could not copy
        Path(dst).mkdir(parents=True)
        (Path(dst) / "saved_model.pb").write_bytes(b"half")
        raise shutil.Error([(str(src), str(dst), "[Errno 28] No space left on device")])

    monkeypatch.setattr(publishing.shutil, "copytree", broken_copy)
    assert run(volume) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: the volume is full (No space left on device" in err
    assert "nothing was published" in err and "Traceback" not in err
    served = volume / "serving" / "tf-mnist"
    assert list(served.iterdir()) == [], "neither a version nor a temporary dir may remain"


def test_the_next_publish_removes_the_copies_of_killed_publishes(volume, saved_models):
    add_candidate(volume, "cnn", saved_models["good"])
    served = volume / "serving" / "tf-mnist"
    stale = served / ".publish-1-killed" / "model"  # what a SIGKILL mid-copy leaves
    stale.mkdir(parents=True)
    (stale / "saved_model.pb").write_bytes(b"half")
    assert run(volume) == 0
    assert sorted(p.name for p in served.iterdir()) == ["1"]


def test_a_bad_service_name_is_refused_before_any_path_is_built(volume, capsys):
    with pytest.raises(SystemExit) as e:
        sel.main(["--volume", str(volume), "--service", "../../../x"])
    assert e.value.code == 2
    assert "service name '../../../x' is not valid" in capsys.readouterr().err
    assert not (volume / "serving").exists()


def test_rollback_walks_back_the_history(volume, saved_models, capsys):
    add_candidate(volume, "cnn", saved_models["good"])
    assert run(volume) == 0  # v1 good
    shutil.rmtree(volume / "candidates" / "cnn")
    add_candidate(volume, "cnn", saved_models["bad"])
    assert run(volume, "--force") == 0  # v2 bad
    assert run(volume, "--rollback") == 0  # v3 = v1
    served = volume / "serving" / "tf-mnist"
    out = capsys.readouterr().out
    assert "version 1 republished as version 3" in out
    assert "model: version 3: cnn (rollback to version 1)" in out, "the card of what serves now"
    v1_record = json.loads((served / "1" / "publish.json").read_text())
    assert f"accuracy: validation {v1_record['val_accuracy']:.4f}" in out
    assert records.read_publish(contract.serving_record(volume, "tf-mnist"))["version"] == 3
    v1 = (served / "1" / "variables" / "variables.data-00000-of-00001").read_bytes()
    v3 = (served / "3" / "variables" / "variables.data-00000-of-00001").read_bytes()
    assert v1 == v3
    with pytest.raises(SystemExit, match="no earlier version to roll back to"):
        run(volume, "--rollback")


def test_rollback_with_nothing_published_explains(volume):
    with pytest.raises(SystemExit, match="nothing is published"):
        run(volume, "--rollback")


def test_min_accuracy_must_be_a_fraction(volume, capsys):
    with pytest.raises(SystemExit) as exit_:
        run(volume, "--min-accuracy", "86")
    assert exit_.value.code == 2
    assert "fraction" in capsys.readouterr().err


# --------------------------------------------------------------------------- --canary


def test_a_canary_goes_beside_serving_under_a_number_never_used(volume, saved_models, capsys):
    add_candidate(volume, "cnn", saved_models["good"])
    assert run(volume) == 0  # serving version 1
    served = records.read_publish(contract.serving_record(volume, "tf-mnist"))
    (volume / "rejected" / "tf-mnist" / "2").mkdir(parents=True)  # a rejected canary's number
    capsys.readouterr()
    argv = contract.select(volume, canary=True, code_version="distml:0123456789ab")
    assert sel.main(argv[4:]) == 0
    canary = Path(contract.canary_dir(volume, "tf-mnist"))
    assert f"published cnn as {canary / '3'}" in capsys.readouterr().out
    r = report(volume)
    assert (r["canary"], r["published"], r["version"]) == (True, True, 3)
    assert [p.name for p in canary.iterdir()] == ["3"], "no temporary directory is left"
    record = json.loads((canary / "3" / "publish.json").read_text())
    missing = [f for f in records.LINEAGE_FIELDS if record.get(f) in (None, "", {}, [])]
    assert not missing, f"publish.json lacks {missing}"
    assert (record["canary"], record["version"], record["previous"]) == (True, 3, 1)
    assert record["code_version"] == "distml:0123456789ab" and record["reason"] == r["reason"]
    assert serving_versions(volume / "serving" / "tf-mnist") == [1], "serving untouched"
    assert records.read_publish(contract.serving_record(volume, "tf-mnist")) == served
    # Promoted, it serves as version 3; a rollback then goes back to what served before.
    analysis = volume.parent / "analysis.json"
    analysis.write_text('{"decision": "promote", "reason": "every gate passed"}')
    end = canary_commands.canary_end(volume, "tf-mnist", promote=True, record=analysis)
    assert canary_publish.main(end[4:]) == 0
    assert serving_versions(volume / "serving" / "tf-mnist") == [1, 3]
    assert records.read_publish(contract.serving_record(volume, "tf-mnist"))["version"] == 3
    assert sel.rollback(volume, "tf-mnist") == (1, 4)


@pytest.mark.parametrize("in_progress", [True, False], ids=["a canary runs", "nothing serves"])
def test_a_canary_is_refused_before_anything_is_evaluated(
    volume, saved_models, in_progress, monkeypatch
):
    add_candidate(volume, "cnn", saved_models["good"])
    if in_progress:
        (volume / "serving" / "tf-mnist" / "1").mkdir(parents=True)
        (volume / "serving" / "tf-mnist" / "canary" / "4").mkdir(parents=True)
    monkeypatch.setattr(sel, "load_split_arrays", lambda *a, **k: pytest.fail("evaluated"))
    assert run(volume, "--canary") == 1
    r = report(volume)
    assert r["canary"] is True and not r["published"]
    if in_progress:
        where = volume / "serving" / "tf-mnist" / "canary"
        assert r["reason"] == (
            f"a canary (version 4) is in progress in {where}; let it "
            "finish, or end it (promote or reject) first"
        )
    else:
        assert r["reason"].startswith("nothing serves yet: a canary needs a serving version")
        assert r["reason"].endswith("deploy without --canary first")
    canary_versions = serving_versions(volume / "serving" / "tf-mnist" / "canary")
    assert canary_versions == ([4] if in_progress else [])


def test_a_canary_is_judged_as_a_publish_is(volume, saved_models):
    add_candidate(volume, "cnn", saved_models["good"])
    assert run(volume) == 0
    shutil.rmtree(volume / "candidates" / "cnn")
    add_candidate(volume, "cnn", saved_models["bad"])
    assert run(volume, "--canary") == 0
    r = report(volume)
    assert not r["published"] and "kept version 1" in r["reason"]
    assert not (volume / "serving" / "tf-mnist" / "canary").exists()
    assert run(volume, "--canary", "--force") == 0
    assert serving_versions(volume / "serving" / "tf-mnist" / "canary") == [2]


def test_canary_and_rollback_do_not_mix(volume, capsys):
    with pytest.raises(SystemExit) as e:
        run(volume, "--canary", "--rollback")
    assert e.value.code == 2 and "cannot be combined with --rollback" in capsys.readouterr().err
