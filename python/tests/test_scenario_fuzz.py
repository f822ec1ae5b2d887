"""Property-based fuzzing of the lab's scenario loader with hypothesis (issue 18's
"Python's scenario loader with hypothesis"): whatever a scenario file holds, `load` and
`parse` either return a checked Scenario or raise `ScenarioError` naming the file (and,
for a bad value, the field); nothing else escapes, and a Scenario that loads expands into
conditions and emulator configs without error.

The seed corpus is the repository's own scenarios; each example mutates one of them
(replace a value anywhere in the document with a value of any TOML type, delete a key,
add an unknown one) or feeds raw bytes. `derandomize=True` makes the examples the same on
every run, so CI is deterministic; `GEARBOX_FUZZ_EXAMPLES=N .venv/bin/pytest
python/tests/test_scenario_fuzz.py` runs more (docs/reliability.md has the figures).
"""

from __future__ import annotations

import copy
import math
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gearbox.lab.scenario import conditions, emu_config, load, parse  # noqa: E402
from gearbox.lab.scenario.reader import ScenarioError  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SEEDS = sorted((REPO / "scenarios").glob("*.toml"))
DOCS = [(p, tomllib.loads(p.read_text())) for p in SEEDS]
EXAMPLES = int(os.environ.get("GEARBOX_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8,
)


def _places(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path in the document (dict keys and list indices)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _places(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _places(v, (*prefix, i))
    return out


def _check(doc: dict[str, Any], path: Path) -> None:
    try:
        s = parse(doc, path)
    except ScenarioError as e:
        assert str(path) in str(e)
        return
    for c in conditions(s):
        emu_config(s, c, lambda ref, seed: Path("/nonexistent/trace.mahi"))


@FUZZ
@given(st.data())
def test_a_mutated_scenario_loads_or_is_refused_with_a_scenario_error(data: st.DataObject) -> None:
    path, original = data.draw(st.sampled_from(DOCS))
    doc = copy.deepcopy(original)
    places = _places(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        if not places:
            break
        where = data.draw(st.sampled_from(places))
        parent = doc
        for k in where[:-1]:
            parent = parent[k]
        action = data.draw(st.sampled_from(["replace", "delete", "add"]))
        try:
            if action == "replace":
                parent[where[-1]] = data.draw(values)
            elif action == "delete":
                del parent[where[-1]]
            elif isinstance(parent, dict):
                parent[data.draw(st.text(min_size=1, max_size=12))] = data.draw(values)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation moved this place
        places = _places(doc)
    _check(doc, path)


@FUZZ
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_arbitrary_bytes_are_refused_with_a_scenario_error_naming_the_file(raw: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fuzz.toml"
        path.write_bytes(raw)
        try:
            s = load(path)
        except ScenarioError as e:
            assert str(path) in str(e)
            return
        for c in conditions(s):
            emu_config(s, c, lambda ref, seed: Path("/nonexistent/trace.mahi"))


def test_the_seed_corpus_is_the_repositorys_scenarios() -> None:
    assert len(DOCS) >= 10
    for path, doc in DOCS:
        _check(doc, path)
    assert not math.isnan(0.0)
