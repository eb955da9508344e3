"""Image sizes from PNG/JPEG headers alone (GIF, BMP and WebP recognised by name): nothing
is decoded, so a small file claiming a huge size costs nothing to measure."""

from __future__ import annotations

import io
import struct

from PIL import Image
from PIL.JpegImagePlugin import JpegImageFile
from PIL.PngImagePlugin import PngImageFile


class ImageHeaderError(ValueError):
    """Image bytes whose header is unknown, truncated or corrupt."""


#: Header readers of the decodable formats, by their file signature. Pillow's own
#: ``Image.open`` would refuse a large image outright (its decompression-bomb check) before
#: telling its size; this server applies its own limit, so it reads the header directly.
_HEADER_READERS = (
    (b"\x89PNG\r\n\x1a\n", "png", PngImageFile),
    (b"\xff\xd8\xff", "jpeg", JpegImageFile),
)
#: Formats named in the "not supported" answer (TensorFlow's decoder knows them too).
_NAMED_FORMATS = ("GIF", "BMP", "WEBP")


def image_size(data: bytes) -> tuple[str, int, int]:
    """``(format, width, height)`` from the header of PNG or JPEG bytes (GIF, BMP and WebP
    are recognised so that they can be refused by name).

    Only the header is read: nothing is decoded.

    Raises:
        ImageHeaderError: unknown format, or a header that is truncated or corrupt.
    """
    for signature, fmt, reader in _HEADER_READERS:
        if data.startswith(signature):
            try:
                with reader(io.BytesIO(data)) as image:
                    return fmt, *image.size
            except (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error) as e:
                raise ImageHeaderError(f"{fmt.upper()} header is truncated or corrupt ({e})") from e
    try:
        with Image.open(io.BytesIO(data), formats=_NAMED_FORMATS) as image:
            if image.format is None:  # never: the plugin that opened it names its format
                raise ImageHeaderError("the image's format is unknown")
            return image.format.lower(), *image.size
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise ImageHeaderError(
            f"not a PNG or JPEG image (the data starts with {data[:8].hex(' ') or 'nothing'})"
        ) from e
