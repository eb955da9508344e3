"""k8s.manifests.names: ``dns_name`` turns any text into a DNS-1123 label or refuses it,
and ``is_dns_label`` rejects what is not one."""

from __future__ import annotations

import pytest

from k8s import manifests as m


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cnn_batchnorm", "cnn-batchnorm"),
        ("Train CNN", "train-cnn"),
        ("--a__b..c--", "a-b-c"),
        ("x" * 70, "x" * 63),
        ("a" * 62 + "_b", "a" * 62),  # cut at 63, then no trailing '-'
        ("tf-mnist", "tf-mnist"),
    ],
)
def test_dns_name(text, expected) -> None:
    assert m.dns_name(text) == expected
    assert m.is_dns_label(expected)


@pytest.mark.parametrize("text", ["", "__", "-", "..."])
def test_dns_name_refuses_nothing(text) -> None:
    with pytest.raises(ValueError, match="DNS-1123"):
        m.dns_name(text)


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a_b", "a" * 64, "a.b"])
def test_is_dns_label_rejects(name) -> None:
    assert not m.is_dns_label(name)
