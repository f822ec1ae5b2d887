//! Page loads: a page's objects fetched in dependency order over one connection.
//!
//! FlexHTTP (FlexHTTP §2) chooses HTTP/2 or HTTP/3 per *page load*, and judges the
//! choice by how long the page takes, not by any single request. A browser fetches the
//! HTML, discovers CSS and JS in it, and discovers further objects in those; everything
//! discovered is fetched concurrently on the origin's one multiplexed connection with an
//! RFC 9218 `priority: u=N` header. This module does the same with a
//! [`gearbox_workload::Page`] graph: an object starts the moment all its dependencies are
//! complete. Rejected alternative: a fixed number of waves (HTML, then CSS/JS, then the
//! rest), which waits for the slowest object of a wave and so overstates load times.

use std::collections::HashMap;
use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};
use gearbox_dataplane::telemetry::{ClientRecord, Protocol};
use gearbox_workload::{ObjectKind, Page};
use http::HeaderValue;

use crate::client::{parse_url, Client, Request};
use crate::error::ClientError;
use crate::gear::TransportPref;

/// How to load a page.
#[derive(Debug, Clone)]
pub struct PageLoadOptions {
    /// Transport of the whole page (`Auto`: the gear decides once for the page).
    pub transport: TransportPref,
    /// Local path index.
    pub path_index: usize,
    /// Workload click index, written into every object's record.
    pub click: Option<u32>,
    /// Fetch the HTML on a new connection (a first visit, so the handshake counts in the
    /// page load time); otherwise a pooled connection to the origin is reused.
    pub fresh_connection: bool,
    /// Why `transport` was chosen, when a page-level gear chose it (the HTTP-version gear,
    /// FlexHTTP §3.4): the decision every object's record carries instead of `fixed:...`.
    pub reason: Option<String>,
}

impl Default for PageLoadOptions {
    fn default() -> Self {
        PageLoadOptions {
            transport: TransportPref::Auto,
            path_index: 0,
            click: None,
            fresh_connection: true,
            reason: None,
        }
    }
}

/// When one object of a page was fetched.
#[derive(Debug, Clone)]
pub struct ObjectTiming {
    /// Object id in the page.
    pub id: usize,
    /// Request path.
    pub path: String,
    /// Milliseconds from the page load's start to this object's request.
    pub started_ms: f64,
    /// Milliseconds from the page load's start to this object's last byte.
    pub completed_ms: f64,
    /// Response status.
    pub status: u16,
    /// The object's telemetry record.
    pub record: ClientRecord,
}

/// The result of a page load.
#[derive(Debug, Clone)]
pub struct PageLoad {
    /// Milliseconds from the start to the last object's last byte.
    pub page_load_ms: f64,
    /// Milliseconds from the start to the last byte of the last object that delays a
    /// browser's `load` event ([`load_event_ms`]): what Chromium reports as the page's
    /// load time, which `page_load_ms` exceeds when scripts fetch data.
    pub load_event_ms: f64,
    /// Protocol the objects travelled on (that of the HTML).
    pub protocol: Protocol,
    /// The transport decision and its reason.
    pub decision: String,
    /// Every object, by id.
    pub objects: Vec<ObjectTiming>,
}

impl Client {
    /// Loads `page` from `origin` (`https://host:port`) over `transport`, starting with a
    /// new connection; see [`Client::load_page_with`].
    pub async fn load_page(
        &self,
        origin: &str,
        page: &Page,
        transport: TransportPref,
    ) -> Result<PageLoad, ClientError> {
        self.load_page_with(
            origin,
            page,
            &PageLoadOptions {
                transport,
                ..PageLoadOptions::default()
            },
        )
        .await
    }

    /// Loads `page`: each object is requested once all its dependencies are complete, all
    /// on the origin's one HTTP/2 or HTTP/3 connection (HTTP/1.1: its keep-alive pool).
    /// When an object fails, no further objects are started, those in flight finish (so
    /// each still gets its record), and the first error is returned.
    pub async fn load_page_with(
        &self,
        origin: &str,
        page: &Page,
        options: &PageLoadOptions,
    ) -> Result<PageLoad, ClientError> {
        page.validate().map_err(|e| ClientError::Page(e.to_string()))?;
        let origin = origin.trim_end_matches('/');
        let authority = parse_url(&format!("{origin}/"))?.authority;
        let mut decision = self.decide(options.transport, &authority);
        if let (Some(reason), false) = (&options.reason, options.transport == TransportPref::Auto) {
            decision.reason = reason.clone();
        }
        let transport = decision.choice;
        let count = page.objects.len();
        let mut waiting_on: Vec<usize> = page.objects.iter().map(|o| o.depends_on.len()).collect();
        let mut dependents: HashMap<usize, Vec<usize>> = HashMap::new();
        for object in &page.objects {
            for &d in &object.depends_on {
                dependents.entry(d).or_default().push(object.id);
            }
        }
        let start = Instant::now();
        let fetch = |id: usize| {
            let object = &page.objects[id];
            let mut req = Request::get(format!("{origin}{}", object.path), transport);
            req.path_index = options.path_index;
            req.click = options.click;
            req.force_new_connection = options.fresh_connection && id == 0;
            req.discard_body = true;
            // RFC 9218 §4.1: urgency 0..=7, incremental left at its default (false).
            if let Ok(v) = HeaderValue::from_str(&format!("u={}", object.priority.min(7))) {
                req.headers.insert("priority", v);
            }
            let decided = Some(decision.clone());
            async move {
                let started_ms = start.elapsed().as_secs_f64() * 1e3;
                let (result, record) = self.execute(req, decided).await;
                (id, started_ms, start.elapsed().as_secs_f64() * 1e3, result, record)
            }
        };
        let mut running = FuturesUnordered::new();
        for object in page.objects.iter().filter(|o| o.depends_on.is_empty()) {
            running.push(fetch(object.id));
        }
        let mut done: Vec<Option<ObjectTiming>> = vec![None; count];
        let mut first_error = None;
        while let Some((id, started_ms, completed_ms, result, record)) = running.next().await {
            match result {
                Ok(response) => {
                    done[id] = Some(ObjectTiming {
                        id,
                        path: page.objects[id].path.clone(),
                        started_ms,
                        completed_ms,
                        status: response.status,
                        record,
                    });
                    if first_error.is_none() {
                        for &next in dependents.get(&id).map(Vec::as_slice).unwrap_or(&[]) {
                            waiting_on[next] -= 1;
                            if waiting_on[next] == 0 {
                                running.push(fetch(next));
                            }
                        }
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let objects: Vec<ObjectTiming> = done.into_iter().flatten().collect();
        let page_load_ms = objects.iter().map(|o| o.completed_ms).fold(0.0, f64::max);
        let protocol = objects.first().map(|o| o.record.protocol).unwrap_or(Protocol::H2);
        Ok(PageLoad {
            page_load_ms,
            load_event_ms: load_event_ms(page, &objects),
            protocol,
            decision: decision.reason,
            objects,
        })
    }
}

/// When a browser would fire the page's `load` event: the last completion among the
/// objects that delay it. The document, its stylesheets, scripts (inserted ones too),
/// images and fonts delay the load event (HTML Living Standard, "delay the load event");
/// data a script fetches ([`ObjectKind::Other`]: `fetch()`, XHR) does not, so a browser
/// reports a page as loaded while such transfers still run. Chromium's load time is this
/// one; [`PageLoad::page_load_ms`] waits for every object.
pub fn load_event_ms(page: &Page, objects: &[ObjectTiming]) -> f64 {
    objects
        .iter()
        .filter(|o| page.objects.get(o.id).is_some_and(|p| p.kind != ObjectKind::Other))
        .map(|o| o.completed_ms)
        .fold(0.0, f64::max)
}
