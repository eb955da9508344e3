"""e2e tier: canary releases on the local runtime, under a running Locust load test.

v1 serves; a good v2 goes out with ``deploy --canary`` and is promoted with no failed
request; then bad versions are rolled back or refused while v2 serves throughout: one
trained for a single step (let past the selection's floor with ``--force``) fails the
accuracy gate; SavedModels built here (tests/support/failing_model.py, faulty_versions.py)
fail the error gate: one failing on the load test's image with a TensorFlow error, one
whose graph rejects that image (once a 400 that blamed the client), and one that crashes
its process on it (the canary's own server: the stable never stops); one answering NaN
for single images is refused by the selection before it serves anyone.

Offline; data from DISTML_DATA_DIR. Run: nox -s e2e
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.e2e_kit import SERVICE, deployed, invoke, invoke_in_background, post

# 2 passes a step: the shadow phase and a two-step canary take about 24 s, after the
# selection, the canary's own server's start (10-20 s) and the labelled sample (5,000
# images to each version): the load runs 120 s to cover them all (90 s for a bad version,
# rolled back in the shadow phase).
FAST = ["--canary-interval", "4", "--shadow-interval", "4"]


@pytest.fixture(scope="module")
def data_dir(required_data_dir: Path) -> Path:
    return required_data_dir


@pytest.fixture(scope="module")
def service(tmp_path_factory, data_dir) -> Iterator[dict]:
    """up -> train cnn -> deploy: version 1 serves."""
    wd = tmp_path_factory.mktemp("canary") / "wd"
    with deployed(wd, data_dir, "train", "--model-type", "cnn", "--epochs", "2",
                  "--steps-per-epoch", "15") as s:  # fmt: skip
        yield s


@contextmanager
def under_load(wd: Path, seconds: int) -> Iterator[list[subprocess.CompletedProcess]]:
    """A Locust load test running meanwhile; its result is appended when it is done."""
    proc = invoke_in_background(wd, "loadtest", "--concurrency", "3", "--duration", f"{seconds}s")
    done: list = []
    try:
        yield done
    finally:
        out, err = proc.communicate(timeout=seconds + 120)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))


def serving(wd: Path) -> list[int]:
    root = wd / "volume/serving" / SERVICE
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit())


def rejected(wd: Path, version: int) -> dict:
    return json.loads((wd / f"volume/rejected/{SERVICE}/{version}/publish.json").read_text())


def test_a_good_version_is_promoted_under_load_with_no_failed_request(service):
    wd = service["wd"]
    with under_load(wd, 120) as load:
        r = invoke(wd, "deploy", "--canary", "--canary-steps", "20,50", *FAST)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "promoted: version 2 serves every request" in r.stdout
    steps = set(re.findall(r"^\[\d+\] ((?:canary|shadow) \d+%):", r.stdout, re.MULTILINE))
    assert steps == {"shadow 20%", "canary 20%", "canary 50%"}, r.stdout[-3000:]
    shadow = re.findall(
        r"^\[\d+\] shadow 20%: traffic pass .*, agreement ([\d.]+)% of", r.stdout, re.M
    )
    assert shadow and float(shadow[-1]) > 50, r.stdout[-3000:]  # the shadow's figures shown
    assert load[0].returncode == 0, load[0].stdout[-3000:]  # Locust: 0 failed requests
    assert serving(wd) == [1, 2]
    status = invoke(wd, "status").stdout
    assert "last canary" in status and "promoted: version 2" in status


def test_a_version_trained_one_step_fails_the_accuracy_gate_and_is_rolled_back(service):
    wd = service["wd"]
    r = invoke(wd, "train", "--model-type", "cnn", "--epochs", "1", "--steps-per-epoch", "1")
    assert r.returncode == 0, r.stdout[-2000:]
    with under_load(wd, 90) as load:
        r = invoke(wd, "deploy", "--canary", "--force", "--canary-steps", "20", *FAST)
    assert r.returncode == 1, r.stdout[-3000:]
    assert "accuracy fail" in r.stdout and "version 3 was rolled back" in r.stdout
    assert load[0].returncode == 0, load[0].stdout[-3000:]  # v2 served throughout
    assert serving(wd) == [1, 2]  # the stable untouched: nothing published
    record = rejected(wd, 3)["rejected"]
    assert record["decision"] == "rollback" and record["intervals"]


def test_a_version_that_answers_errors_fails_the_error_gate_and_is_rolled_back(service, data_dir):
    wd = service["wd"]
    _replace_candidate_with_failing_model(wd, data_dir)
    with under_load(wd, 90) as load:
        r = invoke(wd, "deploy", "--canary", "--force", "--canary-steps", "20", *FAST)
    assert r.returncode == 1, r.stdout[-3000:]
    assert "errors fail" in r.stdout and "version 4 was rolled back" in r.stdout
    # Caught in the shadow phase, on mirrored copies: no user got one of its answers.
    assert load[0].returncode == 0, load[0].stdout[-3000:]  # Locust: 0 failed requests
    assert serving(wd) == [1, 2]
    (interval,) = rejected(wd, 4)["rejected"]["intervals"]
    assert interval["gates"]["errors"][0] == "fail" and interval["shadow"] == 20
    assert interval["stable"]["errors"] == 0  # no failure the stable version caused


@pytest.mark.parametrize("fault", ["rejects_image", "aborts_on_image"])
def test_a_version_whose_graph_rejects_or_crashes_is_rolled_back_the_stable_serving_on(
    service, data_dir, fault
):
    from tests.support import faulty_versions

    wd = service["wd"]
    before = serving(wd)
    _replace_candidate_with_failing_model(wd, data_dir, getattr(faulty_versions, fault))
    with under_load(wd, 90):
        r = invoke(wd, "deploy", "--canary", "--force", "--canary-steps", "20", *FAST)
    assert r.returncode == 1, r.stdout[-3000:]
    (version,) = map(int, re.findall(r"version (\d+) was rolled back", r.stdout))
    assert "errors fail" in r.stdout, r.stdout[-3000:]
    summary = json.loads((wd / "reports/loadtest/summary.json").read_text())
    assert summary["failures"] == 0, summary  # caught in the shadow phase: no user saw it
    assert serving(wd) == before
    for interval in rejected(wd, version)["rejected"]["intervals"]:
        assert interval["stable"]["errors"] == 0  # no failure the stable version caused
    status, _ = post(f"{service['url']}/v1/models/{SERVICE}:predict", _sample(wd))
    assert status == 200  # the stable's server still answers, whatever the canary did


def test_a_version_slow_on_a_few_calls_fails_the_latency_gate_the_stable_unslowed(
    service, data_dir
):
    from ml.model.export import export_model
    from tests.support.faulty_versions import slow_sometimes

    wd = service["wd"]
    model, _ = _briefly_trained(data_dir)
    _as_candidate(wd, lambda path: export_model(model, path))
    r = invoke(wd, "deploy", "--force")  # the stable: this very model, served plainly
    assert r.returncode == 0, r.stdout[-3000:]
    before = serving(wd)
    _as_candidate(wd, lambda path: slow_sometimes(model, path))  # the same, but slow at times
    with under_load(wd, 90) as load:
        r = invoke(wd, "deploy", "--canary", "--force", "--canary-steps", "20", *FAST)
    assert r.returncode == 1, r.stdout[-3000:]
    (version,) = map(int, re.findall(r"version (\d+) was rolled back", r.stdout))
    assert "latency fail" in r.stdout and "0 lost, 0 gained" in r.stdout, r.stdout[-3000:]
    assert "accuracy fail" not in r.stdout, "its answers are the stable's: only its latency"
    assert load[0].returncode == 0, load[0].stdout[-3000:]  # Locust: 0 failed requests
    assert serving(wd) == before
    intervals = rejected(wd, version)["rejected"]["intervals"]
    assert all(i["shadow"] == 20 for i in intervals), "caught before any user got its answers"
    latency = [i["gates"].get("latency", [""])[0] for i in intervals]
    slow = [i["canary"]["p99_s"] for i in intervals if i["canary"]]
    stable = [i["stable"]["p99_s"] for i in intervals if i["stable"]]
    # Its own process took the slow calls: the stable stayed within the objective.
    assert "fail" in latency and all(s is not None and s < 0.1 for s in stable), (slow, stable)
    print(f"slow version: canary p99 {slow} s, the stable's meanwhile {stable} s")


def test_a_version_with_one_class_mostly_wrong_is_rolled_back_on_that_class(service, data_dir):
    from ml.model.export import export_model
    from tests.support.faulty_versions import one_class_confused

    wd = service["wd"]
    model, _ = _briefly_trained(data_dir)
    _as_candidate(wd, lambda path: export_model(model, path))
    assert invoke(wd, "deploy", "--force").returncode == 0  # the stable: this very model
    before = serving(wd)
    # Class 1's recall down about 20 points, the total about 2 (measured: 91.3% -> 71.3%,
    # 67.7% -> 65.8% on the sample's 5,000 images).
    _as_candidate(wd, lambda path: one_class_confused(model, path, wrong=1, share=0.25))
    with under_load(wd, 90) as load:
        r = invoke(wd, "deploy", "--canary", "--force", "--canary-steps", "20", *FAST)
    assert r.returncode == 1, r.stdout[-3000:]
    found = re.search(r"accuracy fail \(([\d.]+)% vs ([\d.]+)% on 5000: (\d+) lost, (\d+) gained, "
                      r"p=[^;]+; class 1 recall -([\d.]+) pts\)", r.stdout)  # fmt: skip
    assert found, r.stdout[-3000:]
    total_drop = float(found[2]) - float(found[1])
    assert total_drop <= 2.5 and float(found[5]) >= 15, found.group(0)  # the class, not the total
    assert load[0].returncode == 0, load[0].stdout[-3000:]  # caught in the shadow phase
    assert serving(wd) == before


def test_a_version_with_a_wrong_signature_is_refused_by_the_selection(service):
    from tests.support.faulty_versions import wrong_pixels_shape

    wd = service["wd"]
    before = serving(wd)
    _as_candidate(wd, wrong_pixels_shape)  # serving_pixels takes flat [None, 784] vectors
    r = invoke(wd, "deploy", "--canary", "--force", "--canary-steps", "20", *FAST)
    assert r.returncode != 0, r.stdout[-3000:]
    said = r.stdout + r.stderr
    assert "cannot serve" in said and "no usable candidate" in said, said[-3000:]
    assert serving(wd) == before  # never published: nobody got an answer of it


def test_a_version_answering_nan_for_single_images_never_serves_anyone(service, data_dir):
    from tests.support.faulty_versions import nan_on_single

    wd = service["wd"]
    before = serving(wd)
    _replace_candidate_with_failing_model(
        wd, data_dir, lambda m, image, path: nan_on_single(m, path)
    )
    r = invoke(wd, "deploy", "--canary", "--force", "--canary-steps", "20", *FAST)
    assert r.returncode != 0, r.stdout[-3000:]
    assert "non-finite" in r.stdout + r.stderr and "skipped" in r.stdout + r.stderr
    assert serving(wd) == before


def test_a_version_trained_longer_is_promoted_as_better(service):
    wd = service["wd"]
    before = serving(wd)
    r = invoke(wd, "train", "--model-type", "cnn", "--epochs", "3", "--steps-per-epoch", "40")
    assert r.returncode == 0, r.stdout[-2000:]
    with under_load(wd, 120) as load:
        r = invoke(wd, "deploy", "--canary", "--canary-steps", "20,50", *FAST)
    assert r.returncode == 0, r.stdout[-3000:]
    assert re.search(r"^promoted: version \d+ serves every request", r.stdout, re.M), r.stdout
    gained = re.findall(
        r"accuracy pass \([\d.]+% vs [\d.]+% on \d+: (\d+) lost, (\d+) gained", r.stdout
    )
    assert gained and int(gained[-1][1]) > int(gained[-1][0]), r.stdout[-3000:]  # it is better
    assert load[0].returncode == 0, load[0].stdout[-3000:]
    assert len(serving(wd)) == len(before) + 1


def _sample(wd: Path) -> bytes:
    """The load test's request (`up` wrote it), whose image the faulty versions fail on."""
    return (wd / "sample-request.json").read_bytes()


def _replace_candidate_with_failing_model(wd: Path, data_dir: Path, export=None) -> None:
    """candidates/cnn: a briefly trained cnn that fails on the sample request's image
    (``export(model, image, path)``; default tests/support/failing_model.py's)."""
    from tests.support.failing_model import export_failing_on

    model, image = _briefly_trained(data_dir)
    _as_candidate(wd, lambda path: (export or export_failing_on)(model, image, path))


def _briefly_trained(data_dir: Path) -> tuple:
    """A cnn trained briefly, and the sample request's image ([28, 28, 1] in [0, 1])."""
    import numpy as np

    from ml.data.dataset import load_arrays
    from ml.model.architectures import build_model

    (x, y), (x_test, _) = load_arrays(data_dir)
    model = build_model("cnn", learning_rate=3e-3, seed=1)
    model.fit(x[:6400, ..., None] / 255.0, y[:6400], batch_size=128, epochs=1, verbose=0)
    return model, (x_test[0, ..., None] / 255.0).astype(np.float32)


def _as_candidate(wd: Path, export) -> None:
    """candidates/cnn replaced by what ``export(path)`` writes, its params kept."""
    import shutil

    candidate = wd / "volume/candidates/cnn"
    params = (candidate / "params.yaml").read_text()
    shutil.rmtree(candidate)
    export(candidate)
    (candidate / "params.yaml").write_text(params)
