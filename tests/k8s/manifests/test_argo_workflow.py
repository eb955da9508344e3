"""k8s.manifests.argo_workflow: the Argo Workflow is strictly valid against Argo's CRD, every
object it embeds against its own schema, its steps are the task chain's builders, its cache
key tracks its inputs, and its success and failure conditions mean what they say when Argo
evaluates them. (Its Roles: test_argo_rbac.py.)"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import yaml

from k8s import manifests as m
from k8s.providers.settings import SERVING_MODES, Settings
from ml import contract
from ml.contract import MODEL_TYPES
from tests.support import argo_conditions as argo
from tests.support import json_patch, k8s_schemas
from tests.support.workflow_kit import IMAGE, KEY, MATRIX, S, build, embedded

# The module (k8s.manifests.argo_workflow, as an attribute, is the function it exports).
wfm = importlib.import_module("k8s.manifests.argo_workflow")


def templates(wf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in wf["spec"]["templates"]}


def written(wf: dict[str, Any], name: str) -> dict[str, Any]:
    """What resource step ``name`` writes: its manifest or, for a guarded patch, what the
    patch makes of the object its create step makes (the object as it is when absent)."""
    t = templates(wf)[name]
    if t["resource"]["action"] != "patch":
        return embedded(t)
    return json_patch.apply(
        embedded(templates(wf)[wfm.create_step(name)]), yaml.safe_load(t["resource"]["manifest"])
    )


def step_groups(wf: dict[str, Any], template: str | None = None) -> list[list[str]]:
    """The step names of a steps template (the entrypoint by default), group by group."""
    steps = templates(wf)[template or wf["spec"]["entrypoint"]]["steps"]
    return [[step["name"] for step in group] for group in steps]


# -- strict validity --------------------------------------------------------------------


@pytest.mark.parametrize("s", MATRIX)
def test_every_object_and_every_embedded_manifest_is_strictly_valid(s: Settings) -> None:
    objs = m.workflow_objects(s, models=MODEL_TYPES, cache_key=KEY, min_accuracy=0.5, parallelism=2)
    assert [o["kind"] for o in objs] == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Workflow",
    ]
    for obj in objs:
        assert k8s_schemas.validate(obj) == [], obj["kind"]
    resources = [t for t in objs[-1]["spec"]["templates"] if "resource" in t]
    assert resources, "no resource step"
    for t in resources:
        assert k8s_schemas.validate(written(objs[-1], t["name"])) == [], t["name"]


def test_the_validator_bites_on_the_published_design_s_mistakes() -> None:
    """The original workflow's errors are caught: `manifests:` for `manifest:`, a
    successCondition outside `resource`, `cache:` beside `memoize:` instead of inside."""
    wf = build()
    train = templates(wf)[m.tfjob_name("cnn")]
    train["resource"]["manifests"] = train["resource"].pop("manifest")
    serve = templates(wf)[wfm.STEP_SERVE]
    serve["successCondition"] = serve["resource"].pop("successCondition")
    ingest = templates(wf)[wfm.STEP_INGEST]
    ingest["cache"] = ingest["memoize"].pop("cache")
    errors = "\n".join(k8s_schemas.validate(wf))
    assert "'manifests' was unexpected" in errors
    assert "'successCondition' was unexpected" in errors
    assert "'cache' was unexpected" in errors and "'cache' is a required property" in errors


def test_an_embedded_manifest_s_typo_is_caught_by_its_own_schema() -> None:
    job = embedded(templates(build())[m.tfjob_name("cnn")])
    job["spec"]["tfReplicaSpecs"]["Worker"]["replica"] = 2
    assert k8s_schemas.validate(job)


# -- structure --------------------------------------------------------------------------


@pytest.mark.parametrize("s", MATRIX)
def test_ingest_then_parallel_tfjobs_then_select_then_serve(s: Settings) -> None:
    wf = build(s)
    serving = ([wfm.STEP_RUNTIME] if s.predictor == "kserve" else []) + [wfm.STEP_SERVE]
    serving += [wfm.STEP_INGRESS] if s.serving_mode == "standard" else []
    assert step_groups(wf) == [
        [wfm.STEP_INGEST],
        [wfm.STEP_TRAIN],
        [wfm.STEP_SELECT],
        *[[step] for name in serving for step in (wfm.create_step(name), name)],
    ]
    # The training template: one group, so the TFJobs run in parallel.
    assert step_groups(wf, wfm.STEP_TRAIN) == [[m.tfjob_name(x) for x in MODEL_TYPES]]
    by_name = templates(wf)
    for steps_template in (wfm.ENTRYPOINT, wfm.STEP_TRAIN):
        for group in by_name[steps_template]["steps"]:
            for step in group:
                # One name per step: the step, its template and (for TFJobs) the object.
                assert step["template"] == step["name"] and step["name"] in by_name
    assert len(by_name) == len(wf["spec"]["templates"]), "template names repeat"


def test_a_model_subset_gives_one_training_step_each() -> None:
    wf = build(models=["cnn_dropout"])
    assert step_groups(wf, wfm.STEP_TRAIN) == [["train-cnn-dropout"]]
    assert "train-cnn" not in templates(wf)


# -- parallelism: how many TFJobs at once ----------------------------------------------


def training_waves(wf: dict[str, Any]) -> list[list[str]]:
    """The TFJob steps Argo v4.1.2 starts together, reconcile after reconcile, when each
    started step runs until the next reconcile (the most that can overlap).

    steps.go executeStepGroup calls executeTemplate for every step of the group in order
    on each reconcile; operator.go checkParallelism refuses a new child (a step not yet
    Pending/Running) once getActiveChildren(boundaryID) reaches the parallelism of the
    template whose node is the boundary (the steps template holding the group): that
    step is left for a later reconcile (ErrParallelismReached: continue)."""
    template = templates(wf)[wfm.STEP_TRAIN]
    limit = template.get("parallelism")
    (group,) = template["steps"]
    started: set[str] = set()
    waves: list[list[str]] = []
    while len(started) < len(group):
        active: list[str] = []
        for step in group:
            if step["name"] in started:
                continue
            if limit is not None and len(active) >= limit:
                continue
            active.append(step["name"])
            started.add(step["name"])
        waves.append(active)
    return waves


def test_parallelism_one_trains_one_model_at_a_time() -> None:
    wf = build(parallelism=1)
    assert templates(wf)[wfm.STEP_TRAIN]["parallelism"] == 1
    assert training_waves(wf) == [[m.tfjob_name(x)] for x in MODEL_TYPES]


def test_no_parallelism_trains_every_model_at_once() -> None:
    wf = build()
    assert "parallelism" not in templates(wf)[wfm.STEP_TRAIN]
    assert training_waves(wf) == [[m.tfjob_name(x) for x in MODEL_TYPES]]


def test_parallelism_limits_the_training_steps_and_nothing_else() -> None:
    wf = build(parallelism=2)
    assert [len(w) for w in training_waves(wf)] == [2, 1]
    limited = {t["name"] for t in wf["spec"]["templates"] if "parallelism" in t}
    assert limited == {wfm.STEP_TRAIN}
    assert "parallelism" not in wf["spec"], "a workflow-level limit counts every pod"
    assert k8s_schemas.validate(wf) == []


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_a_parallelism_that_is_not_a_count_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="whole number of TFJobs at once"):
        build(parallelism=bad)
    with pytest.raises(ValueError, match="whole number of TFJobs at once"):
        m.workflow_objects(S, models=MODEL_TYPES, cache_key=KEY, parallelism=bad)


def test_names_are_what_argo_accepts() -> None:
    """validate.go: workflow names at most 63; template and step names
    [a-zA-Z0-9][-a-zA-Z0-9]* up to 128 characters."""
    wf = build()
    assert len(wf["metadata"]["name"]) <= 63
    for name in templates(wf):
        assert argo._LABEL_NAME.match(name) and "." not in name and "_" not in name, name


def test_workflow_level_settings() -> None:
    s = Settings(image=IMAGE, train_deadline_s=1800)
    spec = build(s)["spec"]
    assert spec["serviceAccountName"] == m.WORKFLOW_SA
    assert spec["activeDeadlineSeconds"] > s.train_deadline_s
    assert spec["podGC"] == {"strategy": "OnPodSuccess"}
    assert spec["volumes"] == [
        {"name": m.VOLUME_NAME, "persistentVolumeClaim": {"claimName": s.volume}}
    ]
    volumes = {v["name"] for v in spec["volumes"]}
    for t in spec["templates"]:
        for mount in t.get("container", {}).get("volumeMounts", []):
            assert mount["name"] in volumes and mount["mountPath"] == s.mount_path


def test_retries_only_where_a_retry_is_safe() -> None:
    by_name = templates(build())
    retried = {name for name, t in by_name.items() if "retryStrategy" in t}
    serving = {wfm.STEP_RUNTIME, wfm.STEP_SERVE}
    assert retried == {wfm.STEP_INGEST, *serving, *map(wfm.create_step, serving)}
    standard = templates(build(Settings(image=IMAGE, serving_mode="standard")))
    assert "retryStrategy" in standard[wfm.STEP_INGRESS]  # a guarded patch: idempotent
    # The ingest retries are the task chain's ingest Job's backoffLimit (one fact).
    assert (
        by_name[wfm.STEP_INGEST]["retryStrategy"]["limit"]
        == (m.ingest_job(S)["spec"]["backoffLimit"])
    )
    assert m.selection_job(S, min_accuracy=0, force=False)["spec"]["backoffLimit"] == 0


def test_only_the_tfjobs_are_owned_by_the_workflow() -> None:
    """Deleting the Workflow (to re-run it, or --stop) deletes its TFJobs, never the
    live service."""
    owned = {
        name
        for name, t in templates(build()).items()
        if t.get("resource", {}).get("setOwnerReference")
    }
    assert owned == {m.tfjob_name(x) for x in MODEL_TYPES}


# -- one source of truth ---------------------------------------------------------------


@pytest.mark.parametrize("source_dir", [False, True])
def test_container_steps_run_the_contract_commands(source_dir: bool) -> None:
    s = Settings(image=IMAGE, mount_path="/vol")
    by_name = templates(build(s, min_accuracy=0.75, source_dir=source_dir))
    raw = m.raw_data_dir(s) if source_dir else None
    assert by_name[wfm.STEP_INGEST]["container"]["command"] == contract.ingest("/vol", raw)
    assert by_name[wfm.STEP_SELECT]["container"]["command"] == contract.select(
        "/vol", s.service, min_accuracy=0.75, code_version=IMAGE
    )
    # The image tag reaches the selection step as the published version's code version.
    assert by_name[wfm.STEP_SELECT]["container"]["image"] == IMAGE


def test_container_steps_are_the_task_chain_s_job_pods() -> None:
    by_name = templates(build(min_accuracy=0.5))
    jobs = {
        wfm.STEP_INGEST: m.ingest_job(S),
        wfm.STEP_SELECT: m.selection_job(S, min_accuracy=0.5, force=False),
    }
    for name, job in jobs.items():
        pod = job["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        container.pop("name")  # Argo names it "main"
        assert by_name[name]["container"] == container
        assert by_name[name]["securityContext"] == pod["spec"]["securityContext"]
        assert by_name[name]["metadata"]["labels"] == pod["metadata"]["labels"]


@pytest.mark.parametrize("s", MATRIX)
def test_resource_steps_apply_exactly_the_task_chain_s_objects(s: Settings) -> None:
    by_name = templates(build(s))
    for model in MODEL_TYPES:
        t = by_name[m.tfjob_name(model)]
        assert t["resource"]["action"] == "create"
        assert embedded(t) == m.tfjob(s, model)
    wf = build(s)
    assert written(wf, wfm.STEP_SERVE) == m.inference_service(s)
    if s.predictor == "kserve":
        assert written(wf, wfm.STEP_RUNTIME) == m.serving_runtime(s)
    else:
        assert wfm.STEP_RUNTIME not in by_name
    if s.serving_mode == "standard":
        ingress = by_name[wfm.STEP_INGRESS]["resource"]
        assert written(wf, wfm.STEP_INGRESS) == m.ingress_service(s)
        assert ingress["action"] == "patch" and not ingress.get("setOwnerReference")
        assert "successCondition" not in ingress and "failureCondition" not in ingress
    else:
        assert wfm.STEP_INGRESS not in by_name


@pytest.mark.parametrize("mode", SERVING_MODES)
def test_the_workflow_applies_what_deploy_applies_after_selection(mode: str) -> None:
    """`invoke deploy`'s objects after the selection Job (message-dumper aside: the
    request logger is the task chain's option) are the serving steps' objects, in order."""
    s = Settings(image=IMAGE, serving_mode=mode)
    objs = m.cluster_objects(s, models=MODEL_TYPES)
    deploy = [o for step, o in objs if step == "deploy" and o["kind"] != "Job"]
    wf = next(o for step, o in objs if step == m.WORKFLOW_STEP and o["kind"] == "Workflow")
    names = [n for (n,) in step_groups(wf)[3:] if not n.endswith(wfm.CREATE_SUFFIX)]
    assert [written(wf, n) for n in names] == deploy


# -- memoization -------------------------------------------------------------------------


def test_memo_key_is_stable_and_tracks_both_inputs() -> None:
    sums = list(contract.RAW_SHA256)
    assert m.memo_key(IMAGE, sums) == m.memo_key(IMAGE, tuple(sums)) == KEY
    assert m.memo_key(IMAGE, sums[::-1]) == KEY, "the order of the files is not an input"
    changed = [*sums[:-1], "0" * 64]
    assert m.memo_key(IMAGE, changed) != KEY
    assert m.memo_key("distml:fedcba987654", sums) != KEY
    assert len({m.memo_key(IMAGE, sums[:i]) for i in range(1, 5)}) == 4
    # One cache serves every namespace (it lives in Argo's): the volume is an input too.
    here, there = (
        m.memo_key(IMAGE, sums, volume=v) for v in ("a/strategy-volume", "b/strategy-volume")
    )
    assert len({here, there, KEY}) == 3


def test_memo_key_is_a_valid_argo_cache_key_and_configmap_key() -> None:
    # workflow/controller/cache/cache.go cacheKeyRegex; a ConfigMap data key.
    assert wfm._CACHE_KEY.match(KEY) and len(KEY) <= 253
    assert k8s_schemas.validate({**m.workflow_cache(S), "data": {KEY: "{}"}}) == []


@pytest.mark.parametrize(
    "image, sums, fragment",
    [
        ("", contract.RAW_SHA256, "image"),
        (IMAGE, [], "at least one"),
        (IMAGE, ["abc"], "SHA-256"),
        (IMAGE, contract.RAW_SHA256[0], "not one string"),
    ],
    ids=["no image", "no checksums", "not a digest", "one string"],
)
def test_memo_key_refuses_what_is_not_its_inputs(image: str, sums: Any, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        m.memo_key(image, sums)


def test_ingest_is_memoized_on_the_workflow_s_key_in_the_labelled_cache() -> None:
    wf = build(cache_max_age="48h")
    assert wf["spec"]["arguments"]["parameters"] == [{"name": wfm.CACHE_KEY_PARAM, "value": KEY}]
    ingest = templates(wf)[wfm.STEP_INGEST]
    assert ingest["memoize"] == {
        "key": "{{inputs.parameters.cache-key}}",
        "maxAge": "48h",
        "cache": {"configMap": {"name": "distml-workflow-cache-kubeflow"}},
    }
    assert ingest["inputs"]["parameters"] == [{"name": wfm.CACHE_KEY_PARAM}]
    (step,) = templates(wf)[wfm.ENTRYPOINT]["steps"][0]
    assert step["arguments"]["parameters"] == [
        {"name": wfm.CACHE_KEY_PARAM, "value": "{{workflow.parameters.cache-key}}"}
    ]
    cache = m.workflow_cache(S)
    assert cache["metadata"]["name"] == m.workflow_cache_name(S.namespace)
    assert cache["metadata"]["namespace"] == m.ARGO_NAMESPACE
    # workflow/common/common.go: LabelKeyConfigMapType = LabelValueTypeConfigMapCache
    assert cache["metadata"]["labels"]["workflows.argoproj.io/configmap-type"] == "Cache"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"cache_key": "ingest key"}, "memoization key"),
        ({"cache_key": "-leading"}, "memoization key"),
        ({"cache_max_age": "30 days"}, "duration"),
        ({"cache_max_age": "7d"}, "duration"),
        ({"models": ["resnet"]}, "unknown model"),
        ({"min_accuracy": 80}, "fraction"),
    ],
    ids=["space in key", "leading dash", "not a duration", "days", "model", "percent"],
)
def test_bad_arguments_are_refused_with_what_to_change(kwargs: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        build(**kwargs)


# -- a cluster distml did not create, a namespace with Istio injection --------------------


def test_on_a_cluster_distml_did_not_create_there_is_no_ingress_step() -> None:
    """`deploy` makes no NodePort Service there (the node ports are not distml's): neither
    does the Workflow; the rest of the pipeline is unchanged."""
    s = Settings(image=IMAGE, provider="existing", namespace="ml-team", serving_mode="standard")
    wf = build(s)
    assert wfm.STEP_INGRESS not in templates(wf)
    assert [n for (n,) in step_groups(wf)[3:]] == [
        wfm.create_step(wfm.STEP_RUNTIME),
        wfm.STEP_RUNTIME,
        wfm.create_step(wfm.STEP_SERVE),
        wfm.STEP_SERVE,
    ]
    manifests = [written(wf, t["name"]) for t in wf["spec"]["templates"] if "resource" in t]
    assert not [o for o in manifests if o["kind"] == "Service"]
    assert k8s_schemas.validate(wf) == []


def test_every_workflow_pod_refuses_an_istio_sidecar_and_keeps_its_token() -> None:
    """Each step's pod would never end with a sidecar; Argo's executor in each reports
    the step's result through the API, so the steps' pods (unlike the Jobs they are
    built from) keep a service-account token."""
    wf = build()
    assert wf["spec"]["podMetadata"] == {"annotations": {"sidecar.istio.io/inject": "false"}}
    assert "automountServiceAccountToken" not in wf["spec"]
    for t in wf["spec"]["templates"]:
        assert "automountServiceAccountToken" not in t, t["name"]


@pytest.mark.parametrize("s", MATRIX)
def test_a_canary_workflow_selects_into_the_canary_and_serves_nothing(s: Settings) -> None:
    # `invoke workflow --canary`: the stable's serving objects are left as they are; the
    # new version is judged from the laptop once the Workflow ends.
    objs = m.workflow_objects(s, models=MODEL_TYPES, cache_key=KEY, canary=True)
    wf = objs[-1]
    for obj in objs:
        assert k8s_schemas.validate(obj) == [], obj["kind"]
    assert step_groups(wf) == [[wfm.STEP_INGEST], [wfm.STEP_TRAIN], [wfm.STEP_SELECT]]
    tfjobs = {m.tfjob_name(x) for x in MODEL_TYPES}
    resources = {t["name"] for t in wf["spec"]["templates"] if "resource" in t}
    assert resources == tfjobs, "the TFJobs are the only objects it writes"
    (select,) = [t for t in wf["spec"]["templates"] if t["name"] == wfm.STEP_SELECT]
    assert "--canary" in select["container"]["command"]
    (plain,) = [t for t in build(s)["spec"]["templates"] if t["name"] == wfm.STEP_SELECT]
    assert "--canary" not in plain["container"]["command"], "a plain workflow as before"
