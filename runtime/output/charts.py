"""Charts people would rather look at than read: training curves of every candidate."""

from __future__ import annotations

import json
from pathlib import Path

from ml import contract


def load_histories(volume: Path) -> dict[str, list[dict]]:
    """``{model: per-epoch rows}`` from every ``candidates/<model>/metrics.json``."""
    out: dict[str, list[dict]] = {}
    for path in sorted(Path(contract.candidates_dir(volume)).glob(f"*/{contract.METRICS_FILE}")):
        if path.parent.name.startswith("."):
            continue
        try:
            out[path.parent.name] = json.loads(path.read_text()).get("history", [])
        except (OSError, ValueError):
            continue
    return out


def training_curves(volume: Path, out_png: Path) -> Path | None:
    """Loss and accuracy per epoch (train dashed, validation solid), all models; None if no data."""
    histories = {m: h for m, h in load_histories(volume).items() if h}
    if not histories:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (model, rows) in enumerate(sorted(histories.items())):
        color = f"C{i}"
        epochs = [r["epoch"] for r in rows]
        for key, ax, style in (
            ("loss", ax_loss, "--"),
            ("val_loss", ax_loss, "-"),
            ("accuracy", ax_acc, "--"),
            ("val_accuracy", ax_acc, "-"),
        ):
            values = [r.get(key) for r in rows]
            if all(v is not None for v in values):
                label = f"{model} ({'validation' if key.startswith('val_') else 'train'})"
                ax.plot(epochs, values, style, color=color, marker="o", label=label)
    ax_loss.set(title="Loss per epoch", xlabel="epoch", ylabel="cross-entropy")
    ax_acc.set(title="Accuracy per epoch", xlabel="epoch", ylabel="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8)
    fig.suptitle("distml training curves (dashed: train batches, solid: validation split)")
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png
