"""runtime/output/tables.py: the result tables every task prints: columns aligned under a dashed
rule, no trailing spaces, and milliseconds as whole numbers (``-`` when unknown)."""

from __future__ import annotations

from runtime.output.tables import ms, table


def test_columns_are_aligned_under_a_dashed_rule_without_trailing_spaces():
    text = table([("model", "val acc"), ("cnn_batchnorm", "0.8712"), ("cnn", "")])
    assert text.splitlines() == [
        "model          val acc",
        "-------------  -------",
        "cnn_batchnorm  0.8712",
        "cnn",
    ]


def test_milliseconds_are_whole_and_unknown_is_a_dash():
    assert [ms(12.4), ms(12.6), ms(0.0), ms(None)] == ["12", "13", "0", "-"]
