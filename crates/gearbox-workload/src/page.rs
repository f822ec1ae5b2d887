//! Web pages as dependency graphs of objects.
//!
//! A page load in FlexHTTP (§2 and Table 1) and SAILfish (§5.1.4, Table 5.1) is not a
//! flat list of downloads: the HTML is fetched first, the CSS and JS it references are
//! discovered from it, and some images and fonts are only discovered once a
//! stylesheet or script has arrived. Each object carries a browser-like priority (SAILfish
//! §5.1.4: "Firefox prioritizes on Javascript, HTML, and CSS files, and postpones
//! everything else"), expressed as an RFC 9218 urgency (0 = most urgent, 7 = least).
//!
//! The generator draws a page's file count from a table, the kind of each non-root object
//! in proportion to FlexHTTP Table 1's per-kind file counts, each size from the kind's size
//! table, and each object's parent among the objects of the kind it is discovered from.
//! Objects are numbered in discovery order, so dependencies always point to lower ids.
//!
//! Rejected alternative: replaying the SPDY-era dependency graphs SAILfish trained on.
//! They are not in the papers and cannot be downloaded here; a generator fed by the
//! published averages gives unlimited pages with the same aggregate shape.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::cdf::Cdf;
use crate::spec::{non_negative, FieldProblem, WorkloadError, WorkloadSpec};

/// What an object of a page is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectKind {
    /// The HTML document; the root of the graph.
    Html,
    /// A stylesheet.
    Css,
    /// A script.
    Js,
    /// An image.
    Image,
    /// A web font.
    Font,
    /// Anything else (JSON fetched by scripts, media, ...).
    Other,
}

impl ObjectKind {
    /// All kinds, root first.
    pub const ALL: [ObjectKind; 6] = [
        ObjectKind::Html,
        ObjectKind::Css,
        ObjectKind::Js,
        ObjectKind::Image,
        ObjectKind::Font,
        ObjectKind::Other,
    ];

    /// File extension used in object paths.
    pub fn extension(self) -> &'static str {
        match self {
            ObjectKind::Html => "html",
            ObjectKind::Css => "css",
            ObjectKind::Js => "js",
            ObjectKind::Image => "img",
            ObjectKind::Font => "woff2",
            ObjectKind::Other => "bin",
        }
    }

    /// Objects of these kinds are found while parsing the HTML, so their children may follow.
    fn is_discovered_from_html(self) -> bool {
        matches!(self, ObjectKind::Css | ObjectKind::Js)
    }
}

/// One object of a page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageObject {
    /// Position in [`Page::objects`]; 0 is the HTML root.
    pub id: usize,
    /// Request path, `/bytes/<size_bytes>?object=<id>.<ext>`, served by the synthetic edge.
    pub path: String,
    /// What the object is.
    pub kind: ObjectKind,
    /// Response body size in bytes.
    pub size_bytes: u64,
    /// RFC 9218 urgency, 0 (most urgent) to 7.
    pub priority: u8,
    /// Ids of the objects that must arrive before this one is discovered.
    pub depends_on: Vec<usize>,
}

impl PageObject {
    /// Where the object goes among objects that become ready together, in the order a
    /// browser requests them (SAILfish §5.1.4: HTML, CSS and JS first): RFC 9218
    /// urgency, then HTML, CSS, JS before every other kind, then page order. Smaller
    /// goes first.
    pub fn browser_order(&self) -> (u8, u8, usize) {
        let kind = match self.kind {
            ObjectKind::Html => 0,
            ObjectKind::Css => 1,
            ObjectKind::Js => 2,
            _ => 3,
        };
        (self.priority, kind, self.id)
    }
}

/// A web page: objects and their discovery dependencies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page {
    /// The objects; `objects[i].id == i`, the first is the HTML root.
    pub objects: Vec<PageObject>,
}

/// Why a page's graph is not one a browser could load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// The page has no objects.
    #[error("the page has no objects")]
    Empty,
    /// Object 0 is not HTML, or it depends on something.
    #[error("object 0 must be the HTML root with no dependencies")]
    RootNotHtml,
    /// An object's id does not match its position.
    #[error("object at position {position} has id {id}")]
    IdMismatch {
        /// Position in the list.
        position: usize,
        /// The id it carries.
        id: usize,
    },
    /// A dependency names no object, or the object itself.
    #[error("object {object} depends on {dependency}, which is not another object of the page")]
    BadDependency {
        /// The object.
        object: usize,
        /// The dependency it names.
        dependency: usize,
    },
    /// A non-root object depends on nothing, so the browser could never discover it.
    #[error("object {object} depends on nothing; only the HTML root may")]
    Orphan {
        /// The object.
        object: usize,
    },
    /// A priority is outside RFC 9218's 0..=7.
    #[error("object {object} has priority {priority}; urgencies are 0 to 7")]
    BadPriority {
        /// The object.
        object: usize,
        /// Its priority.
        priority: u8,
    },
    /// The dependencies form a cycle.
    #[error("the dependencies form a cycle through objects {objects:?}")]
    Cycle {
        /// Objects that could not be ordered.
        objects: Vec<usize>,
    },
}

impl Page {
    /// Checks that the graph is loadable: HTML root, ids in order, dependencies on other
    /// existing objects, every non-root object discovered from something, urgencies 0..=7,
    /// no cycles.
    pub fn validate(&self) -> Result<(), PageError> {
        self.topological_order().map(|_| ())
    }

    /// Object ids in an order that respects every dependency (ties broken by lower id),
    /// after the checks of [`Page::validate`].
    pub fn topological_order(&self) -> Result<Vec<usize>, PageError> {
        let root = self.objects.first().ok_or(PageError::Empty)?;
        if root.kind != ObjectKind::Html || !root.depends_on.is_empty() {
            return Err(PageError::RootNotHtml);
        }
        let count = self.objects.len();
        let mut waiting_on = vec![0usize; count];
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); count];
        for (position, object) in self.objects.iter().enumerate() {
            if object.id != position {
                return Err(PageError::IdMismatch {
                    position,
                    id: object.id,
                });
            }
            if object.priority > 7 {
                return Err(PageError::BadPriority {
                    object: position,
                    priority: object.priority,
                });
            }
            if position > 0 && object.depends_on.is_empty() {
                return Err(PageError::Orphan { object: position });
            }
            for &dependency in &object.depends_on {
                if dependency >= count || dependency == position {
                    return Err(PageError::BadDependency {
                        object: position,
                        dependency,
                    });
                }
                waiting_on[position] += 1;
                dependents[dependency].push(position);
            }
        }
        let mut ready: BinaryHeap<Reverse<usize>> = (0..count)
            .filter(|&object| waiting_on[object] == 0)
            .map(Reverse)
            .collect();
        let mut order = Vec::with_capacity(count);
        while let Some(Reverse(object)) = ready.pop() {
            order.push(object);
            for &dependent in &dependents[object] {
                waiting_on[dependent] -= 1;
                if waiting_on[dependent] == 0 {
                    ready.push(Reverse(dependent));
                }
            }
        }
        if order.len() < count {
            let objects = (0..count).filter(|&object| waiting_on[object] > 0).collect();
            return Err(PageError::Cycle { objects });
        }
        Ok(order)
    }

    /// Sum of all object sizes.
    pub fn total_bytes(&self) -> u64 {
        self.objects.iter().map(|object| object.size_bytes).sum()
    }

    /// Number of objects of a kind.
    pub fn count(&self, kind: ObjectKind) -> usize {
        self.objects.iter().filter(|object| object.kind == kind).count()
    }
}

/// How pages are generated (the `[page]` section of a workload file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageSpec {
    /// Objects per page, HTML included; each draw is rounded and at least 1.
    pub files_per_page: Cdf,
    /// Milliseconds from the start of one page load to the start of the next, when a
    /// workload of pages is turned into requests.
    pub think_time_ms: Cdf,
    /// The HTML root (`files_per_page` and discovery shares must be 0).
    pub html: KindSpec,
    /// Stylesheets.
    pub css: KindSpec,
    /// Scripts.
    pub js: KindSpec,
    /// Images.
    pub image: KindSpec,
    /// Web fonts.
    pub font: KindSpec,
    /// Everything else.
    pub other: KindSpec,
}

/// How objects of one kind are drawn (`[page.css]`, `[page.image]`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindSpec {
    /// Mean number of objects of this kind per page; the kinds of non-root objects are
    /// drawn in proportion to these numbers.
    #[serde(default)]
    pub files_per_page: f64,
    /// Object size in bytes.
    pub size_bytes: Cdf,
    /// RFC 9218 urgency, 0 (most urgent) to 7.
    pub urgency: u8,
    /// Probability that an object is discovered from a stylesheet (when the page already
    /// has one) rather than from the HTML.
    #[serde(default)]
    pub from_css: f64,
    /// Probability that an object is discovered from a script (when the page already has
    /// one) rather than from the HTML.
    #[serde(default)]
    pub from_js: f64,
}

impl PageSpec {
    fn kind(&self, kind: ObjectKind) -> &KindSpec {
        match kind {
            ObjectKind::Html => &self.html,
            ObjectKind::Css => &self.css,
            ObjectKind::Js => &self.js,
            ObjectKind::Image => &self.image,
            ObjectKind::Font => &self.font,
            ObjectKind::Other => &self.other,
        }
    }

    pub(crate) fn check(&self) -> Result<(), FieldProblem> {
        non_negative(&self.files_per_page, "page", "files_per_page")?;
        non_negative(&self.think_time_ms, "page", "think_time_ms")?;
        let tables = [
            "page.html",
            "page.css",
            "page.js",
            "page.image",
            "page.font",
            "page.other",
        ];
        for (kind, table) in ObjectKind::ALL.into_iter().zip(tables) {
            let spec = self.kind(kind);
            non_negative(&spec.size_bytes, table, "size_bytes")?;
            if spec.urgency > 7 {
                return Err(FieldProblem::new(table, "urgency", "RFC 9218 urgencies are 0 to 7"));
            }
            if !(spec.files_per_page.is_finite() && spec.files_per_page >= 0.0) {
                return Err(FieldProblem::new(table, "files_per_page", "must be a number >= 0"));
            }
            for (key, share) in [("from_css", spec.from_css), ("from_js", spec.from_js)] {
                if !(0.0..=1.0).contains(&share) {
                    return Err(FieldProblem::new(table, key, "a probability lies in [0, 1]"));
                }
            }
            if spec.from_css + spec.from_js > 1.0 {
                return Err(FieldProblem::new(
                    table,
                    "from_js",
                    "from_css + from_js must not exceed 1",
                ));
            }
            if kind == ObjectKind::Html && (spec.files_per_page != 0.0 || spec.from_css != 0.0 || spec.from_js != 0.0) {
                return Err(FieldProblem::new(
                    table,
                    "files_per_page",
                    "the HTML is the single root: leave files_per_page, from_css and from_js out",
                ));
            }
        }
        let weight: f64 = ObjectKind::ALL[1..]
            .iter()
            .map(|&kind| self.kind(kind).files_per_page)
            .sum();
        if weight <= 0.0 && self.files_per_page.max() >= 1.5 {
            return Err(FieldProblem::new(
                "page.image",
                "files_per_page",
                "some non-HTML kind needs files_per_page > 0",
            ));
        }
        Ok(())
    }

    /// Generates one page; the same seed gives the same page.
    pub fn generate_page(&self, seed: u64) -> Page {
        self.generate_with(&mut ChaCha8Rng::seed_from_u64(seed))
    }

    pub(crate) fn generate_with<R: Rng + ?Sized>(&self, rng: &mut R) -> Page {
        let files = self.files_per_page.sample(rng).round().max(1.0) as usize;
        let sub_kinds = &ObjectKind::ALL[1..];
        let total_weight: f64 = sub_kinds.iter().map(|&kind| self.kind(kind).files_per_page).sum();
        let mut drawn: Vec<ObjectKind> = (1..files)
            .map(|_| {
                let mut u = rng.random::<f64>() * total_weight;
                for &kind in sub_kinds {
                    let weight = self.kind(kind).files_per_page;
                    if u < weight {
                        return kind;
                    }
                    u -= weight;
                }
                // Rounding at the top end of the last bucket.
                sub_kinds
                    .iter()
                    .rev()
                    .copied()
                    .find(|&kind| self.kind(kind).files_per_page > 0.0)
                    .unwrap_or(ObjectKind::Other)
            })
            .collect();
        // Discovery order: the HTML, then the CSS and JS it references (in document order),
        // then everything else, which may hang off those.
        drawn.sort_by_key(|kind| !kind.is_discovered_from_html());

        let mut objects = Vec::with_capacity(files);
        objects.push(self.object(0, ObjectKind::Html, Vec::new(), rng));
        let mut css_ids = Vec::new();
        let mut js_ids = Vec::new();
        for kind in drawn {
            let id = objects.len();
            let spec = self.kind(kind);
            let u: f64 = rng.random();
            let candidates: &[usize] = if u < spec.from_css {
                &css_ids
            } else if u < spec.from_css + spec.from_js {
                &js_ids
            } else {
                &[]
            };
            let parent = if candidates.is_empty() {
                0
            } else {
                candidates[rng.random_range(0..candidates.len())]
            };
            objects.push(self.object(id, kind, vec![parent], rng));
            match kind {
                ObjectKind::Css => css_ids.push(id),
                ObjectKind::Js => js_ids.push(id),
                _ => {}
            }
        }
        Page { objects }
    }

    fn object<R: Rng + ?Sized>(&self, id: usize, kind: ObjectKind, depends_on: Vec<usize>, rng: &mut R) -> PageObject {
        let spec = self.kind(kind);
        let size_bytes = spec.size_bytes.sample(rng).round().max(1.0) as u64;
        PageObject {
            id,
            path: format!("/bytes/{size_bytes}?object={id}.{}", kind.extension()),
            kind,
            size_bytes,
            priority: spec.urgency,
            depends_on,
        }
    }
}

impl WorkloadSpec {
    /// Generates one page of a page workload; the same seed gives the same page.
    pub fn generate_page(&self, seed: u64) -> Result<Page, WorkloadError> {
        match &self.page {
            Some(page) => Ok(page.generate_page(seed)),
            None => Err(WorkloadError::NotAPage {
                name: self.name.clone(),
            }),
        }
    }
}

/// Generates one page from the built-in `page` workload (FlexHTTP Table 1, SAILfish
/// Table 5.1); the same seed gives the same page.
pub fn generate_page(seed: u64) -> Result<Page, WorkloadError> {
    WorkloadSpec::builtin("page")?.generate_page(seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(id: usize, kind: ObjectKind, depends_on: Vec<usize>) -> PageObject {
        PageObject {
            id,
            path: String::new(),
            kind,
            size_bytes: 1,
            priority: 3,
            depends_on,
        }
    }

    #[test]
    fn topological_order_puts_every_object_after_what_it_depends_on() {
        let page = Page {
            objects: vec![
                object(0, ObjectKind::Html, vec![]),
                object(1, ObjectKind::Image, vec![3]),
                object(2, ObjectKind::Js, vec![0]),
                object(3, ObjectKind::Css, vec![0]),
            ],
        };
        assert_eq!(page.topological_order().unwrap(), vec![0, 2, 3, 1]);
    }

    #[test]
    fn cycles_orphans_and_non_html_roots_are_rejected() {
        let cyclic = Page {
            objects: vec![
                object(0, ObjectKind::Html, vec![]),
                object(1, ObjectKind::Js, vec![2]),
                object(2, ObjectKind::Js, vec![1]),
            ],
        };
        assert_eq!(cyclic.validate(), Err(PageError::Cycle { objects: vec![1, 2] }));
        let orphan = Page {
            objects: vec![object(0, ObjectKind::Html, vec![]), object(1, ObjectKind::Css, vec![])],
        };
        assert_eq!(orphan.validate(), Err(PageError::Orphan { object: 1 }));
        let css_root = Page {
            objects: vec![object(0, ObjectKind::Css, vec![])],
        };
        assert_eq!(css_root.validate(), Err(PageError::RootNotHtml));
        let dangling = Page {
            objects: vec![object(0, ObjectKind::Html, vec![]), object(1, ObjectKind::Css, vec![9])],
        };
        assert_eq!(
            dangling.validate(),
            Err(PageError::BadDependency {
                object: 1,
                dependency: 9
            })
        );
        assert_eq!(Page { objects: vec![] }.validate(), Err(PageError::Empty));
    }

    #[test]
    fn html_css_js_go_before_images_of_the_same_urgency() {
        let object = |id, kind| PageObject {
            id,
            path: String::new(),
            kind,
            size_bytes: 1,
            priority: 3,
            depends_on: Vec::new(),
        };
        let order: Vec<_> = [
            object(1, ObjectKind::Image),
            object(2, ObjectKind::Js),
            object(3, ObjectKind::Css),
            object(4, ObjectKind::Html),
        ]
        .iter()
        .map(PageObject::browser_order)
        .collect();
        assert!(order[3] < order[2] && order[2] < order[1] && order[1] < order[0]);
        let mut urgent = object(5, ObjectKind::Image);
        urgent.priority = 0;
        assert!(urgent.browser_order() < order[3]);
    }
}
