"""``python -m integration.workflow_race ADMIN_CONTEXT``: the workflow's served name taken
after submit is refused in its serve step (issue 37, "the late writers").

A step of the bring-your-own run (``integration.byo``), run with the user's settings
(``INVOKE_WORKDIR``, ``INVOKE_RUNTIME=existing``, ``INVOKE_CLUSTER_NAMESPACE``) once the
user's work dir has done ``invoke up --with-argo``, and before its ``deploy``:

1. ``invoke workflow --watch`` (one model, a small budget) starts, its output streamed;
2. once the Workflow runs its train step, the admin creates an InferenceService of the
   served name in the user's namespace (labels ``team=other``, no instance label): it is
   there before the serve step, and after `invoke workflow` checked the name at submit;
3. the workflow must fail with the watch's refusal line for step ``serve``, and the
   admin's InferenceService keep its uid, generation, labels and spec, with no writer of
   distml's among its field managers;
4. the admin's InferenceService and the Workflow are deleted, whatever happened.

Exit 0 with one summary line; SystemExit with what was seen otherwise. Stdlib only.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import time
from typing import IO, Any

from integration import byo_cluster, tenants

# The product's names, repeated (stdlib only here; tests/integration/test_workflow_race.py
# checks each against its source).
WORKFLOW = "distml-pipeline"  # k8s.manifests.names.WORKFLOW_NAME
DEFAULT_SERVICE = "tf-mnist"  # ml.contract.DEFAULT_SERVICE; INVOKE_SERVICE overrides it
ISVC_RESOURCE = "inferenceservices.v1beta1.serving.kserve.io"  # guarded.kubectl_resource
MODEL = "cnn"
TRAIN_STEP = f"train-{MODEL}"  # k8s.manifests.names.tfjob_name(MODEL)
SERVE_STEPS = ("serve-create", "serve")  # argo_workflow.create_step(STEP_SERVE), STEP_SERVE
FINISHED = ("Succeeded", "Failed", "Error")  # a Workflow's final phases
# A JSON patch by the serve step: Argo runs `kubectl patch`, whose field manager this is.
ARGO_PATCH_MANAGER = "kubectl-patch"
START_TIMEOUT_S = 900  # submit, ingestion (not cached the first time), the TFJob created
FINISH_TIMEOUT_S = 1800  # training, selection, the serving steps
POLL_S = 2.0


def command() -> list[str]:
    """`invoke workflow`, watched, one model, the run's small training budget."""
    invoke = [sys.executable, "-m", "invoke", "workflow", "--watch"]
    return [*invoke, "--model-type", MODEL, *byo_cluster.BUDGET]


def where() -> tuple[str, str]:
    """The user's namespace and served name, from the user's settings."""
    namespace = os.environ.get("INVOKE_CLUSTER_NAMESPACE", "")
    if not namespace:
        raise SystemExit("workflow race: INVOKE_CLUSTER_NAMESPACE is not set (the user's)")
    return namespace, os.environ.get("INVOKE_SERVICE") or DEFAULT_SERVICE


def refusal(namespace: str, service: str) -> str:
    """What `invoke workflow --watch` says when step serve refused the InferenceService
    (runtime.cluster.workflow.refusals)."""
    return f"step serve refused to write {ISVC_RESOURCE} {namespace}/{service}"


def foreign_isvc(namespace: str, service: str) -> dict[str, Any]:
    """Another team's InferenceService (tenants.other_team_objects'), of the served name."""
    isvc = copy.deepcopy(
        next(o for o in tenants.other_team_objects() if o["kind"] == "InferenceService")
    )
    isvc["metadata"].update(name=service, namespace=namespace)
    return isvc


def run(cmd: list[str], stdin: str | None = None, echo: bool = True) -> str:
    """``cmd``'s output; SystemExit with its error when it fails."""
    if echo:
        print("+ " + " ".join(cmd), flush=True)
    try:
        done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"{' '.join(cmd)} did not end in 600 s") from None
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def get_command(kubectl: list[str], kind: str, name: str) -> list[str]:
    return [*kubectl, "get", kind, name, "-o", "json", "--ignore-not-found"]


def get(kubectl: list[str], kind: str, name: str, echo: bool = True) -> dict[str, Any] | None:
    out = run(get_command(kubectl, kind, name), echo=echo)
    return json.loads(out) if out.strip() else None


class Streamed:
    """A command run with its output printed as it comes, and kept."""

    def __init__(self, cmd: list[str]) -> None:
        print("+ " + " ".join(cmd), flush=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # each line as it is printed
        out, err = subprocess.PIPE, subprocess.STDOUT
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            print(line, end="", flush=True)
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def finish(self, timeout_s: float) -> int:
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"`invoke workflow` still runs after {timeout_s:.0f} s") from None
        self._reader.join(timeout=30)
        return int(code)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def stage(wf: dict[str, Any] | None, old_uid: str | None) -> str:
    """Where the Workflow this run submitted is: not submitted (absent, or the finished one
    `invoke workflow` replaces), starting, training (the moment), serving (too late), over."""
    if wf is None or wf["metadata"].get("uid") == old_uid:
        return "not submitted"
    nodes = ((wf.get("status") or {}).get("nodes") or {}).values()
    # The steps started; attempt "serve(1)" is step "serve".
    started = {(n.get("displayName") or "").partition("(")[0] for n in nodes}
    if started & set(SERVE_STEPS):
        return "serving"
    if (wf.get("status") or {}).get("phase") in FINISHED:
        return "over"
    return "training" if TRAIN_STEP in started else "starting"


def wait_training(
    kubectl: list[str], wf: Streamed, old_uid: str | None, timeout_s: float = START_TIMEOUT_S
) -> None:
    """Poll the Workflow until step train-cnn has started and the serve steps have not."""
    poll = " ".join(get_command(kubectl, "workflow", WORKFLOW))
    print(f"+ (every {POLL_S:.0f} s, until step {TRAIN_STEP} runs) {poll}", flush=True)
    deadline = time.monotonic() + timeout_s
    while (seen := stage(get(kubectl, "workflow", WORKFLOW, echo=False), old_uid)) != "training":
        if seen in ("serving", "over"):
            raise SystemExit(
                f"workflow race: Workflow {WORKFLOW} was {seen} before step {TRAIN_STEP} "
                "was seen running: the name could not be taken in time, nothing was judged"
            )
        if wf.proc.poll() is not None:
            raise SystemExit(
                f"workflow race: `invoke workflow` exited {wf.proc.poll()} "
                f"before step {TRAIN_STEP} ran"
            )
        if time.monotonic() >= deadline:
            raise SystemExit(
                f"workflow race: step {TRAIN_STEP} did not start in {timeout_s:.0f} s "
                f"(Workflow {WORKFLOW}: {seen})"
            )
        time.sleep(POLL_S)


def make_foreign(kubectl: list[str], namespace: str, service: str) -> dict[str, Any]:
    """The admin creates the other team's InferenceService; what it is as created."""
    out = run(
        [*kubectl, "create", "-f", "-", "-o", "json"], json.dumps(foreign_isvc(namespace, service))
    )
    made = json.loads(out)
    meta = made["metadata"]
    print(
        f"made InferenceService {namespace}/{service} as the admin (team=other): "
        f"uid {meta['uid']} generation {meta['generation']}",
        flush=True,
    )
    return made


def judge(
    code: int, said: str, made: dict[str, Any], now: dict[str, Any] | None, namespace: str
) -> str:
    """The summary line when the serve step refused and the admin's object is as it was
    made; SystemExit naming every way it is not."""
    name = made["metadata"]["name"]
    problems = []
    if code == 0:
        problems.append("`invoke workflow` exited 0: it served over another team's object")
    elif refusal(namespace, name) not in said:
        problems.append(
            f"`invoke workflow` exited {code} without saying {refusal(namespace, name)!r}"
        )
    if now is None:
        problems.append(f"InferenceService {namespace}/{name} is gone")
    else:
        before, after = tenants.fingerprint(made), tenants.fingerprint(now)
        changed = [f for f in ("uid", "generation", "labels", "spec") if before[f] != after[f]]
        if changed:
            problems.append(f"InferenceService {namespace}/{name} changed: {changed}")
        wrote = {m.get("manager") for m in now["metadata"].get("managedFields") or []}
        if after["distml_wrote"] or ARGO_PATCH_MANAGER in wrote:
            problems.append(f"InferenceService {namespace}/{name} written by {sorted(wrote)}")
    if problems:
        raise SystemExit("workflow race: FAILED:\n  " + "\n  ".join(problems))
    meta = now["metadata"] if now else {}
    return (
        f"workflow race: step serve refused InferenceService {namespace}/{name}, made by "
        f"the admin after submit (uid {meta.get('uid')} generation {meta.get('generation')} "
        f"kept); `invoke workflow` exited {code}"
    )


def clean_up(kubectl: list[str], service: str, made_uid: str | None) -> list[str]:
    """Delete the admin's InferenceService (the one made here: same uid) and the Workflow
    (its TFJob with it); what could not be done."""
    delete = [*kubectl, "delete", "--timeout=300s"]
    left = []
    try:
        now = get(kubectl, "inferenceservice", service) if made_uid else None
        if now and now["metadata"]["uid"] == made_uid:
            run([*delete, "inferenceservice", service])
    except SystemExit as e:
        left.append(str(e))
    try:
        run([*delete, "--ignore-not-found", "--cascade=foreground", "workflow", WORKFLOW])
    except SystemExit as e:
        left.append(str(e))
    return left


def race(admin: str) -> str:
    namespace, service = where()
    kubectl = ["kubectl", "--context", admin, "-n", namespace]
    if get(kubectl, "inferenceservice", service) is not None:
        raise SystemExit(
            f"workflow race: InferenceService {namespace}/{service} exists "
            "already: run this step before the user's `invoke deploy`"
        )
    old = get(kubectl, "workflow", WORKFLOW)  # a finished one, which `invoke workflow` replaces
    old_uid = old["metadata"]["uid"] if old else None
    wf = Streamed(command())
    made = None
    try:
        wait_training(kubectl, wf, old_uid)
        made = make_foreign(kubectl, namespace, service)
        code = wf.finish(FINISH_TIMEOUT_S)
        verdict = judge(code, wf.text(), made, get(kubectl, "inferenceservice", service), namespace)
    finally:
        wf.stop()
        left = clean_up(kubectl, service, made["metadata"]["uid"] if made else None)
    if left:
        raise SystemExit("workflow race: passed, but not cleaned up:\n  " + "\n  ".join(left))
    return verdict


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m integration.workflow_race ADMIN_CONTEXT", file=sys.stderr)
        return 2
    print(race(args[0]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
