"""The page kit: seeded sites, their statistics against the measured page set, their features, bad input,
and our client loading a generated page's graph from a real edge serving the site."""

from __future__ import annotations

import json
import os
import random
import statistics
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from support import Edge, running_edge

import gearbox
from gearbox.pages import GenerateError, ModelError, PageFeatureError, PageModel, generate, page_features, plan_page
from gearbox.pages.__main__ import main as pages_main
from gearbox.pages.model import PagePlan, PlannedObject
from gearbox.pages.site import browser_dependencies, make_png


def tree_digest(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_same_seed_writes_the_same_sites_and_another_seed_does_not(tmp_path: Path) -> None:
    generate(tmp_path / "a", 4, seed=3)
    generate(tmp_path / "b", 4, seed=3)
    generate(tmp_path / "c", 4, seed=4)
    a, b, c = (tree_digest(tmp_path / d) for d in "abc")
    assert a == b
    assert a != c


def test_many_pages_follow_the_measured_page_set() -> None:
    """Over 4,000 planned pages, counts and bytes per kind match the fitted targets: the means of the
    measured page set (FlexHTTP's per-site table) and, within its spread, Table 1."""
    model = PageModel()
    rng = random.Random(2024)
    pages = [plan_page(model, rng) for _ in range(4000)]

    def per_page(kind: str | None, what: str) -> list[float]:
        out = []
        for p in pages:
            objs = [o for o in p.objects if kind is None or o.kind == kind]
            out.append(len(objs) if what == "files" else sum(o.size_bytes for o in objs))
        return out

    files = per_page(None, "files")
    # Measured: mean 33.3, median 22, max 255 (Table 1: mean 36.06, max 255).
    assert 30 <= statistics.fmean(files) <= 37
    assert 19 <= statistics.median(files) <= 25
    assert max(files) <= 255 and min(files) >= 1
    for kind, mean_files, zero_share in (("css", 2.4, 0.277), ("js", 6.0, 0.214), ("image", 21.7, 0.130)):
        counts = per_page(kind, "files")
        assert statistics.fmean(counts) == pytest.approx(mean_files, rel=0.12), kind
        assert sum(1 for c in counts if c == 0) / len(counts) == pytest.approx(zero_share, abs=0.04), kind
    # Bytes are heavy-tailed: means within 25 %, medians within a factor of two of the measured ones.
    for kind, mean_bytes, median_bytes in (
        (None, 1_027_000, 556_000),
        ("css", 46_500, 26_500),
        ("js", 190_000, 107_000),
        ("image", 663_000, 150_000),
    ):
        b = per_page(kind, "bytes")
        assert statistics.fmean(b) == pytest.approx(mean_bytes, rel=0.25), kind
        if kind in (None, "image"):
            assert median_bytes / 2 <= statistics.median(b) <= median_bytes * 2, kind
    # Table 1's mean page weight (1.08 MB) is within the same tolerance.
    assert statistics.fmean(per_page(None, "bytes")) == pytest.approx(1_080_000, rel=0.25)


def test_written_files_have_the_planned_sizes_and_features_match_the_graph(tmp_path: Path) -> None:
    entries = generate(tmp_path, 6, seed=11)
    for e in entries:
        graph = json.loads((tmp_path / f"{e['name']}.page.json").read_text())
        objs = graph["objects"]
        assert objs[0]["kind"] == "html" and objs[0]["depends_on"] == []
        for o in objs:
            path = tmp_path / o["path"].lstrip("/")
            assert path.stat().st_size == o["size_bytes"]
            assert o["id"] not in o["depends_on"] and all(0 <= d < len(objs) for d in o["depends_on"])
        f = page_features(tmp_path / e["name"])
        assert f.all_files == len(objs)
        assert f.all_bytes == sum(o["size_bytes"] for o in objs)
        for kind in ("css", "js", "image"):
            mine = [o for o in objs if o["kind"] == kind]
            assert getattr(f, f"{kind}_files") == len(mine)
            assert getattr(f, f"{kind}_bytes") == sum(o["size_bytes"] for o in mine)
        assert e["features"] == f.as_dict()


def test_what_a_browser_requests_after_the_head_waits_for_every_stylesheet_and_head_script() -> None:
    # (kind, referrer, how the referrer references it) of objects 0..12.
    drawn = [("html", None, "root"), ("css", 0, "link"), ("css", 1, "import"), ("js", 0, "script")]
    drawn += [("js", 0, "script"), ("js", 3, "insert-script"), ("image", 0, "img"), ("image", 2, "background")]
    drawn += [("image", 4, "insert-img"), ("image", 5, "insert-img"), ("other", 0, "fetch"), ("other", 3, "fetch")]
    drawn += [("other", 5, "fetch")]
    plan = PagePlan([PlannedObject(i, kind, 900, parent, via) for i, (kind, parent, via) in enumerate(drawn)])
    deps = browser_dependencies(plan)
    blocking = [1, 2, 3, 4]
    # Found while the parser waits (the preload scanner) or in the stylesheet that imports it.
    assert deps[0] == [] and deps[1] == [0] and deps[2] == [1] and deps[3] == [0] and deps[6] == [0]
    # After the head: the body's inline fetch, a background's element, what a head script does.
    assert deps[10] == [0, *blocking]
    assert deps[7] == blocking
    assert deps[5] == blocking and deps[8] == blocking and deps[11] == blocking
    # An inserted script runs as soon as it arrives.
    assert deps[9] == [5] and deps[12] == [5]


def test_generated_images_are_valid_pngs_of_the_exact_size() -> None:
    for size in (100, 101, 500, 4_000, 65_600, 300_001):
        data, width, height = make_png(size, (10, 200, 30))
        assert len(data) == size
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        w, h = struct.unpack(">II", data[16:24])
        assert (w, h) == (width, height)
        # Walk the chunks: every CRC is right, IDAT inflates to h rows of 1 + 3w bytes.
        pos, idat = 8, b""
        while pos < len(data):
            (length,) = struct.unpack(">I", data[pos : pos + 4])
            kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
            (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
            assert crc == zlib.crc32(kind + body)
            if kind == b"IDAT":
                idat += body
            pos += 12 + length
        assert len(zlib.decompress(idat)) == height * (1 + 3 * width)


def test_features_of_a_hand_written_site_count_only_what_the_page_references(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "a").mkdir(parents=True)
    (site / "index.html").write_text(
        '<link rel="stylesheet" href="a/s.css"><script src="m.js"></script>\n<img src="x.png"><a href="#top">t</a>'
        '<img src="https://example.org/far.png"><!-- <img src="commented.png"> -->'
    )
    (site / "a" / "s.css").write_text("body { background: url(../y.png); }")
    (site / "m.js").write_text('var u = "data/z.json"; fetch(u);')
    (site / "data").mkdir()
    (site / "data" / "z.json").write_text("{}")
    for name, size in (("x.png", 10), ("y.png", 20), ("unused.png", 1000)):
        (site / name).write_bytes(b"p" * size)
    f = page_features(site)
    assert (f.all_files, f.css_files, f.js_files, f.image_files) == (6, 1, 1, 2)
    assert f.image_bytes == 30


def test_a_broken_reference_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text('<html>\n<body>\n<img src="gone.png">\n</body></html>')
    with pytest.raises(PageFeatureError, match=r"index\.html:3: reference 'gone\.png' names a missing file"):
        page_features(site)
    with pytest.raises(PageFeatureError, match="no such file"):
        page_features(tmp_path / "nothing")
    # `..` above the root stays at the root, as in a browser: never a file outside the site.
    (site / "index.html").write_text('<img src="../../etc/passwd">')
    with pytest.raises(PageFeatureError, match=r"site/etc/passwd\)"):
        page_features(site)


def test_bad_arguments_are_refused_with_the_argument_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(GenerateError, match="count"):
        generate(tmp_path / "x", 0, seed=1)
    with pytest.raises(GenerateError, match="seed"):
        generate(tmp_path / "x", 1, seed=-1)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(GenerateError, match="not empty"):
        generate(tmp_path / "full", 1, seed=1)
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    with pytest.raises(ModelError, match="files_median"):
        generate(tmp_path / "y", 1, seed=1, model=replace(PageModel(), files_median=0))
    with pytest.raises(ModelError, match=r"presence\.js"):
        PageModel(presence={"css": 0.5, "js": 1.5, "image": 0.5, "other": 0.5}).validate()
    assert pages_main(["gen", "--out", str(tmp_path / "full"), "--count", "1"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert pages_main(["stats", str(tmp_path)]) == 2
    assert "pages.json: no such file" in capsys.readouterr().err


def test_the_gearbox_command_runs_the_kit(gearbox_bin: Path, tmp_path: Path) -> None:
    env = {**os.environ, "GEARBOX_PYTHON": sys.executable}
    out = subprocess.run(
        [str(gearbox_bin), "pages", "gen", "--out", str(tmp_path / "s"), "--count", "2", "--seed", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert "wrote 2 pages" in out.stdout and "all_files" in out.stdout
    feats = subprocess.run(
        [str(gearbox_bin), "pages", "features", str(tmp_path / "s" / "page-0001")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert feats.returncode == 0, feats.stderr
    assert json.loads(feats.stdout) == page_features(tmp_path / "s" / "page-0001").as_dict()


@pytest.fixture(scope="module")
def site_edge(gearbox_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Edge, Path]]:
    directory = tmp_path_factory.mktemp("pages-edge")
    sites = directory / "sites"
    generate(sites, 3, seed=21)
    with running_edge(gearbox_bin, directory, ["--static-dir", str(sites)]) as edge:
        yield edge, sites


@pytest.mark.parametrize("transport", ["tcp", "quic"])
def test_our_client_loads_a_generated_site_as_its_dependency_graph(
    site_edge: tuple[Edge, Path], transport: str
) -> None:
    edge, sites = site_edge
    with gearbox.Client(ca=edge.cert, connect_timeout_s=5, request_timeout_s=60) as client:
        for name in ("page-0000", "page-0001", "page-0002"):
            graph = json.loads((sites / f"{name}.page.json").read_text())
            load = client.load_page(edge.origin, graph, transport=transport)
            assert all(o["status"] == 200 for o in load["objects"]), name
            for obj, spec in zip(load["objects"], graph["objects"], strict=True):
                assert obj["record"]["bytes"] == spec["size_bytes"]
                for dep in spec["depends_on"]:
                    assert obj["started_ms"] >= load["objects"][dep]["completed_ms"]
            # The load event waits for everything but the data the scripts fetch.
            delaying = [
                o["completed_ms"]
                for o, spec in zip(load["objects"], graph["objects"], strict=True)
                if spec["kind"] != "other"
            ]
            assert load["load_event_ms"] == max(delaying) <= load["page_load_ms"]
