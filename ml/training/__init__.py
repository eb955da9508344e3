"""Training: ``python -m ml train`` (``train``), its config and profiles
(``config``), TF_CONFIG (``tf_config``), progress lines and metrics (``progress``,
``train_metrics``), SIGTERM saves (``preemption``, ``steps``), loopback-only workers
(``loopback``)."""
