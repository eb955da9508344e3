"""ml/contract_canary.py: each canary command is what its module's own parser takes."""

from __future__ import annotations

from ml import canary_publish, canary_weight, contract_canary, sample_accuracy


def test_each_command_parses_with_its_modules_parser():
    end = contract_canary.canary_end("/v", "s", promote=True, record_json='{"a": 1}', python="py")
    assert end[:3] == ["py", "-m", "ml.canary_publish"]
    args = canary_publish.build_parser().parse_args(end[3:])
    assert (args.volume, args.service, args.promote, args.record_json) == (
        "/v",
        "s",
        True,
        '{"a": 1}',
    )
    weight = contract_canary.canary_weight("/v", "s", 25)
    assert canary_weight.build_parser().parse_args(weight[3:]).weight == 25
    sample = contract_canary.sample_accuracy({"1": "http://h/v2/models/s/versions/1/infer"}, "/d")
    parsed = sample_accuracy.parser().parse_args(sample[3:])
    assert parsed.source_dir == "/d" and parsed.count == 1000
