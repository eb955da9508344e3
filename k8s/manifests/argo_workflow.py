"""The whole pipeline as one Argo Workflow (argoproj.io/v1alpha1, Argo Workflows v4.1.2),
and the objects it needs: its RBAC (``k8s.manifests.argo_rbac``) and its memoization
cache ConfigMap.

Built from the same builders as the task chain: the ingestion and selection steps run the
pod specs of ``ingest_job`` and ``selection_job`` (so their commands are ``ml.contract``'s),
each training step creates exactly ``tfjob(s, model)``, and the serving steps apply exactly
what `invoke deploy` applies after selection: ``serving_runtime(s)``,
``inference_service(s)`` and, in standard mode, ``ingress_service(s)``. Outline::

    pipeline (steps)
      1. ingest                       container, memoized on the data checksums + image
      2. train (steps)                [parallelism: N TFJobs at once, when given]
           train-<model> ...          one resource step per model, in parallel
      3. select                       container on the PVC; a refusal to publish fails it
      4. serving-runtime-create,      resource create, then a guarded JSON patch
         serving-runtime              (predictor "kserve" only)
      5. serve-create, serve          the same for the InferenceService; ``serve``
                                      succeeds once KServe reports Ready
      6. ingress-create, ingress      the same for the ingress Service (standard mode on
                                      a cluster distml made: ``has_ingress``)

Deliberate choices (and why):
- A fixed name (``WORKFLOW_NAME``), not ``generateName``: one pipeline runs at a time
  anyway (one ReadWriteOnce volume, fixed TFJob and service names), and ``--watch`` and
  ``--stop`` then address it without parsing ``kubectl create`` output. Re-running means
  deleting the previous Workflow first, which also deletes its TFJobs (they carry an
  owner reference to it), so the new ``create`` steps do not meet old TFJobs.
- The serving objects carry no owner reference: deleting a finished Workflow must not take
  the live service down.
- The serving steps write an object only if it is this work dir's when they write it
  (hours after `invoke workflow` checked the names): ``<step>-create`` creates it
  (``kubectl create``: fails on AlreadyExists, and the step ``continueOn: failed``), then
  ``<step>`` patches it with a JSON Patch (``mergeStrategy: json``) whose first ops
  ``test`` its distml labels and its instance label, then write its labels, annotations
  and spec (k8s.manifests.guarded). The API server applies a JSON Patch to the object it
  stores in one request, and a failed ``test`` rejects the whole patch (422): someone
  else's object of that name is never written, however late it appeared. (Argo v4.1.2
  workflow/executor/resource.go getKubectlArguments: a ``json`` patch runs ``kubectl
  patch --type json --patch-file <manifest> <flags...>``, so ``flags`` name the object.)
  Not a plain ``apply``: it would take over an object of that name whoever made it.
- Argo's ``successCondition``/``failureCondition`` are Kubernetes label selectors whose
  keys are gjson paths (workflow/executor/resource.go: ``labels.Parse``, then
  ``gjsonLabels``). A key must be a valid label key, so a query such as
  ``conditions.#(type=="Ready")`` cannot be written: the conditions below use fields the
  operators set from those conditions (see ``tfjob_conditions`` and ``isvc_conditions``).
- The memoization ConfigMap (``workflow_cache``) loses every label but Argo's own the
  first time the controller saves an entry (workflow/controller/cache/configmap_cache.go
  sets its labels to exactly ``workflows.argoproj.io/configmap-type: Cache``): delete it
  by name (``workflow_cache_name(namespace)``), not by the distml labels. Delete it too
  whenever the volume is deleted, or the next run skips ingestion into an empty volume.
  It lives in Argo's namespace, shared by every distml namespace: its name (and its
  Role's) carries the distml namespace, so one namespace's `down` leaves the others'.
- Every pod of the Workflow carries ``sidecar.istio.io/inject: "false"``
  (``spec.podMetadata``): an injected sidecar never exits, and the step would never end.
  They keep their service-account token: Argo's executor in each reports the step's
  result through the API (the project's own pods have none: k8s.manifests.pods).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

import yaml

from k8s.client.objects import WORKFLOW_API, WORKFLOW_KIND
from k8s.manifests.argo_rbac import cache_writer_rbac, workflow_rbac
from k8s.manifests.checks import check_min_accuracy, check_models, check_settings
from k8s.manifests.guarded import guarded_patch, kubectl_resource
from k8s.manifests.inference import (
    has_ingress,
    inference_service,
    ingress_service,
    serving_runtime,
)
from k8s.manifests.names import (
    ARGO_CONTROLLER_SA,
    ARGO_NAMESPACE,
    INSTANCE_LABEL,
    NO_ISTIO_SIDECAR,
    WORKFLOW_COMPONENT,
    WORKFLOW_NAME,
    WORKFLOW_SA,
    raw_data_dir,
    tfjob_name,
    workflow_cache_name,
)
from k8s.manifests.placement import pull_secrets
from k8s.manifests.pods import ingest_job, meta, selection_job, tfjob
from k8s.providers.settings import Settings

# Argo refuses a memoization ConfigMap without this label (common.LabelKeyConfigMapType).
CACHE_LABEL = {"workflows.argoproj.io/configmap-type": "Cache"}
CACHE_KEY_PARAM = "cache-key"
DEFAULT_CACHE_MAX_AGE = "720h"
# Beyond the training deadline: ingestion (a download at worst), selection and serving.
WORKFLOW_OVERHEAD_S = 3600

ENTRYPOINT = "pipeline"
STEP_INGEST = "ingest"
STEP_TRAIN = "train"  # the steps template holding the TFJob steps (and their parallelism)
STEP_SELECT = "select"
STEP_RUNTIME = "serving-runtime"
STEP_SERVE = "serve"
STEP_INGRESS = "ingress"
SERVING_STEPS = (STEP_RUNTIME, STEP_SERVE, STEP_INGRESS)
CREATE_SUFFIX = "-create"  # the step that creates a serving step's object when absent

# Argo's cache key syntax (workflow/controller/cache/cache.go: cacheKeyRegex); the key is
# also a ConfigMap data key (at most 253 characters).
_CACHE_KEY = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]*$")
# Go's time.ParseDuration, which Argo applies to memoize.maxAge (operator.go).
_GO_DURATION = re.compile(r"^([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# The training operator's job condition types (kubeflow.org/v1 JobConditionType). Each
# type is in status.conditions at most once (pkg/util/status.go: setCondition filters
# out the old one and appends the new one), and nothing is appended after Failed.
TFJOB_CONDITION_TYPES = ("Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed")


# -- the memoization key and cache ------------------------------------------------------


def memo_key(image: str, data_checksums: Sequence[str], volume: str = "") -> str:
    """The ingestion step's cache key: a hash of the project image (its tag is the code
    version), the dataset files' SHA-256 (order does not matter) and, when given, the
    volume ingested into (``namespace/claim``: Argo keeps one cache for every namespace,
    and another deployment's entry must not skip ingestion into this one's volume). The
    same inputs give the same key, so a second run with nothing changed skips ingestion."""
    if not isinstance(image, str) or not image.strip():
        raise ValueError(f"memo_key needs the project image reference, got {image!r}")
    if isinstance(data_checksums, str):
        raise ValueError("data_checksums must be a list of SHA-256 hex digests, not one string")
    checksums = sorted(data_checksums)
    if not checksums:
        raise ValueError("memo_key needs at least one dataset checksum")
    bad = [c for c in checksums if not isinstance(c, str) or not _SHA256.match(c)]
    if bad:
        raise ValueError(f"not SHA-256 hex digests (64 lower-case hex characters): {bad}")
    inputs = {"image": image, "data": checksums, **({"volume": volume} if volume else {})}
    digest = hashlib.sha256(json.dumps(inputs).encode()).hexdigest()
    return f"ingest-{digest}"


def workflow_cache(s: Settings) -> dict[str, Any]:
    """The ConfigMap Argo keeps the ingestion step's memoization entries in: in Argo's own
    namespace, where the controller looks for it (see k8s.manifests.argo_rbac), named for
    this deployment's namespace."""
    check_settings(s)
    name = workflow_cache_name(s.namespace)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(name, ARGO_NAMESPACE, WORKFLOW_COMPONENT, extra_labels=CACHE_LABEL),
    }


# -- conditions ------------------------------------------------------------------------


def tfjob_conditions(job: dict[str, Any]) -> tuple[str, str]:
    """(successCondition, failureCondition) for a TFJob resource step.

    Success: every replica type's ``status.replicaStatuses.<type>.succeeded`` equals its
    replicas; with ``successPolicy: AllWorkers`` that is exactly when the operator marks
    the job Succeeded (Argo's own TFJob example, examples/k8s-resource-log-selector.yaml,
    waits on the same field). All requirements must match.
    Failure: a condition of type Failed at any position it can hold (each type at most
    once, so one of the first ``len(TFJOB_CONDITION_TYPES)``); any one requirement fails
    the step, and Argo checks failure before success.
    """
    replicas = job["spec"]["tfReplicaSpecs"]
    success = ",".join(
        f"status.replicaStatuses.{rtype}.succeeded == {spec['replicas']}"
        for rtype, spec in replicas.items()
    )
    failure = ",".join(
        f"status.conditions.{i}.type == Failed" for i in range(len(TFJOB_CONDITION_TYPES))
    )
    return success, failure


def isvc_conditions() -> tuple[str, str]:
    """(successCondition, failureCondition) for the InferenceService step.

    KServe sets ``status.modelStatus.states.targetModelState`` to Loaded only once the
    service's Ready condition is True (and, in Knative mode, the latest revision is the
    ready one), and to FailedToLoad when the model cannot load or the spec is invalid
    (pkg/apis/serving/v1beta1/inference_service_status.go at v0.20.0:
    PropagateModelStatus, UpdateModelRevisionStates, UpdateModelTransitionStatus).
    """
    state = "status.modelStatus.states.targetModelState"
    return f"{state} == Loaded", f"{state} == FailedToLoad"


# -- templates -------------------------------------------------------------------------


def _manifest(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=False)


def _container_template(
    name: str, job: dict[str, Any], *, inputs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A container template running a Job's one container with its pod's security
    context; the Job's backoffLimit becomes the retry limit (0: no retry)."""
    pod = job["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    template: dict[str, Any] = {"name": name}
    if inputs:
        template["inputs"] = inputs
    template["metadata"] = {"labels": dict(pod["metadata"]["labels"])}
    # Argo names the container "main"; the volume is the Workflow's (spec.volumes).
    template["container"] = {k: v for k, v in container.items() if k != "name"}
    template["securityContext"] = pod["spec"]["securityContext"]
    if "affinity" in pod["spec"]:  # next to the volume (k8s.manifests.placement)
        template["affinity"] = pod["spec"]["affinity"]
    if job["spec"]["backoffLimit"]:
        template["retryStrategy"] = {
            "limit": job["spec"]["backoffLimit"],
            "retryPolicy": "Always",
            "backoff": {"duration": "10s", "factor": 2},
        }
    return template


def _resource_template(
    name: str,
    obj: dict[str, Any],
    action: str,
    conditions: tuple[str, str] | None = None,
    *,
    owned: bool,
    retry: bool,
) -> dict[str, Any]:
    resource: dict[str, Any] = {"action": action}
    if owned:
        resource["setOwnerReference"] = True
    if conditions:
        resource["successCondition"], resource["failureCondition"] = conditions
    resource["manifest"] = _manifest(obj)
    template: dict[str, Any] = {"name": name, "resource": resource}
    if retry:
        # Only the Error phase (the step's pod lost: evicted, node gone), never a verdict.
        template["retryStrategy"] = {"limit": 2, "retryPolicy": "OnError"}
    return template


def _ingest_template(s: Settings, cache_max_age: str, source_dir: bool) -> dict[str, Any]:
    job = ingest_job(s, raw_data_dir(s) if source_dir else None)
    param = {"name": CACHE_KEY_PARAM}
    template = _container_template(STEP_INGEST, job, inputs={"parameters": [param]})
    # Retried (ingest's backoffLimit): it is idempotent and a download may flake.
    template["memoize"] = {
        "key": f"{{{{inputs.parameters.{CACHE_KEY_PARAM}}}}}",
        "maxAge": cache_max_age,
        "cache": {"configMap": {"name": workflow_cache_name(s.namespace)}},
    }
    return template


def _steps(s: Settings, canary: bool) -> list[list[dict[str, Any]]]:
    cache_arg = {"name": CACHE_KEY_PARAM, "value": f"{{{{workflow.parameters.{CACHE_KEY_PARAM}}}}}"}
    names = [STEP_INGEST, STEP_TRAIN, STEP_SELECT]
    for name in [] if canary else serving_steps(s):  # a canary leaves the serving as it is
        names += [create_step(name), name]
    # One step per group: each waits for the one before. Step and template share a name.
    groups: list[list[dict[str, Any]]] = [[{"name": name, "template": name}] for name in names]
    groups[0][0]["arguments"] = {"parameters": [cache_arg]}
    for (step,) in groups:
        if step["name"].endswith(CREATE_SUFFIX):
            # AlreadyExists fails the create (the main container exits 1: node Failed,
            # operator.go inferFailedReason); the guarded patch after it decides.
            step["continueOn"] = {"failed": True}
    return groups


def serving_steps(s: Settings) -> list[str]:
    """The serving steps of ``s``, in order (each after its ``create_step``)."""
    names = [STEP_RUNTIME] if s.predictor == "kserve" else []
    names.append(STEP_SERVE)
    if has_ingress(s):
        names.append(STEP_INGRESS)
    return names


def create_step(step: str) -> str:
    """The name of the step creating serving step ``step``'s object when it is absent."""
    return f"{step}{CREATE_SUFFIX}"


def _train_template(models: Sequence[str], parallelism: int | None) -> dict[str, Any]:
    """The TFJob steps, one group (in parallel), in their own steps template so that
    ``parallelism`` limits them and nothing else: Argo v4.1.2 counts a template's
    parallelism against every active child of the template's node (operator.go
    checkParallelism: getActiveChildren(boundaryID)), whatever its step group."""
    template: dict[str, Any] = {"name": STEP_TRAIN}
    if parallelism is not None:
        template["parallelism"] = parallelism
    # Step, template and TFJob share one name per model.
    template["steps"] = [[{"name": tfjob_name(m), "template": tfjob_name(m)} for m in models]]
    return template


def _guarded_templates(
    name: str,
    obj: dict[str, Any],
    instance: str | None,
    conditions: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``create_step(name)``: ``obj`` created when absent; ``name``: ``guarded_patch``
    of it, by kind and name (a json patch takes no ``-f``), waiting on ``conditions``.
    Both retried on Error only: a create that meets its own object fails, and goes on."""
    if instance:
        meta = obj["metadata"]
        obj = {**obj, "metadata": {**meta, "labels": {**meta["labels"], INSTANCE_LABEL: instance}}}
    create = _resource_template(create_step(name), obj, "create", owned=False, retry=True)
    meta = obj["metadata"]
    resource: dict[str, Any] = {
        "action": "patch",
        "mergeStrategy": "json",
        "flags": [kubectl_resource(obj), meta["name"], "--namespace", meta["namespace"]],
    }
    if conditions:
        resource["successCondition"], resource["failureCondition"] = conditions
    resource["manifest"] = json.dumps(guarded_patch(obj, instance), indent=1)
    patch = {"name": name, "resource": resource, "retryStrategy": dict(create["retryStrategy"])}
    return [create, patch]


def _serving_templates(s: Settings, instance: str | None) -> list[dict[str, Any]]:
    """The same objects `invoke deploy` applies after selection, each written only if it
    is this work dir's (module docstring); the InferenceService's step waits for Ready."""
    out = []
    if s.predictor == "kserve":
        out += _guarded_templates(STEP_RUNTIME, serving_runtime(s), instance)
    out += _guarded_templates(STEP_SERVE, inference_service(s), instance, isvc_conditions())
    if has_ingress(s):
        # The way in from the host (deploy applies it too); nothing to wait for.
        out += _guarded_templates(STEP_INGRESS, ingress_service(s), instance)
    return out


def _templates(
    s: Settings,
    models: Sequence[str],
    *,
    cache_max_age: str,
    min_accuracy: float,
    source_dir: bool,
    parallelism: int | None,
    instance: str | None,
    canary: bool,
) -> list[dict[str, Any]]:
    templates = [
        {"name": ENTRYPOINT, "steps": _steps(s, canary)},
        _ingest_template(s, cache_max_age, source_dir),
        _train_template(models, parallelism),
    ]
    for m in models:
        job = tfjob(s, m)
        # Not retried: a retried `create` meets the failed TFJob (AlreadyExists), and the
        # TFJob restarts its own workers (runPolicy.backoffLimit = --max-restarts).
        templates.append(
            _resource_template(
                tfjob_name(m), job, "create", tfjob_conditions(job), owned=True, retry=False
            )
        )
    # Not retried (backoffLimit 0): a refusal to publish is a verdict, not a flake.
    select = selection_job(s, min_accuracy=min_accuracy, force=False, canary=canary)
    templates.append(_container_template(STEP_SELECT, select))
    return templates + ([] if canary else _serving_templates(s, instance))


def check_parallelism(parallelism: object) -> None:
    """None (every TFJob at once) or a whole number >= 1 (the CRD's minimum)."""
    if parallelism is None:
        return
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise ValueError(
            f"parallelism {parallelism!r} must be a whole number of TFJobs at once (>= 1), "
            "or None to run them all at once"
        )


def is_duration(text: object) -> bool:
    """A duration Argo accepts for ``memoize.maxAge`` (Go's time.ParseDuration)."""
    return isinstance(text, str) and bool(_GO_DURATION.match(text))


def _check_cache(cache_key: str, cache_max_age: str) -> None:
    if not isinstance(cache_key, str) or not _CACHE_KEY.match(cache_key) or len(cache_key) > 253:
        raise ValueError(
            f"cache key {cache_key!r} is not an Argo memoization key (letters, digits and '-', "
            "starting with a letter or digit, at most 253): derive it with memo_key()"
        )
    if not is_duration(cache_max_age):
        raise ValueError(
            f"cache max age {cache_max_age!r} is not a duration such as '720h', '30m' or '90s'"
        )


def workflow(
    s: Settings,
    *,
    models: Sequence[str],
    cache_key: str,
    cache_max_age: str = DEFAULT_CACHE_MAX_AGE,
    min_accuracy: float = 0.0,
    source_dir: bool = False,
    parallelism: int | None = None,
    instance: str | None = None,
    canary: bool = False,
) -> dict[str, Any]:
    """The Workflow: ingest -> one TFJob per model in parallel -> select -> serve; with
    ``canary``, select publishes a canary release and there is no serving step (`invoke
    workflow --canary` then judges it from this machine, as `deploy --canary` does).

    ``cache_key``: ``memo_key(s.image, contract.RAW_SHA256)``; ``source_dir``: ingest
    reads the raw files ``invoke up --source-dir`` copied into the volume;
    ``parallelism``: at most that many TFJobs at once (None: all of them);
    ``instance``: the work dir's id, which the serving steps require of what they
    write (None: only distml's labels are required)."""
    check_settings(s)
    models = check_models(models)
    check_min_accuracy(min_accuracy)
    _check_cache(cache_key, cache_max_age)
    check_parallelism(parallelism)
    templates = _templates(
        s,
        models,
        cache_max_age=cache_max_age,
        min_accuracy=min_accuracy,
        source_dir=source_dir,
        parallelism=parallelism,
        instance=instance,
        canary=canary,
    )
    volumes = ingest_job(s)["spec"]["template"]["spec"]["volumes"]
    return {
        "apiVersion": WORKFLOW_API,
        "kind": WORKFLOW_KIND,
        "metadata": meta(WORKFLOW_NAME, s.namespace, WORKFLOW_COMPONENT),
        "spec": {
            "entrypoint": ENTRYPOINT,
            "serviceAccountName": WORKFLOW_SA,
            "arguments": {"parameters": [{"name": CACHE_KEY_PARAM, "value": cache_key}]},
            "activeDeadlineSeconds": s.train_deadline_s + WORKFLOW_OVERHEAD_S,
            # Failed pods stay (their logs explain the failure); finished ones go.
            "podGC": {"strategy": "OnPodSuccess"},
            # Every step's pod: an Istio sidecar would keep it running (module docstring).
            "podMetadata": {"annotations": dict(NO_ISTIO_SIDECAR)},
            "volumes": volumes,
            **pull_secrets(s),
            "templates": templates,
        },
    }


def workflow_objects(
    s: Settings, *, controller_sa: str = ARGO_CONTROLLER_SA, **options: Any
) -> list[dict[str, Any]]:
    """The steps' ServiceAccount, Role and RoleBinding, the controller's cache Role and
    RoleBinding (to ``controller_sa``, the ServiceAccount Argo's controller runs as), the
    cache ConfigMap and the Workflow: apply order (the Workflow's pods need their
    ServiceAccount and Role from the first step, and the controller writes the cache as
    soon as ingestion ends). ``options``: ``workflow()``'s keywords."""
    wf = workflow(s, **options)
    rbac = workflow_rbac(s, options["models"])
    return [*rbac, *cache_writer_rbac(s, controller_sa), workflow_cache(s), wf]
