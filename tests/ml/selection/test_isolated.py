"""ml.selection.isolated: a SavedModel is evaluated in a child process, so one that kills
it (a real TensorFlow abort, conftest.py's ``aborting_model``) is a CandidateError naming
the signal, and the next model gets a fresh child."""

from __future__ import annotations

import multiprocessing
import signal

import pytest

from ml.data.dataset import load_arrays
from ml.selection import isolated


def test_a_model_that_aborts_its_process_is_named_and_the_next_gets_a_fresh_one(
    saved_models, aborting_model, shared_data_dir, tmp_path
):
    from ml.selection.evaluate import CandidateError, evaluate_saved_model

    _, (x, y) = load_arrays(shared_data_dir)
    images, labels = x[:1000, ..., None], y[:1000]
    with isolated.IsolatedEvaluator() as evaluator:
        with pytest.raises(CandidateError) as crashed:
            evaluator.evaluate(aborting_model, images, labels)
        assert str(crashed.value).startswith(
            f"{aborting_model}: its evaluation process died with signal SIGABRT while loading"
        )
        scores = evaluator.evaluate(saved_models["good"], images, labels)
        assert scores == evaluate_saved_model(saved_models["good"], images, labels)
        with pytest.raises(CandidateError, match=r"has no saved_model\.pb"):
            evaluator.evaluate(tmp_path, images, labels)  # the child's own reason
        with pytest.raises(RuntimeError, match=r"(?s)failed in the child process:\n.*TypeError"):
            evaluator.evaluate(saved_models["good"], images, None)  # a bug, not a candidate
        assert evaluator.evaluate(saved_models["good"], images, labels) == scores
    assert multiprocessing.active_children() == [], "no child outlives the evaluator"


@pytest.mark.parametrize(
    ("exitcode", "said"),
    [
        (-signal.SIGSEGV, "died with signal SIGSEGV while loading or running the model"),
        (-signal.SIGKILL, "died with signal SIGKILL while loading or running the model"),
        (3, "exited with status 3 while loading or running the model"),
    ],
    ids=["a segfault", "the OOM killer", "an exit"],
)
def test_how_a_child_ended_is_said_in_words(exitcode, said):
    assert isolated._how_it_ended(exitcode).startswith(said)
