"""Step arithmetic for training calls that run several steps (``steps_per_execution``).

With ``compile(steps_per_execution=N)`` one call of Keras's train function runs up to N
steps: callbacks see ``on_train_batch_begin`` with the call's first batch index and
``on_train_batch_end`` with its last, and nothing in between. So "every K steps" can only
mean "every call that finished a multiple of K steps" (a call runs N steps, which need not
divide K), and every worker of a job answers it alike (they run the same calls).
"""

from __future__ import annotations


def crossed(first: int, last: int, every: int) -> bool:
    """Did the call that ran batches ``first..last`` (0-based, inclusive) of an epoch
    finish a multiple of ``every`` steps? With one step per call: ``(last + 1) % every == 0``.
    """
    return (last + 1) // every > first // every
