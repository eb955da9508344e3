"""ml/contract/canary_commands.py: each canary command is what its module's own parser takes."""

from __future__ import annotations

from ml import contract
from ml.contract import canary_commands
from ml.selection import canary_publish, canary_weight, sample_accuracy


def test_each_command_parses_with_its_modules_parser():
    end = canary_commands.canary_end("/v", "s", promote=True, record_json='{"a": 1}', python="py")
    assert end[:4] == ["py", "-m", "ml", "canary_publish"]
    args = canary_publish.build_parser().parse_args(contract.split_step(end)[1])
    assert (args.volume, args.service, args.promote, args.record_json) == (
        "/v",
        "s",
        True,
        '{"a": 1}',
    )
    weight = canary_commands.canary_weight("/v", "s", 25)
    assert canary_weight.build_parser().parse_args(contract.split_step(weight)[1]).weight == 25
    sample = canary_commands.sample_accuracy({"1": "http://h/v2/models/s/versions/1/infer"}, "/d")
    parsed = sample_accuracy.parser().parse_args(contract.split_step(sample)[1])
    assert parsed.source_dir == "/d" and parsed.count == canary_commands.SAMPLE_IMAGES
