"""Page features (FlexHTTP §3.5.1, Table 1 "Web Page") computed from a site's files.

FlexHTTP extracts the page's structure after a load: how many files and how many bytes in all, and of
CSS, of JavaScript and of images. Here the same eight numbers come from the files themselves: starting
at the HTML, every reference a browser would follow (`src=` and `href=` attributes, CSS `url(...)` and
`@import`, and quoted paths in scripts) is resolved, the referenced file must exist, and each file
reached is counted once by its type. Files in the directory that nothing references are not part of the
page and are not counted (a browser would not fetch them either).

Rejected alternative: reading the generator's `page.json`. It would only echo the generator; the file
walk also measures sites the generator did not write.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import asdict, dataclass
from pathlib import Path

#: Extensions counted as images, stylesheets and scripts.
IMAGE_EXT = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".avif", ".ico"}
CSS_EXT = {".css"}
JS_EXT = {".js", ".mjs"}
#: Extensions whose content is scanned for further references.
_SCANNED = {".html", ".htm"} | CSS_EXT | JS_EXT

_ATTR = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_URL = re.compile(r"""url\(\s*["']?([^"')\s]+)["']?\s*\)""", re.IGNORECASE)
_QUOTED = re.compile(r"""["']([A-Za-z0-9_./-]+\.[A-Za-z0-9]{2,5})["']""")
_COMMENT = {
    "html": re.compile(r"<!--.*?-->", re.DOTALL),
    "css": re.compile(r"/\*.*?\*/", re.DOTALL),
    "js": re.compile(r"/\*.*?\*/", re.DOTALL),
}


class PageFeatureError(ValueError):
    """A site cannot be measured; the message names the file and, for a broken reference, the line."""


@dataclass(frozen=True)
class PageFeatures:
    """Table 1's page features, with units in the names (bytes; Table 1 prints MB = 10^6 bytes)."""

    all_files: int
    all_bytes: int
    css_files: int
    css_bytes: int
    js_files: int
    js_bytes: int
    image_files: int
    image_bytes: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _kind_of(path: str) -> str:
    ext = posixpath.splitext(path)[1].lower()
    if ext in CSS_EXT:
        return "css"
    if ext in JS_EXT:
        return "js"
    if ext in IMAGE_EXT:
        return "image"
    if ext in {".html", ".htm"}:
        return "html"
    return "other"


def _references(text: str, kind: str) -> list[tuple[str, int]]:
    """(reference, 1-based line) pairs in a file's text, comments blanked first (line numbers kept)."""
    comment = _COMMENT.get(kind)
    if comment is not None:
        text = comment.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found: list[tuple[int, str]] = []
    patterns = [_ATTR, _URL] if kind in ("html", "css") else []
    if kind in ("html", "js"):
        patterns.append(_QUOTED)
    for pattern in patterns:
        for m in pattern.finditer(text):
            found.append((m.start(1), m.group(1)))
    out = []
    seen = set()
    for pos, ref in sorted(found):
        if ref in seen:
            continue
        seen.add(ref)
        out.append((ref, text.count("\n", 0, pos) + 1))
    return out


def _is_local(ref: str) -> bool:
    return not (re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", ref) or ref.startswith("//") or ref.startswith("#"))


def page_features(site: Path, entry: str = "index.html") -> PageFeatures:
    """Walks the site from `entry` and counts every file the page references, by type."""
    root = site / entry
    if not root.is_file():
        raise PageFeatureError(f"{root}: no such file (a site needs its {entry})")
    doc_dir = posixpath.dirname(entry)
    seen: dict[str, int] = {}
    queue = [entry]
    while queue:
        rel = queue.pop()
        if rel in seen:
            continue
        path = site / rel
        data = path.read_bytes()
        seen[rel] = len(data)
        kind = _kind_of(rel)
        if posixpath.splitext(rel)[1].lower() not in _SCANNED:
            continue
        text = data.decode("utf-8", errors="replace")
        # CSS resolves against the stylesheet; HTML and scripts against the document.
        base = posixpath.dirname(rel) if kind == "css" else doc_dir
        for ref, line in _references(text, kind):
            if not _is_local(ref):
                continue
            ref_path = ref.split("?")[0].split("#")[0]
            # As a browser resolves a URL: `..` above the site's root stays at the root.
            target = posixpath.normpath(posixpath.join("/" + base, ref_path)).lstrip("/")
            if not (site / target).is_file():
                raise PageFeatureError(f"{path}:{line}: reference {ref!r} names a missing file ({site / target})")
            if target not in seen:
                queue.append(target)
    counts = {k: [0, 0] for k in ("css", "js", "image")}
    for rel, size in seen.items():
        k = _kind_of(rel)
        if k in counts:
            counts[k][0] += 1
            counts[k][1] += size
    return PageFeatures(
        all_files=len(seen),
        all_bytes=sum(seen.values()),
        css_files=counts["css"][0],
        css_bytes=counts["css"][1],
        js_files=counts["js"][0],
        js_bytes=counts["js"][1],
        image_files=counts["image"][0],
        image_bytes=counts["image"][1],
    )
