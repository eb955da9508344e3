"""The cluster side: pinned versions, pure manifest builders, one client seam, waits,
cluster providers (k3d, kind, minikube) and the preflight.

Nothing here imports TensorFlow or ``ml`` (``invoke --list`` stays fast), and the
``kubernetes`` client is imported only when a real cluster is talked to.
"""
