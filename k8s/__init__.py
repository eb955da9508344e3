"""The cluster side, one room per concern:

    client/      the one client seam (kube), reading objects, kubectl's errors, ownership
    install/     versions, the pinned upstream files, operators, capacity, the preflight
    waits/       the poll every wait is built from, the waits by kind, failure reports
    manifests/   pure builders: every object distml applies
    providers/   where the cluster lives: k3d, kind, minikube, an existing cluster, storage,
                 what a deployment is (settings)
    monitoring/  distml's own Prometheus, reading a Prometheus, the Grafana dashboard

Nothing here imports TensorFlow or ``ml`` (``invoke --list`` stays fast), and the
``kubernetes`` client is imported only when a real cluster is talked to.
"""
