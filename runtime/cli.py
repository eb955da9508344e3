"""What every task does with its flags and a runtime's answer: typed requests from flags
(a value no runtime could act on exits 2), notes for the flags a runtime cannot honour,
and a runtime verb's outcome as an exit code (``error: ...`` for a ``DistmlError``; its
``exit_code`` when it has one, else 1; Ctrl-C says what the runtime left behind); and the
cluster settings, refusing their old names."""

from __future__ import annotations

import errno
import os
import sys

from invoke import Exit

from common.errors import DistmlError
from ml import contract


def build_request(cls, **fields):
    """A typed request from flags; a value no runtime could act on exits 2 with its message."""
    try:
        return cls(**fields)
    except DistmlError as e:
        raise Exit(f"error: {e}", code=2) from e


def checked(rt, request, *, refuse=()):
    """Say which flags the runtime cannot honour: ``refuse`` ones exit 2, the rest are noted."""
    from runtime.requests import unsupported

    flags = unsupported(request, rt.capabilities)
    refused = [f for f in flags if f in refuse]
    if refused:
        raise Exit(f"error: {', '.join(refused)} cannot be used on the {rt.name} runtime", 2)
    if flags:
        verb = "applies" if len(flags) == 1 else "apply"
        print(f"note: {', '.join(flags)} {verb} to cluster runtimes; ignored on {rt.name}")
    return request


def call(fn, *args):
    """Run a runtime verb; a DistmlError becomes ``error: ...`` and a non-zero exit."""
    try:
        code = fn(*args)
    except DistmlError as e:
        raise Exit(f"error: {e}", code=getattr(e, "exit_code", 1)) from e
    except Exception as e:
        full = disk_full(e)
        if full is None:
            raise
        raise Exit(f"error: {disk_full_message(full, getattr(fn, '__self__', None))}", 1) from None
    except KeyboardInterrupt:
        owner = getattr(fn, "__self__", None)
        note = getattr(owner, "interrupt_note", "every process this task started has been stopped")
        print(f"\ninterrupted: {note}", file=sys.stderr)
        raise Exit(code=130) from None
    if code:
        raise Exit(code=code)


def disk_full(error: BaseException | None) -> OSError | None:
    """The "no space left" (or quota) error in ``error``'s chain, if there is one: a full
    disk often surfaces as a second error raised while cleaning up after the first."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in contract.DISK_FULL_ERRNOS:
            return error
        error = error.__cause__ or error.__context__
    return None


def disk_full_message(error: OSError, runtime=None) -> str:
    """One line: the disk is full, where, and what to do; what was finished is kept."""
    wd = getattr(getattr(runtime, "wd", None), "root", None)
    where = f" (writing {error.filename})" if error.filename else ""
    place = f" under {wd}" if wd else ""
    return (
        f"the disk is full{place}: {os.strerror(error.errno or errno.ENOSPC)}{where}. "
        "Free some space "
        f"(df -h {wd or '.'}) or set INVOKE_WORKDIR to a roomier disk, then run the task "
        "again; what had finished, and the saved state, are kept"
    )


def int_flag(flag, value, default=None):
    return _number(int, "a whole number", flag, value, default)


def float_flag(flag, value, default=None):
    return _number(float, "a number", flag, value, default)


def ints_flag(flag, value, default=()):
    """A comma-separated list of whole numbers (``10,25,50``); exit 2 for anything else."""
    if value is None or value == "":
        return default
    try:
        return tuple(int(part) for part in str(value).split(","))
    except ValueError:
        raise Exit(
            f"error: {flag} must be whole numbers separated by commas (e.g. 10,25,50), "
            f"got {value!r}",
            code=2,
        ) from None


def _number(kind, noun, flag, value, default):
    """A flag's value as ``kind`` (``default`` when not given); exit 2 when it is not one."""
    if value is None or value == "":
        return default
    try:
        return kind(value)
    except ValueError:
        raise Exit(f"error: {flag} must be {noun}, got {value!r}", code=2) from None


def service_name(c):
    """The ``service`` setting, checked: it names a directory, a URL and cluster objects."""
    try:
        return contract.check_service(str(c.config.service))
    except ValueError as e:
        raise Exit(f"error: {e} (the `service` setting: INVOKE_SERVICE or invoke.yaml)", 2) from e


# Cluster settings moved under ``cluster:``; the old names would be ignored without a word.
RENAMED = {
    "INVOKE_CLUSTER": "INVOKE_CLUSTER_NAME",
    "INVOKE_NAMESPACE": "INVOKE_CLUSTER_NAMESPACE",
    "INVOKE_INGRESS_PORT": "INVOKE_CLUSTER_INGRESS_PORT",
}


def cluster_config(c):
    """``c.config.cluster``, refusing the settings' old names (environment or invoke.yaml)."""
    old = [f"{k} (now {v})" for k, v in RENAMED.items() if k in os.environ]
    old += [
        f"{k} in invoke.yaml (now cluster.{k})"
        for k in ("namespace", "ingress_port")
        if k in c.config
    ]
    if old:
        raise Exit(f"error: cluster settings were renamed; use the new names: {'; '.join(old)}", 2)
    return c.config.cluster
