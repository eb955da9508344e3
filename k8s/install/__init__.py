"""What `up` puts on a cluster and checks first: every pinned version (``versions``), the
pinned upstream files (``upstream_files``), the operators (``operators``,
``optional_operators``, ``istio_gateway``), what is already installed (``operator_check``),
what distml's pods ask of the nodes (``capacity``, ``node_capacity``) and the checks before
anything is created (``preflight``)."""
