"""`invoke up` on the local runtime: preflight, the work dir, the dataset on its volume
and the sample request, each skipped when already done. Functions of the
``LocalRuntime`` they set up."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ml import contract
from ml.contract import records
from runtime.local import serving
from runtime.requests import UpRequest

if TYPE_CHECKING:
    from runtime.local import LocalRuntime

REQUIRED_MODULES = {
    "tensorflow": "tensorflow",
    "tf_keras": "tf-keras",
    "tensorflow_datasets": "tensorflow-datasets",
    "kserve": "kserve",
    "locust": "locust",
    "matplotlib": "matplotlib",
}
MIN_FREE_BYTES = 2 * 1024**3


def preflight(rt: LocalRuntime) -> list[str]:
    """What stops the local runtime from working here: missing packages, too little disk."""
    problems = []
    missing = [
        pkg for mod, pkg in REQUIRED_MODULES.items() if importlib.util.find_spec(mod) is None
    ]
    if missing:
        problems.append(
            f"missing Python packages: {', '.join(missing)}; install the project with "
            "`pip install -e .` in this environment"
        )
    probe = rt.wd.root if rt.wd.root.exists() else rt.wd.root.parent
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < MIN_FREE_BYTES and not rt.wd.exists():
        problems.append(
            f"only {free / 1024**3:.1f} GiB free under {probe}; the local runtime needs "
            f"about {MIN_FREE_BYTES / 1024**3:.0f} GiB (free space or set INVOKE_WORKDIR)"
        )
    return problems


def up(rt: LocalRuntime, request: UpRequest) -> int:
    source_dir = request.source_dir
    source = str(Path(source_dir).expanduser().resolve()) if source_dir else None
    ingest = contract.ingest(rt.wd.volume, source, python=rt.python)
    if not rt.ex.act(f"create the work dir {rt.wd.root} (volume {rt.wd.volume})"):
        rt.ex.step("ingest", ingest)
        return 0
    problems = preflight(rt)
    if problems:
        raise rt.error("preflight failed:\n  - " + "\n  - ".join(problems))
    created = rt.wd.create()
    rt.out(f"work dir {rt.wd.root} ({'created' if created else 'exists'})")
    log = rt.wd.logs / "ingest.log"
    code, output = rt.ex.step("ingest", ingest, log)
    if code != 0:
        raise rt.error(f"ingest failed (exit {code}); full log: {log}")
    already = not records.read_ingest_line(output).changed
    state = rt.wd.state()
    sample_existed = (rt.wd.root / contract.SAMPLE_REQUEST).is_file()
    serving.write_sample(rt, source_dir)
    if already and not created and state.up and sample_existed:
        rt.out("local runtime already ready; nothing changed")
    else:
        rt.wd.update_state(up=True, runtime="local", source_dir=source)
        rt.out(f"local runtime ready: volume {rt.wd.volume}")
    return 0
