"""Write the JSON sidecar (`<model>.meta.json`) that travels with every model file.

The Rust data plane (`gearbox_policy::ModelMeta`) reads it with unknown fields
denied, so this module is the one place that knows its field names. Schema and
meaning: docs/models.md, "Sidecar".
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

FORMAT_VERSION = 1


@dataclass
class Feature:
    """One input column, in model order. `mean`/`std` (both or neither) mean the
    model was trained on (x - mean) / std."""

    name: str
    mean: float | None = None
    std: float | None = None

    def to_json(self) -> dict:
        out: dict = {"name": self.name}
        if self.mean is not None or self.std is not None:
            if self.mean is None or self.std is None or not self.std > 0:
                raise ValueError(f"feature {self.name}: give both mean and std > 0, or neither")
            out["mean"] = float(self.mean)
            out["std"] = float(self.std)
        return out


@dataclass
class Sidecar:
    model_version: str
    objective: str
    features: list[Feature]
    training_data_sha256: str
    training_data_file: str | None = None
    training_rows: int | None = None
    class_labels: list[str] = field(default_factory=list)
    trainer: str | None = None

    def to_json(self) -> dict:
        out: dict = {
            "format_version": FORMAT_VERSION,
            "model_version": self.model_version,
            "objective": self.objective,
            "features": [f.to_json() for f in self.features],
        }
        if self.class_labels:
            out["class_labels"] = list(self.class_labels)
        data: dict = {"sha256": self.training_data_sha256}
        if self.training_data_file is not None:
            data["file"] = self.training_data_file
        if self.training_rows is not None:
            data["rows"] = int(self.training_rows)
        out["training_data"] = data
        if self.trainer is not None:
            out["trainer"] = self.trainer
        return out


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes: the training-data digest of the sidecar."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sidecar_path(model_path: str | Path) -> Path:
    """`m.json` -> `m.meta.json` (the name the Rust loader looks for)."""
    p = Path(model_path)
    stem = p.name[: -len(".json")] if p.name.endswith(".json") else p.name
    return p.with_name(stem + ".meta.json")


def write_sidecar(model_path: str | Path, sidecar: Sidecar) -> Path:
    path = sidecar_path(model_path)
    path.write_text(json.dumps(sidecar.to_json(), indent=2) + "\n")
    return path
