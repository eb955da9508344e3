"""ml.selection.sample_accuracy, the canary's model gate: against the real server (``python
-m ml serve``) its accuracy is the one the V1 answers of the same images give, for the plain
and the versioned V2 URL; a refusing, silent or garbled endpoint is exit 1 naming it and
what it said; no data is exit 2; several versions in one endpoint's answers are reported
together; and any ``--endpoint`` text is a name and an http(s) URL or a clean argparse error
(hypothesis). The real-server tests use the ``tf`` fixture, which makes them heavy
(tests/support/tiers.py)."""

from __future__ import annotations

import contextlib
import http.server
import io
import itertools
import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ml.data.dataset import read_idx
from ml.selection import sample_accuracy
from tests.ml.server.serve_process import REPO, Server, export_test_model
from tests.support.serve_requests import MAX_INSTANCES, MODEL

COUNT = 30  # not a multiple of the batch: the last request is smaller
INFER = f"/v2/models/{MODEL}/infer"
VERSION_1 = f"/v2/models/{MODEL}/versions/1/infer"


@pytest.fixture(scope="module")
def server(tf, tmp_path_factory) -> Iterator[Server]:
    """The real server, serving one version (1) of a randomly initialised cnn."""
    from ml.selection.select import publish

    model = export_test_model(tmp_path_factory.mktemp("export") / "model")
    root = tmp_path_factory.mktemp("volume")
    publish(model, root / "serving", {"source": "test"})
    started = Server(root / "serving", tmp_path_factory.mktemp("logs") / "server.log")
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def v1_answers(server: Server, data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """The server's V1 predict answers (classes) on the first COUNT test images, and
    their labels."""
    images = read_idx(data_dir / "t10k-images-idx3-ubyte.gz")[:COUNT, :, :, np.newaxis]
    labels = read_idx(data_dir / "t10k-labels-idx1-ubyte.gz")[:COUNT]
    pixels = (images / np.float32(255)).astype(np.float32)
    predicted = []
    for start in range(0, COUNT, MAX_INSTANCES):
        batch = pixels[start : start + MAX_INSTANCES]
        status, answer = server.predict({"instances": batch.tolist()})
        assert status == 200, answer
        predicted += list(np.argmax(answer["predictions"], axis=1))
    return np.array(predicted), labels


def test_accuracy_is_what_the_v1_answers_of_the_same_images_give(server, shared_data_dir) -> None:
    endpoints = [f"--endpoint=plain={server.url}{INFER}", f"--endpoint=v1={server.url}{VERSION_1}"]
    command = [sys.executable, "-m", "ml", "sample_accuracy", *endpoints, "--count", str(COUNT)]
    command += ["--batch", str(MAX_INSTANCES), "--source-dir", str(shared_data_dir)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    predicted, labels = v1_answers(server, shared_data_dir)
    expected = float(np.mean(predicted == labels))
    answers = "".join(map(str, predicted))
    assert json.loads(line) == {
        "count": COUNT,
        "accuracy": {"plain": expected, "v1": expected},
        "model_version": {"plain": "1", "v1": "1"},
        "labels": "".join(map(str, labels)),
        "predicted": {"plain": answers, "v1": answers},
    }


@pytest.mark.parametrize(
    ("path", "said"),
    [
        (f"/v2/models/{MODEL}/versions/9/infer", "version 9 is not served here"),
        ("/v2/models/nope/infer", "This server serves: "),
    ],
    ids=["a version not served", "a model not served"],
)
def test_an_endpoint_that_refuses_is_exit_1_with_what_the_server_said(
    server, shared_data_dir, capsys, path, said
) -> None:
    argv = [f"--endpoint=canary={server.url}{path}", "--count=3"]
    assert sample_accuracy.main([*argv, "--source-dir", str(shared_data_dir)]) == 1
    captured = capsys.readouterr()
    line = captured.err.splitlines()[-1]  # after the data's progress lines
    assert captured.out == ""
    assert line.startswith(f"endpoint canary ({server.url}{path}): HTTP 404: ")
    assert said in line


# --------------------------------------------------------------------------- light: a stub


Answer = Callable[[int], tuple[int, bytes]]  # images in the request -> (status, body)


@pytest.fixture
def stub() -> Iterator[Callable[[Answer], str]]:
    """``stub(answer) -> URL``: a loopback server answering every POST with ``answer(n)``."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def serve(answer: Answer) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, text = answer(body["inputs"][0]["shape"][0])
                self.send_response(status)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args) -> None:
                pass

        servers.append(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler))
        threading.Thread(target=servers[-1].serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{servers[-1].server_port}{INFER}"

    try:
        yield serve
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def class_0(versions: Iterator[str]) -> Answer:
    """V2 answers that say class 0 for every image, each from the next of ``versions``."""

    def answer(n: int) -> tuple[int, bytes]:
        output = {"name": "probabilities", "datatype": "FP32", "shape": [n, 10]}
        data = [1.0 if k == 0 else 0.0 for _ in range(n) for k in range(10)]
        body = {"model_version": next(versions), "outputs": [{**output, "data": data}]}
        return 200, json.dumps(body).encode()

    return answer


def test_versions_answering_one_endpoint_are_reported_together(stub, shared_data_dir, capsys):
    url = stub(class_0(iter(["2", "10", "2", "1"])))
    argv = [f"--endpoint=mixed={url}", "--count=10", "--batch=3"]  # 4 requests
    assert sample_accuracy.main([*argv, "--source-dir", str(shared_data_dir)]) == 0
    labels = read_idx(shared_data_dir / "t10k-labels-idx1-ubyte.gz")[:10]
    assert json.loads(capsys.readouterr().out) == {
        "count": 10,
        "accuracy": {"mixed": float(np.mean(labels == 0))},
        "model_version": {"mixed": "1,2,10"},
        "labels": "".join(map(str, labels)),
        "predicted": {"mixed": "0" * 10},  # the stub answers class 0 for every image
    }


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (200, b"<html>busy</html>", "HTTP 200 but not a V2 answer"),
        (200, b'{"outputs": []}', "HTTP 200 but not a V2 answer"),
        (200, b"", "HTTP 200 but not a V2 answer"),
        (503, b'{"error": "Model tf-mnist is not ready.\\nno version yet"}', "HTTP 503: Model"),
        (502, b"<html>Bad Gateway</html>", "HTTP 502: <html>Bad Gateway</html>"),
    ],
    ids=["not JSON", "no probabilities", "empty", "an error", "a proxy's page"],
)
def test_a_garbled_or_failing_answer_is_exit_1_on_one_line(
    stub, shared_data_dir, capsys, status, body, said
) -> None:
    stable, url = stub(class_0(itertools.repeat("1"))), stub(lambda n: (status, body))
    argv = [f"--endpoint=stable={stable}", f"--endpoint=canary={url}", "--count=2"]
    assert sample_accuracy.main([*argv, "--source-dir", str(shared_data_dir)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    line = captured.err.splitlines()[-1]
    assert line.startswith(f"endpoint canary ({url}): {said}")


def test_an_endpoint_that_does_not_answer_is_exit_1(dead_url, shared_data_dir, capsys) -> None:
    argv = [f"--endpoint=stable={dead_url}", "--count=1", "--timeout=5"]
    assert sample_accuracy.main([*argv, "--source-dir", str(shared_data_dir)]) == 1
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith(f"endpoint stable ({dead_url}): no answer (URLError: ")
    assert "check the URL, that the service is up" in line


def test_no_data_is_exit_2_with_the_reason(tmp_path, isolated_data_places, capsys) -> None:
    argv = ["--endpoint=stable=http://127.0.0.1:1/", "--source-dir", str(tmp_path / "none")]
    assert sample_accuracy.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "cannot measure accuracy: " in captured.err
    assert "--source-dir DIR" in captured.err  # ml.data.raw's fixes


@pytest.mark.parametrize(
    "argv",
    [
        ["--endpoint=a=http://h/", "--endpoint=a=http://g/"],
        ["--endpoint=a=http://h/", "--count=0"],
        ["--endpoint=a=http://h/", "--batch=-1"],
        ["--endpoint=a=http://h/", "--timeout=nan"],
        [],
    ],
    ids=["a name twice", "no images", "a negative batch", "no timeout", "no endpoint"],
)
def test_bad_flags_are_argparse_errors(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exit:
        sample_accuracy.main(argv)
    assert exit.value.code == 2 and "error: " in capsys.readouterr().err


# --------------------------------------------------------------------------- the parser

NAMES = st.one_of(st.from_regex(r"[A-Za-z0-9][\w.-]{0,7}", fullmatch=True), st.text(max_size=8))
HOSTS = st.one_of(st.from_regex(r"[a-z0-9.-]{1,12}", fullmatch=True), st.text(max_size=12))
URLS = st.builds(
    "{}{}{}{}".format,
    st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "http:/", "//", ""]),
    HOSTS,
    st.sampled_from(["", ":8080", ":99999", ":x", "]"]),
    st.sampled_from(["", "/v2/models/tf-mnist/infer", "/a b", "/\u00e9", "?q=1", "#\n"]),
)
TEXTS = st.one_of(st.text(), st.builds("{}={}".format, NAMES, URLS))


@given(TEXTS)
@example("canary=http://svc.ns/v2/models/tf-mnist/infer")
@example("stable=https://[::1]:8080/v2/models/tf-mnist/versions/2/infer")
def test_any_endpoint_text_is_a_name_and_an_http_url_or_a_clean_argparse_error(text) -> None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = sample_accuracy.parser().parse_args([f"--endpoint={text}"])
    except SystemExit as e:
        assert e.code == 2
        assert "error: argument --endpoint: " in err.getvalue()
        return
    ((name, url),) = args.endpoint
    assert f"{name}={url}" == text and name
    parts = urllib.parse.urlsplit(url)
    assert parts.scheme in ("http", "https") and parts.hostname
    assert parts.port is None or 0 <= parts.port <= 65535
    assert url.isascii() and url.isprintable() and " " not in url
