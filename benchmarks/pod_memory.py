"""Peak memory of the pods distml schedules, measured in the real image.

The cluster manifests' worker and predictor pod specs run through ``docker run`` as a
kubelet runs them (the image tier's translation, tests/image/test_pods.py): a 2-worker
TFJob per model with the default `train-all` settings, then the predictor, idle and under
5 concurrent clients. Each container's main process is sampled for its kernel-kept peak
resident set (``VmHWM``) twice a second. The figures set the pods' memory requests
(k8s/providers/settings.py) and docs/cluster.md's resource table quotes them.

    python benchmarks/pod_memory.py --image distml:<tag> [--models cnn cnn_batchnorm]

Needs a Docker engine with the image built (``invoke build``) and the Fashion-MNIST files.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from k8s import manifests  # noqa: E402
from k8s.providers.settings import Settings  # noqa: E402
from tests.image.test_pods import command, docker_args  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "pod_memory.json"


class Docker:
    def __init__(self, docker: str) -> None:
        self.docker = docker
        self.names: list[str] = []

    def run(self, *args: str) -> str:
        return subprocess.run(
            [self.docker, *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    def start(self, name: str, *args: str) -> None:
        self.run("run", "-d", "--name", name, *args)
        self.names.append(name)

    def cleanup(self) -> None:
        for name in self.names:
            subprocess.run([self.docker, "rm", "-f", name], capture_output=True)


def memory_mib(pid: int) -> tuple[float, float] | None:
    """(peak resident set VmHWM, proportional set size PSS now), MiB; None once gone."""
    try:
        hwm = next(
            int(line.split()[1])
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("VmHWM:")
        )
        pss = next(
            int(line.split()[1])
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
            if line.startswith("Pss:")
        )
    except (FileNotFoundError, ProcessLookupError):  # it has exited
        return None
    except StopIteration:
        raise RuntimeError(f"/proc/{pid} has no VmHWM/Pss line: not Linux?") from None
    # PermissionError propagates: another user's smaps_rollup needs root (or ptrace rights).
    return hwm / 1024, pss / 1024


def watch(dk: Docker, names: list[str], until_exit: bool = True) -> dict[str, list[float]]:
    """Sample each container's main process until every container has exited (or once):
    {name: [peak RSS, peak PSS]}."""
    pids = {n: int(dk.run("inspect", "-f", "{{.State.Pid}}", n)) for n in names}
    peaks = {n: [0.0, 0.0] for n in names}
    while True:
        alive = False
        for name, pid in pids.items():
            value = memory_mib(pid) if pid else None
            if value is not None:
                peaks[name] = [max(a, b) for a, b in zip(peaks[name], value, strict=True)]
                alive = True
        if not alive or not until_exit:
            return peaks
        time.sleep(0.5)


def train(dk: Docker, image: str, volume: Path, s: Settings, model: str) -> list[list[float]]:
    """One TFJob's workers side by side, as on one node: [[peak RSS, peak PSS]] per worker."""
    tfjob = manifests.tfjob(s, model)
    worker = tfjob["spec"]["tfReplicaSpecs"]["Worker"]
    spec, c = worker["template"]["spec"], worker["template"]["spec"]["containers"][0]
    port = c["ports"][0]["containerPort"]
    net = f"pm-{model}-net".replace("_", "-")
    dk.run("network", "create", net)
    names = [f"pm-{model}-worker-{i}".replace("_", "-") for i in range(worker["replicas"])]
    cluster = {"worker": [f"{n}:{port}" for n in names]}
    try:
        for i, name in enumerate(names):
            tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
            dk.start(
                name, "--network", net, "-e", f"TF_CONFIG={tf_config}",
                *docker_args(spec, c, volume), image, *command(c),
            )  # fmt: skip
        peaks = watch(dk, names)
        codes = [dk.run("inspect", "-f", "{{.State.ExitCode}}", n) for n in names]
        assert codes == ["0"] * len(names), f"{model}: workers exited {codes}"
    finally:
        dk.cleanup()
        dk.run("network", "rm", net)
    return [peaks[n] for n in names]


def run_job(dk: Docker, image: str, volume: Path, job: dict) -> None:
    """A Job's one pod, to completion."""
    spec = job["spec"]["template"]["spec"]
    c = spec["containers"][0]
    name = f"pm-{job['metadata']['name']}"
    dk.start(name, *docker_args(spec, c, volume), image, *command(c))
    watch(dk, [name])
    code = dk.run("inspect", "-f", "{{.State.ExitCode}}", name)
    assert code == "0", f"{name} exited {code}: {dk.run('logs', name)[-2000:]}"


def _ready(url: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        assert time.monotonic() < deadline, f"{url} never answered 200"
        time.sleep(0.5)


def _load(urls: list[str], body: bytes, seconds: float, clients: int = 5) -> int:
    """``clients`` threads posting ``body`` round-robin over ``urls``; requests sent."""
    stop = time.monotonic() + seconds
    sent = [0] * clients

    def client(i: int) -> None:
        while time.monotonic() < stop:
            url = urls[(i + sent[i]) % len(urls)]
            headers = {"Content-Type": "application/json"}
            with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=30):
                sent[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(sent)


def serve(dk: Docker, image: str, volume: Path, s: Settings, png: bytes) -> dict:
    """Two predictor replicas (a scale-out) under 5 concurrent clients for 20 s."""
    c = manifests.serving_runtime(s)["spec"]["containers"][0]
    port = c["ports"][0]["containerPort"]
    names, hosts = ["pm-predictor-0", "pm-predictor-1"], []
    for name in names:
        dk.start(
            name, "-p", f"127.0.0.1::{port}", *docker_args({}, c, None),
            "-v", f"{volume / 'serving' / s.service}:{manifests.KSERVE_MODEL_DIR}:ro",
            image, *command(c, s.service),
        )  # fmt: skip
        hosts.append(dk.run("port", name, f"{port}/tcp").splitlines()[0])
    for host in hosts:
        _ready(f"http://{host}/v1/models/{s.service}")
    idle = watch(dk, names, until_exit=False)
    body = json.dumps({"instances": [{"b64": base64.b64encode(png).decode()}]}).encode()
    urls = [f"http://{h}/v1/models/{s.service}:predict" for h in hosts]
    sent = _load(urls, body, 20)
    loaded = watch(dk, names, until_exit=False)
    dk.cleanup()
    return {
        "idle": [idle[n] for n in names],
        "after_load": [loaded[n] for n in names],
        "requests": sent,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image", required=True, help="the project image, e.g. distml:<tag>")
    p.add_argument("--docker", default=os.environ.get("DISTML_DOCKER", "docker"))
    p.add_argument("--data-dir", default=os.environ.get("DISTML_DATA_DIR"))
    p.add_argument("--models", nargs="+", default=["cnn", "cnn_batchnorm"])
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if not args.data_dir:
        p.error("--data-dir (or DISTML_DATA_DIR): the four Fashion-MNIST .gz files")
    s = Settings(image=args.image)
    dk = Docker(args.docker)
    volume = Path(tempfile.mkdtemp(prefix="distml-pod-memory-"))
    try:
        raw = volume / manifests.RAW_DATA_SUBDIR
        raw.mkdir(parents=True)
        for f in Path(args.data_dir).glob("*-ubyte.gz"):
            shutil.copy(f, raw / f.name)
        for path in (volume, *volume.rglob("*")):  # the pods run as a non-root user
            path.chmod(0o777 if path.is_dir() else 0o666)
        run_job(dk, args.image, volume, manifests.ingest_job(s, manifests.raw_data_dir(s)))
        workers = {m: train(dk, args.image, volume, s, m) for m in args.models}
        run_job(dk, args.image, volume, manifests.selection_job(s, min_accuracy=0, force=False))
        from ml.data.dataset import read_idx
        from ml.data.sample import encode_png

        png = encode_png(read_idx(Path(args.data_dir) / "t10k-images-idx3-ubyte.gz")[0])
        predictor = serve(dk, args.image, volume, s, png)
    finally:
        dk.cleanup()
        shutil.rmtree(volume, ignore_errors=True)
    result = {
        "image": args.image,
        "date": time.strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "profile": s.profile,
        "workers_per_job": s.workers,
        "worker_peak_rss_pss_mib": workers,
        "predictor": predictor,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for model, peaks in workers.items():
        print(
            f"worker {model}: peak RSS / PSS "
            + ", ".join(f"{r:.0f} / {p:.0f}" for r, p in peaks)
            + " MiB"
        )
    for phase in ("idle", "after_load"):
        figures = ", ".join(f"{r:.0f} / {p:.0f}" for r, p in predictor[phase])
        print(f"predictor x2, {phase}: peak RSS / PSS {figures} MiB")
    print(f"({predictor['requests']} requests in 20 s)")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
