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
//! table, and each object's parent (its referrer) among the objects of the kind it is
//! discovered from. Objects are numbered in discovery order, so every parent has a lower id.
//!
//! An object depends on what a browser has finished before it requests the object
//! ([`Dependencies::Browser`], the default), not on its referrer alone: the loaders (the
//! client's page load, the simulator's) request an object the moment its dependencies are
//! complete, so the graph is the request order. The rule is the page kit's
//! (`gearbox.pages.site.browser_dependencies`, python/gearbox/pages/site.py), read onto
//! this generator's objects, which have a referrer but no place in a document: stylesheets
//! and scripts found in the HTML are taken to be in its head, the scripts neither `async`
//! nor `defer`, as the page kit writes its sites.
//!
//! - Requested once the referrer is complete: what the HTML references (stylesheets, head
//!   scripts, `<img>` images, preloaded fonts; the preload scanner finds them while the
//!   parser waits), a stylesheet's `@import`, and whatever a script inserted by another
//!   script requests (such a script runs as soon as it arrives).
//! - A parser-blocking script runs only once the stylesheets before it have loaded and the
//!   scripts before it have run, so the parser leaves the head only when every stylesheet
//!   reached from the HTML (with its imports) and every head script is complete: the
//!   *blocking set*. What comes after the head also waits for the whole blocking set: data
//!   the HTML's body fetches ([`ObjectKind::Other`] from the HTML, an inline `fetch()`),
//!   what a blocking stylesheet references other than imports (background images, fonts:
//!   the body's elements that use them are parsed after the head), and everything a head
//!   script requests (its work waits for DOMContentLoaded).
//!
//! Such an object depends on its referrer and the blocking set. A script inserted by a head
//! script is then discovered after every head stylesheet and script, so when the draw put
//! it before one of them the objects are renumbered in dependency order (ties by the drawn
//! order; nothing moves in a page without such a script), and every dependency still has a
//! lower id. [`Dependencies::Referrer`] keeps the graph of before this rule (each object on
//! its referrer only) for reproducing figures measured with it. Rejected: the referrer alone
//! as the default; a loader following it starts a body's data fetches and a script's
//! insertions beside the head's stylesheets and scripts, which a browser does not, and on
//! slow lossy paths it shared the path with them and finished the head later than
//! Chromium (docs/flexhttp.md, "Our loader against Chromium").
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

/// What a generated object depends on (`dependencies` in `[page]`; module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dependencies {
    /// What a browser has finished before it requests the object: its referrer, and for
    /// what comes after the head also every head stylesheet and head script.
    #[default]
    Browser,
    /// Its referrer alone (the generator's graph before [`Dependencies::Browser`]).
    Referrer,
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
    /// What an object depends on (default: [`Dependencies::Browser`]).
    #[serde(default)]
    pub dependencies: Dependencies,
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
        if self.dependencies == Dependencies::Browser {
            browser_dependencies(&mut objects);
            objects = renumbered_in_dependency_order(objects);
        }
        Page { objects }
    }

    fn object<R: Rng + ?Sized>(&self, id: usize, kind: ObjectKind, depends_on: Vec<usize>, rng: &mut R) -> PageObject {
        let spec = self.kind(kind);
        let size_bytes = spec.size_bytes.sample(rng).round().max(1.0) as u64;
        PageObject {
            id,
            path: object_path(id, kind, size_bytes),
            kind,
            size_bytes,
            priority: spec.urgency,
            depends_on,
        }
    }
}

/// The request path of a generated object.
fn object_path(id: usize, kind: ObjectKind, size_bytes: u64) -> String {
    format!("/bytes/{size_bytes}?object={id}.{}", kind.extension())
}

/// `objects` renumbered in [`Page::topological_order`] (ties by id), their dependencies and
/// paths rewritten to the new ids, so every dependency has a lower id. Objects already in
/// such an order keep their ids; a graph that has no order is left as it is.
fn renumbered_in_dependency_order(objects: Vec<PageObject>) -> Vec<PageObject> {
    let page = Page { objects };
    let Ok(order) = page.topological_order() else {
        return page.objects;
    };
    if order.iter().enumerate().all(|(position, &id)| position == id) {
        return page.objects;
    }
    let mut new_id = vec![0; order.len()];
    for (position, &id) in order.iter().enumerate() {
        new_id[id] = position;
    }
    order
        .iter()
        .enumerate()
        .map(|(id, &old)| {
            let o = &page.objects[old];
            let mut depends_on: Vec<usize> = o.depends_on.iter().map(|&d| new_id[d]).collect();
            depends_on.sort_unstable();
            PageObject {
                id,
                path: object_path(id, o.kind, o.size_bytes),
                kind: o.kind,
                size_bytes: o.size_bytes,
                priority: o.priority,
                depends_on,
            }
        })
        .collect()
}

/// Rewrites the dependencies of `objects`, each depending on its referrer alone (its one
/// entry of `depends_on`, with a lower id), into what a browser has finished before it
/// requests the object ([`Dependencies::Browser`]; the rule in the module documentation).
fn browser_dependencies(objects: &mut [PageObject]) {
    let parent = |o: &PageObject| o.depends_on.first().copied();
    // The blocking set, in id order (a parent's membership is known before its children's).
    let mut blocking = vec![false; objects.len()];
    for o in objects.iter() {
        blocking[o.id] = match (o.kind, parent(o)) {
            (ObjectKind::Js, Some(0)) => true,
            (ObjectKind::Css, Some(p)) => p == 0 || (blocking[p] && objects[p].kind == ObjectKind::Css),
            _ => false,
        };
    }
    let blocking_ids: Vec<usize> = (0..objects.len()).filter(|&id| blocking[id]).collect();
    let after_head: Vec<bool> = objects
        .iter()
        .map(|o| match parent(o) {
            None => false,
            Some(0) => o.kind == ObjectKind::Other,
            Some(p) => match objects[p].kind {
                ObjectKind::Css => blocking[p] && o.kind != ObjectKind::Css,
                ObjectKind::Js => blocking[p],
                _ => false,
            },
        })
        .collect();
    for o in objects.iter_mut() {
        if let (true, Some(p)) = (after_head[o.id], o.depends_on.first().copied()) {
            let mut deps: Vec<usize> = blocking_ids.iter().copied().chain([p]).collect();
            deps.sort_unstable();
            deps.dedup();
            o.depends_on = deps;
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
    fn what_comes_after_the_head_waits_for_every_head_stylesheet_and_script() {
        use ObjectKind::*;
        // Each object on its referrer, as the generator draws them.
        let referrers = [
            (Html, None),
            (Css, Some(0)),    // 1: <link> in the head
            (Css, Some(1)),    // 2: @import of 1
            (Js, Some(0)),     // 3: head script
            (Js, Some(3)),     // 4: inserted by head script 3
            (Js, Some(0)),     // 5: head script, after 4 in id order
            (Image, Some(0)),  // 6: <img>
            (Image, Some(2)),  // 7: background image of the imported stylesheet
            (Font, Some(1)),   // 8: font of stylesheet 1
            (Other, Some(0)),  // 9: the body's inline fetch()
            (Other, Some(4)),  // 10: fetched by inserted script 4
            (Image, Some(3)),  // 11: inserted by head script 3
            (Css, Some(3)),    // 12: stylesheet inserted by head script 3
            (Image, Some(12)), // 13: background image of that stylesheet
            (Font, Some(0)),   // 14: preloaded by the HTML
        ];
        let mut objects: Vec<PageObject> = referrers
            .iter()
            .enumerate()
            .map(|(id, &(kind, parent))| object(id, kind, parent.into_iter().collect()))
            .collect();
        browser_dependencies(&mut objects);
        let deps: Vec<Vec<usize>> = objects.iter().map(|o| o.depends_on.clone()).collect();
        let head = vec![1, 2, 3, 5];
        let expected: Vec<Vec<usize>> = vec![
            vec![],
            vec![0],
            vec![1],
            vec![0],
            head.clone(), // runs after DOMContentLoaded: the head, its inserter 3 among it
            vec![0],
            vec![0],
            head.clone(),
            head.clone(),
            vec![0, 1, 2, 3, 5],
            vec![4],
            head.clone(),
            head.clone(),
            vec![12],
            vec![0],
        ];
        assert_eq!(deps, expected);
        // Script 4 waits for head script 5, so it is discovered after it: renumbered, the
        // two swap and every dependency has a lower id.
        let renumbered = renumbered_in_dependency_order(objects);
        let kinds: Vec<(usize, ObjectKind)> = renumbered.iter().map(|o| (o.id, o.kind)).collect();
        assert_eq!(&kinds[3..6], &[(3, Js), (4, Js), (5, Js)]);
        assert_eq!(renumbered[4].depends_on, vec![0], "old 5, a head script");
        assert_eq!(renumbered[5].depends_on, vec![1, 2, 3, 4], "old 4, after the head");
        assert_eq!(renumbered[10].depends_on, vec![5], "fetched by old 4");
        assert_eq!(renumbered[9].depends_on, vec![0, 1, 2, 3, 4]);
        assert_eq!(renumbered[5].path, "/bytes/1?object=5.js");
        assert!(renumbered.iter().all(|o| o.depends_on.iter().all(|&d| d < o.id)));
        Page { objects: renumbered }.validate().unwrap();
    }

    #[test]
    fn browser_dependencies_change_only_the_graph_of_a_generated_page() {
        let browser = WorkloadSpec::builtin("page").unwrap().page.unwrap();
        assert_eq!(browser.dependencies, Dependencies::Browser, "the built-in default");
        let referrer = PageSpec {
            dependencies: Dependencies::Referrer,
            ..browser.clone()
        };
        let (mut widened, mut renumbered) = (0, 0);
        for seed in 0..300 {
            let (b, r) = (browser.generate_page(seed), referrer.generate_page(seed));
            b.validate().unwrap_or_else(|e| panic!("page {seed}: {e}"));
            // The same objects (kind, size, urgency), each dependency on a lower id.
            let drawn = |p: &Page| {
                let mut v: Vec<_> = p.objects.iter().map(|o| (o.kind, o.size_bytes, o.priority)).collect();
                v.sort_unstable();
                v
            };
            assert_eq!(drawn(&b), drawn(&r), "page {seed}");
            for o in &b.objects {
                assert!(o.depends_on.iter().all(|&d| d < o.id), "page {seed}: {o:?}");
                assert_eq!(o.path, object_path(o.id, o.kind, o.size_bytes));
            }
            let same_ids = b
                .objects
                .iter()
                .zip(&r.objects)
                .all(|(x, y)| (x.kind, x.size_bytes) == (y.kind, y.size_bytes));
            if !same_ids {
                renumbered += 1;
                continue;
            }
            // Not renumbered: the same ids and paths, each object on its referrer and
            // possibly more.
            for (bo, ro) in b.objects.iter().zip(&r.objects) {
                assert_eq!(bo.path, ro.path);
                assert!(ro.depends_on.len() <= 1 && ro.depends_on.iter().all(|d| bo.depends_on.contains(d)));
                widened += usize::from(bo.depends_on.len() > ro.depends_on.len());
            }
        }
        assert!(widened > 0, "no object of 300 pages waits for the head");
        assert!(renumbered < 300, "{renumbered} of 300 pages renumbered");
    }

    #[test]
    fn a_workload_file_picks_the_referrer_graph_by_name() {
        let text = WorkloadSpec::builtin_text("page").unwrap();
        let line = "dependencies = \"browser\"";
        assert!(text.contains(line), "the built-in file names its rule");
        let with = |value: &str| {
            let edited = text.replacen(line, &format!("dependencies = \"{value}\""), 1);
            WorkloadSpec::from_toml_str(&edited, "page.toml")
        };
        let spec = with("referrer").unwrap();
        assert_eq!(spec.page.as_ref().unwrap().dependencies, Dependencies::Referrer);
        let page = spec.generate_page(3).unwrap();
        assert!(page.objects[1..].iter().all(|o| o.depends_on.len() == 1));
        assert!(with("parser").is_err(), "an unknown rule is refused");
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
