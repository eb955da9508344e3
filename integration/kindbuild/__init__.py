"""Build everything a kind cluster needs on a machine with no container registry.

Every piece comes from a Go module (through the Go module proxy) or a Debian package,
at the versions :mod:`integration.kindbuild.pins` names, and lands in a cache outside the
repository keyed by component and version::

    ${DISTML_KIND_CACHE:-/var/cache/distml-kind}/<component>-<version>/

An entry is complete once its ``build.json`` exists (written last, with the build's
wall time); a second run finds it and builds nothing. Heavy commands run under
``nice -n 19 ionice -c3`` with a small ``go build -p``: these machines have 2 CPUs.

Run: ``python -m integration.kindbuild [STEP ...]`` (``--help`` lists the steps).
"""
