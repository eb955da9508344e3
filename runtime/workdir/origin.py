"""Which directory a work dir's state belongs to: a copy is not the work dir it copies.

`invoke up` records in the state the work dir's resolved path, the host, and a random
secret. A ``cp -r`` of the work dir, or an rsync to a colleague's machine, carries that
record, and with it the instance id every object on the cluster is labelled with, the
volume's uid, the context: the copy would act on the original's objects as its own. So
every task first compares the record with where it runs (``check``): a copy is refused,
naming the original, until the user says which it is:

- a copy: ``invoke up`` makes it a new work dir (a new instance; the original's objects are
  left alone, and refused as another work dir's), or ``invoke down --forget`` clears its
  record without touching any cluster;
- the original, moved: ``invoke moved`` takes the record over, refused while the original
  is still there (the same host, the path there, its state holding the same secret).
"""

from __future__ import annotations

import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import DistmlError
from runtime.workdir import Workdir
from runtime.workdir.state import read_state

# What a copy's fresh `up` (or `down --forget`) clears: everything that names the
# original's objects, cluster and processes (a new instance id is chosen by `up`). The
# source dir stays; the record of the images goes (the images stay in Docker).
RENEWED: tuple[str, ...] = (
    "up",
    "runtime",
    "instance",
    "workdir_path",
    "workdir_host",
    "workdir_secret",
    "object_uids",
    "volume_uid",
    "made_cluster",
    "context",
    "namespace",
    "cluster_server",
    "cluster_uid",
    "cluster_ca",
    "storage_class",
    "volume_access",
    "serving_mode",
    "argo",
    "monitoring",
    "deployed",
    "target",
    "max_replicas",
    "scale_metric",
    "scrape_interval_s",
    "server",
    "canary_server",
    "train_pids",
    "train_metrics",
    "image",
    "built_images",
    "pushed",
)


class CopiedWorkdir(DistmlError):
    """This work dir's record names another directory: it is a copy, or it was moved."""


@dataclass(frozen=True)
class Place:
    path: str
    host: str

    def describe(self) -> str:
        return f"{self.path} on {self.host}"


def here(wd: Workdir) -> Place:
    return Place(str(wd.root), socket.gethostname())


def recorded(wd: Workdir) -> Place | None:
    state = wd.state()
    if not (state.workdir_path and state.workdir_host):
        return None
    return Place(state.workdir_path, state.workdir_host)


def stamp(wd: Workdir) -> None:
    """Record where this work dir lives (once: `up` in a work dir that has no record)."""
    if recorded(wd) is None:
        place = here(wd)
        wd.update_state(
            workdir_path=place.path, workdir_host=place.host, workdir_secret=secrets.token_hex(16)
        )


def original(wd: Workdir) -> Place | None:
    """The place the record names, when it is not this one (None: this is the work dir,
    or it has no record yet)."""
    was = recorded(wd)
    return was if was is not None and was != here(wd) else None


def original_is_there(wd: Workdir, was: Place) -> bool:
    """The original still lives on this host: at its path, its state holding the same
    secret (another work dir made there since has another secret)."""
    if was.host != socket.gethostname():
        return False  # another machine's: cannot be checked from here
    secret = wd.state().workdir_secret
    theirs = read_state(Path(was.path) / wd.state_path.name)
    return bool(secret) and theirs.workdir_secret == secret


def check(wd: Workdir) -> None:
    """Refuse a copied (or moved) work dir until the user says which it is."""
    was = original(wd)
    if was is None:
        return
    state = wd.state()
    raise CopiedWorkdir(
        f"this work dir ({wd.root}) is a copy of the work dir at {was.describe()}: its "
        f"record (instance {state.instance or '-'}) is that work dir's, and acting on it "
        "here would change or delete that work dir's objects. Say which it is:\n"
        "  - a copy: `invoke up` makes this one a new work dir (the original's objects are "
        "left alone), or `invoke down --forget` clears its record and touches no cluster;\n"
        f"  - the original, moved here from {was.path}: `invoke moved` takes the record over"
    )


def renew(wd: Workdir, out: Any) -> None:
    """A copy's `up`: start afresh as a new work dir (``check`` said it is a copy)."""
    was = original(wd)
    if was is None:
        return
    wd.update_state(**dict.fromkeys(RENEWED))
    out(
        f"work dir: a copy of {was.describe()}; its record is cleared: a new work dir, "
        "with an id of its own at its `up` (the original's objects are left alone)"
    )


def moved(wd: Workdir, out: Any) -> int:
    """`invoke moved`: this is the original work dir, moved here; take the record over."""
    was = original(wd)
    if was is None:
        out(f"work dir {wd.root}: its record is its own; nothing to take over")
        return 0
    if original_is_there(wd, was):
        raise CopiedWorkdir(
            f"the work dir at {was.describe()} is still there, with the same record: this "
            "one is a copy, not the original moved. `invoke up` makes it a new work dir "
            "(or, for this one to take the original's place, remove the original directory "
            "first: nothing on the cluster needs to change)"
        )
    if was.host != socket.gethostname():
        out(
            f"note: the record names another host ({was.host}); distml cannot check that "
            "the original is gone there: it takes your word that this is it, moved"
        )
    place = here(wd)
    wd.update_state(workdir_path=place.path, workdir_host=place.host)
    out(f"work dir: moved from {was.describe()}; its record is this one's now")
    return 0
