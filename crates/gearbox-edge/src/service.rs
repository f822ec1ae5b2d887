//! Routes, shared by HTTP/1.1, HTTP/2 and HTTP/3: `/bytes/{n}`, `/echo`, the static
//! directory, and reverse proxy of everything else to the upstream origin.
//!
//! Routing is a pure function of method and path ([`route`]) so that it is tested
//! without sockets; [`respond`] turns a route into a response whose body is an
//! [`EdgeBody`], which both the hyper and the h3 paths stream frame by frame.

use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::Shared;

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
    /// A file of the static directory.
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
            if let Some(file) = static_file(dir, path) {
                return Route::File(file);
            }
        }
    }
    if proxy {
        return Route::Proxy;
    }
    Route::Error(StatusCode::NOT_FOUND, format!("no route for {path}\n"))
}

/// The file a URL path names inside `dir`, if it exists; `..` and hidden names never match.
fn static_file(dir: &Path, path: &str) -> Option<PathBuf> {
    let rel = Path::new(path.trim_start_matches('/'));
    let mut out = dir.to_path_buf();
    for c in rel.components() {
        match c {
            Component::Normal(name) if !name.to_string_lossy().starts_with('.') => out.push(name),
            _ => return None,
        }
    }
    if out.is_dir() {
        out.push("index.html");
    }
    out.is_file().then_some(out)
}

/// A static file, ready to send.
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
async fn open_file(path: &Path, head: bool) -> std::io::Result<Opened> {
    use std::io::Read;
    let path = path.to_path_buf();
    let opened = tokio::task::spawn_blocking(move || {
        let mut f = std::fs::File::open(&path)?;
        let len = f.metadata()?.len();
        if head || len > FILE_CHUNK as u64 {
            return Ok(Opened::Stream(tokio::fs::File::from_std(f), len));
        }
        let mut buf = Vec::with_capacity(len as usize);
        f.read_to_end(&mut buf)?;
        Ok(Opened::Whole(buf.into()))
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
    /// Already read (HTTP/3).
    Buffered(Bytes),
}

impl RequestBody {
    /// Reads the whole body, up to `limit` bytes.
    async fn read_all(self, limit: u64) -> Result<Bytes, String> {
        match self {
            RequestBody::Buffered(b) => Ok(b),
            RequestBody::Hyper(inc) => {
                let limited = http_body_util::Limited::new(inc, usize::try_from(limit).unwrap_or(usize::MAX));
                limited.collect().await.map(|c| c.to_bytes()).map_err(|e| e.to_string())
            }
        }
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
        }
    }

    fn repeat(n: u64) -> Self {
        EdgeBody {
            kind: BodyKind::Repeat { remaining: n },
            sent: 0,
            on_end: None,
        }
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
    }
}

impl Body for EdgeBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
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

/// Waits `ms` before a request is served: `tcp_processing_ms` / `quic_processing_ms`,
/// a server made slower on one protocol (WiseTrans §IV-D, Fig. 11's changed implementation).
pub async fn added_processing(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// Serves one request. Never fails: every problem becomes an error response.
pub async fn respond(shared: &Shared, parts: http::request::Parts, body: RequestBody) -> Response<EdgeBody> {
    let cfg = &shared.config;
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let head = parts.method == Method::HEAD;
    let r = route(
        &parts.method,
        path,
        cfg.max_bytes,
        cfg.static_dir.as_deref(),
        shared.proxy.is_some(),
    );
    let mut resp = match r {
        Route::Bytes(n) => {
            if parts.method == Method::POST {
                if let Err(e) = body.read_all(cfg.max_bytes).await {
                    return text(StatusCode::BAD_REQUEST, format!("cannot read request body: {e}\n"));
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
        Route::Echo => match body.read_all(cfg.max_bytes).await {
            Ok(b) if !b.is_empty() => Response::new(EdgeBody::full(b)),
            Ok(_) => text(
                StatusCode::OK,
                format!("{} {} {:?}\n", parts.method, path, parts.version),
            ),
            Err(e) => text(StatusCode::BAD_REQUEST, format!("cannot read request body: {e}\n")),
        },
        Route::File(file) => match open_file(&file, head).await {
            Ok(opened) => {
                let (body, len) = match opened {
                    Opened::Stream(_, len) if head => (EdgeBody::full(Bytes::new()), len),
                    Opened::Stream(f, len) => {
                        let kind = BodyKind::File {
                            file: f,
                            remaining: len,
                            buf: bytes::BytesMut::new(),
                        };
                        let body = EdgeBody {
                            kind,
                            sent: 0,
                            on_end: None,
                        };
                        (body, len)
                    }
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
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot read {path}: {e}\n")),
        },
        Route::Proxy => match &shared.proxy {
            Some(p) => p.forward(parts, body, cfg.max_bytes).await,
            None => text(StatusCode::NOT_FOUND, format!("no route for {path}\n")),
        },
        Route::Error(status, msg) => text(status, msg),
    };
    resp.headers_mut()
        .insert(header::SERVER, HeaderValue::from_static("gearbox"));
    resp
}

/// Reverse proxy to one HTTP/1.1 origin, with pooled keep-alive connections.
pub struct Proxy {
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<Bytes>,
    >,
    origin: http::uri::Authority,
}

impl Proxy {
    /// A proxy to `origin` (`http://host:port`, validated by the config).
    pub fn new(origin: &str) -> Option<Self> {
        let uri: http::Uri = origin.parse().ok()?;
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http09_responses(false)
            .build_http();
        Some(Proxy {
            client,
            origin: uri.authority()?.clone(),
        })
    }

    async fn forward(&self, parts: http::request::Parts, body: RequestBody, limit: u64) -> Response<EdgeBody> {
        let started = Instant::now();
        let body = match body.read_all(limit).await {
            Ok(b) => b,
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("cannot read request body: {e}\n")),
        };
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
        let mut req = http::Request::new(http_body_util::Full::new(body));
        *req.method_mut() = parts.method;
        *req.uri_mut() = uri;
        for (k, v) in parts.headers.iter() {
            if k != header::HOST && k != header::CONNECTION && k != header::TRANSFER_ENCODING {
                req.headers_mut().append(k, v.clone());
            }
        }
        if let Ok(host) = HeaderValue::from_str(self.origin.as_str()) {
            req.headers_mut().insert(header::HOST, host);
        }
        match self.client.request(req).await {
            Ok(resp) => {
                let (p, inc) = resp.into_parts();
                let mut r = Response::from_parts(
                    p,
                    EdgeBody {
                        kind: BodyKind::Upstream(inc),
                        sent: 0,
                        on_end: None,
                    },
                );
                r.headers_mut().remove(header::CONNECTION);
                // The origin's HTTP version is its own business; the client gets ours.
                *r.version_mut() = http::Version::HTTP_11;
                r
            }
            Err(e) => {
                tracing::warn!(error = %e, elapsed_ms = started.elapsed().as_millis() as u64, "upstream request failed");
                text(
                    StatusCode::BAD_GATEWAY,
                    format!("upstream {} failed: {e}\n", self.origin),
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
        for p in ["/../etc/passwd", "/.secret", "/missing.css"] {
            assert!(
                matches!(
                    route(&Method::GET, p, 1, Some(dir.path()), false),
                    Route::Error(StatusCode::NOT_FOUND, _)
                ),
                "{p}"
            );
        }
    }
}
