"""What a TensorFlow error says, in one line: the useful line of its message, not the
graph-execution boilerplate around it (for the server's 4xx answers and the selection's
report)."""

from __future__ import annotations

import re
from typing import Any


def tf_detail(error: Any) -> str:
    """The useful line of a TensorFlow error's ``message``."""
    skip = ("Graph execution error", "Detected at node", "<stack traces", "[[")
    lines = [line.strip() for line in error.message.splitlines()]
    useful = [line for line in lines if line and not line.startswith(skip)]
    detail = useful[-1] if useful else " ".join(error.message.split())
    detail = re.sub(r"\{\{.*?\}\}|\[Op:[^\]]*\].*$", "", detail)
    return detail.strip() or "TensorFlow gave no reason"
