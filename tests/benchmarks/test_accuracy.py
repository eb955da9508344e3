"""benchmarks.accuracy: the accuracy report names, per seed, the model selection would pick
(on validation), and its table."""

from __future__ import annotations


def test_accuracy_report_names_the_model_selection_would_pick_per_seed():
    from benchmarks import accuracy

    def row(profile, model, figures):
        runs = [
            {
                "seed": s,
                "val_accuracy": v,
                "test_accuracy": t,
                "wall_seconds": 1.0,
                "train_examples_per_second": 1.0,
            }
            for s, (v, t) in enumerate(figures, start=1)
        ]
        return accuracy.summarise(profile, model, runs, accuracy.JobShape(1, 128))

    results = [
        row("full", "cnn", [(0.90, 0.95), (0.93, 0.92)]),  # seed 1: best test, worse val
        row("full", "cnn_dropout", [(0.92, 0.91), (0.91, 0.90)]),
        row("quick", "cnn", [(0.88, 0.87)]),
    ]
    picks = accuracy.selected(results)
    assert picks == {
        "full": [(1, "cnn_dropout", 0.91), (2, "cnn", 0.92)],  # chosen on validation
        "quick": [(1, "cnn", 0.87)],
    }
    text = accuracy.markdown(
        {
            "workers": 2,
            "machine": {"cpus": 2},
            "date": "d",
            "pipeline_examples_per_second": 1,
            "results": results,
        }
    )
    assert "Selected on validation, `full`: test accuracy 91.50% (mean of 2 seeds;" in text
    assert "| full | cnn | 1 x 128 | 91.50% | 93.50% | 3.00% | 2 |" in text
