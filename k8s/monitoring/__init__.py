"""Watching what runs: distml's own Prometheus as pure builders (``stack``), reading a
Prometheus's API through the API server (``prometheus``) and the Grafana dashboard
(``grafana``)."""
