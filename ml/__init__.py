"""Pod code for distml: everything that runs inside a training, selection or serving pod.

The pod contract (``python -m ml <step> ...``) is this package's only API. It imports
nothing from the orchestration side (``tasks/``, ``runtime/``, ``k8s/``, ``loadtest/``).
"""

import os

# tf-keras (Keras 2) is required: Keras 3 cannot run MultiWorkerMirroredStrategy ``fit``
# in TF 2.21. This must be in effect before TensorFlow is imported; it is the one
# import-time action this package allows itself.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
