"""image tier: the pods the cluster manifests describe, run for real in the real image.

No Kubernetes runs here, so each pod spec from ``k8s.manifests`` is translated to
``docker run`` as a kubelet would run it: its command and args, its env, its user and
capabilities, its CPU/memory limits, the PVC as a bind mount at its mountPath. What the
operators add is added the way they add it: TF_CONFIG naming the peer workers (training
operator), the serving directory mounted read-only at /mnt/models and ``{{.Name}}``
replaced (KServe). The lifecycle then runs as it would on a cluster: the loader pod's
files, the ingest Job, a 2-worker TFJob, the selection Job, the predictor, whose
readiness probe must pass before it answers a predict request.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from k8s import manifests
from k8s.providers.settings import Settings


def _mebibytes(quantity: str) -> str:
    units = {"Mi": 1, "Gi": 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return f"{int(float(quantity[: -len(suffix)]) * factor)}m"
    raise AssertionError(f"unexpected memory quantity {quantity!r}")


def _cpus(quantity: str) -> str:
    return str(int(quantity[:-1]) / 1000) if quantity.endswith("m") else quantity


def docker_args(
    pod_spec: dict[str, Any], container: dict[str, Any], volume: Path | None
) -> list[str]:
    """``docker run`` flags for a pod's container, the way a kubelet would run it (the
    PVC, when ``volume`` is given, bind-mounted at each mountPath)."""
    pod_sc = pod_spec.get("securityContext") or {}
    sc = {**pod_sc, **(container.get("securityContext") or {})}
    args = ["--user", f"{sc['runAsUser']}:{sc['runAsGroup']}"]
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    for cap in (sc.get("capabilities") or {}).get("drop") or []:
        args += ["--cap-drop", cap]
    limits = (container.get("resources") or {}).get("limits") or {}
    if "cpu" in limits:
        args += ["--cpus", _cpus(limits["cpu"])]
    if "memory" in limits:
        args += ["--memory", _mebibytes(limits["memory"])]
    for name, value in pod_env(container).items():
        args += ["-e", f"{name}={value}"]
    for mount in (container.get("volumeMounts") or []) if volume else []:
        args += ["-v", f"{volume}:{mount['mountPath']}"]
    return args


#: What a kubelet gives ``valueFrom.fieldRef``: docker knows a container's IP only once it
#: runs, so every address of the container (0.0.0.0) stands for the pod's IP.
FIELDS = {"status.podIP": "0.0.0.0"}


def pod_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as a kubelet makes it: ``fieldRef`` values filled in,
    and ``$(NAME)`` expanded from the variables defined before it (as the kubelet does)."""
    env: dict[str, str] = {}
    for e in container.get("env") or []:
        if "valueFrom" in e:
            env[e["name"]] = FIELDS[e["valueFrom"]["fieldRef"]["fieldPath"]]
            continue
        value = e["value"]
        for name, known in env.items():
            value = value.replace(f"$({name})", known)
        env[e["name"]] = value
    return env


def command(container: dict[str, Any], name: str = "tf-mnist") -> list[str]:
    return [a.replace("{{.Name}}", name) for a in container["command"] + container.get("args", [])]


def run_to_completion(dk, image: str, name: str, args: list[str], argv: list[str]) -> str:
    dk.run("run", "-d", "--name", name, *args, image, *argv)
    dk.containers.append(name)
    code = int(dk.run("wait", name, timeout=900).stdout.strip())
    logs = dk.run("logs", name, check=False)
    text = logs.stdout + logs.stderr
    assert code == 0, f"{name} exited {code}:\n{text[-3000:]}"
    return text


@pytest.fixture(scope="module")
def settings(image) -> Settings:
    return Settings(image=image, epochs=1, steps_per_epoch=10)


@pytest.fixture(scope="module")
def lifecycle(dk, image, volume, data_dir, settings):
    """loader files -> ingest Job -> 2-worker TFJob -> selection Job, as the cluster runs them."""
    s = settings
    out: dict[str, str] = {}
    # The loader pod + `kubectl cp`: the raw files land in <volume>/raw/fashion-mnist.
    raw = volume / manifests.RAW_DATA_SUBDIR
    raw.mkdir(parents=True)
    for f in data_dir.glob("*-ubyte.gz"):
        shutil.copy(f, raw / f.name)
    for path in (volume, *volume.rglob("*")):
        path.chmod(0o777 if path.is_dir() else 0o666)

    job = manifests.ingest_job(s, manifests.raw_data_dir(s))
    spec = job["spec"]["template"]["spec"]
    c = spec["containers"][0]
    out["ingest"] = run_to_completion(
        dk, image, dk.name("ingest"), docker_args(spec, c, volume), command(c)
    )

    tfjob = manifests.tfjob(s, "cnn")
    worker = tfjob["spec"]["tfReplicaSpecs"]["Worker"]
    spec = worker["template"]["spec"]
    c = spec["containers"][0]
    port = c["ports"][0]["containerPort"]
    net = dk.name("tfjob-net")
    dk.run("network", "create", net)
    dk.networks.append(net)
    names = [f"{dk.name(tfjob['metadata']['name'])}-worker-{i}" for i in range(worker["replicas"])]
    cluster = {"worker": [f"{n}:{port}" for n in names]}
    for i, name in enumerate(names):  # what the training operator injects
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        dk.run(
            "run", "-d", "--name", name, "--network", net, "-e", f"TF_CONFIG={tf_config}",
            *docker_args(spec, c, volume), image, *command(c),
        )  # fmt: skip
        dk.containers.append(name)
    codes = [int(dk.run("wait", n, timeout=900).stdout.strip()) for n in names]
    logs = [dk.run("logs", n, check=False) for n in names]
    assert codes == [0, 0], "\n".join((r.stdout + r.stderr)[-2500:] for r in logs)

    job = manifests.selection_job(s, min_accuracy=0.0, force=False)
    spec = job["spec"]["template"]["spec"]
    c = spec["containers"][0]
    out["select"] = run_to_completion(
        dk, image, dk.name("select"), docker_args(spec, c, volume), command(c)
    )
    return out


def test_ingest_train_and_select_pods_run_as_specified(lifecycle, volume, settings):
    assert (volume / "datasets" / "fashion_mnist").is_dir()
    assert sorted(volume.rglob("saved_model.pb"))[0] == volume / "candidates/cnn/saved_model.pb"
    metrics = json.loads((volume / "candidates/cnn/metrics.json").read_text())
    assert metrics["workers"] == settings.workers
    assert "published cnn" in lifecycle["select"]
    assert (volume / f"serving/{settings.service}/1/saved_model.pb").is_file()


def test_predictor_pod_is_ready_only_once_the_model_loads_then_answers(
    dk, image, volume, data_dir, settings, lifecycle
):
    runtime = manifests.serving_runtime(settings)
    c = runtime["spec"]["containers"][0]
    isvc = manifests.inference_service(settings)
    assert isvc["spec"]["predictor"]["model"]["storageUri"].endswith("serving/tf-mnist")
    name = dk.name("predictor")
    port = c["ports"][0]["containerPort"]
    serving = volume / "serving" / settings.service
    dk.run(
        "run", "-d", "--name", name, "-p", f"127.0.0.1::{port}",
        *docker_args({}, c, None),
        "-v", f"{serving}:{manifests.KSERVE_MODEL_DIR}:ro",  # what KServe mounts
        image, *command(c, settings.service),
    )  # fmt: skip
    dk.containers.append(name)
    host = dk.run("port", name, f"{port}/tcp").stdout.strip().splitlines()[0]
    probe = c["readinessProbe"]["httpGet"]
    url = f"http://{host}{probe['path']}"
    deadline = time.monotonic() + 240
    codes = []
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                codes.append(resp.status)
                if resp.status == 200:
                    break
        except urllib.error.HTTPError as e:
            codes.append(e.code)  # 503 while the model loads: not Ready yet
        except (urllib.error.URLError, OSError):
            pass
        running = dk.run("inspect", "-f", "{{.State.Running}}", name).stdout.strip()
        assert running == "true", dk.run("logs", name, check=False).stderr[-3000:]
        assert time.monotonic() < deadline, "the predictor never passed its readiness probe"
        time.sleep(0.5)
    assert set(codes) <= {200, 503}, codes

    from ml.data.dataset import read_idx
    from ml.data.sample import encode_png

    png = encode_png(read_idx(data_dir / "t10k-images-idx3-ubyte.gz")[0])
    body = json.dumps({"instances": [{"b64": base64.b64encode(png).decode()}]}).encode()
    req = urllib.request.Request(
        f"http://{host}/v1/models/{settings.service}:predict",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        answer = json.loads(resp.read())
    assert len(answer["predictions"][0]) == 10 and answer["model_version"] == 1
    # Its memory limit holds it with room to spare.
    stats = dk.run("stats", "--no-stream", "--format", "{{.MemPerc}}", name).stdout.strip()
    assert float(stats.rstrip("%")) < 90, stats
