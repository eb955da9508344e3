"""tasks/access_role.py: `invoke access-role` prints (or writes to ``--out``) the Role and
RoleBinding that grant what this user lacks of what distml needs in its namespace, on the
context `up` recorded or the one named; stdout holds the YAML alone."""

from __future__ import annotations

import importlib

import pytest
import yaml
from invoke import Config, Context

import tasks
from tests.runtime.cluster.test_access_check import ADMIN_RULES, rules
from tests.runtime.cluster.test_existing_up import NS, existing, results
from tests.support.cluster_kit import make_ctx
from tests.support.fakekube import FakeKube
from tests.support.k8s_schemas import validate

# The module (``tasks.access_role`` the attribute is the task, imported by tasks/__init__).
task_module = importlib.import_module("tasks.access_role")


@pytest.fixture
def fake() -> FakeKube:
    kube = FakeKube()
    kube.answer_create("SelfSubjectRulesReview", rules(ADMIN_RULES))
    kube.answer_create("SelfSubjectReview", lambda _: {"userInfo": {"username": "alice"}})
    return kube


@pytest.fixture
def run(tmp_path, fake, monkeypatch):
    """The task, on a work dir of its own, its runtime the existing one over ``fake``."""
    from runtime.workdir import Workdir

    wd = Workdir.at(tmp_path / "wd")
    wd.create()
    asked = {}

    def cluster_runtime(c, name, workdir, **kw):
        asked.update(name=name, **kw)
        return existing(make_ctx(fake, results()), wd, fake, [])

    monkeypatch.setattr(task_module, "_cluster_runtime", cluster_runtime)

    def run(**flags):
        c = Context(Config(overrides={"workdir": str(wd.root)}))
        task_module.access_role(c, **flags)
        return asked

    return run


def test_it_prints_only_what_is_missing_as_valid_yaml_on_stdout(run, capsys):
    asked = run(context="alice@byo")
    assert asked == {"name": "existing", "for_up": True, "context": "alice@byo"}
    out = capsys.readouterr().out
    role, binding = yaml.safe_load_all(out)
    assert validate(role) == [] and validate(binding) == []
    assert {r for rule in role["rules"] for r in rule["resources"]} == {
        "tfjobs", "inferenceservices", "servingruntimes",
    }  # fmt: skip
    assert role["metadata"]["namespace"] == NS
    assert binding["subjects"][0]["name"] == "alice"


def test_out_writes_the_file_and_says_how_to_apply_it(run, capsys, tmp_path):
    target = tmp_path / "for-admin.yaml"
    run(out=str(target))
    captured = capsys.readouterr()
    assert captured.out == ""
    assert [d["kind"] for d in yaml.safe_load_all(target.read_text())] == ["Role", "RoleBinding"]
    assert f"`kubectl -n {NS} apply -f {target}`" in captured.err


def test_full_grants_everything_distml_needs(run, capsys):
    run(full=True)
    role, _ = yaml.safe_load_all(capsys.readouterr().out)
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert {"pods", "pods/exec", "persistentvolumeclaims", "tfjobs"} <= resources


def test_a_user_who_may_do_it_all_gets_nothing_to_grant(run, fake, capsys):
    fake.create_answers.pop("SelfSubjectRulesReview")  # the default: everything allowed
    run()
    captured = capsys.readouterr()
    assert captured.out == "" and "nothing to grant" in captured.err


def test_the_task_is_in_the_collection():
    assert "access-role" in tasks.ns.task_names
