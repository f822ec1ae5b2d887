//! Routes, shared by HTTP/1.1, HTTP/2 and HTTP/3: `/bytes/{n}`, `/echo`, the static
//! directory, and reverse proxy of everything else to the upstream origin.
//!
//! Routing is a pure function of method and path ([`route`]) so that it is tested
//! without sockets; [`respond`] turns a route into a response whose body is an
//! [`EdgeBody`], which both the hyper and the h3 paths stream frame by frame.
//!
//! Request bodies arrive through one [`BodyReader`] for every protocol, which
//! enforces `max_body_bytes` and the gap of `body_read_timeout_ms` (docs/edge.md
//! "Limits"). Only `/echo` holds a body whole, against a budget shared by the edge
//! (`body_memory_bytes`); `POST /bytes/{n}` and the proxy stream the body through.
//! Routing touches no file system: whether a static path names a file is decided
//! on tokio's blocking pool, never on a runtime thread.

use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::{header, HeaderValue, Method, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::limits::Hit;
use crate::Shared;

/// The request half of an HTTP/3 stream.
pub type H3Recv = h3::server::RequestStream<crate::h3_ack::RecvHalf, Bytes>;
/// Boxed errors of bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Size of the shared payload that `/bytes/{n}` slices its frames from.
const PAYLOAD_CHUNK: usize = 256 * 1024;
static PAYLOAD: [u8; PAYLOAD_CHUNK] = [b'g'; PAYLOAD_CHUNK];
/// Read size for static files.
const FILE_CHUNK: usize = 256 * 1024;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/bytes/{n}`: n synthetic bytes (GET, or POST with an upload that is read and dropped).
    Bytes(u64),
    /// `/echo`: the request body back (or a text description of the request if it has none).
    Echo,
    /// A path of the static directory that may name a file (or a directory with an
    /// `index.html`); whether it does is looked up off the runtime threads.
    File(PathBuf),
    /// To the upstream origin.
    Proxy,
    /// An error response with a message for the client.
    Error(StatusCode, String),
}

/// Decides the route of a request from its method and path.
pub fn route(method: &Method, path: &str, max_bytes: u64, static_dir: Option<&Path>, proxy: bool) -> Route {
    let path = path.split('?').next().unwrap_or("");
    if let Some(n) = path.strip_prefix("/bytes/") {
        if method != Method::GET && method != Method::POST && method != Method::HEAD {
            return Route::Error(StatusCode::METHOD_NOT_ALLOWED, "use GET or POST on /bytes/{n}\n".into());
        }
        return match n.parse::<u64>() {
            Ok(n) if n <= max_bytes => Route::Bytes(n),
            Ok(n) => Route::Error(
                StatusCode::BAD_REQUEST,
                format!("/bytes/{n}: {n} is over this edge's limit of {max_bytes} bytes (max_bytes)\n"),
            ),
            Err(_) => Route::Error(
                StatusCode::BAD_REQUEST,
                format!("/bytes/{{n}}: {n:?} is not a byte count\n"),
            ),
        };
    }
    if path == "/echo" {
        return Route::Echo;
    }
    if let Some(dir) = static_dir {
        if method == Method::GET || method == Method::HEAD {
            if let Some(file) = static_candidate(dir, path) {
                return Route::File(file);
            }
        }
    }
    if proxy {
        return Route::Proxy;
    }
    Route::Error(StatusCode::NOT_FOUND, format!("no route for {path}\n"))
}

/// The path a URL path names inside `dir`, without looking at the disk; `..` and
/// hidden names never match.
fn static_candidate(dir: &Path, path: &str) -> Option<PathBuf> {
    let rel = Path::new(path.trim_start_matches('/'));
    let mut out = dir.to_path_buf();
    for c in rel.components() {
        match c {
            Component::Normal(name) if !name.to_string_lossy().starts_with('.') => out.push(name),
            _ => return None,
        }
    }
    Some(out)
}

/// A static file, ready to send.
#[derive(Debug)]
enum Opened {
    /// Small enough to have been read whole.
    Whole(Bytes),
    /// Streamed in [`FILE_CHUNK`] reads, with its length.
    Stream(tokio::fs::File, u64),
}

/// Opens a file, and reads it whole when it fits in one read, all in one trip to
/// tokio's blocking pool. Going through `tokio::fs` one step at a time (open, size,
/// read) costs a pool trip each plus a chunk-sized buffer per response: measured with
/// `gearbox bench edge`, a 1 KB file then took about four times the server CPU of a
/// `/bytes/1024` answer and fell behind caddy (docs/benchmarks.md). Reading inline on
/// the runtime thread, as nginx does, was tried and measured no better here, and would
/// let a cold disk stall every connection on that thread.
///
/// A directory stands for its `index.html`; a path that names no regular file gives
/// `Ok(None)` (the request then goes on to the proxy, or gets 404). The checks run
/// in the same blocking task as the open, so no `stat` ever runs on a runtime thread.
async fn open_file(path: &Path, head: bool) -> std::io::Result<Option<(PathBuf, Opened)>> {
    use std::io::Read;
    let mut path = path.to_path_buf();
    let opened = tokio::task::spawn_blocking(move || {
        if path.is_dir() {
            path.push("index.html");
        }
        let mut f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let meta = f.metadata()?;
        if !meta.is_file() {
            return Ok(None);
        }
        let len = meta.len();
        if head || len > FILE_CHUNK as u64 {
            return Ok(Some((path, Opened::Stream(tokio::fs::File::from_std(f), len))));
        }
        let mut buf = Vec::with_capacity(len as usize);
        f.read_to_end(&mut buf)?;
        Ok(Some((path, Opened::Whole(buf.into()))))
    })
    .await;
    opened.unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css",
        "js" | "mjs" => "text/javascript",
        "json" => "application/json",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "webp" => "image/webp",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// A request body, as each protocol delivers it.
pub enum RequestBody {
    /// hyper's streaming body (HTTP/1.1, HTTP/2).
    Hyper(hyper::body::Incoming),
    /// The request half of an HTTP/3 stream.
    H3(Box<H3Recv>),
    /// No body.
    Empty,
}

/// Why a request body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Over a size limit (413): the limit's value and field name.
    TooLarge(u64, &'static str),
    /// No bytes for `body_read_timeout_ms` (408).
    Timeout(Duration),
    /// The edge's budget for bodies held whole is spent (503).
    NoMemory,
    /// The client's stream failed (400).
    Broken(String),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge(n, field) => write!(f, "request body over this edge's limit of {n} bytes ({field})"),
            BodyError::Timeout(d) => write!(
                f,
                "no request body bytes for {} ms (body_read_timeout_ms)",
                d.as_millis()
            ),
            BodyError::NoMemory => write!(f, "the edge holds as many request bodies as it may (body_memory_bytes)"),
            BodyError::Broken(e) => write!(f, "cannot read request body: {e}"),
        }
    }
}

impl std::error::Error for BodyError {}

/// Reads a request body piece by piece, whatever the protocol, within
/// `max_body_bytes` and with at most `body_read_timeout_ms` between two pieces.
pub struct BodyReader {
    body: RequestBody,
    read: u64,
    limit: u64,
    gap: Duration,
    done: bool,
}

impl BodyReader {
    /// A reader with the edge's limits.
    pub fn new(body: RequestBody, limits: &crate::Limits) -> Self {
        let done = match &body {
            RequestBody::Hyper(inc) => http_body::Body::is_end_stream(inc),
            RequestBody::Empty => true,
            RequestBody::H3(_) => false,
        };
        BodyReader {
            body,
            read: 0,
            limit: limits.max_body_bytes,
            gap: Duration::from_millis(limits.body_read_timeout_ms),
            done,
        }
    }

    /// The next piece of the body, `None` at its end.
    pub async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
        if self.done {
            return None;
        }
        let piece = match tokio::time::timeout(self.gap, next_piece(&mut self.body)).await {
            Err(_) => Some(Err(BodyError::Timeout(self.gap))),
            Ok(p) => p,
        };
        match &piece {
            None | Some(Err(_)) => self.done = true,
            Some(Ok(b)) => {
                self.read += b.len() as u64;
                if self.read > self.limit {
                    self.done = true;
                    return Some(Err(BodyError::TooLarge(self.limit, "limits.max_body_bytes")));
                }
            }
        }
        piece
    }

    /// Reads and drops the rest of the body; the bytes read.
    async fn drain(&mut self) -> Result<u64, BodyError> {
        while let Some(p) = self.next().await {
            p?;
        }
        Ok(self.read)
    }

    /// Reads the whole body into memory, up to `max` bytes, taking each byte from the
    /// edge's shared budget; the budget is held by the returned permit.
    async fn read_all(
        &mut self,
        max: u64,
        memory: &crate::limits::BodyMemory,
    ) -> Result<(Bytes, Option<tokio::sync::OwnedSemaphorePermit>), BodyError> {
        let mut held = None;
        let mut buf = BytesMut::new();
        while let Some(p) = self.next().await {
            let p = p?;
            if (buf.len() + p.len()) as u64 > max {
                self.done = true;
                return Err(BodyError::TooLarge(max, "limits.max_buffered_body_bytes"));
            }
            memory.take(&mut held, p.len()).map_err(|_| BodyError::NoMemory)?;
            buf.extend_from_slice(&p);
        }
        Ok((buf.freeze(), held))
    }
}

impl Drop for BodyReader {
    fn drop(&mut self) {
        // RFC 9114 §4.1: a server that answers before the request is complete may stop
        // reading it with H3_NO_ERROR; quinn's own default (code 0) would read as an error.
        if let (false, RequestBody::H3(s)) = (self.done, &mut self.body) {
            s.stop_sending(h3::error::Code::H3_NO_ERROR);
        }
    }
}

async fn next_piece(body: &mut RequestBody) -> Option<Result<Bytes, BodyError>> {
    match body {
        RequestBody::Empty => None,
        RequestBody::Hyper(inc) => loop {
            match inc.frame().await? {
                Ok(f) => match f.into_data() {
                    Ok(d) if d.is_empty() => continue,
                    Ok(d) => return Some(Ok(d)),
                    // Trailers: nothing a route here uses.
                    Err(_) => continue,
                },
                Err(e) => return Some(Err(BodyError::Broken(e.to_string()))),
            }
        },
        RequestBody::H3(s) => match s.recv_data().await {
            Ok(Some(mut b)) => Some(Ok(b.copy_to_bytes(b.remaining()))),
            Ok(None) => None,
            Err(e) => Some(Err(BodyError::Broken(e.to_string()))),
        },
    }
}

/// Called once when a response body has been handed over entirely (`true`) or was
/// abandoned (`false`, e.g. the client reset the stream).
pub type OnEnd = Box<dyn FnOnce(bool, u64) + Send>;

/// A response body: empty, one buffer, synthetic bytes, or a proxied stream.
pub struct EdgeBody {
    kind: BodyKind,
    sent: u64,
    on_end: Option<OnEnd>,
    /// Held until the body is dropped: the request's place in its connection's
    /// activity, the memory budget of a body held whole.
    keep: Vec<Box<dyn Send + Sync>>,
    /// The connection told when a piece waits for the client (`send_timeout_ms`), and
    /// whether one waits now.
    send_watch: Option<(std::sync::Arc<crate::limits::Activity>, bool)>,
}

enum BodyKind {
    Full(Option<Bytes>),
    /// A file streamed in chunks, with the bytes still to send.
    File {
        file: tokio::fs::File,
        remaining: u64,
        buf: bytes::BytesMut,
    },
    Repeat {
        remaining: u64,
    },
    Upstream(hyper::body::Incoming),
}

impl EdgeBody {
    fn full(b: impl Into<Bytes>) -> Self {
        EdgeBody {
            kind: BodyKind::Full(Some(b.into())),
            sent: 0,
            on_end: None,
            keep: Vec::new(),
            send_watch: None,
        }
    }

    fn repeat(n: u64) -> Self {
        EdgeBody {
            kind: BodyKind::Repeat { remaining: n },
            sent: 0,
            on_end: None,
            keep: Vec::new(),
            send_watch: None,
        }
    }

    fn from_kind(kind: BodyKind) -> Self {
        EdgeBody {
            kind,
            sent: 0,
            on_end: None,
            keep: Vec::new(),
            send_watch: None,
        }
    }

    /// Keeps `v` alive as long as the body.
    pub fn keep(&mut self, v: impl Send + Sync + 'static) {
        self.keep.push(Box::new(v));
    }

    /// Tells `activity` while a piece of this body waits for the transport to take it:
    /// the clock of `send_timeout_ms` on HTTP/1.1 and HTTP/2.
    pub fn watch_send(&mut self, activity: std::sync::Arc<crate::limits::Activity>) {
        self.send_watch = Some((activity, false));
    }

    /// Calls `f` when the body ends or is dropped unfinished.
    pub fn on_end(&mut self, f: OnEnd) {
        self.on_end = Some(f);
    }

    fn finish(&mut self, complete: bool) {
        if let Some(f) = self.on_end.take() {
            f(complete, self.sent);
        }
    }
}

impl Drop for EdgeBody {
    fn drop(&mut self) {
        // hyper stops polling once a body with an exact size says it has ended.
        let complete = self.is_end_stream();
        self.finish(complete);
        if let Some((activity, true)) = &self.send_watch {
            activity.taken();
        }
    }
}

impl Body for EdgeBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        // Asked for the next piece: the last one was taken.
        if let Some((activity, waiting @ true)) = &mut this.send_watch {
            *waiting = false;
            activity.taken();
        }
        let next: Option<Result<Frame<Bytes>, Self::Error>> = match &mut this.kind {
            BodyKind::Full(b) => b.take().filter(|b| !b.is_empty()).map(|b| Ok(Frame::data(b))),
            BodyKind::Repeat { remaining } => {
                if *remaining == 0 {
                    None
                } else {
                    let n = (*remaining).min(PAYLOAD_CHUNK as u64) as usize;
                    *remaining -= n as u64;
                    Some(Ok(Frame::data(Bytes::from_static(&PAYLOAD[..n]))))
                }
            }
            BodyKind::File { file, remaining, buf } => {
                if *remaining == 0 {
                    None
                } else {
                    let want = FILE_CHUNK.min(usize::try_from(*remaining).unwrap_or(FILE_CHUNK));
                    if buf.capacity() < want {
                        buf.reserve(want);
                    }
                    match tokio_util::io::poll_read_buf(Pin::new(file), cx, buf) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(0)) => Some(Err(format!("file ended {remaining} bytes early").into())),
                        Poll::Ready(Ok(_)) => {
                            let take = (buf.len() as u64).min(*remaining) as usize;
                            *remaining -= take as u64;
                            let chunk = buf.split_to(take).freeze();
                            buf.clear();
                            Some(Ok(Frame::data(chunk)))
                        }
                        Poll::Ready(Err(e)) => Some(Err(e.into())),
                    }
                }
            }
            BodyKind::Upstream(inc) => match Pin::new(inc).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(f) => f.map(|r| r.map_err(Into::into)),
            },
        };
        match &next {
            Some(Ok(f)) => {
                this.sent += f.data_ref().map_or(0, |d| d.len() as u64);
                if this.is_end_stream() {
                    this.finish(true);
                } else if let Some((activity, waiting)) = &mut this.send_watch {
                    *waiting = true;
                    activity.handed();
                }
            }
            Some(Err(_)) => this.finish(false),
            None => this.finish(true),
        }
        Poll::Ready(next)
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            BodyKind::Full(b) => b.as_ref().is_none_or(|b| b.is_empty()),
            BodyKind::Repeat { remaining } | BodyKind::File { remaining, .. } => *remaining == 0,
            BodyKind::Upstream(inc) => inc.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            BodyKind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            BodyKind::Repeat { remaining } | BodyKind::File { remaining, .. } => SizeHint::with_exact(*remaining),
            BodyKind::Upstream(inc) => inc.size_hint(),
        }
    }
}

fn text(status: StatusCode, msg: String) -> Response<EdgeBody> {
    let mut r = Response::new(EdgeBody::full(msg));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// An answer to a request that ran into a limit: counted, and marked with the limit
/// so that the request's telemetry record names it in `error`.
fn limit_hit(shared: &Shared, hit: Hit, status: StatusCode, msg: String) -> Response<EdgeBody> {
    shared.metrics.limit_hits.count(hit);
    tracing::debug!(limit = hit.name(), %status, "{}", msg.trim_end());
    let mut r = text(status, msg);
    r.extensions_mut().insert(hit);
    if hit == Hit::BodyMemory {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// The answer to a body that could not be read.
fn body_error(shared: &Shared, e: BodyError) -> Response<EdgeBody> {
    let msg = format!("{e}\n");
    match e {
        BodyError::TooLarge(..) => limit_hit(shared, Hit::BodySize, StatusCode::PAYLOAD_TOO_LARGE, msg),
        BodyError::Timeout(_) => limit_hit(shared, Hit::BodyTimeout, StatusCode::REQUEST_TIMEOUT, msg),
        BodyError::NoMemory => limit_hit(shared, Hit::BodyMemory, StatusCode::SERVICE_UNAVAILABLE, msg),
        BodyError::Broken(_) => text(StatusCode::BAD_REQUEST, msg),
    }
}

/// The limit a response was stopped by, if any (for its telemetry record).
pub fn hit_of<B>(resp: &Response<B>) -> Option<Hit> {
    resp.extensions().get::<Hit>().copied()
}

/// Waits `ms` before a request is served: `tcp_processing_ms` / `quic_processing_ms`,
/// a server made slower on one protocol (WiseTrans §IV-D, Fig. 11's changed implementation).
pub async fn added_processing(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Serves one request. Never fails: every problem becomes an error response.
pub async fn respond(shared: &Shared, parts: http::request::Parts, body: RequestBody) -> Response<EdgeBody> {
    let mut resp = answer(shared, parts, body).await;
    resp.headers_mut()
        .insert(header::SERVER, HeaderValue::from_static("gearbox"));
    resp
}

async fn answer(shared: &Shared, parts: http::request::Parts, body: RequestBody) -> Response<EdgeBody> {
    let cfg = &shared.config;
    let limits = &cfg.limits;
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let head = parts.method == Method::HEAD;
    // HTTP/1.1's count is also enforced by hyper, and every protocol's size by its
    // stack (hyper, h2, h3 answer 431 themselves); the count of HTTP/2 and HTTP/3
    // fields has no setting in h2 or h3, so it is checked here for all.
    if parts.headers.len() > limits.max_headers as usize {
        return limit_hit(
            shared,
            Hit::Headers,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!(
                "{} header fields; this edge takes at most {} (limits.max_headers)\n",
                parts.headers.len(),
                limits.max_headers
            ),
        );
    }
    if let Some(n) = declared_length(&parts.headers).filter(|n| *n > limits.max_body_bytes) {
        tracing::debug!(declared = n, "request refused on its Content-Length");
        return body_error(
            shared,
            BodyError::TooLarge(limits.max_body_bytes, "limits.max_body_bytes"),
        );
    }
    let mut body = BodyReader::new(body, limits);
    let r = route(
        &parts.method,
        path,
        cfg.max_bytes,
        cfg.static_dir.as_deref(),
        shared.proxy.is_some(),
    );
    match r {
        Route::Bytes(n) => {
            // An upload is read and dropped as it arrives; a GET's (absent) body is not
            // waited for, so an HTTP/3 client that leaves its stream open is answered.
            if parts.method == Method::POST {
                if let Err(e) = body.drain().await {
                    return body_error(shared, e);
                }
            }
            let mut r = Response::new(if head {
                EdgeBody::full(Bytes::new())
            } else {
                EdgeBody::repeat(n)
            });
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            if head {
                r.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(n));
            }
            r
        }
        Route::Echo => {
            let max = limits.max_buffered_body_bytes;
            if declared_length(&parts.headers).is_some_and(|n| n > max) {
                return body_error(shared, BodyError::TooLarge(max, "limits.max_buffered_body_bytes"));
            }
            match body.read_all(max, &shared.body_memory).await {
                Ok((b, held)) if !b.is_empty() => {
                    let mut body = EdgeBody::full(b);
                    if let Some(h) = held {
                        body.keep(h);
                    }
                    Response::new(body)
                }
                Ok(_) => text(
                    StatusCode::OK,
                    format!("{} {} {:?}\n", parts.method, path, parts.version),
                ),
                Err(e) => body_error(shared, e),
            }
        }
        Route::File(file) => match open_file(&file, head).await {
            Ok(Some((file, opened))) => {
                let (body, len) = match opened {
                    Opened::Stream(_, len) if head => (EdgeBody::full(Bytes::new()), len),
                    Opened::Stream(f, len) => (
                        EdgeBody::from_kind(BodyKind::File {
                            file: f,
                            remaining: len,
                            buf: bytes::BytesMut::new(),
                        }),
                        len,
                    ),
                    Opened::Whole(b) => {
                        let len = b.len() as u64;
                        (EdgeBody::full(b), len)
                    }
                };
                let mut r = Response::new(body);
                r.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(&file)));
                if head {
                    r.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(len));
                }
                r
            }
            Ok(None) => match &shared.proxy {
                Some(p) => p.forward(shared, parts, body).await,
                None => text(StatusCode::NOT_FOUND, format!("no route for {path}\n")),
            },
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot read {path}: {e}\n")),
        },
        Route::Proxy => match &shared.proxy {
            Some(p) => p.forward(shared, parts, body).await,
            None => text(StatusCode::NOT_FOUND, format!("no route for {path}\n")),
        },
        Route::Error(status, msg) => text(status, msg),
    }
}

/// Header fields that describe one connection, not the message (RFC 9110 §7.6.1):
/// a proxy removes them, and every field that `Connection` names, in both directions.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
];

/// Removes the hop-by-hop fields of RFC 9110 §7.6.1 from `headers`.
pub fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    let named: Vec<http::HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| http::HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
    for n in HOP_BY_HOP {
        headers.remove(n);
    }
}

type ProxyBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

/// Reverse proxy to one HTTP/1.1 origin, with pooled keep-alive connections. The
/// request body is streamed to the origin as it arrives, never held whole.
pub struct Proxy {
    client: hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, ProxyBody>,
    origin: http::uri::Authority,
    response_timeout: Duration,
}

impl Proxy {
    /// A proxy to `origin` (`http://host:port`, validated by the config), with the
    /// connect and response timeouts of `limits`.
    pub fn new(origin: &str, limits: &crate::Limits) -> Option<Self> {
        let uri: http::Uri = origin.parse().ok()?;
        let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_millis(limits.proxy_connect_timeout_ms)));
        connector.set_nodelay(true);
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http09_responses(false)
            // A request body the upstream does not take waits here, then in the
            // client's flow-control window: one file piece's worth, within the
            // response allowance of docs/edge.md "Memory".
            .http1_max_buf_size(FILE_CHUNK)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(connector);
        Some(Proxy {
            client,
            origin: uri.authority()?.clone(),
            response_timeout: Duration::from_millis(limits.proxy_response_timeout_ms),
        })
    }

    async fn forward(&self, shared: &Shared, parts: http::request::Parts, mut body: BodyReader) -> Response<EdgeBody> {
        use http_body_util::BodyExt as _;
        let started = Instant::now();
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = match http::Uri::builder()
            .scheme("http")
            .authority(self.origin.clone())
            .path_and_query(pq)
            .build()
        {
            Ok(u) => u,
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("bad path: {e}\n")),
        };
        // The first piece tells an empty body (sent as such) from one to stream.
        let first = match body.next().await {
            None => None,
            Some(Ok(b)) => Some(b),
            Some(Err(e)) => return body_error(shared, e),
        };
        let failure = std::sync::Arc::new(std::sync::Mutex::new(None::<BodyError>));
        let upstream_body: ProxyBody = match first {
            None => http_body_util::Empty::<Bytes>::new()
                .map_err(|e: std::convert::Infallible| -> BoxError { match e {} })
                .boxed_unsync(),
            Some(first) => {
                let failure = failure.clone();
                let rest =
                    futures::stream::unfold((Some(first), body, failure), |(first, mut body, failure)| async move {
                        if let Some(b) = first {
                            return Some((Ok(Frame::data(b)), (None, body, failure)));
                        }
                        match body.next().await? {
                            Ok(b) => Some((Ok(Frame::data(b)), (None, body, failure))),
                            Err(e) => {
                                *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                                Some((Err(Box::new(e) as BoxError), (None, body, failure)))
                            }
                        }
                    });
                http_body_util::StreamBody::new(rest).boxed_unsync()
            }
        };
        let mut req = http::Request::new(upstream_body);
        *req.method_mut() = parts.method;
        *req.uri_mut() = uri;
        *req.headers_mut() = parts.headers;
        strip_hop_by_hop(req.headers_mut());
        if let Ok(host) = HeaderValue::from_str(self.origin.as_str()) {
            req.headers_mut().insert(header::HOST, host);
        }
        let outcome = tokio::time::timeout(self.response_timeout, self.client.request(req)).await;
        if let Some(e) = failure.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return body_error(shared, e);
        }
        match outcome {
            Ok(Ok(resp)) => {
                let (mut p, inc) = resp.into_parts();
                strip_hop_by_hop(&mut p.headers);
                // The origin's HTTP version is its own business; the client gets ours.
                p.version = http::Version::HTTP_11;
                Response::from_parts(p, EdgeBody::from_kind(BodyKind::Upstream(inc)))
            }
            Ok(Err(e)) => {
                let elapsed_ms = started.elapsed().as_millis() as u64;
                tracing::warn!(error = %e, elapsed_ms, "upstream request failed");
                let cause = std::error::Error::source(&e)
                    .map(|s| format!(": {s}"))
                    .unwrap_or_default();
                limit_hit(
                    shared,
                    Hit::UpstreamFailed,
                    StatusCode::BAD_GATEWAY,
                    format!("upstream {} failed: {e}{cause}\n", self.origin),
                )
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = self.response_timeout.as_millis() as u64,
                    "upstream response timed out"
                );
                limit_hit(
                    shared,
                    Hit::UpstreamTimeout,
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "upstream {} sent no response within {} ms (limits.proxy_response_timeout_ms)\n",
                        self.origin,
                        self.response_timeout.as_millis()
                    ),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_route_parses_its_size_and_enforces_the_limit() {
        assert_eq!(
            route(&Method::GET, "/bytes/1000?x=1", 5000, None, false),
            Route::Bytes(1000)
        );
        match route(&Method::GET, "/bytes/6000", 5000, None, false) {
            Route::Error(s, m) => {
                assert_eq!(s, StatusCode::BAD_REQUEST);
                assert!(m.contains("5000"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            route(&Method::GET, "/bytes/ten", 5000, None, false),
            Route::Error(StatusCode::BAD_REQUEST, _)
        ));
    }

    #[test]
    fn unknown_path_is_404_without_upstream_and_proxied_with_one() {
        assert!(matches!(
            route(&Method::GET, "/nope", 1, None, false),
            Route::Error(StatusCode::NOT_FOUND, _)
        ));
        assert_eq!(route(&Method::GET, "/nope", 1, None, true), Route::Proxy);
    }

    #[test]
    fn static_files_never_escape_their_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.css"), "x").unwrap();
        std::fs::write(dir.path().join(".secret"), "x").unwrap();
        assert_eq!(
            route(&Method::GET, "/a.css", 1, Some(dir.path()), false),
            Route::File(dir.path().join("a.css"))
        );
        for p in ["/../etc/passwd", "/.secret", "/a/../../x"] {
            assert!(
                matches!(
                    route(&Method::GET, p, 1, Some(dir.path()), false),
                    Route::Error(StatusCode::NOT_FOUND, _)
                ),
                "{p}"
            );
        }
    }

    #[tokio::test]
    async fn a_static_path_naming_no_file_is_no_file_and_a_directory_serves_its_index() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/index.html"), "<p>").unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        assert!(open_file(&dir.path().join("missing.css"), false)
            .await
            .unwrap()
            .is_none());
        assert!(open_file(&dir.path().join("empty"), false).await.unwrap().is_none());
        let (path, opened) = open_file(&dir.path().join("d"), false).await.unwrap().unwrap();
        assert_eq!(path, dir.path().join("d/index.html"));
        assert!(matches!(opened, Opened::Whole(b) if &b[..] == b"<p>"));
    }

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_are_removed() {
        let mut h = http::HeaderMap::new();
        for (k, v) in [
            ("connection", "close, x-secret"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("upgrade", "h2c"),
            ("proxy-connection", "keep-alive"),
            ("x-secret", "1"),
            ("accept", "*/*"),
            ("cache-control", "no-cache"),
        ] {
            h.append(k, HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["accept", "cache-control"]);
    }
}
