"""Speed Index in real Chromium under the pinned Lighthouse, checked on pages whose visual progress the
test controls, over HTTP/2 and HTTP/3 to a real edge on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import Edge, running_edge

from gearbox.pages import generate, page_features
from gearbox.pages.chromium import (
    BrowserError,
    BrowserLoad,
    Condition,
    chrome_flags,
    lighthouse_cli,
    measure_load,
    measure_loads_speedline,
)

#: A white page with a line of text (Lighthouse needs a contentful paint) whose whole viewport turns
#: red after DELAY ms: visual completeness jumps from ~0 to 1 at DELAY, so Speed Index is about DELAY.
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>progress</title>
<style>html, body {{ margin: 0; height: 100%; background: #fff; }}
#cover {{ position: fixed; inset: 0; background: #fff; }}</style></head>
<body><div id="cover"></div><p style="position: relative; margin: 4px; font-size: 12px">gearbox</p>
<script>setTimeout(function () {{ document.getElementById('cover').style.background = 'rgb(200, 30, 30)'; }}, {delay});
</script></body></html>
"""


@pytest.fixture(scope="module")
def progress_edge(gearbox_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    lighthouse_cli()  # fails (not skips) with how to install it
    directory = tmp_path_factory.mktemp("progress")
    site = directory / "site"
    site.mkdir()
    for delay in (300, 2300):
        (site / f"delay-{delay}.html").write_text(PAGE.format(delay=delay))
    with running_edge(gearbox_bin, directory, ["--static-dir", str(site)], host="localhost") as edge:
        yield edge


def measured(edge: Edge, meter: str, http_version: str) -> dict[int, BrowserLoad]:
    urls = {delay: f"{edge.origin}/delay-{delay}.html" for delay in (300, 2300)}
    if meter == "lighthouse":
        return {
            d: measure_load(u, address="127.0.0.1", cert_pem=edge.cert, http_version=http_version)
            for d, u in urls.items()
        }
    # The change comes after the load event: the settle window must cover it.
    loads = measure_loads_speedline(
        list(urls.values()), address="127.0.0.1", cert_pem=edge.cert, http_version=http_version, settle_ms=3000
    )
    for x in loads:
        if isinstance(x, BrowserError):
            raise x
    return dict(zip(urls, loads, strict=True))  # type: ignore[arg-type]


# Lighthouse over HTTP/3 only: Lighthouse gets the same Chromium flags as the speedline
# runs (`chrome_flags`), whose HTTP/2 case (`--disable-quic`) speedline checks here and
# the flags test below; a Lighthouse run costs ~40 s of CI's 30 minutes.
@pytest.mark.parametrize(("http_version", "meter"), [("h3", "lighthouse"), ("h2", "speedline"), ("h3", "speedline")])
def test_speed_index_follows_when_the_page_becomes_visually_complete(
    progress_edge: Edge, http_version: str, meter: str
) -> None:
    si = {}
    for delay, load in measured(progress_edge, meter, http_version).items():
        # Every request went over the version asked for: nothing fell back.
        assert set(load.protocols) == {http_version}, load
        # The viewport is incomplete until the cover turns red: SI cannot be earlier than that.
        assert load.speed_index_ms >= delay, load
        si[delay] = load.speed_index_ms
    # The only difference between the two pages is 2 s of delay; SI moves by that much (one frame of slack
    # either way per page at Lighthouse's screenshot rate, plus scheduling on a loaded machine).
    assert si[2300] - si[300] == pytest.approx(2000, abs=400), si


def test_bad_measurement_requests_are_refused() -> None:
    with pytest.raises(BrowserError, match="http_version"):
        chrome_flags("localhost", 443, "127.0.0.1", "x", "h1")
    with pytest.raises(BrowserError, match="url must be"):
        measure_load("http://localhost/", address="127.0.0.1", cert_pem=Path("c.pem"), http_version="h2")
    with pytest.raises(BrowserError, match="one batch is one origin"):
        measure_loads_speedline(
            ["https://a.test:1/x", "https://b.test:1/y"], address="127.0.0.1", cert_pem=Path("c.pem"), http_version="h2"
        )
    with pytest.raises(BrowserError, match="loss_rate"):
        Condition(rtt_ms=50, loss_rate=1.5, rate_mbps=5).validate()
    assert "loss_rate = 0.01" in Condition(rtt_ms=50, loss_rate=0.01, rate_mbps=5).emu_toml()


def test_h3_flags_force_quic_to_the_origin_and_h2_flags_disable_it() -> None:
    h3 = chrome_flags("gearbox.test", 4433, "10.0.0.1", "abc=", "h3")
    assert "--origin-to-force-quic-on=gearbox.test:4433" in h3
    assert "--ignore-certificate-errors-spki-list=abc=" in h3
    assert h3[0] == "--host-resolver-rules=MAP gearbox.test 10.0.0.1"
    assert "--disable-quic" in chrome_flags("gearbox.test", 4433, "10.0.0.1", "abc=", "h2")


@pytest.fixture(scope="module")
def generated_edge(gearbox_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Edge, Path]]:
    directory = tmp_path_factory.mktemp("generated")
    sites = directory / "sites"
    generate(sites, 2, seed=5)
    with running_edge(gearbox_bin, directory, ["--static-dir", str(sites)], host="localhost") as edge:
        yield edge, sites


@pytest.mark.parametrize("http_version", ["h2", "h3"])
def test_chromium_loads_and_paints_every_object_of_a_generated_page(
    generated_edge: tuple[Edge, Path], http_version: str
) -> None:
    edge, sites = generated_edge
    names = ["page-0000", "page-0001"]
    loads = measure_loads_speedline(
        [f"{edge.origin}/{n}/index.html" for n in names],
        address="127.0.0.1",
        cert_pem=edge.cert,
        http_version=http_version,
    )
    for name, load in zip(names, loads, strict=True):
        assert isinstance(load, BrowserLoad), load
        graph = json.loads((sites / f"{name}.page.json").read_text())
        # Every object of the page was fetched, each once, all over the version asked for (besides
        # them, at most the browser's own favicon request).
        expected = sorted(o["path"] for o in graph["objects"])
        assert sorted(p for p in load.paths if p != "/favicon.ico") == expected, name
        assert set(load.protocols) == {http_version}, load
        assert load.transfer_bytes >= page_features(sites / name).all_bytes
        # SI cannot come before the first paint; FCP is the page's own timing and SI the trace's
        # screenshots, so allow a frame (~17 ms) and clock granularity between them.
        assert load.fcp_ms > 0
        assert load.speed_index_ms >= load.fcp_ms - 50, load


def test_chromium_own_choice_is_http2_first_then_http3_after_alt_svc(generated_edge: tuple[Edge, Path]) -> None:
    # FlexHTTP §4's "Chromium" baseline: QUIC enabled, not forced. The first visit by a new profile
    # knows nothing of the origin: its document comes over HTTP/2, whose Alt-Svc header Chromium
    # remembers; it may move the page's later requests to HTTP/3 once its QUIC connection is up (it
    # did so on loopback in CI). The next visit (a new browser on that profile, no connection left
    # open) uses HTTP/3, the self-signed certificate accepted as `chrome_flags` arranges: without
    # that, every QUIC attempt failed and both visits were HTTP/2 only.
    edge, sites = generated_edge
    url = f"{edge.origin}/page-0000/index.html"
    first, later = measure_loads_speedline(
        [url], address="127.0.0.1", cert_pem=edge.cert, http_version="chromium", visits=2
    )
    assert isinstance(first, BrowserLoad) and isinstance(later, BrowserLoad), (first, later)
    assert (first.visit, later.visit) == (0, 1)
    assert first.document_protocol == "h2", first
    assert "h3" in later.protocols, later
    # The cache is off: the later visit fetched every object again.
    expected = sorted(o["path"] for o in json.loads((sites / "page-0000.page.json").read_text())["objects"])
    assert sorted(p for p in later.paths if p != "/favicon.ico") == expected


def test_chromium_own_choice_flags_leave_the_origin_to_chromium() -> None:
    flags = chrome_flags("gearbox.test", 4433, "10.0.0.1", "abc=", "chromium")
    # QUIC is on; forcing it on an unused port of the host only lets its self-signed certificate pass.
    assert "--enable-quic" in flags and "--disable-quic" not in flags
    assert [f for f in flags if f.startswith("--origin-to-force-quic-on")] == [
        "--origin-to-force-quic-on=gearbox.test:9"
    ]
    with pytest.raises(BrowserError, match="speedline meter"):
        measure_load("https://gearbox.test:4433/", address="127.0.0.1", cert_pem=Path("c.pem"), http_version="chromium")


def test_peer_servers_serve_h2_only(tmp_path: Path) -> None:
    from gearbox.pages.chromium import measure_over_emu
    from gearbox.pages.peers import peer_command

    cmd = peer_command(
        "nginx", tmp_path / "w", tmp_path / "sites", tmp_path / "c.pem", tmp_path / "k.pem", "10.0.0.1:4433"
    )
    assert cmd.startswith("exec nginx -c ")
    conf = (tmp_path / "w" / "nginx.conf").read_text()
    assert "listen 10.0.0.1:4433 ssl http2;" in conf and "ssl_protocols TLSv1.3;" in conf
    assert "caddy run" in peer_command(
        "caddy", tmp_path / "c", tmp_path, tmp_path / "c", tmp_path / "k", "10.0.0.1:4433"
    )
    # Any host name on the port: Chromium asks for gearbox.test, not the address.
    assert "https://:4433 {\n  bind 10.0.0.1\n" in (tmp_path / "c" / "Caddyfile").read_text()
    with pytest.raises(ValueError, match="peer must be one of nginx, caddy"):
        peer_command("apache", tmp_path, tmp_path, tmp_path, tmp_path, "a:1")
    cond = Condition(rtt_ms=50, loss_rate=0.0, rate_mbps=5)
    with pytest.raises(BrowserError, match="nginx is measured over h2 only"):
        measure_over_emu(
            Path("gearbox"), tmp_path, [], cond, ["h2", "h3"], 1, tmp_path / "o.jsonl", tmp_path, server="nginx"
        )
    with pytest.raises(BrowserError, match="server must be edge or one of"):
        measure_over_emu(Path("gearbox"), tmp_path, [], cond, ["h2"], 1, tmp_path / "o.jsonl", tmp_path, server="iis")
