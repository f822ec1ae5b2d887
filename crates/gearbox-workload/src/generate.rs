//! Turning a workload spec into a deterministic sequence of requests.
//!
//! Generation is a pure function of the spec and a seed: a ChaCha8 stream seeded with
//! `seed` drives every draw, so the client, the simulator and Python see the same requests
//! for the same seed on every platform. Time is an offset in milliseconds from the start of
//! the workload; nothing here reads a clock. The generator is an iterator
//! ([`WorkloadSpec::requests`]) so that a virtual-time simulator can pull requests as it
//! advances; [`WorkloadSpec::generate`] collects a bounded prefix of it.

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::page::PageObject;
use crate::spec::{ClickSpec, ClientSpec, ConnectionReuse, Pattern, WorkloadSpec};

/// One request of a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// When to send it, in milliseconds from the start of the workload.
    pub send_at_ms: f64,
    /// Which click (user action, page load) it belongs to, counting from 0.
    pub click: u32,
    /// Request size in bytes (headers plus body the client uploads).
    pub request_bytes: u64,
    /// Response body size in bytes.
    pub response_bytes: u64,
    /// Whether the request opens a new connection rather than reusing the current one.
    pub new_connection: bool,
    /// Which emulated client address sends it: `prefix << 8 | host`, so `client_index >> 8`
    /// is the /24 prefix. 0 unless the workload has a `[clients]` section.
    pub client_index: u32,
    /// Request path on the synthetic edge, e.g. `/bytes/12345`.
    pub path: String,
}

/// Where generation stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// Requests sent before this many milliseconds from the start.
    DurationMs(f64),
    /// At most this many requests.
    Requests(usize),
}

impl WorkloadSpec {
    /// The workload's requests for `seed`, in send order, up to `limit`. The same seed
    /// always gives the same requests.
    ///
    /// Page workloads emit each page's objects in discovery order, all at the page's start
    /// time; the dependencies between them come from [`WorkloadSpec::generate_page`], and a
    /// `Requests` limit may stop part-way through a page. A spec without a pattern section
    /// (never one built by the constructors, which validate) yields no requests.
    pub fn generate(&self, seed: u64, limit: Limit) -> Vec<Request> {
        match limit {
            Limit::Requests(count) => self.requests(seed).take(count).collect(),
            Limit::DurationMs(duration_ms) => self
                .requests(seed)
                .take_while(|request| request.send_at_ms < duration_ms)
                .collect(),
        }
    }

    /// The workload's requests for `seed` as an endless (for bulk: one-element) iterator.
    pub fn requests(&self, seed: u64) -> RequestStream<'_> {
        RequestStream {
            spec: self,
            rng: ChaCha8Rng::seed_from_u64(seed),
            click: 0,
            next_send_at_ms: 0.0,
            left_in_click: 0,
            client_index: 0,
            page_objects: Vec::new(),
            emitted: 0,
            finished: false,
        }
    }
}

/// Iterator over a workload's requests; see [`WorkloadSpec::requests`].
#[derive(Debug, Clone)]
pub struct RequestStream<'a> {
    spec: &'a WorkloadSpec,
    rng: ChaCha8Rng,
    /// Index of the current click.
    click: u32,
    /// Send time of the next request.
    next_send_at_ms: f64,
    /// Requests of the current click not yet emitted.
    left_in_click: usize,
    /// Client of the current click.
    client_index: u32,
    /// Objects of the current page not yet emitted, in reverse order (pop from the end).
    page_objects: Vec<PageObject>,
    /// Requests emitted so far.
    emitted: u64,
    finished: bool,
}

impl Iterator for RequestStream<'_> {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.finished {
            return None;
        }
        match self.spec.pattern() {
            None => {
                self.finished = true;
                None
            }
            Some(Pattern::Bulk(bulk)) => {
                self.finished = true;
                Some(Request {
                    send_at_ms: 0.0,
                    click: 0,
                    request_bytes: bulk.request_bytes,
                    response_bytes: bulk.size_bytes,
                    new_connection: true,
                    client_index: self.draw_client(),
                    path: format!("/bytes/{}", bulk.size_bytes),
                })
            }
            Some(Pattern::Clicks(clicks)) => Some(self.next_click_request(clicks)),
            Some(Pattern::Page(page)) => {
                let first_of_click = self.page_objects.is_empty();
                if first_of_click {
                    if self.emitted > 0 {
                        self.next_send_at_ms += page.think_time_ms.sample(&mut self.rng);
                        self.click = self.click.saturating_add(1);
                    }
                    self.client_index = self.draw_client();
                    let mut objects = page.generate_with(&mut self.rng).objects;
                    objects.reverse();
                    self.page_objects = objects;
                }
                let object = self.page_objects.pop()?;
                let new_connection = self.new_connection(first_of_click);
                self.emitted += 1;
                Some(Request {
                    send_at_ms: self.next_send_at_ms,
                    click: self.click,
                    request_bytes: request_bytes_for_get(&object.path),
                    response_bytes: object.size_bytes,
                    new_connection,
                    client_index: self.client_index,
                    path: object.path,
                })
            }
        }
    }
}

/// Size of a plain GET for `path`: request line plus a typical set of browser headers.
/// Pages carry no request sizes of their own (FlexHTTP Table 1 lists response sizes only).
/// Bytes of a GET for `path`: typical request headers plus the path (the workloads'
/// request size for page objects).
pub fn request_bytes_for_get(path: &str) -> u64 {
    const TYPICAL_HEADER_BYTES: u64 = 400;
    TYPICAL_HEADER_BYTES + path.len() as u64
}

impl RequestStream<'_> {
    fn next_click_request(&mut self, clicks: &ClickSpec) -> Request {
        let first_of_click = self.left_in_click == 0;
        if first_of_click {
            if self.emitted > 0 {
                self.next_send_at_ms += clicks.think_time_ms.sample(&mut self.rng);
                self.click = self.click.saturating_add(1);
            }
            self.left_in_click = draw_count(clicks.requests_per_click.sample(&mut self.rng));
            self.client_index = self.draw_client();
        } else {
            self.next_send_at_ms += clicks.gap_ms.sample(&mut self.rng);
        }
        self.left_in_click -= 1;
        let request_bytes = draw_bytes(clicks.request_bytes.sample(&mut self.rng));
        let response_bytes = match (&clicks.response_bytes, &clicks.response_mss) {
            (Some(bytes), _) => draw_bytes(bytes.sample(&mut self.rng)),
            (None, Some(segments)) => draw_bytes(segments.sample(&mut self.rng) * clicks.segment_bytes() as f64),
            (None, None) => 0,
        };
        let new_connection = self.new_connection(first_of_click);
        self.emitted += 1;
        Request {
            send_at_ms: self.next_send_at_ms,
            click: self.click,
            request_bytes,
            response_bytes,
            new_connection,
            client_index: self.client_index,
            path: format!("/bytes/{response_bytes}"),
        }
    }

    fn new_connection(&self, first_of_click: bool) -> bool {
        match self.spec.connection {
            ConnectionReuse::Persistent => self.emitted == 0,
            ConnectionReuse::PerClick => first_of_click,
            ConnectionReuse::PerRequest => true,
        }
    }

    fn draw_client(&mut self) -> u32 {
        match &self.spec.clients {
            Some(clients) => client_index(clients, &mut self.rng),
            None => 0,
        }
    }
}

fn client_index<R: Rng + ?Sized>(clients: &ClientSpec, rng: &mut R) -> u32 {
    let prefix = clients
        .prefix_index
        .sample(rng)
        .floor()
        .clamp(0.0, f64::from((1u32 << 24) - 1)) as u32;
    let host = rng.random_range(0..clients.hosts_per_prefix.clamp(1, 256));
    prefix << 8 | host
}

/// A request count from a continuous draw: nearest integer, at least 1.
fn draw_count(value: f64) -> usize {
    value.round().max(1.0) as usize
}

/// A size in bytes from a continuous draw: nearest integer, at least 1.
fn draw_bytes(value: f64) -> u64 {
    value.round().max(1.0) as u64
}
