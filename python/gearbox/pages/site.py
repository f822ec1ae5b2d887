"""Writing a planned page as a static site a browser renders, and its dependency graph for our client.

Every object is a real, valid file of exactly its planned size (the HTML and a script that references
many objects can be larger than drawn: the references come first, and the drawn size is a floor):

* HTML: a heading, a paragraph, stylesheets and scripts in the head, <img> elements with their
  intrinsic size in a wrapping grid, <div>s styled by stylesheet backgrounds, and an inline script for
  the JSON it fetches; padded by a comment.
* CSS: @import of further stylesheets, rules for background images (`url(../img/N.png)`), padding
  in a comment.
* JS: waits for the DOM, then inserts <img> and <script> elements and fetches JSON; padding in a
  comment.
* Images: PNG, one colour gradient per image, pixels stored without compression (so the bytes on the
  wire are the pixels), topped up to the exact size by a tEXt chunk.
* Other: JSON.

Padding is random base64 text, so a server that compresses text cannot shrink a page's bytes away.

The site's `page.json` beside it (outside the served directory) is the same graph in the format of
gearbox_workload::Page, which our client's page loader (crates/gearbox-client/src/page.rs) loads.
An object's `depends_on` lists what a browser must have *finished* before it requests the object
(`browser_dependencies`), not only where it is referenced: the page's parser-blocking resources
hold back much of what is discovered after them, and a loader that requests everything once its
referrer arrives competes with the scripts for the path and finishes the page's visible part later
than Chromium does.
"""

from __future__ import annotations

import base64
import json
import random
import struct
import zlib
from pathlib import Path

from gearbox.pages.model import URGENCY, PagePlan, PlannedObject

#: Largest edge of an image as laid out, in CSS pixels (larger images are scaled down in the layout).
LAYOUT_MAX_PX = 240

_DIRS = {"css": "css", "js": "js", "image": "img", "other": "data"}
_EXT = {"css": "css", "js": "js", "image": "png", "other": "json"}


def relative_path(obj: PlannedObject) -> str:
    """The object's path relative to the site's directory."""
    if obj.kind == "html":
        return "index.html"
    return f"{_DIRS[obj.kind]}/{obj.id}.{_EXT[obj.kind]}"


def _padding(rng: random.Random, n: int) -> str:
    if n <= 0:
        return ""
    text = base64.b64encode(rng.randbytes(n)).decode("ascii")[:n]
    # Never close the comment early: '*/' cannot occur in base64, '--' can.
    return text.replace("-", "A")


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png_raw(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    rows = []
    for y in range(height):
        f = 0.55 + 0.45 * (y / max(height - 1, 1))
        px = bytes(int(c * f) for c in rgb)
        rows.append(b"\x00" + px * width)
    return b"".join(rows)


def _png_size(width: int, height: int) -> int:
    raw = height * (1 + 3 * width)
    blocks = max(1, -(-raw // 65535))
    zlen = 2 + 5 * blocks + raw + 4
    return 8 + 25 + 12 + zlen + 12


def png_dimensions(size_bytes: int) -> tuple[int, int]:
    """Width and height of the largest roughly 4:3 image whose stored PNG fits `size_bytes` with room
    for a padding chunk (20 bytes at least), or 1x1."""
    pixels = max(1, (size_bytes - 120) // 3)
    width = max(1, int((pixels * 4 / 3) ** 0.5))
    height = max(1, pixels // width)
    while (width > 1 or height > 1) and size_bytes - _png_size(width, height) < 20:
        if height > 1:
            height -= 1
        else:
            width -= 1
    return width, height


def make_png(size_bytes: int, rgb: tuple[int, int, int]) -> tuple[bytes, int, int]:
    """A valid PNG of exactly `size_bytes` bytes (at least the size of a 1x1 PNG), with its size."""
    width, height = png_dimensions(size_bytes)
    raw = _png_raw(width, height, rgb)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    out = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", zlib.compress(raw, 0))
    gap = size_bytes - len(out) - 12
    if gap >= 20:
        text = b"Comment\x00" + b"x" * (gap - 12 - 8)
        out += _png_chunk(b"tEXt", text)
    return out + _png_chunk(b"IEND", b""), width, height


def _layout_size(width: int, height: int) -> tuple[int, int]:
    scale = min(1.0, LAYOUT_MAX_PX / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def _colour(rng: random.Random) -> tuple[int, int, int]:
    return (rng.randrange(40, 250), rng.randrange(40, 250), rng.randrange(40, 250))


def _pad_to(text: str, size: int, rng: random.Random, open_c: str, close_c: str) -> str:
    """`text` plus a padding comment so that the whole is `size` bytes (never shorter than `text`)."""
    room = size - len(text) - len(open_c) - len(close_c) - 1
    if room < 0:
        return text
    return text + open_c + _padding(rng, room) + close_c + "\n"


def write_site(plan: PagePlan, directory: Path, name: str, seed: int) -> dict:
    """Writes the page's files under `directory` (which must not exist or be empty) and returns the
    page graph (gearbox_workload::Page shape, object paths prefixed with `/<name>/`)."""
    rng = random.Random(f"gearbox-pages-site:{seed}")
    directory.mkdir(parents=True, exist_ok=True)
    for d in _DIRS.values():
        (directory / d).mkdir(exist_ok=True)
    children: dict[int, list[PlannedObject]] = {}
    for o in plan.objects[1:]:
        assert o.parent is not None
        children.setdefault(o.parent, []).append(o)
    images: dict[int, tuple[bytes, int, int]] = {}
    for o in plan.objects:
        if o.kind == "image":
            images[o.id] = make_png(o.size_bytes, _colour(rng))
    written: dict[int, int] = {}

    def write(o: PlannedObject, data: bytes) -> None:
        (directory / relative_path(o)).write_bytes(data)
        written[o.id] = len(data)

    for o in plan.objects:
        kids = children.get(o.id, [])
        if o.kind == "image":
            write(o, images[o.id][0])
        elif o.kind == "other":
            head = json.dumps({"object": o.id, "kind": "gearbox-page-data"})[:-1] + ', "pad": "'
            body = head + _padding(rng, o.size_bytes - len(head) - 3) + '"}\n'
            write(o, body.encode("ascii"))
        elif o.kind == "css":
            lines = [f'@import url("{k.id}.css");' for k in kids if k.via == "import"]
            lines.append(f"/* gearbox page stylesheet {o.id} */")
            lines.append(f".gb-css-{o.id} {{ border-top: 2px solid rgb(90, {o.id % 200}, 160); }}")
            for k in kids:
                if k.via == "background":
                    w, h = _layout_size(images[k.id][1], images[k.id][2])
                    lines.append(
                        f".gb-bg-{k.id} {{ display: inline-block; width: {w}px; height: {h}px; "
                        f"background-image: url(../img/{k.id}.png); background-size: cover; margin: 2px; }}"
                    )
            text = "\n".join(lines) + "\n"
            write(o, _pad_to(text, o.size_bytes, rng, "/*", "*/").encode("ascii"))
        elif o.kind == "js":
            calls = []
            for k in kids:
                if k.via == "insert-img":
                    w, h = _layout_size(images[k.id][1], images[k.id][2])
                    calls.append(f'img("{relative_path(k)}", {w}, {h});')
                elif k.via == "insert-script":
                    calls.append(f'js("{relative_path(k)}");')
                elif k.via == "fetch":
                    calls.append(f'get("{relative_path(k)}");')
            text = (
                f"// gearbox page script {o.id}\n(function () {{\n  var d = document;\n"
                "  function img(src, w, h) { var i = d.createElement('img'); i.src = src; i.width = w; "
                "i.height = h; i.alt = ''; d.getElementById('gb-js').appendChild(i); }\n"
                "  function js(src) { var s = d.createElement('script'); s.src = src; d.head.appendChild(s); }\n"
                "  function get(src) { fetch(src).then(function (r) { return r.text(); }); }\n"
                "  function run() {\n"
                + "".join(f"    {c}\n" for c in calls)
                + f"    window.gearboxScripts = (window.gearboxScripts || 0) + 1; // {o.id}\n"
                "  }\n"
                "  if (d.readyState === 'loading') d.addEventListener('DOMContentLoaded', run); else run();\n"
                "})();\n"
            )
            write(o, _pad_to(text, o.size_bytes, rng, "/*", "*/").encode("ascii"))
        else:
            head = [
                "<!doctype html>",
                '<html><head><meta charset="utf-8">',
                '<meta name="viewport" content="width=device-width, initial-scale=1">',
                f"<title>gearbox page {name}</title>",
                "<style>body { font-family: sans-serif; margin: 8px; background: #fff; } "
                "#gb-grid, #gb-js { display: flex; flex-wrap: wrap; align-items: flex-start; } "
                "#gb-grid img, #gb-js img { margin: 2px; }</style>",
            ]
            for k in kids:
                if k.via == "link":
                    head.append(f'<link rel="stylesheet" href="{relative_path(k)}">')
            for k in kids:
                if k.via == "script":
                    head.append(f'<script src="{relative_path(k)}"></script>')
            body = [
                "</head><body>",
                f"<h1>gearbox page {name}</h1>",
                "<p>A generated page: its objects and sizes follow the measured distributions of "
                "FlexHTTP's page set.</p>",
                '<div id="gb-grid">',
            ]
            for obj in plan.objects:
                if obj.kind == "image" and obj.via == "background":
                    body.append(f'<div class="gb-bg-{obj.id}"></div>')
                elif obj.kind == "image" and obj.via == "img":
                    w, h = _layout_size(images[obj.id][1], images[obj.id][2])
                    body.append(f'<img src="{relative_path(obj)}" width="{w}" height="{h}" alt="">')
            body.append('</div><div id="gb-js"></div>')
            fetches = [f'fetch("{relative_path(k)}");' for k in kids if k.via == "fetch"]
            if fetches:
                body.append("<script>" + " ".join(fetches) + "</script>")
            text = "\n".join(head + body) + "\n"
            tail = "</body></html>\n"
            padded = _pad_to(text, o.size_bytes - len(tail), rng, "<!--", "-->")
            write(o, (padded + tail).encode("ascii"))

    deps = browser_dependencies(plan)
    objects = []
    for o in plan.objects:
        objects.append(
            {
                "id": o.id,
                "path": f"/{name}/{relative_path(o)}",
                "kind": o.kind,
                "size_bytes": written[o.id],
                "priority": URGENCY[o.kind],
                "depends_on": deps[o.id],
            }
        )
    return {"objects": objects}


def browser_dependencies(plan: PagePlan) -> dict[int, list[int]]:
    """What a browser has finished before it requests each object of the site `write_site` makes.

    The head holds every stylesheet (`<link>`) and then every script (`<script src>`, neither
    async nor defer), so (HTML Living Standard, "parsing HTML documents" and "scripting"):

    * Stylesheets, head scripts and the body's `<img>` elements are requested once the HTML
      arrives (the preload scanner finds them while the parser waits); an `@import` once its
      stylesheet arrives.
    * A parser-blocking script runs only after the stylesheets before it have loaded and the
      scripts before it have run, so the parser passes the head only when every stylesheet
      (with its imports) and every head script is complete: the *blocking set*.
    * What comes after that waits for the whole blocking set: the body's inline script (its
      `fetch()` calls), the body's elements that a stylesheet gives a background image, and
      everything a head script does, since its `run()` waits for DOMContentLoaded.
    * A script inserted by another runs as soon as it arrives (the document is past
      `loading` by then), so what it requests waits for it alone.

    Rejected: the referrer alone as the dependency (the graph before this function). In
    Chromium the body's `fetch()` of a page with large data files starts after the head scripts;
    a loader that starts it with them shares the path with them from the first round trip and
    finished the scripts (the page's load event) later than Chromium on lossy slow paths
    (docs/flexhttp.md, "Our loader against Chromium").
    """
    blocking = [o.id for o in plan.objects if o.kind == "css" or o.via == "script"]
    deps: dict[int, list[int]] = {}
    for o in plan.objects:
        if o.parent is None:
            deps[o.id] = []
            continue
        parent = plan.objects[o.parent]  # an object's id is its index in the plan
        after_head = (o.parent == 0 and o.via == "fetch") or o.via == "background" or parent.via == "script"
        deps[o.id] = sorted({o.parent, *blocking}) if after_head else [o.parent]
    return deps
