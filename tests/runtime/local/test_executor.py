"""runtime/local/executor.py: under --dry the local runtime prints each command in order (a
worker's TF_CONFIG included) and touches nothing."""

from __future__ import annotations

from pathlib import Path

from runtime.image import image_tag
from runtime.local import LocalRuntime
from runtime.requests import DeployRequest, DownRequest, LoadtestRequest, TrainRequest, UpRequest
from runtime.workdir import Workdir

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_dry_local_runtime_prints_each_command_in_order_and_touches_nothing(tmp_path):
    wd = Workdir.at(tmp_path / "wd")
    lines: list[str] = []
    rt = LocalRuntime(wd, out=lines.append, dry=True)
    assert rt.up(UpRequest(source_dir=str(tmp_path))) == 0
    assert rt.train(TrainRequest(models=("cnn", "cnn_dropout"), workers=2, epochs=1)) == 0
    assert rt.deploy(DeployRequest(min_accuracy=0.5, force=True, http_port=8181)) == 0
    assert rt.loadtest(LoadtestRequest(concurrency=3)) == 0
    assert rt.down(DownRequest(purge=True)) == 0
    assert not wd.root.exists()
    runs = [line for line in lines if line.startswith("would run (")]
    assert [r.split(")")[0] for r in runs] == [
        "would run (ingest",
        "would run (cnn worker 0",
        "would run (cnn worker 1",
        "would run (cnn_dropout worker 0",
        "would run (cnn_dropout worker 1",
        "would run (selection",
        "would run (model server, in the background",
    ]
    assert runs[0].endswith(f"python -m ml ingest --volume {wd.volume} --source-dir {tmp_path}")
    assert '"task": {"type": "worker", "index": 1}' in runs[2]
    assert runs[2].endswith(
        "--model-type cnn --profile quick --log-every 5 --epochs 1 --bind-loopback"
    )
    assert runs[5].endswith("--min-accuracy 0.5 --force --code-version " + image_tag(REPO_ROOT))
    assert runs[6].endswith("--host 127.0.0.1 --http-port 8181")
    assert any("3 user(s), no wait time" in line for line in lines)
    assert not wd.root.exists()  # nothing was created, nothing started


def test_a_command_is_shown_with_python_for_its_interpreter_whatever_comes_first():
    from runtime.local.executor import shown

    assert shown(["/v/bin/python3.11", "-m", "ml", "serve"]) == "python -m ml serve"
    assert shown(["nice", "-n", "10", "/v/bin/python", "-m", "ml", "serve"]) == (
        "nice -n 10 python -m ml serve"
    )
