"""The model gate's comparison: the two versions' answers on the same labelled images.

``ml sample_accuracy`` reports each image's true class and each version's answer (one digit
an image). Paired on the same images, only the images the versions answer differently say
anything about which is better: ``stable_only`` (the stable right, the canary wrong) and
``canary_only`` (the reverse). Under "the canary is no worse" each such image is a fair coin,
so McNemar's exact test, one-sided, gives the chance of the canary losing at least as many
(:func:`worse_p`). The same holds within each class, which a total can hide: a version that
gets one class mostly wrong and the others a little better.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import DistmlError
from runtime.canary.stats import binomial_at_least

CLASSES = 10


@dataclass(frozen=True)
class Paired:
    """The canary against the stable on ``images`` labelled images: in total, and per
    class (``per_class[k]``: (images, stable_only, canary_only) of class k)."""

    images: int
    stable_only: int
    canary_only: int
    per_class: tuple[tuple[int, int, int], ...]

    @property
    def drop(self) -> float:
        """The canary's accuracy below the stable's (negative: above)."""
        return (self.stable_only - self.canary_only) / self.images if self.images else 0.0

    def class_drop(self, k: int) -> float:
        images, lost, gained = self.per_class[k]
        return (lost - gained) / images if images else 0.0


class SampleError(DistmlError):
    """The sample's report is not a labelled comparison of the two versions."""


def paired(labels: str, stable: str, canary: str) -> Paired:
    """Compare the answers (digit strings of equal length) image by image.

    Raises:
        SampleError: lengths differ, or a character is not a class digit.
    """
    if not len(labels) == len(stable) == len(canary) or not labels:
        raise SampleError(
            f"{len(labels)} labels, {len(stable)} and {len(canary)} answers: not one each"
        )
    if not (labels + stable + canary).isdigit() or not (labels + stable + canary).isascii():
        raise SampleError("the sample's labels and answers must be class digits 0-9")
    counts = [[0, 0, 0] for _ in range(CLASSES)]
    for truth, s, c in zip(labels, stable, canary, strict=True):
        row = counts[int(truth)]
        row[0] += 1
        row[1] += s == truth != c
        row[2] += c == truth != s
    lost = sum(row[1] for row in counts)
    gained = sum(row[2] for row in counts)
    return Paired(len(labels), lost, gained, tuple(tuple(row) for row in counts))  # type: ignore[misc]


def worse_p(stable_only: int, canary_only: int) -> float:
    """P(the canary loses at least ``stable_only`` of the images the two answer
    differently | each is a fair coin): McNemar's exact test, one-sided."""
    return binomial_at_least(stable_only, stable_only + canary_only, 0.5)


def read_report(found: dict, stable: int, canary: int) -> tuple[dict[str, float], Paired | None]:
    """The sample step's last JSON line: each version's accuracy, and the canary paired
    with the stable when the report holds their answers (None otherwise: an older step).

    Raises:
        SampleError: no accuracy in it, or answers that are not a comparison.
    """
    scores = found.get("accuracy")
    if not isinstance(scores, dict):
        raise SampleError("the sample printed no accuracy")
    try:
        accuracies = {str(k): float(v) for k, v in scores.items()}
    except (TypeError, ValueError) as e:
        raise SampleError(f"the sample's accuracy is not a number ({e})") from None
    labels, answers = found.get("labels"), found.get("predicted")
    if not isinstance(labels, str) or not isinstance(answers, dict):
        return accuracies, None
    s, c = answers.get(str(stable)), answers.get(str(canary))
    if not isinstance(s, str) or not isinstance(c, str):
        raise SampleError(f"the sample has no answers of versions {stable} and {canary}")
    return accuracies, paired(labels, s, c)
