"""image tier: the project image run the way pods run it (needs a Docker engine).

``nox -s image`` builds the image and passes its tag in DISTML_IMAGE; the Docker client
in DISTML_DOCKER. Every container and network made here is removed in every case.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def mounts(volume: Path, data_dir: Path) -> list[str]:
    return ["-v", f"{volume}:/trained_model", "-v", f"{data_dir}:/data:ro"]


@pytest.fixture(scope="module")
def trained(dk, image, volume, data_dir):
    """Two containers on a user-defined network: a 2-worker MWMS job on port 2222."""
    net = dk.name("net")
    dk.run("network", "create", net)
    dk.networks.append(net)
    workers = [dk.name(f"worker-{i}") for i in range(2)]
    cluster = {"worker": [f"{w}:2222" for w in workers]}
    for i, name in enumerate(workers):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        dk.run(
            "run",
            "-d",
            "--name",
            name,
            "--network",
            net,
            "-e",
            f"TF_CONFIG={tf_config}",
            "-e",
            "TF_NUM_INTRAOP_THREADS=1",
            "-e",
            "TF_NUM_INTEROP_THREADS=1",
            *mounts(volume, data_dir),
            image,
            "python",
            "-m",
            "ml",
            "train",
            "--volume",
            "/trained_model",
            "--model-type",
            "cnn",
            "--epochs",
            "2",
            "--steps-per-epoch",
            "20",
            "--source-dir",
            "/data",
        )
        dk.containers.append(name)
    codes = [int(dk.run("wait", w, timeout=900).stdout.strip()) for w in workers]
    logs = {
        w: dk.run("logs", w, check=False).stdout + dk.run("logs", w, check=False).stderr
        for w in workers
    }
    return {"codes": codes, "logs": logs}


def test_two_worker_job_in_containers_leaves_one_saved_model(trained, volume):
    assert trained["codes"] == [0, 0], "\n".join(v[-2000:] for v in trained["logs"].values())
    assert sorted(volume.rglob("saved_model.pb")) == [volume / "candidates/cnn/saved_model.pb"]
    metrics = json.loads((volume / "candidates/cnn/metrics.json").read_text())
    assert metrics["workers"] == 2


def test_selection_in_a_container_publishes_version_1(dk, image, volume, data_dir, trained):
    result = dk.run(
        "run",
        "--rm",
        *mounts(volume, data_dir),
        image,
        "python",
        "-m",
        "ml",
        "select",
        "--volume",
        "/trained_model",
        "--source-dir",
        "/data",
    )
    assert "published cnn" in result.stdout
    assert (volume / "serving/tf-mnist/1/saved_model.pb").is_file()


def test_server_in_a_container_answers_the_host(dk, image, volume, data_dir, trained):
    name = dk.name("serve")
    dk.run(
        "run",
        "-d",
        "--name",
        name,
        "-p",
        "127.0.0.1::8080",
        *mounts(volume, data_dir),
        image,
        "python",
        "-m",
        "ml",
        "serve",
        "--model-dir",
        "/trained_model/serving/tf-mnist",
        "--model-name",
        "tf-mnist",
        "--host",
        "0.0.0.0",
        "--http-port",
        "8080",
    )
    dk.containers.append(name)
    host_port = dk.run("port", name, "8080/tcp").stdout.strip().splitlines()[0]
    url = f"http://{host_port}/v1/models/tf-mnist"
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if json.loads(resp.read()).get("ready"):
                    break
        except (urllib.error.URLError, OSError, ValueError):
            pass
        state = dk.run("inspect", "-f", "{{.State.Running}}", name).stdout.strip()
        assert state == "true", dk.run("logs", name, check=False).stderr[-3000:]
        assert time.monotonic() < deadline, "the containerised server never became ready"
        time.sleep(0.5)
    from ml.data.dataset import read_idx
    from ml.data.sample import encode_png

    png = encode_png(read_idx(data_dir / "t10k-images-idx3-ubyte.gz")[0])
    body = json.dumps(
        {"instances": [{"b64": base64.b64encode(png).decode()}], "return_class_names": True}
    ).encode()
    req = urllib.request.Request(
        f"{url}:predict", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        answer = json.loads(resp.read())
    assert len(answer["predictions"][0]) == 10
    assert answer["model_version"] == 1


def test_the_container_user_is_not_root(dk, image):
    assert dk.run("run", "--rm", image, "id", "-u").stdout.strip() == "1000"
    usage = dk.run("run", "--rm", image).stdout
    assert "python -m ml train" in usage and "python -m ml serve" in usage


def test_no_certificates_or_caches_are_left_in_the_image(dk, image):
    found = dk.run(
        "run",
        "--rm",
        image,
        "sh",
        "-c",
        "ls /tmp/ca-bundle.pem /tmp/requirements-image.txt /root/.cache/pip "
        "2>/dev/null; find /opt/venv -name __pycache__ | head -1",
    ).stdout.strip()
    assert found == ""
