"""integration.kindbuild.kindsource: reading kind's Go constants, raw strings and constants
joined whole."""

from __future__ import annotations

import pytest

from integration.kindbuild import kindsource


def test_a_go_constant_made_of_raw_strings_and_constants_is_read_whole():
    source = 'const img = "docker.io/x:v1"\n\nconst manifest = `a: 1\nimage: ` + img + `\nb: 2\n`\n'
    assert kindsource.go_string(source, "manifest") == "a: 1\nimage: docker.io/x:v1\nb: 2\n"
    with pytest.raises(ValueError):
        kindsource.go_string(source, "missing")
