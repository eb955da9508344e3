"""Which kubectl failures `up`'s installs retry until their deadline (an API server or a
webhook starting or blipping) and which stop them at once with kubectl's own message (a
wrong URL, an unknown flag, a schema error, a webhook refusing the object)."""

from __future__ import annotations

from k8s.client.kube import KubeError

# kubectl failures that go away by themselves: the API server or a webhook is starting or
# blipping. Checked first: "error validating data: failed to download openapi ...
# connection refused" is a transient failure that also contains "error validating".
TRANSIENT_KUBECTL_ERRORS = (
    "failed to download openapi",
    "connection refused",
    "was refused",  # "The connection to the server 127.0.0.1:6443 was refused"
    "i/o timeout",
    "the server is currently unable to handle the request",
    "no endpoints available",
    "failed calling webhook",
)
# kubectl failures that no amount of retrying fixes (a wrong URL, a flag this kubectl
# does not know, a manifest it cannot parse, a schema or field error, an empty selection):
# fail at once with kubectl's own message.
PERMANENT_KUBECTL_ERRORS = (
    "unable to read url",
    "404 not found",
    "unknown flag",
    "unknown shorthand flag",
    "error parsing",
    "error validating",
    "strict decoding error",
    "unknown field",
    "couldn't get version/kind",
    "no objects passed to apply",
    "denied the request",  # an admission webhook refused the object itself
)
NO_MATCH_TRIES = 5


def classify_kubectl_error(text: str) -> str:
    """ "transient", "permanent" or "no-match" (CRDs not served yet) for kubectl's stderr.
    Anything unrecognised is transient: retried until the deadline, never given up early."""
    low = text.lower()
    if "no matches for kind" in low:
        return "no-match"
    if any(p in low for p in TRANSIENT_KUBECTL_ERRORS):
        return "transient"
    if any(p in low for p in PERMANENT_KUBECTL_ERRORS):
        return "permanent"
    return "transient"


class PermanentError(KubeError):
    """A failure retrying cannot fix."""

    permanent = True
