"""Net and recipe YAML as hpcdl's own files are written: one flow mapping per layer."""

from __future__ import annotations

import yaml


def _flow(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, sort_keys=False).strip()
    return text[:-len("\n...")].strip() if text.endswith("\n...") else text


def net_yaml(data: dict, source: str = "") -> str:
    head = f"# Imported by `hpcdl nets import` from Caffe's {source}.\n" if source else ""
    lines = [head.rstrip("\n")] if head else []
    for key, value in data.items():
        if key == "layers":
            lines.append("layers:")
            lines.extend(f"  - {_flow(layer)}" for layer in value)
        elif isinstance(value, dict) and key == "caffe":
            lines.append(yaml.safe_dump({key: value}, sort_keys=False, width=10**9, default_flow_style=None).rstrip())
        else:
            lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def recipe_yaml(recipe: dict, solvers: list[str]) -> str:
    head = "# Imported by `hpcdl recipes import` from Caffe's " + " then ".join(solvers) + ".\n"
    head += "# data.source is synthetic: point it at the data set (Caffe's data layers read LMDB/LevelDB).\n"
    return head + yaml.safe_dump(recipe, sort_keys=False, width=10**9, default_flow_style=None)
