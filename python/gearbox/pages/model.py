"""The statistical model of a page: how many objects, of which kinds, how large, discovered from where.

FlexHTTP (§3.5.1, Table 1) describes its page set by eight features: the number and the bytes of all
files, of CSS, of JavaScript and of images. Its repository publishes those features per site for the
front pages it crawled (430 sites; docs/flexhttp.md "Page kit" cites it); the parameters below are
summary statistics fitted to that table, not its data:

* files per page ~ lognormal through the measured median (22) and mean (33.3), clipped to [1, 255]
  (255 is Table 1's and the measurement's maximum);
* which kinds a page has at all ~ independent per-kind presence with the measured fractions of sites
  that have any (CSS 72%, JS 79%, images 87%, text beyond the HTML 64%);
* the kinds of the non-root files ~ multinomial over per-page shares drawn from a Dirichlet over the
  present kinds (so image-heavy pages and script-heavy pages both occur, as measured); its weights
  were calibrated by simulation so that the mean count of each kind equals the measured mean;
* each object's size ~ lognormal per kind: the spread (sigma of log bytes) measured on the sites that
  have exactly one object of that kind, the location solved so that the mean, after clipping to
  `max_object_bytes`, equals the measured bytes per object of that kind.

Rejected alternative: drawing per-kind counts independently (per-kind negative binomials). It gets the
marginal means right but loses the measured fact that a page with many files has many of every kind,
which is what Fig. 2's files-by-size plane is about.

What the measurement does not say — where an object is discovered (HTML, a stylesheet or a script) —
follows the `page` workload's documented assumptions (workloads/page.toml), so that a generated site
and a workload page have the same shape of dependency graph.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, field

#: The kinds of a page's objects, as the `page` workload names them (gearbox_workload::ObjectKind).
KINDS = ("html", "css", "js", "image", "other")

#: RFC 9218 urgency per kind, as in workloads/page.toml (HTML, CSS, JS first; the rest later).
URGENCY = {"html": 0, "css": 0, "js": 1, "image": 5, "other": 3}


class ModelError(ValueError):
    """A page model's parameter is out of its domain; the message names the field."""


@dataclass(frozen=True)
class SizeLaw:
    """A lognormal object size, clipped to [min_bytes, max_bytes]."""

    #: Mean object size in bytes after clipping (the measured bytes per object of the kind).
    mean_bytes: float
    #: Standard deviation of ln(bytes) (the measured spread of single objects of the kind).
    sigma: float
    #: Smallest object the site writer can make valid for the kind (a 1x1 PNG is ~70 bytes).
    min_bytes: int
    #: Largest object drawn.
    max_bytes: int

    @functools.cache  # noqa: B019 (frozen, hashable, few instances)
    def mu(self) -> float:
        """Location of ln(bytes) such that the clipped mean equals `mean_bytes` (bisection)."""
        lo, hi = math.log(max(self.min_bytes, 1)) - 20.0, math.log(self.max_bytes)
        for _ in range(200):
            mid = (lo + hi) / 2
            if _clipped_lognormal_mean(mid, self.sigma, self.min_bytes, self.max_bytes) < self.mean_bytes:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def sample(self, rng: random.Random, mu: float) -> int:
        x = rng.lognormvariate(mu, self.sigma)
        return int(round(min(max(x, self.min_bytes), self.max_bytes)))


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def _clipped_lognormal_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    """E[min(max(X, lo), hi)] for ln X ~ N(mu, sigma^2)."""
    a, b = math.log(lo), math.log(hi)
    body = math.exp(mu + sigma**2 / 2) * (_phi((b - mu - sigma**2) / sigma) - _phi((a - mu - sigma**2) / sigma))
    return lo * _phi((a - mu) / sigma) + body + hi * (1 - _phi((b - mu) / sigma))


@dataclass(frozen=True)
class PageModel:
    """Parameters of generated pages; the defaults are fitted to FlexHTTP's published per-site table."""

    #: Name written into every generated page's metadata.
    name: str = "flexhttp"
    #: Median files per page, HTML included (measured: 22).
    files_median: float = 22.0
    #: Sigma of ln(files per page): sqrt(2 ln(mean / median)) with the measured mean 33.3.
    files_sigma: float = 0.913
    #: Files per page are clipped to this (Table 1's maximum, 255).
    files_max: int = 255
    #: Probability that a page has any object of the kind (measured fraction of sites).
    presence: dict[str, float] = field(
        default_factory=lambda: {"css": 0.723, "js": 0.786, "image": 0.870, "other": 0.637}
    )
    #: Dirichlet weights of the kinds among the present ones. Calibrated by simulation (fixed-point
    #: iterations over 6,000 pages each, starting from the pooled shares of non-root files 0.073,
    #: 0.187, 0.670, 0.070) so that mean counts match the measured means per page: CSS 2.4, JS 6.0,
    #: images 21.7, other text 2.2.
    shares: dict[str, float] = field(
        default_factory=lambda: {"css": 0.045, "js": 0.150, "image": 0.755, "other": 0.050}
    )
    #: Dirichlet concentration of the per-page shares: var(share) = m (1 - m) / (1 + c); chosen so
    #: the spread of the image share between pages is near the measured one (variance 0.079).
    share_concentration: float = 2.2
    #: Object sizes per kind. Means are measured bytes per object (text 39,189; CSS 19,713;
    #: JS 31,421; images 30,595); sigmas from the single-object sites (n = 156, 106, 33, 19).
    sizes: dict[str, SizeLaw] = field(
        default_factory=lambda: {
            "html": SizeLaw(39_189, 1.66, 600, 2_000_000),
            "other": SizeLaw(39_189, 1.66, 40, 2_000_000),
            "css": SizeLaw(19_713, 1.36, 40, 1_000_000),
            "js": SizeLaw(31_421, 2.24, 40, 2_000_000),
            "image": SizeLaw(30_595, 2.55, 100, 10_000_000),
        }
    )
    #: Probability that a stylesheet is @imported by an earlier stylesheet rather than linked from
    #: the HTML (workloads/page.toml `[page.css] from_css`).
    css_from_css: float = 0.1
    #: Probability that a script is inserted by an earlier script (`[page.js] from_js`).
    js_from_js: float = 0.2
    #: Probability that an image is a stylesheet's background (`[page.image] from_css`) ...
    image_from_css: float = 0.2
    #: ... or is inserted by a script (`[page.image] from_js`); otherwise an <img> in the HTML.
    image_from_js: float = 0.1
    #: Probability that an `other` object (JSON) is fetched by a script file rather than by the
    #: HTML's inline script (`[page.other] from_js`).
    other_from_js: float = 0.5

    def validate(self) -> None:
        """Raises ModelError naming the first field out of its domain."""
        if not (self.files_median >= 1 and math.isfinite(self.files_median)):
            raise ModelError(f"files_median must be >= 1, got {self.files_median}")
        if not (self.files_sigma >= 0 and math.isfinite(self.files_sigma)):
            raise ModelError(f"files_sigma must be >= 0, got {self.files_sigma}")
        if self.files_max < 1:
            raise ModelError(f"files_max must be >= 1, got {self.files_max}")
        if set(self.shares) != {"css", "js", "image", "other"}:
            raise ModelError(f"shares must name css, js, image and other, got {sorted(self.shares)}")
        for kind, s in self.shares.items():
            if not (s > 0 and math.isfinite(s)):
                raise ModelError(f"shares.{kind} must be > 0, got {s}")
        if set(self.presence) != {"css", "js", "image", "other"}:
            raise ModelError(f"presence must name css, js, image and other, got {sorted(self.presence)}")
        for kind, p in self.presence.items():
            if not 0 <= p <= 1:
                raise ModelError(f"presence.{kind} must be a probability in [0, 1], got {p}")
        if not (self.share_concentration > 0 and math.isfinite(self.share_concentration)):
            raise ModelError(f"share_concentration must be > 0, got {self.share_concentration}")
        if set(self.sizes) != set(KINDS):
            raise ModelError(f"sizes must name {', '.join(KINDS)}, got {sorted(self.sizes)}")
        for kind, law in self.sizes.items():
            if not (0 < law.min_bytes <= law.mean_bytes <= law.max_bytes):
                raise ModelError(f"sizes.{kind}: need 0 < min_bytes <= mean_bytes <= max_bytes, got {law}")
            if not (law.sigma > 0 and math.isfinite(law.sigma)):
                raise ModelError(f"sizes.{kind}.sigma must be > 0, got {law.sigma}")
        for name in ("css_from_css", "js_from_js", "image_from_css", "image_from_js", "other_from_js"):
            p = getattr(self, name)
            if not 0 <= p <= 1:
                raise ModelError(f"{name} must be a probability in [0, 1], got {p}")
        if self.image_from_css + self.image_from_js > 1:
            raise ModelError("image_from_css + image_from_js must be <= 1")


@dataclass
class PlannedObject:
    """One object of a planned page, before its file is written."""

    id: int
    kind: str
    size_bytes: int
    #: Id of the object whose content references this one (None for the HTML root).
    parent: int | None
    #: How the parent references it: "link", "import", "script", "img", "background", "insert-script",
    #: "insert-img", "fetch" (or "root").
    via: str


@dataclass
class PagePlan:
    """A page's objects in discovery order; objects[0] is the HTML."""

    objects: list[PlannedObject]


def plan_page(model: PageModel, rng: random.Random) -> PagePlan:
    """Draws one page from `model` (validated) with `rng`: counts, kinds, sizes and discovery."""
    files_mu = math.log(model.files_median)
    n = int(round(rng.lognormvariate(files_mu, model.files_sigma)))
    n = min(max(n, 1), model.files_max)
    kinds = [k for k in ("css", "js", "image", "other") if rng.random() < model.presence[k]]
    drawn: list[str] = []
    if n > 1 and kinds:
        total = sum(model.shares[k] for k in kinds)
        gammas = [rng.gammavariate(model.share_concentration * model.shares[k] / total, 1.0) for k in kinds]
        g = sum(gammas)
        weights = [x / g for x in gammas] if g > 0 else [1.0] * len(kinds)
        # Every present kind has at least one object; the rest are shared out by the weights.
        drawn = kinds[: n - 1] + rng.choices(kinds, weights=weights, k=max(0, n - 1 - len(kinds)))
    elif n > 1:
        drawn = ["image"] * (n - 1)
    # Stylesheets and scripts first, as a browser discovers them in the head; then the rest.
    order = {"css": 0, "js": 1, "image": 2, "other": 3}
    drawn.sort(key=lambda k: order[k])
    mus = {k: model.sizes[k].mu() for k in KINDS}
    objects = [PlannedObject(0, "html", model.sizes["html"].sample(rng, mus["html"]), None, "root")]
    css_ids: list[int] = []
    js_ids: list[int] = []
    for kind in drawn:
        oid = len(objects)
        parent, via = 0, ""
        u = rng.random()
        if kind == "css":
            parent, via = (rng.choice(css_ids), "import") if css_ids and u < model.css_from_css else (0, "link")
        elif kind == "js":
            parent, via = (rng.choice(js_ids), "insert-script") if js_ids and u < model.js_from_js else (0, "script")
        elif kind == "image":
            if css_ids and u < model.image_from_css:
                parent, via = rng.choice(css_ids), "background"
            elif js_ids and u < model.image_from_css + model.image_from_js:
                parent, via = rng.choice(js_ids), "insert-img"
            else:
                parent, via = 0, "img"
        else:
            parent, via = (rng.choice(js_ids), "fetch") if js_ids and u < model.other_from_js else (0, "fetch")
        objects.append(PlannedObject(oid, kind, model.sizes[kind].sample(rng, mus[kind]), parent, via))
        if kind == "css":
            css_ids.append(oid)
        elif kind == "js":
            js_ids.append(oid)
    return PagePlan(objects)
