"""ml.contract is light, and the pod's parsers accept exactly the commands it builds.

The orchestration side (runtime/, k8s/, tasks/) builds every pod command with ml.contract;
the ml/* modules take their choices, defaults and names from it. These tests are what keep
the two sides together: a flag renamed in a parser, or a choice added to the contract that
the pod code cannot build, fails here.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ml import contract

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("tensorflow", "tf_keras", "tensorflow_datasets", "numpy", "kserve", "yaml")


def test_importing_the_contract_imports_nothing_heavy():
    probe = (
        "import json, sys\n"
        "import ml.contract\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == []


@pytest.mark.parametrize(
    "argv",
    [
        contract.ingest("/v"),
        contract.train("/v", "cnn"),
        contract.select("/v"),
        contract.serve("/m", "s", host="h", http_port=1),
        contract.evaluate("/v", ["/d"]),
    ],
    ids=lambda argv: argv[3],
)
def test_each_command_runs_a_step_python_m_ml_dispatches_to(argv):
    (python, dash_m, package, step), _ = contract.split_step(argv)
    assert (python, dash_m, package) == ("python", "-m", "ml")
    assert callable(importlib.import_module(contract.STEPS[step]).main)


@pytest.mark.parametrize("step", sorted(contract.STEPS))
def test_every_step_is_a_module_with_a_main_and_its_help_names_the_command(step, capsys):
    from ml.__main__ import main

    with pytest.raises(SystemExit) as done:
        main([step, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m ml {step} ")


def test_python_m_ml_without_a_step_prints_every_step_and_a_wrong_one_is_exit_2(capsys):
    from ml.__main__ import main

    assert main([]) == 0
    usage = capsys.readouterr().out
    assert all(f"python -m ml {step} " in usage for step in contract.STEPS)
    assert main(["trian", "--volume", "/v"]) == contract.USAGE_EXIT
    err = capsys.readouterr().err
    assert "no step 'trian'" in err and "train" in err


@pytest.mark.parametrize("argv", [["python", "-m", "ml.train"], ["python", "-m", "ml", "x"], []])
def test_a_command_that_is_no_step_is_refused(argv):
    with pytest.raises(ValueError, match="not a step's command"):
        contract.split_step(argv)


@pytest.mark.parametrize("source_dir", [None, "/raw"])
def test_ingest_parses_the_ingest_command(source_dir):
    from ml.data import ingest

    args = ingest._parser().parse_args(contract.split_step(contract.ingest("/vol", source_dir))[1])
    assert (args.volume, args.source_dir, args.mirror) == ("/vol", source_dir, None)


@pytest.mark.parametrize("profile", contract.PROFILES)
@pytest.mark.parametrize("model", contract.MODEL_TYPES)
def test_train_parses_the_train_command_for_every_model_and_profile(model, profile):
    from ml.training import train

    argv = contract.train("/vol", model, profile=profile, epochs=2, steps_per_epoch=3)
    args = train.build_parser().parse_args(contract.split_step(argv)[1])
    assert (args.volume, args.model_type, args.profile) == ("/vol", model, profile)
    assert (args.epochs, args.steps_per_epoch, args.log_every) == (2, 3, contract.LOG_EVERY)
    cfg = train.config_from_args(args)  # the pod code knows the model and the profile
    assert (cfg.model_type, cfg.profile, cfg.epochs, cfg.steps_per_epoch) == (
        model,
        profile,
        2,
        3,
    )


def test_train_passes_the_batch_and_no_validation_to_the_pod_code():
    from ml.training import train

    argv = contract.train(
        "/vol", "cnn", batch_size_per_replica=32, validation=False, seed=7, steps_per_execution=3
    )
    cfg = train.config_from_args(train.build_parser().parse_args(contract.split_step(argv)[1]))
    assert (cfg.batch_size_per_replica, cfg.validation, cfg.seed) == (32, False, 7)
    assert cfg.steps_per_execution == 3


def test_train_command_defaults_are_the_pod_defaults():
    from ml.training import train

    args = train.build_parser().parse_args(contract.split_step(contract.train("/vol", "cnn"))[1])
    assert (args.profile, args.epochs, args.steps_per_epoch) == (
        contract.DEFAULT_PROFILE,
        None,
        None,
    )
    assert train.config_from_args(args) == train.config_from_args(
        train.build_parser().parse_args(["--volume", "/vol", "--model-type", "cnn"])
    )


def test_every_contract_model_has_a_builder():
    from ml.model.architectures import check_model_type

    assert [check_model_type(m) for m in contract.MODEL_TYPES] == list(contract.MODEL_TYPES)


@pytest.mark.parametrize(("min_accuracy", "force"), [(0.0, False), (0.875, True)])
def test_select_parses_the_select_command(min_accuracy, force):
    from ml.selection import select

    argv = contract.select(
        "/vol", "svc", min_accuracy=min_accuracy, force=force, code_version="distml:abc"
    )
    args = select.build_parser().parse_args(contract.split_step(argv)[1])
    assert (args.volume, args.service, args.min_accuracy) == ("/vol", "svc", min_accuracy)
    assert (args.force, args.rollback, args.code_version) == (force, False, "distml:abc")
    unrecorded = select.build_parser().parse_args(contract.split_step(contract.select("/vol"))[1])
    assert unrecorded.code_version == select.UNKNOWN_CODE_VERSION


def test_select_parses_the_rollback_command_and_defaults_to_the_contract_service():
    from ml.selection import select

    args = select.build_parser().parse_args(
        contract.split_step(contract.select("/vol", rollback=True))[1]
    )
    assert (args.volume, args.service, args.rollback) == ("/vol", contract.DEFAULT_SERVICE, True)
    assert select.build_parser().parse_args(["--volume", "/v"]).service == contract.DEFAULT_SERVICE


def test_evaluate_parses_the_evaluate_command():
    from ml.selection import evaluate

    args = evaluate.build_parser().parse_args(
        contract.split_step(contract.evaluate("/vol", ["/a", "/b"]))[1]
    )
    assert (args.volume, args.model_dir) == ("/vol", ["/a", "/b"])


def test_serve_parses_the_serve_command():
    from ml.server import serve

    argv = contract.serve("/mnt/models", "svc", host="0.0.0.0", http_port=8080)
    args = serve.build_parser().parse_args(contract.split_step(argv)[1])
    assert (args.model_dir, args.model_name, args.host, args.http_port) == (
        "/mnt/models",
        "svc",
        "0.0.0.0",
        8080,
    )


def test_tensorboard_command_parses_with_tensorboards_own_flags():
    from tensorboard import default, program

    argv = contract.tensorboard("/trained_model", host="0.0.0.0")
    assert argv[:3] == ["python", "-m", "tensorboard.main"]
    board = program.TensorBoard(plugins=default.get_plugins())
    board.configure(argv=[None, *argv[3:]])
    flags = board.flags
    assert (flags.logdir, flags.host, flags.port) == ("/trained_model/tensorboard", "0.0.0.0", 6006)


def test_the_event_file_check_runs_as_a_pod_runs_it(tmp_path):
    """``has_event_files_check`` from the image's working directory (it holds ``ml/``):
    exit 3 before any training run wrote event files, 0 after."""

    def check() -> int:
        argv = contract.has_event_files_check(tmp_path, python=sys.executable)
        return subprocess.run(argv, cwd=REPO, capture_output=True, timeout=60).returncode

    assert check() == contract.NO_EVENT_FILES_EXIT
    run = Path(contract.tensorboard_dir(tmp_path, "cnn")) / "train"
    run.mkdir(parents=True)
    (run / "notes.txt").write_text("not an event file")
    assert check() == contract.NO_EVENT_FILES_EXIT
    (run / "events.out.tfevents.1700000000.host.1.v2").write_bytes(b"")
    assert check() == 0
    assert contract.has_event_files(tmp_path)
