"""ml.server.instances: the image checks done from the headers before any decoding: an image
over --max-image-pixels, and the request's pixel budget (--max-request-pixels) summed over its
images, through both the V1 and the V2 parsers."""

from __future__ import annotations

import pytest

from ml.server import client_error as errors
from ml.server import image_header, instances, v1, v2
from tests.support.serve_requests import HUGE_PNG, b64, huge_png, v2_bytes_request


def test_huge_png_is_rejected_before_decoding() -> None:
    # Far too little data for its size: a decoder would fail; the header check answers 413.
    assert image_header.image_size(HUGE_PNG) == ("png", 100_000, 100_000)
    with pytest.raises(errors.ClientError) as info:
        instances.check_image(HUGE_PNG, 0, instances.DEFAULT_MAX_IMAGE_PIXELS)
    assert info.value.status == 413
    assert "100000x100000" in info.value.message and "--max-image-pixels" in info.value.message
    assert instances.check_image(huge_png(4096, 4096), 0, 4096 * 4096)  # the limit itself is fine


@pytest.mark.parametrize("path", ["v1", "v2"])
def test_request_pixel_budget_is_summed_from_headers_before_decoding(path: str) -> None:
    # Four 100x100 headers with no image data behind them: only their headers are read.
    images = [huge_png(100, 100)] * 4

    def parse(limit: int) -> instances.ParsedRequest:
        if path == "v1":
            body = {"instances": [b64(image) for image in images]}
            return v1.parse_request(body, max_request_pixels=limit)
        return v2.parse_v2_request(v2_bytes_request(images), max_request_pixels=limit)

    assert parse(40_000).inputs == images  # exactly at the limit: accepted
    with pytest.raises(errors.ClientError) as info:
        parse(39_999)
    assert info.value.status == 413
    assert info.value.message.startswith(
        "the request's 4 images total 40,000 pixels, more than this server's limit of "
        "39,999 pixels per request (--max-request-pixels)"
    )


def test_default_request_pixel_budget_refuses_a_full_batch_of_the_largest_images() -> None:
    largest = huge_png(4096, 4096)  # each at --max-image-pixels, so each alone is accepted
    assert v1.parse_request({"instances": [b64(largest)]}).inputs == [largest]
    body = {"instances": [b64(largest)] * instances.DEFAULT_MAX_INSTANCES}
    with pytest.raises(errors.ClientError) as info:
        v1.parse_request(body)
    assert info.value.status == 413 and "--max-request-pixels" in info.value.message
