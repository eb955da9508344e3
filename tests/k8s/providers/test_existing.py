"""k8s.providers.existing: which kubeconfig context the existing-cluster runtime uses (the recorded
one wins; asking for another is refused), what its provider runs and refuses, how it
checks the context answers; and the requests' checks of ``loadtest --url`` and
``up --storage-class``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from invoke import Config, MockContext, Result

from k8s.providers import provider
from k8s.providers.existing import Existing, ExistingClusterError, choose_context
from runtime.requests import LoadtestRequest, RequestError, UpRequest

CURRENT = "kubectl config current-context"
CONTEXTS = "kubectl config get-contexts -o name"


def ctx(results: dict[str, Result]) -> MockContext:
    return MockContext(config=Config(overrides={"run": {"dry": False}}), run=results, repeat=True)


def ran(c: MockContext) -> list[str]:
    return [call.args[0] for call in c.run.call_args_list]


def existing(name: str = "team") -> Existing:
    p = provider("existing", kube_context=name)
    assert isinstance(p, Existing)
    return p


# ------------------------------------------------------------------ choose_context
@pytest.mark.parametrize("for_up", [True, False])
@pytest.mark.parametrize("asked", ["", "prod"])
def test_the_recorded_context_wins(for_up, asked):
    c = ctx({CURRENT: Result("other\n")})
    context, why = choose_context(c, asked=asked, recorded="prod", for_up=for_up)
    assert context == "prod"
    assert "invoke up" in why
    assert ran(c) == []  # kubectl's current context is not even asked


def test_up_on_another_context_than_the_recorded_one_is_refused():
    with pytest.raises(ExistingClusterError) as e:
        choose_context(ctx({}), asked="staging", recorded="prod", for_up=True)
    message = str(e.value)
    assert "'prod'" in message and "'staging'" in message
    assert "invoke down" in message


@pytest.mark.parametrize("for_down", [True, False])
def test_later_tasks_use_the_recorded_context_and_say_the_setting_waits(for_down):
    # Refusing them would refuse `down` too: the one way out.
    context, why = choose_context(
        ctx({}), asked="staging", recorded="prod", for_up=False, for_down=for_down
    )
    assert context == "prod"
    assert "'staging'" in why and "invoke down" in why


def test_down_with_nothing_recorded_has_nothing_to_delete_on_a_cluster():
    c = ctx({CURRENT: Result("kind-team\n")})
    assert choose_context(c, asked="kind-team", recorded=None, for_up=False, for_down=True) == (
        "",
        "none is set up for this work dir",
    )


def test_up_uses_the_context_asked_for_when_none_is_recorded():
    c = ctx({CURRENT: Result("other\n")})
    assert choose_context(c, asked="staging", recorded=None, for_up=True) == (
        "staging",
        "asked for",
    )
    assert ran(c) == []


def test_the_first_up_never_takes_kubectls_current_context():
    # It may install operators cluster-wide: the cluster is named, never assumed.
    c = ctx({CURRENT: Result("kind-team\n")})
    with pytest.raises(ExistingClusterError, match=r"--context NAME") as err:
        choose_context(c, asked="", recorded=None, for_up=True)
    assert "kubectl's current one is 'kind-team'" in str(err.value)


def test_an_empty_context_never_becomes_kubectls_current_one():
    from k8s.client.kube import ApiKube, KubeError

    with pytest.raises(ExistingClusterError, match="no kubeconfig context named"):
        existing("").kubectl("get pods")
    with pytest.raises(KubeError, match="no kubeconfig context named"):
        ApiKube("")


def test_a_task_other_than_up_never_acts_on_an_asked_context_it_has_nothing_on():
    # `invoke down` in a fresh work dir with cluster.context set must not delete another
    # work dir's objects on that cluster.
    c = ctx({CURRENT: Result("kind-team\n")})
    with pytest.raises(ExistingClusterError, match=r"`invoke up --runtime existing"):
        choose_context(c, asked="kind-team", recorded=None, for_up=False)


def test_a_task_other_than_up_needs_a_recorded_context():
    c = ctx({CURRENT: Result("kind-team\n")})
    with pytest.raises(ExistingClusterError, match=r"`invoke up --runtime existing"):
        choose_context(c, asked="", recorded=None, for_up=False)
    assert ran(c) == []  # not silently kubectl's current context


@pytest.mark.parametrize(
    "result", [Result("", exited=1, stderr="error: current-context is not set"), Result("\n")]
)
def test_no_current_context_names_the_flag(result):
    with pytest.raises(ExistingClusterError) as e:
        choose_context(ctx({CURRENT: result}), asked="", recorded=None, for_up=True)
    assert "--context NAME" in str(e.value)
    assert "kubectl config get-contexts" in str(e.value)


# ------------------------------------------------------------------ the provider
def test_kubectl_names_the_context_quoted():
    assert existing("team").kubectl("get pods") == "kubectl --context team get pods"
    assert existing("a b;rm").kubectl("get ns") == "kubectl --context 'a b;rm' get ns"
    assert existing("team").context == "team"


def test_it_never_creates_deletes_or_side_loads(tmp_path: Path):
    p, c = existing(), ctx({})
    with pytest.raises(ExistingClusterError, match="does not create clusters"):
        p.create(c, tmp_path)
    with pytest.raises(ExistingClusterError, match="never deletes"):
        p.delete(c)
    with pytest.raises(ExistingClusterError, match=r"invoke build --push"):
        p.import_image(c, "distml:abc", tmp_path)
    assert p.has_image(c, "distml:abc") is False
    assert p.ingress_url(c) == ""
    assert ran(c) == []


def test_it_takes_no_node_image():
    with pytest.raises(ValueError, match="node_image"):
        provider("existing", kube_context="team", node_image="kindest/node:x")


def test_other_providers_ignore_a_context():
    assert provider("kind", kube_context="team").context == "kind-dist-ml"


VERSION_OK = json.dumps(
    {"clientVersion": {"gitVersion": "v1.33.1"}, "serverVersion": {"gitVersion": "v1.31.4"}}
)


def test_reach_returns_the_servers_version():
    c = ctx({CONTEXTS: Result("kind-a\nteam\n"), "kubectl --context team version -o json":
             Result(VERSION_OK)})  # fmt: skip
    p = existing("team")
    assert p.reach(c) == "v1.31.4"
    assert p.exists(c)


def test_reach_refuses_a_context_kubectl_does_not_have():
    c = ctx({CONTEXTS: Result("kind-a\nteams\n")})
    with pytest.raises(ExistingClusterError) as e:
        existing("team").reach(c)
    assert "no context 'team'" in str(e.value)
    assert "kubectl config get-contexts" in str(e.value)
    assert ran(c) == [CONTEXTS]
    assert not existing("team").exists(c)


@pytest.mark.parametrize(
    "answer",
    [
        Result(json.dumps({"clientVersion": {"gitVersion": "v1.33.1"}}), exited=1,
               stderr="The connection to the server 10.0.0.1:6443 was refused"),
        Result("", exited=1, stderr="Unable to connect to the server: dial tcp: i/o timeout"),
        Result("not json"),
    ],
)  # fmt: skip
def test_reach_says_how_to_see_why_a_context_does_not_answer(answer):
    c = ctx({CONTEXTS: Result("team\n"), "kubectl --context team version -o json": answer})
    with pytest.raises(ExistingClusterError) as e:
        existing("team").reach(c)
    assert "does not answer" in str(e.value)
    assert "`kubectl --context team cluster-info`" in str(e.value)


# ------------------------------------------------------------------ requests
@pytest.mark.parametrize(
    "url", ["http://localhost:8080", "https://model.example.com", "http://10.0.0.1:31080/base"]
)
def test_loadtest_accepts_an_http_base_url(url):
    assert LoadtestRequest(url=url).url == url


@pytest.mark.parametrize(
    "url",
    [
        "ftp://x",
        "localhost:8080",  # no scheme
        "http://localhost:8080/v1?x=1",  # a query
        "http://localhost:8080/#frag",
        "http://localhost:70000",
        "http://",
        "",
    ],
)
def test_loadtest_refuses_what_is_not_a_base_url(url):
    with pytest.raises(RequestError, match=r"--url"):
        LoadtestRequest(url=url)


@pytest.mark.parametrize("name", ["Bad_Name", "UPPER", "-x", "a b", ""])
def test_up_refuses_a_storage_class_that_is_not_a_name(name):
    with pytest.raises(RequestError, match=r"--storage-class"):
        UpRequest(storage_class=name)


@pytest.mark.parametrize("name", ["local-path", "gp3", "nfs.csi", None])
def test_up_accepts_a_storage_class_name(name):
    assert UpRequest(storage_class=name).storage_class == name
