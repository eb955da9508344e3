"""Waiting for the cluster: the machinery every wait is built from (``cluster_poll``), the
waits by kind (``tfjobs``, ``isvc_wait``, ``workload_waits``, ``argo_status``) and what a
user needs when one fails (``diagnose``)."""
