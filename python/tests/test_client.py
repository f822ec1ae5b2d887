"""The Python client against a real `gearbox edge` over TCP (h1, h2) and QUIC (h3)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import Edge, free_port

import gearbox

PROTOCOL = {"tcp": "h2", "h1": "h1", "quic": "h3"}


@pytest.fixture
def client(edge: Edge) -> Iterator[gearbox.Client]:
    with gearbox.Client(ca=edge.cert, connect_timeout_s=5, request_timeout_s=20) as c:
        yield c


@pytest.mark.parametrize("transport", ["tcp", "h1", "quic"])
def test_get_returns_the_requested_bytes_and_a_timed_record(client: gearbox.Client, edge: Edge, transport: str) -> None:
    r = client.get(f"{edge.origin}/bytes/100000", transport=transport)
    assert r.status == 200
    assert isinstance(r.body, bytes) and len(r.body) == 100_000
    record = r.record
    assert record["side"] == "client"
    assert record["protocol"] == PROTOCOL[transport]
    assert record["status"] == 200 and record["bytes"] == 100_000
    assert record["rct_ms"] > 0 and record["ttfb_ms"] > 0
    assert record["error"] is None
    assert record["url"] == f"{edge.origin}/bytes/100000"
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers.get("content-length", "100000") == "100000"
    assert PROTOCOL[transport] in repr(r)


def test_every_transport_delivers_the_same_body(client: gearbox.Client, edge: Edge) -> None:
    bodies = {t: client.get(f"{edge.origin}/bytes/70001", transport=t).body for t in PROTOCOL}
    assert len(set(bodies.values())) == 1


@pytest.mark.parametrize("transport", ["tcp", "h1", "quic"])
def test_a_second_request_reuses_the_connection(edge: Edge, transport: str) -> None:
    with gearbox.Client(ca=edge.cert) as c:
        first = c.get(f"{edge.origin}/bytes/10", transport=transport).record
        second = c.get(f"{edge.origin}/bytes/10", transport=transport).record
        forced = c.request("GET", f"{edge.origin}/bytes/10", transport=transport, force_new_connection=True).record
    assert first["new_connection"] is True and first["handshake_ms"] > 0
    assert second["new_connection"] is False and second["conn_id"] == first["conn_id"]
    assert forced["new_connection"] is True and forced["conn_id"] != first["conn_id"]


@pytest.mark.parametrize("transport", ["tcp", "h1", "quic"])
def test_post_sends_the_body_and_headers(client: gearbox.Client, edge: Edge, transport: str) -> None:
    payload = bytes(range(256)) * 40
    r = client.request("POST", f"{edge.origin}/echo", body=payload, transport=transport, headers={"x-test": "1"})
    assert r.status == 200 and r.body == payload
    assert r.record["method"] == "POST"


def test_discarded_bodies_are_still_counted(client: gearbox.Client, edge: Edge) -> None:
    r = client.request("GET", f"{edge.origin}/bytes/5000", discard_body=True, click=3)
    assert r.body == b"" and r.record["bytes"] == 5000 and r.record["click"] == 3


def test_error_statuses_are_responses_not_exceptions(client: gearbox.Client, edge: Edge) -> None:
    r = client.get(f"{edge.origin}/no-such-route")
    assert r.status == 404 and r.record["status"] == 404


@pytest.mark.parametrize("transport", ["tcp", "quic"])
def test_a_page_load_fetches_every_object(client: gearbox.Client, edge: Edge, transport: str) -> None:
    page = gearbox.generate_page(seed=11)
    load = client.load_page(edge.origin, page, transport=transport)
    assert load["protocol"] == PROTOCOL[transport]
    assert load["transport"] == transport
    assert [o["id"] for o in load["objects"]] == [o["id"] for o in page["objects"]]
    assert all(o["status"] == 200 for o in load["objects"])
    assert load["page_load_ms"] == pytest.approx(max(o["completed_ms"] for o in load["objects"]))
    for obj, spec in zip(load["objects"], page["objects"], strict=True):
        assert obj["record"]["bytes"] == spec["size_bytes"]
        for dep in spec["depends_on"]:
            assert obj["started_ms"] >= load["objects"][dep]["completed_ms"]
    assert load["objects"][0]["record"]["new_connection"] is True


def test_a_page_can_be_given_as_a_seed(client: gearbox.Client, edge: Edge) -> None:
    load = client.load_page(edge.origin, 5, transport="quic")
    assert len(load["objects"]) == len(gearbox.generate_page(5)["objects"])


def test_a_page_with_a_cycle_is_refused(client: gearbox.Client, edge: Edge) -> None:
    page = gearbox.generate_page(seed=1)
    page["objects"][0]["depends_on"] = [len(page["objects"]) - 1]
    with pytest.raises(gearbox.BadPage):
        client.load_page(edge.origin, page)
    with pytest.raises(gearbox.BadPage):
        client.load_page(edge.origin, {"objects": "nope"})


def closed_port() -> int:
    """A port nothing listens on (just released)."""
    return free_port()


def test_connect_to_a_closed_port_raises_connect_error_quickly() -> None:
    port = closed_port()
    start = time.monotonic()
    with gearbox.Client(insecure=True, connect_timeout_s=3) as c, pytest.raises(gearbox.ConnectError) as info:
        c.get(f"https://127.0.0.1:{port}/bytes/1")
    assert time.monotonic() - start < 3
    assert info.value.kind == "connect"
    assert isinstance(info.value, gearbox.GearboxError)


def test_quic_to_a_closed_port_fails_within_the_connect_timeout() -> None:
    port = closed_port()
    start = time.monotonic()
    with gearbox.Client(insecure=True, connect_timeout_s=1) as c, pytest.raises(gearbox.GearboxError) as info:
        c.get(f"https://127.0.0.1:{port}/bytes/1", transport="quic")
    assert time.monotonic() - start < 5
    assert info.value.kind in ("timeout", "quic", "connect")


@pytest.mark.parametrize("transport", ["tcp", "h1", "quic"])
def test_an_untrusted_certificate_raises_tls_error(edge: Edge, other_cert: Path, transport: str) -> None:
    with gearbox.Client(ca=other_cert, connect_timeout_s=5) as c, pytest.raises(gearbox.TlsError) as info:
        c.get(f"{edge.origin}/bytes/1", transport=transport)
    assert info.value.kind == "tls"


def test_insecure_accepts_any_certificate(edge: Edge) -> None:
    with gearbox.Client(insecure=True) as c:
        assert len(c.get(f"{edge.origin}/bytes/3", transport="quic").body) == 3


def test_a_silent_server_times_out_and_other_threads_run_meanwhile() -> None:
    """A server that accepts TCP but never answers the TLS handshake: the request waits out
    the connect timeout with the GIL released, so this thread keeps counting."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"https://127.0.0.1:{silent.getsockname()[1]}/bytes/1"
        errors: list[BaseException] = []

        def fetch() -> None:
            with gearbox.Client(insecure=True, connect_timeout_s=1.5) as c:
                try:
                    c.get(url)
                except BaseException as e:  # handed to the main thread
                    errors.append(e)

        worker = threading.Thread(target=fetch)
        start = time.monotonic()
        worker.start()
        time.sleep(0.2)
        count = 0
        while worker.is_alive() and time.monotonic() - start < 10:
            count += 1
        worker.join(timeout=5)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], gearbox.RequestTimeout)
    assert errors[0].kind == "timeout"
    assert 1.0 < time.monotonic() - start < 6
    assert count > 10_000, "the main thread barely ran: the GIL was held during the request"


def test_threads_can_share_a_client(client: gearbox.Client, edge: Edge) -> None:
    results: list[int] = []

    def fetch(n: int) -> None:
        results.append(len(client.get(f"{edge.origin}/bytes/{n}", transport="quic").body))

    threads = [threading.Thread(target=fetch, args=(1000 + i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(results) == [1000 + i for i in range(8)]


def test_records_go_to_the_telemetry_file(edge: Edge, tmp_path: Path) -> None:
    path = tmp_path / "sub" / "client.jsonl"
    with gearbox.Client(ca=edge.cert, telemetry=str(path)) as c:
        r = c.get(f"{edge.origin}/bytes/42", transport="h1")
        c.flush()
        lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [r.record]


def test_a_closed_client_refuses_requests(edge: Edge) -> None:
    c = gearbox.Client(ca=edge.cert)
    assert not c.closed and "open" in repr(c)
    c.close()
    c.close()
    assert c.closed
    with pytest.raises(ValueError, match="closed"):
        c.get(f"{edge.origin}/bytes/1")


def test_bad_urls_raise_bad_url(client: gearbox.Client) -> None:
    for url in ("http://127.0.0.1/x", "not a url", "/relative"):
        with pytest.raises(gearbox.BadUrl) as info:
            client.get(url)
        assert info.value.kind == "bad_url"


def test_a_path_index_the_client_lacks_is_a_config_error(client: gearbox.Client, edge: Edge) -> None:
    with pytest.raises(gearbox.ConfigError):
        client.request("GET", f"{edge.origin}/bytes/1", path_index=3)


def test_unknown_names_raise_value_error_listing_the_valid_ones(client: gearbox.Client, edge: Edge) -> None:
    with pytest.raises(ValueError, match="tcp, h1, quic, auto"):
        client.get(f"{edge.origin}/bytes/1", transport="udp")
    with pytest.raises(ValueError, match="newreno, cubic, bbr"):
        gearbox.Client(insecure=True, quic_cc="vegas")
    with pytest.raises(ValueError, match="reno, cubic, bbr"):
        gearbox.Client(insecure=True, tcp_cc="vegas")
    with pytest.raises(ValueError, match="not an IP"):
        gearbox.Client(insecure=True, local_addrs=["localhost"])
    with pytest.raises(ValueError, match="positive"):
        gearbox.Client(insecure=True, request_timeout_s=0)
    with pytest.raises(ValueError, match="not both"):
        gearbox.Client(insecure=True, ca="x.pem")
    with pytest.raises(ValueError, match="HTTP method"):
        client.request("GE T", f"{edge.origin}/bytes/1")


def test_a_missing_ca_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(gearbox.ConfigError, match="missing.pem"):
        gearbox.Client(ca=[tmp_path / "missing.pem"])
