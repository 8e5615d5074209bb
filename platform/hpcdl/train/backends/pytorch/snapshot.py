"""A trained hpcdl PyTorch snapshot's weights into a built net (for `hpcdl nets export --caffemodel`)."""

from __future__ import annotations

from pathlib import Path

from hpcdl.errors import HpcdlError


def load_torch_snapshot(model, path: str | Path) -> None:
    from hpcdl.train import checkpoint

    try:
        state = checkpoint.load(Path(path))
    except checkpoint.CorruptCheckpoint as exc:
        raise HpcdlError(f"export: {exc}") from None
    except FileNotFoundError:
        raise HpcdlError(f"export: {path}: no such file") from None
    weights = state.get("model", state)
    # a DistributedDataParallel model's keys start with "module."
    weights = {k[len("module."):] if k.startswith("module.") else k: v for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise HpcdlError(f"export: {path} does not fit this net: missing {sorted(missing)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]}")
