"""The page kit: seeded static sites whose statistics follow FlexHTTP's measured page set (docs/flexhttp.md).

`generate(out, count, seed)` writes `count` sites and their dependency graphs; `page_features(site)`
computes FlexHTTP's Table 1 page features from a site's files.
"""

from gearbox.pages.features import PageFeatureError, PageFeatures, page_features
from gearbox.pages.generate import GenerateError, generate, generate_one
from gearbox.pages.model import ModelError, PageModel, plan_page

__all__ = [
    "GenerateError",
    "ModelError",
    "PageFeatureError",
    "PageFeatures",
    "PageModel",
    "generate",
    "generate_one",
    "page_features",
    "plan_page",
]
