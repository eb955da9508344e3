"""`invoke access-role`: the Role and RoleBinding a namespace's admin applies so that a user
whose rights end at that namespace can run distml there (an existing cluster)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from invoke import task

from k8s.providers.settings import EXISTING
from runtime.cli import call as _call
from tasks.chooser import cluster_runtime as _cluster_runtime
from tasks.chooser import workdir as _workdir


@task(
    help={
        "context": "the kubeconfig context (default: the one `up` recorded; else name it, "
        "as for the first `up`)",
        "out": "write the YAML to this file for the cluster's admin (default: print it)",
        "full": "every right distml needs, not only those this user lacks",
        "with-argo": "include what `up --with-argo` and `invoke workflow` need",
        "with-monitoring": "include what `up --with-monitoring` needs (distml's Prometheus)",
    }
)
def access_role(c, context=None, out=None, full=False, with_argo=False, with_monitoring=False):
    """Print the Role + RoleBinding that grant what distml lacks in its namespace (existing)."""
    from runtime.cluster.access_check import role_yaml

    with contextlib.redirect_stdout(sys.stderr):  # stdout is the YAML alone
        rt = _cluster_runtime(c, EXISTING, _workdir(c), for_up=True, context=context)
    cx = rt.cx

    def write() -> int:
        s = cx.settings(with_argo=with_argo or None, with_monitoring=with_monitoring or None)
        text, grant = role_yaml(cx, s, everything=bool(full))
        if not grant:
            print(
                f"this user may already do all distml needs in namespace {s.namespace}: "
                "nothing to grant (`--full` prints the Role of all of it)",
                file=sys.stderr,
            )
            return 0
        if not out:
            sys.stdout.write(text)
            return 0
        Path(out).write_text(text)
        print(
            f"wrote {out}: Role distml-user ({len(grant)} verbs) and its RoleBinding in "
            f"namespace {s.namespace}; the cluster's admin applies it: "
            f"`kubectl -n {s.namespace} apply -f {out}`",
            file=sys.stderr,
        )
        return 0

    _call(write)
