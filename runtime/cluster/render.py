"""`invoke render`: every object up/train-all/deploy apply, as numbered YAML files in apply
order; in ``workflow/``, numbered the same way, what `invoke workflow` applies instead of
train-all + deploy; with ``prometheus_operator``, in ``prometheus-operator/``, the objects
for a Prometheus the Prometheus Operator runs, shaped by ``operator_options`` (nothing
applies them: the user does, ``k8s.monitoring.prometheus_operator``); and
``00-operators.sh``: the cluster and operator installs `invoke up` runs on an empty machine,
recorded from the same installer instead of written twice."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from invoke import Config, Context, Result

from k8s import manifests
from k8s.client.drykube import DryKube
from k8s.install.operators import Installer
from k8s.monitoring import stack
from k8s.monitoring.prometheus_operator import OperatorOptions
from k8s.monitoring.prometheus_operator import operator_objects as prometheus_operator_objects
from k8s.providers.settings import Settings
from runtime.cluster.context import ClusterContext

#: The folder (and step name) of the Prometheus Operator's objects.
OPERATOR_FLOW = "prometheus-operator"


def render(
    cx: ClusterContext,
    out_dir: Path,
    *,
    models: Sequence[str],
    serving_mode: str,
    predictor: str,
    source_dir: bool,
    prometheus_operator: bool = False,
    operator_options: OperatorOptions | None = None,
    **changes: Any,
) -> list[Path]:
    """Write the objects and the install script into ``out_dir``; the paths, script first."""
    import yaml

    s = cx.settings(serving_mode=serving_mode, predictor=predictor, **changes)
    flows = {
        "chain": out_dir,
        manifests.WORKFLOW_STEP: out_dir / manifests.WORKFLOW_STEP,
        OPERATOR_FLOW: out_dir / OPERATOR_FLOW,
    }
    for flow, folder in flows.items():
        if flow != OPERATOR_FLOW or prometheus_operator:
            folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("[0-9][0-9]-*.yaml"):
            old.unlink()
    written: list[Path] = []
    numbers = dict.fromkeys(flows, 0)
    objects = manifests.cluster_objects(s, models=list(models), source_dir=source_dir)
    if s.with_monitoring and not s.prometheus:  # `up` applies them after the namespace
        objects[1:1] = [("up", obj) for obj in stack.prometheus_objects(s)]
    if prometheus_operator:
        found = prometheus_operator_objects(s, operator_options)
        objects += [(OPERATOR_FLOW, obj) for obj in found]
    for step, obj in objects:
        # The workflow's objects are the alternative to train-all + deploy, not a sequel:
        # they go in a folder of their own, numbered in their own apply order; so do the
        # Prometheus Operator's, which only a cluster with its CRDs accepts.
        flow = step if step in (manifests.WORKFLOW_STEP, OPERATOR_FLOW) else "chain"
        numbers[flow] += 1
        name = f"{numbers[flow]:02d}-{step}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        path = flows[flow] / name
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        written.append(path)
    ops = out_dir / "00-operators.sh"
    script = operator_script(cx, s)
    if hasattr(cx.provider, "config_yaml"):  # kind: the cluster config the script uses
        config = out_dir / "kind-config.yaml"
        config.write_text(cx.provider.config_yaml())
        script = script.replace(shlex.quote(str(cx.wd.root / "kind-config.yaml")), config.name)
        written.append(config)
    ops.write_text(script)
    written.insert(0, ops)
    return written


def operator_script(cx: ClusterContext, s: Settings) -> str:
    """The cluster + operator install commands `invoke up` runs on an empty machine."""
    commands: list[str] = []
    c = _Recorder(commands)
    cx.provider.create(c, cx.wd.root)
    quiet = lambda _: None  # noqa: E731
    kube = _RecordingKube(commands, cx.provider.kubectl)
    Installer(c, kube, cx.provider, s, quiet, cx.clock).all()
    header = (
        "#!/bin/sh\n# What `invoke up` runs on an empty machine before applying the "
        f"numbered manifests ({cx.provider.name}, {s.serving_mode} mode).\n"
        f"# Versions: k8s/install/versions.py. Waits between steps are omitted here.\nset -e\n"
    )
    return header + "\n".join(commands) + "\n"


class _Recorder(Context):
    """A dry invoke Context that records each command an empty machine would run."""

    def __init__(self, commands: list[str]) -> None:
        super().__init__(Config(overrides={"run": {"dry": True}}))
        self._set(commands=commands)

    def run(self, command: str, **kwargs: Any) -> Any:
        if kwargs.get("hide"):  # read-only queries: an empty machine has nothing
            return Result(exited=1)
        self.commands.append(command)
        return Result()


class _RecordingKube(DryKube):
    """Objects the installer applies itself (the kserve Namespace) become commands."""

    def __init__(self, commands: list[str], kubectl: Callable[[str], str]) -> None:
        super().__init__(lambda _: None)
        self.commands, self.kubectl = commands, kubectl

    def apply(
        self, obj: dict[str, Any], *, dry_run: bool = False, force: bool = False
    ) -> dict[str, Any]:
        import yaml

        if not dry_run:
            body = yaml.safe_dump(obj, sort_keys=False).rstrip()
            apply = self.kubectl("apply --server-side -f -")
            self.commands.append(f"{apply} <<'EOF'\n{body}\nEOF")
        return obj
