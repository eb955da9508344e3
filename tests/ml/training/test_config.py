"""ml.training.config: the quick and full profiles, the override order (defaults, profile, per-model
tuning, file, flags), validation of config files, the learning-rate schedules, YAML round-trip."""

from __future__ import annotations

import itertools

import pytest

from ml.training.config import ConfigError, TrainConfig, from_yaml, load_config_file, resolve


def test_quick_profile_is_the_original_budget() -> None:
    cfg = resolve("quick", overrides={"model_type": "cnn"})
    assert (cfg.epochs, cfg.steps_per_epoch, cfg.batch_size_per_replica) == (3, 70, 64)
    assert cfg.shuffle_buffer == 10_000
    assert cfg.global_batch_size(2) == 128


@pytest.mark.parametrize("profile", ["quick", "full"])
def test_both_profiles_run_ten_steps_per_call_and_a_flag_overrides_it(profile) -> None:
    assert resolve(profile).steps_per_execution == 10
    assert resolve(profile, overrides={"steps_per_execution": 1}).steps_per_execution == 1


def test_full_profile_makes_full_passes() -> None:
    cfg = resolve("full", overrides={"model_type": "cnn"})
    assert cfg.steps_per_epoch is None
    assert cfg.resolved_steps_per_epoch(2) == 54_961 // 128  # the training split


def test_override_order_defaults_profile_file_flags(tmp_path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("profile: full\nepochs: 7\nseed: 5\n")
    cfg = resolve(None, load_config_file(f), {"epochs": 2, "seed": None, "model_type": "cnn"})
    assert cfg.profile == "full"  # from the file
    assert cfg.epochs == 2  # flag beats file
    assert cfg.seed == 5  # file beats default; a None flag does not override
    assert resolve("quick", load_config_file(f)).profile == "quick"  # flag beats file


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("epochs: 0\n", "epochs must be a positive integer"),
        ("steps_per_execution: 0\n", "steps_per_execution must be a positive integer, got 0"),
        ("steps_per_execution: 2.5\n", "steps_per_execution must be a positive integer"),
        ("learning_rate: 5\n", "learning_rate must be in (0, 1)"),
        ("model_type: vgg\n", "valid: cnn, cnn_dropout, cnn_batchnorm"),
        ("eopchs: 3\n", "unknown keys ['eopchs']"),
        ("- 1\n", "must hold a mapping"),
        ("a: [\n", "not valid YAML"),
    ],
    ids=[
        "zero epochs",
        "zero steps per execution",
        "fractional steps per execution",
        "huge learning rate",
        "unknown model",
        "misspelt key",
        "a list",
        "broken yaml",
    ],
)
def test_bad_config_files_say_what_is_wrong(tmp_path, text: str, message: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=None) as err:
        resolve(None, load_config_file(f))
    assert message in str(err.value)


def test_missing_config_file_is_reported(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config_file(tmp_path / "nope.yaml")


def test_step_schedule_divides_by_ten_then_hundred() -> None:
    cfg = TrainConfig(learning_rate=1e-3, lr_schedule="step")
    steps = 10  # per epoch
    assert [cfg.learning_rate_at(e * steps, steps) for e in (0, 2, 3, 6, 7)] == pytest.approx(
        [1e-3, 1e-3, 1e-4, 1e-4, 1e-5]
    )
    assert TrainConfig(lr_schedule="constant").learning_rate_at(99, steps) == 1e-3


def test_cosine_warms_up_from_a_tenth_then_decays_to_zero_at_the_last_step() -> None:
    cfg = TrainConfig(epochs=3, learning_rate=1e-2, lr_schedule="cosine", warmup_steps=20)
    rates = cfg.learning_rates(70)
    assert len(rates) == 210
    assert rates[0] == pytest.approx(1e-3) and rates[10] == pytest.approx(5.5e-3)
    assert rates[20] == pytest.approx(1e-2)
    after_warmup = rates[20:]
    assert all(a >= b for a, b in itertools.pairwise(after_warmup))  # never rises again
    assert rates[20 + 95] == pytest.approx(5e-3) and rates[-1] == pytest.approx(0, abs=1e-6)


def test_negative_warmup_is_refused() -> None:
    with pytest.raises(ConfigError, match="warmup_steps must be 0 or more"):
        TrainConfig(warmup_steps=-1).validate()


def test_yaml_round_trip() -> None:
    cfg = resolve("full", overrides={"model_type": "cnn_batchnorm", "seed": 9})
    assert from_yaml(cfg.to_yaml()) == cfg


def test_per_model_tuning_sits_between_profile_and_flags(tmp_path) -> None:
    from ml.training.config import MODEL_OVERRIDES, PROFILE_DEFAULTS

    tuned = resolve("quick", overrides={"model_type": "cnn_batchnorm"})
    assert tuned.learning_rate == MODEL_OVERRIDES["quick"]["cnn_batchnorm"]["learning_rate"]
    assert tuned.bn_momentum == PROFILE_DEFAULTS["quick"]["bn_momentum"]
    f = tmp_path / "c.yaml"
    f.write_text("learning_rate: 0.0007\n")
    from_file = resolve("quick", load_config_file(f), {"model_type": "cnn_batchnorm"})
    assert from_file.learning_rate == 0.0007  # the file beats the per-model tuning
    flag = resolve(
        "quick", load_config_file(f), {"model_type": "cnn_batchnorm", "learning_rate": 0.002}
    )
    assert flag.learning_rate == 0.002
    # Steps and batch are fixed within a profile: per-model tuning never touches them.
    for models in MODEL_OVERRIDES.values():
        for values in models.values():
            assert not {"steps_per_epoch", "batch_size_per_replica", "epochs"} & set(values)
