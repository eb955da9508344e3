"""Selection and publishing: ``python -m ml select`` (``select``), test
accuracy (``evaluate``), the serving directory's versions (``publishing``), and the
canary's steps (``canary_publish``, ``canary_weight``, ``sample_accuracy``)."""
