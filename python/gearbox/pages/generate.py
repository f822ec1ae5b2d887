"""Generating a set of sites: one directory per page plus its graph and a manifest."""

from __future__ import annotations

import json
import random
from pathlib import Path

from gearbox.pages.features import page_features
from gearbox.pages.model import PageModel, plan_page
from gearbox.pages.site import write_site

#: Name of the manifest written beside the sites.
MANIFEST = "pages.json"


class GenerateError(ValueError):
    """Bad arguments to the generator; the message names the argument."""


def page_name(index: int) -> str:
    return f"page-{index:04d}"


def generate_one(out: Path, index: int, seed: int, model: PageModel | None = None) -> dict:
    """Writes page `index` of the set seeded by `seed` to `out/page-NNNN/` and its graph to
    `out/page-NNNN.page.json`; returns its manifest entry. A page depends only on (seed, index), so
    one page of a set can be regenerated alone."""
    model = model or PageModel()
    model.validate()
    name = page_name(index)
    rng = random.Random(f"gearbox-pages:{model.name}:{seed}:{index}")
    plan = plan_page(model, rng)
    graph = write_site(plan, out / name, name, seed * 100_003 + index)
    (out / f"{name}.page.json").write_text(json.dumps(graph, indent=1) + "\n")
    features = page_features(out / name)
    return {"name": name, "url_path": f"/{name}/index.html", "features": features.as_dict()}


def generate(out: Path, count: int, seed: int, model: PageModel | None = None) -> list[dict]:
    """Writes `count` pages to `out` (created; must be empty if it exists) and a manifest."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise GenerateError(f"count must be a whole number >= 1, got {count!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise GenerateError(f"seed must be a whole number >= 0, got {seed!r}")
    if out.exists() and not out.is_dir():
        raise GenerateError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        raise GenerateError(f"{out}: directory is not empty (the kit never overwrites files)")
    model = model or PageModel()
    model.validate()
    out.mkdir(parents=True, exist_ok=True)
    entries = [generate_one(out, i, seed, model) for i in range(count)]
    manifest = {"generator": "gearbox pages gen", "model": model.name, "seed": seed, "pages": entries}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return entries
