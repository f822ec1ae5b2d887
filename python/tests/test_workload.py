"""Workloads, pages and certificates from Python (no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

import gearbox


def test_the_built_in_workloads_are_listed() -> None:
    assert set(gearbox.workload_names()) >= {"feed", "app", "search", "bulk", "page"}


@pytest.mark.parametrize("name", ["feed", "app", "search", "bulk", "page"])
def test_workload_requests_are_the_same_for_the_same_seed(name: str) -> None:
    first = gearbox.workload_requests(name, seed=7, requests=200)
    assert first == gearbox.workload_requests(name, seed=7, requests=200)
    assert 0 < len(first) <= 200
    keys = {"send_at_ms", "click", "request_bytes", "response_bytes", "new_connection", "client_index", "path"}
    assert all(set(r) == keys for r in first)
    assert all(r["path"].startswith("/bytes/") for r in first)
    times = [r["send_at_ms"] for r in first]
    assert times == sorted(times)


def test_different_seeds_give_different_requests() -> None:
    a = gearbox.workload_requests("app", seed=1, requests=100)
    b = gearbox.workload_requests("app", seed=2, requests=100)
    assert a != b


def test_a_duration_bounds_the_send_times() -> None:
    requests = gearbox.workload_requests("app", seed=3, duration_ms=30_000)
    assert requests and all(r["send_at_ms"] < 30_000 for r in requests)


def test_the_limit_must_be_given_once() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        gearbox.workload_requests("app", seed=1)
    with pytest.raises(ValueError, match="exactly one"):
        gearbox.workload_requests("app", seed=1, duration_ms=10, requests=10)
    with pytest.raises(ValueError, match="finite"):
        gearbox.workload_requests("app", seed=1, duration_ms=float("nan"))


def test_an_unknown_workload_lists_the_built_in_ones() -> None:
    with pytest.raises(ValueError, match="feed, app, search, bulk, page"):
        gearbox.workload_requests("nope", seed=1, requests=1)


def test_a_broken_workload_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text('name = "w"\ndescription = "x"\n[bulk]\nsize_bytes = "lots"\n')
    with pytest.raises(ValueError, match=r"w\.toml.*line 4"):
        gearbox.workload_requests(str(path), seed=1, requests=1)
    with pytest.raises(OSError, match="missing.toml"):
        gearbox.workload_requests(str(tmp_path / "missing.toml"), seed=1, requests=1)


def test_a_generated_page_has_an_html_root_and_a_dependency_graph() -> None:
    page = gearbox.generate_page(seed=42)
    objects = page["objects"]
    assert page == gearbox.generate_page(seed=42)
    root = objects[0]
    assert root["id"] == 0 and root["kind"] == "html" and root["depends_on"] == []
    assert [o["id"] for o in objects] == list(range(len(objects)))
    for o in objects:
        assert set(o) == {"id", "path", "kind", "size_bytes", "priority", "depends_on"}
        assert o["path"].startswith(f"/bytes/{o['size_bytes']}")
        assert 0 <= o["priority"] <= 7
        assert all(d < o["id"] for d in o["depends_on"])
    assert all(o["depends_on"] for o in objects[1:])


def test_pages_come_only_from_page_workloads() -> None:
    with pytest.raises(ValueError, match="not a page workload"):
        gearbox.generate_page(seed=1, workload="app")


def test_make_cert_writes_a_pem_pair(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    gearbox.make_cert(["localhost", "127.0.0.1"], cert, key)
    assert cert.read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert "PRIVATE KEY-----" in key.read_text()
    with pytest.raises(ValueError, match="at least one name"):
        gearbox.make_cert([], cert, key)


def test_errors_form_one_hierarchy() -> None:
    for name in ("ConnectError", "TlsError", "QuicError", "RequestTimeout", "HttpError", "BadUrl", "ConfigError"):
        cls = getattr(gearbox, name)
        assert issubclass(cls, gearbox.GearboxError) and cls.__module__ == "gearbox"
    assert issubclass(gearbox.GearboxError, Exception)
    assert gearbox.RequestTimeout is not TimeoutError
    assert gearbox.__version__


def test_unknown_attributes_are_attribute_errors() -> None:
    with pytest.raises(AttributeError):
        _ = gearbox.nothing_here
    assert "Client" in dir(gearbox)
