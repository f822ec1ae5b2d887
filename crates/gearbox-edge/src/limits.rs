//! The edge's limits and timeouts (the `[limits]` table of the edge config):
//! what a front-end server must bound so that no client, slow or hostile, can hold
//! its memory, file descriptors or tasks without end. Each field is one bound, with
//! the status or reset a client sees when it hits it (docs/edge.md "Limits").
//!
//! They live in a table of their own rather than beside the older top-level fields
//! so that a deployment can read, and override, its whole exposure in one place.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::config::ConfigError;

/// Bounds on what one client or all of them together may take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request header section, bytes, on every protocol; over it the answer is
    /// 431. HTTP/1.1: the request line and header lines as sent; HTTP/2 and HTTP/3:
    /// the decoded field section counted as RFC 9113 §6.5.2 and RFC 9114 §4.2.2 do
    /// (name + value + 32 per field), also advertised to the client as
    /// `SETTINGS_MAX_HEADER_LIST_SIZE` / `SETTINGS_MAX_FIELD_SECTION_SIZE`.
    pub max_header_bytes: u32,
    /// Most header fields in one request, every protocol; over it, 431.
    pub max_headers: u32,
    /// Largest request body, bytes, on any route; over it, 413 (at once when
    /// `Content-Length` says so, otherwise when the count passes it).
    pub max_body_bytes: u64,
    /// Largest body a route must hold whole (`/echo`), bytes; over it, 413. Every
    /// other route streams the body through.
    pub max_buffered_body_bytes: u64,
    /// All bodies held whole at one time, together, bytes; a request that would take
    /// more gets 503 with `Retry-After`.
    pub body_memory_bytes: u64,
    /// Longest wait for the next piece of a request body, milliseconds (slowloris on
    /// the body); past it the answer is 408 and the stream or connection is closed.
    pub body_read_timeout_ms: u64,
    /// Longest time a response may wait for the client to take its next piece,
    /// milliseconds (a client that stops reading, or grants no flow-control credit, like
    /// nginx's `send_timeout`). HTTP/1.1 and HTTP/2: the connection is closed once every
    /// response on it has waited this long; HTTP/3: the stream is reset
    /// (H3_REQUEST_CANCELLED).
    pub send_timeout_ms: u64,
    /// HTTP/1.1: longest time for a request head to arrive once the edge waits for
    /// one, milliseconds (slowloris on the headers; it also bounds an idle
    /// keep-alive connection). hyper closes the connection at it.
    pub header_read_timeout_ms: u64,
    /// A connection with no request in progress for this long is closed, on every
    /// protocol (HTTP/2 and HTTP/3 with GOAWAY), milliseconds. A request whose header
    /// section never completes is no request: dribbled HTTP/2 and HTTP/3 headers end
    /// here.
    pub connection_idle_timeout_ms: u64,
    /// HTTP/2 PING and QUIC PING interval, milliseconds: keeps a connection's path
    /// alive while a request is in progress and finds dead peers.
    pub keep_alive_interval_ms: u64,
    /// HTTP/2: an unanswered PING closes the connection after this long,
    /// milliseconds (on QUIC the transport's `idle_timeout_ms` does it). Also the
    /// grace of a TCP connection told to close: with nothing in progress this long
    /// after its GOAWAY, it is dropped whether or not the peer answers.
    pub keep_alive_timeout_ms: u64,
    /// Concurrent request streams per connection: HTTP/2
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` (a stream over it is refused with
    /// REFUSED_STREAM) and QUIC's bidirectional stream credit (a client cannot open more).
    pub max_streams_per_connection: u32,
    /// Open connections of the edge, TCP and QUIC together; one more is closed at
    /// accept (TCP) or refused (QUIC CONNECTION_REFUSED).
    pub max_connections: u32,
    /// Open connections from one client IP address, TCP and QUIC together.
    pub max_connections_per_ip: u32,
    /// Admin port: longest time for a request head to arrive, milliseconds.
    pub admin_header_timeout_ms: u64,
    /// Proxy: longest time to open a TCP connection to the upstream, milliseconds;
    /// past it, 502.
    pub proxy_connect_timeout_ms: u64,
    /// Proxy: longest time from sending a request upstream to its response head,
    /// milliseconds; past it, 504.
    pub proxy_response_timeout_ms: u64,
    /// QUIC: response bytes one connection may hold written but not yet acknowledged by
    /// the client, unsent ones included (quinn's `send_window`). A response whose client
    /// stops taking data waits here, so this is the most that response bodies can hold of
    /// the edge's memory per QUIC connection. It must cover the path's bandwidth-delay
    /// product (and the controller's queue on top), or it caps throughput.
    pub quic_send_window_bytes: u64,
    /// QUIC: request bytes one stream may have in flight to the edge that it has not
    /// read yet (the stream's flow-control credit, quinn's `stream_receive_window`).
    pub quic_stream_receive_window_bytes: u64,
    /// QUIC: the same for all the streams of a connection together (quinn's
    /// `receive_window`): the most unread request data one QUIC connection may hold.
    pub quic_receive_window_bytes: u64,
    /// HTTP/2: response bytes one stream may hold in the edge beyond what the client's
    /// flow-control credit lets out (hyper's `max_send_buf_size`). Per connection the
    /// bound is this times `max_streams_per_connection`, plus what the kernel's socket
    /// buffer takes (not the edge's memory).
    pub h2_send_buffer_bytes: u64,
    /// HTTP/2: the stream's flow-control window for request bodies
    /// (`SETTINGS_INITIAL_WINDOW_SIZE`, RFC 9113 §6.9.2): unread request bytes one stream
    /// may hold.
    pub h2_stream_window_bytes: u32,
    /// HTTP/2: the connection's flow-control window for request bodies (RFC 9113 §6.9.1):
    /// unread request bytes all the streams of a connection may hold together.
    pub h2_connection_window_bytes: u32,
    /// HTTP/1.1: most bytes hyper buffers per connection in each direction (its
    /// `max_buf_size`): response pieces queued for the socket, and request bytes read but
    /// not yet taken by the route. At least 8,192 (hyper's floor) and `max_header_bytes`.
    pub h1_buffer_bytes: u64,
}

/// What one response in progress holds besides the transport's buffers: the body piece
/// waiting for the transport and, for a file, its read buffer (256 KiB each).
pub const RESPONSE_BYTES: u64 = 2 * (256 << 10);

/// What one connection holds besides its buffers: TLS or QUIC state, the HTTP/2 or
/// HTTP/3 state of its streams, its task. `gearbox bench load` measures 28 KiB per idle
/// TLS/TCP connection and 60 KiB per idle QUIC one; this allows twice the larger.
pub const CONNECTION_STATE_BYTES: u64 = 128 << 10;

/// The most the edge's buffers can hold at once, from the `[limits]` fields
/// (docs/edge.md "Memory"): the largest a connection of any protocol can hold, times
/// `max_connections`, plus the bodies held whole (`body_memory_bytes`). Printed at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBound {
    /// One HTTP/1.1 connection: `h1_buffer_bytes` each way, one response in progress.
    pub h1_connection: u64,
    /// One HTTP/2 connection: per stream `h2_send_buffer_bytes` and a response in
    /// progress, and `h2_connection_window_bytes` of unread request data.
    pub h2_connection: u64,
    /// One QUIC connection: `quic_send_window_bytes`, `quic_receive_window_bytes` and a
    /// response in progress per stream.
    pub h3_connection: u64,
    /// `body_memory_bytes`.
    pub bodies: u64,
    /// `max_connections` times the largest of the three, plus `bodies`.
    pub total: u64,
}

impl std::fmt::Display for MemoryBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kib = |b: u64| b.div_ceil(1024);
        write!(
            f,
            "{} KiB in all (per connection at most: HTTP/1.1 {} KiB, HTTP/2 {} KiB, HTTP/3 {} KiB; bodies held whole {} KiB)",
            kib(self.total),
            kib(self.h1_connection),
            kib(self.h2_connection),
            kib(self.h3_connection),
            kib(self.bodies)
        )
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 32 * 1024,
            max_headers: 100,
            max_body_bytes: crate::config::DEFAULT_MAX_BYTES,
            max_buffered_body_bytes: 1 << 20,
            body_memory_bytes: 64 << 20,
            body_read_timeout_ms: 30_000,
            send_timeout_ms: 60_000,
            header_read_timeout_ms: 10_000,
            connection_idle_timeout_ms: 30_000,
            keep_alive_interval_ms: 10_000,
            keep_alive_timeout_ms: 20_000,
            max_streams_per_connection: 128,
            max_connections: 10_000,
            max_connections_per_ip: 1_000,
            admin_header_timeout_ms: 10_000,
            proxy_connect_timeout_ms: 5_000,
            proxy_response_timeout_ms: 60_000,
            quic_send_window_bytes: 8 << 20,
            quic_stream_receive_window_bytes: 2 << 20,
            quic_receive_window_bytes: 4 << 20,
            h2_send_buffer_bytes: 256 << 10,
            h2_stream_window_bytes: 2 << 20,
            h2_connection_window_bytes: 4 << 20,
            h1_buffer_bytes: 256 << 10,
        }
    }
}

impl Limits {
    /// The bound on the edge's buffered memory these limits imply (docs/edge.md "Memory").
    pub fn memory_bound(&self) -> MemoryBound {
        let streams = u64::from(self.max_streams_per_connection);
        let h1_connection = 2 * self.h1_buffer_bytes + RESPONSE_BYTES + CONNECTION_STATE_BYTES;
        let h2_connection = streams.saturating_mul(self.h2_send_buffer_bytes + RESPONSE_BYTES)
            + u64::from(self.h2_connection_window_bytes)
            + CONNECTION_STATE_BYTES;
        let h3_connection = self.quic_send_window_bytes
            + self.quic_receive_window_bytes
            + streams.saturating_mul(RESPONSE_BYTES)
            + CONNECTION_STATE_BYTES;
        let per = h1_connection.max(h2_connection).max(h3_connection);
        MemoryBound {
            h1_connection,
            h2_connection,
            h3_connection,
            bodies: self.body_memory_bytes,
            total: u64::from(self.max_connections)
                .saturating_mul(per)
                .saturating_add(self.body_memory_bytes),
        }
    }

    /// Checks values that parse but cannot work; errors name the field as
    /// `limits.NAME`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive: [(&'static str, u64); 24] = [
            ("limits.max_header_bytes", self.max_header_bytes.into()),
            ("limits.max_headers", self.max_headers.into()),
            ("limits.max_body_bytes", self.max_body_bytes),
            ("limits.max_buffered_body_bytes", self.max_buffered_body_bytes),
            ("limits.body_memory_bytes", self.body_memory_bytes),
            ("limits.body_read_timeout_ms", self.body_read_timeout_ms),
            ("limits.send_timeout_ms", self.send_timeout_ms),
            ("limits.header_read_timeout_ms", self.header_read_timeout_ms),
            ("limits.connection_idle_timeout_ms", self.connection_idle_timeout_ms),
            ("limits.keep_alive_interval_ms", self.keep_alive_interval_ms),
            ("limits.keep_alive_timeout_ms", self.keep_alive_timeout_ms),
            (
                "limits.max_streams_per_connection",
                self.max_streams_per_connection.into(),
            ),
            ("limits.max_connections", self.max_connections.into()),
            ("limits.max_connections_per_ip", self.max_connections_per_ip.into()),
            ("limits.admin_header_timeout_ms", self.admin_header_timeout_ms),
            ("limits.proxy_connect_timeout_ms", self.proxy_connect_timeout_ms),
            ("limits.proxy_response_timeout_ms", self.proxy_response_timeout_ms),
            ("limits.quic_send_window_bytes", self.quic_send_window_bytes),
            (
                "limits.quic_stream_receive_window_bytes",
                self.quic_stream_receive_window_bytes,
            ),
            ("limits.quic_receive_window_bytes", self.quic_receive_window_bytes),
            ("limits.h2_send_buffer_bytes", self.h2_send_buffer_bytes),
            ("limits.h2_stream_window_bytes", self.h2_stream_window_bytes.into()),
            (
                "limits.h2_connection_window_bytes",
                self.h2_connection_window_bytes.into(),
            ),
            ("limits.h1_buffer_bytes", self.h1_buffer_bytes),
        ];
        for (field, v) in positive {
            if v == 0 {
                return Err(ConfigError::Invalid {
                    field,
                    message: "must be positive".into(),
                });
            }
        }
        if self.max_buffered_body_bytes > self.body_memory_bytes {
            return Err(ConfigError::Invalid {
                field: "limits.max_buffered_body_bytes",
                message: format!(
                    "{} is over limits.body_memory_bytes = {}: one body could never be held",
                    self.max_buffered_body_bytes, self.body_memory_bytes
                ),
            });
        }
        if self.max_connections_per_ip > self.max_connections {
            return Err(ConfigError::Invalid {
                field: "limits.max_connections_per_ip",
                message: format!(
                    "{} is over limits.max_connections = {}",
                    self.max_connections_per_ip, self.max_connections
                ),
            });
        }
        // QUIC flow-control credits are variable-length integers (RFC 9000 §16).
        for (field, v) in [
            (
                "limits.quic_stream_receive_window_bytes",
                self.quic_stream_receive_window_bytes,
            ),
            ("limits.quic_receive_window_bytes", self.quic_receive_window_bytes),
        ] {
            if quinn::VarInt::from_u64(v).is_err() {
                return Err(ConfigError::Invalid {
                    field,
                    message: format!("{v} is over QUIC's largest credit, 2^62 - 1"),
                });
            }
        }
        if self.quic_stream_receive_window_bytes > self.quic_receive_window_bytes {
            return Err(ConfigError::Invalid {
                field: "limits.quic_stream_receive_window_bytes",
                message: format!(
                    "{} is over limits.quic_receive_window_bytes = {}: one stream could never use its credit",
                    self.quic_stream_receive_window_bytes, self.quic_receive_window_bytes
                ),
            });
        }
        // RFC 9113 §6.9.1: a flow-control window is at most 2^31 - 1; h2 needs the
        // connection's at least as large as the default 65,535.
        for (field, v) in [
            ("limits.h2_stream_window_bytes", self.h2_stream_window_bytes),
            ("limits.h2_connection_window_bytes", self.h2_connection_window_bytes),
        ] {
            if v > (1 << 31) - 1 {
                return Err(ConfigError::Invalid {
                    field,
                    message: format!("{v} is over HTTP/2's largest window, 2^31 - 1"),
                });
            }
        }
        if self.h2_stream_window_bytes > self.h2_connection_window_bytes {
            return Err(ConfigError::Invalid {
                field: "limits.h2_stream_window_bytes",
                message: format!(
                    "{} is over limits.h2_connection_window_bytes = {}: one stream could never use its window",
                    self.h2_stream_window_bytes, self.h2_connection_window_bytes
                ),
            });
        }
        if usize::try_from(self.h2_send_buffer_bytes).map_or(true, |v| v > u32::MAX as usize) {
            return Err(ConfigError::Invalid {
                field: "limits.h2_send_buffer_bytes",
                message: format!("{} is over 2^32 - 1", self.h2_send_buffer_bytes),
            });
        }
        // hyper panics below 8,192; a head must fit in the read buffer.
        let h1_floor = 8192u64.max(self.max_header_bytes.into());
        if self.h1_buffer_bytes < h1_floor || self.h1_buffer_bytes > u64::from(u32::MAX) {
            return Err(ConfigError::Invalid {
                field: "limits.h1_buffer_bytes",
                message: format!(
                    "{} is outside {h1_floor} (8,192 or limits.max_header_bytes, the larger) to 2^32 - 1",
                    self.h1_buffer_bytes
                ),
            });
        }
        // quinn's idle timeout and PING interval are 62-bit; hyper's timers are Durations.
        for (field, v) in [
            ("limits.keep_alive_interval_ms", self.keep_alive_interval_ms),
            ("limits.connection_idle_timeout_ms", self.connection_idle_timeout_ms),
        ] {
            if v > 24 * 3600 * 1000 {
                return Err(ConfigError::Invalid {
                    field,
                    message: format!("{v} ms is over a day"),
                });
            }
        }
        Ok(())
    }
}

/// Which limit a request or connection ran into: the `error` of its telemetry record
/// and the `limit` label of `gearbox_limit_hits_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    /// Too many or too large request headers (431).
    Headers,
    /// Request body over `max_body_bytes` or `max_buffered_body_bytes` (413).
    BodySize,
    /// Bodies held whole would exceed `body_memory_bytes` (503).
    BodyMemory,
    /// No body bytes for `body_read_timeout_ms` (408).
    BodyTimeout,
    /// HTTP/1.1 request head not complete within `header_read_timeout_ms`.
    HeaderTimeout,
    /// The client took no response bytes for `send_timeout_ms`.
    SendTimeout,
    /// No request in progress for `connection_idle_timeout_ms`.
    Idle,
    /// `max_connections` reached.
    Connections,
    /// `max_connections_per_ip` reached.
    ConnectionsPerIp,
    /// The upstream could not be reached in `proxy_connect_timeout_ms` or failed (502).
    UpstreamFailed,
    /// The upstream sent no response head within `proxy_response_timeout_ms` (504).
    UpstreamTimeout,
}

impl Hit {
    /// Every kind, in the order `/metrics` lists them.
    pub const ALL: [Hit; 11] = [
        Hit::Headers,
        Hit::BodySize,
        Hit::BodyMemory,
        Hit::BodyTimeout,
        Hit::HeaderTimeout,
        Hit::SendTimeout,
        Hit::Idle,
        Hit::Connections,
        Hit::ConnectionsPerIp,
        Hit::UpstreamFailed,
        Hit::UpstreamTimeout,
    ];

    /// The name in telemetry and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Hit::Headers => "header_limit",
            Hit::BodySize => "body_limit",
            Hit::BodyMemory => "body_memory",
            Hit::BodyTimeout => "body_read_timeout",
            Hit::HeaderTimeout => "header_read_timeout",
            Hit::SendTimeout => "send_timeout",
            Hit::Idle => "idle_timeout",
            Hit::Connections => "connection_limit",
            Hit::ConnectionsPerIp => "connection_limit_per_ip",
            Hit::UpstreamFailed => "upstream_failed",
            Hit::UpstreamTimeout => "upstream_timeout",
        }
    }

    fn slot(self) -> usize {
        Hit::ALL.iter().position(|h| *h == self).unwrap_or(0)
    }
}

/// How often each limit was hit, for `/metrics`.
#[derive(Debug, Default)]
pub struct HitCounts([AtomicU64; Hit::ALL.len()]);

impl HitCounts {
    /// Counts one hit.
    pub fn count(&self, hit: Hit) {
        self.0[hit.slot()].fetch_add(1, Ordering::Relaxed);
    }

    /// Hits of one kind so far.
    pub fn get(&self, hit: Hit) -> u64 {
        self.0[hit.slot()].load(Ordering::Relaxed)
    }
}

/// Open connections of the edge, in total and per client IP address.
#[derive(Debug)]
pub struct ConnectionCap {
    max_total: u32,
    max_per_ip: u32,
    open: Mutex<(u32, HashMap<IpAddr, u32>)>,
}

impl ConnectionCap {
    /// A cap with the limits' bounds.
    pub fn new(limits: &Limits) -> Arc<Self> {
        Arc::new(ConnectionCap {
            max_total: limits.max_connections,
            max_per_ip: limits.max_connections_per_ip,
            open: Mutex::new((0, HashMap::new())),
        })
    }

    /// Admits one more connection from `ip`, or says which bound refuses it. The
    /// admission counts until dropped.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admission, Hit> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.0 >= self.max_total {
            return Err(Hit::Connections);
        }
        let n = open.1.entry(ip).or_insert(0);
        if *n >= self.max_per_ip {
            return Err(Hit::ConnectionsPerIp);
        }
        *n += 1;
        open.0 += 1;
        Ok(Admission { cap: self.clone(), ip })
    }

    /// Connections open now.
    pub fn open(&self) -> u32 {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).0
    }
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct Admission {
    cap: Arc<ConnectionCap>,
    ip: IpAddr,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut open = self.cap.open.lock().unwrap_or_else(|p| p.into_inner());
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.ip);
            }
        }
    }
}

/// The bytes that bodies held whole may take together (`body_memory_bytes`).
#[derive(Debug)]
pub struct BodyMemory(Arc<Semaphore>);

impl BodyMemory {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> Self {
        let permits = usize::try_from(bytes).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS);
        BodyMemory(Arc::new(Semaphore::new(permits)))
    }

    /// Takes `bytes` more of the budget into `held`, or fails when it is spent.
    pub fn take(&self, held: &mut Option<OwnedSemaphorePermit>, bytes: usize) -> Result<(), Hit> {
        if bytes == 0 {
            return Ok(());
        }
        let n = u32::try_from(bytes).map_err(|_| Hit::BodyMemory)?;
        let p = self.0.clone().try_acquire_many_owned(n).map_err(|_| Hit::BodyMemory)?;
        match held {
            Some(h) => h.merge(p),
            None => *held = Some(p),
        }
        Ok(())
    }

    /// Bytes of the budget free now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

/// Whether a connection has requests in progress, and since when it has had none:
/// the clock of `connection_idle_timeout_ms`. Also the clock of `send_timeout_ms`: how
/// many responses hold a piece the client has not taken yet, and since when none was
/// taken.
#[derive(Debug)]
pub struct Activity {
    in_progress: AtomicUsize,
    started: AtomicU64,
    idle_since: Mutex<Instant>,
    /// Responses whose last piece is waiting for the transport (the client) to take it.
    waiting_on_client: AtomicUsize,
    /// When a piece was last handed out or taken, by any response.
    sent_progress: Mutex<Instant>,
    /// Set when `send_timeout_ms` closed the connection, for the records of its requests.
    send_timed_out: std::sync::atomic::AtomicBool,
}

impl Activity {
    /// A connection that has just opened (idle from now).
    pub fn new() -> Arc<Self> {
        Arc::new(Activity {
            in_progress: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            idle_since: Mutex::new(Instant::now()),
            waiting_on_client: AtomicUsize::new(0),
            sent_progress: Mutex::new(Instant::now()),
            send_timed_out: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// A response produced a piece; the transport has yet to take it.
    pub fn handed(&self) {
        *self.sent_progress.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.waiting_on_client.fetch_add(1, Ordering::AcqRel);
    }

    /// The transport took a response's last piece (asked for the next) or the response
    /// ended.
    pub fn taken(&self) {
        *self.sent_progress.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.waiting_on_client.fetch_sub(1, Ordering::AcqRel);
    }

    /// Resolves once some response has waited `timeout` for the client with no response
    /// on the connection making progress meanwhile.
    pub async fn send_stalled(&self, timeout: Duration) {
        quiet_for(
            timeout,
            || self.waiting_on_client.load(Ordering::Acquire) > 0,
            &self.sent_progress,
        )
        .await
    }

    /// Marks the connection as closed by `send_timeout_ms`.
    pub fn mark_send_timeout(&self) {
        self.send_timed_out.store(true, Ordering::Release);
    }

    /// Whether `send_timeout_ms` closed the connection.
    pub fn send_timed_out(&self) -> bool {
        self.send_timed_out.load(Ordering::Acquire)
    }

    /// A request starts; it is in progress until the guard is dropped.
    pub fn start(self: &Arc<Self>) -> ActiveRequest {
        self.in_progress.fetch_add(1, Ordering::AcqRel);
        self.started.fetch_add(1, Ordering::Relaxed);
        ActiveRequest(self.clone())
    }

    /// Requests started on the connection so far.
    pub fn requests(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Resolves once the connection has had no request in progress for `timeout`.
    pub async fn idle_for(&self, timeout: Duration) {
        quiet_for(
            timeout,
            || self.in_progress.load(Ordering::Acquire) == 0,
            &self.idle_since,
        )
        .await
    }
}

impl Activity {
    /// Resolves once the connection has had no request in progress for `grace`,
    /// counting from `since` at the earliest: the bound on a connection that was told
    /// to close (GOAWAY) and has nothing left to finish, but whose peer does not end it.
    pub async fn quiet_after(&self, since: Instant, grace: Duration) {
        loop {
            let wait = if self.in_progress.load(Ordering::Acquire) == 0 {
                let idle = (*self.idle_since.lock().unwrap_or_else(|p| p.into_inner())).max(since);
                match (idle + grace).checked_duration_since(Instant::now()) {
                    None => return,
                    Some(left) if left.is_zero() => return,
                    Some(left) => left,
                }
            } else {
                grace
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// A request in progress on its connection (see [`Activity`]).
#[derive(Debug)]
pub struct ActiveRequest(Arc<Activity>);

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.0.in_progress.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Resolves once `holds` has been true, continuously, for `timeout` since the instant in
/// `since` (which the caller moves whenever the condition is renewed); while it does not
/// hold, checks again every `timeout`. The clock of `idle_for` and `send_stalled`.
async fn quiet_for(timeout: Duration, holds: impl Fn() -> bool, since: &Mutex<Instant>) {
    loop {
        let wait = if holds() {
            let since = *since.lock().unwrap_or_else(|p| p.into_inner());
            match timeout.checked_sub(since.elapsed()) {
                None => return,
                Some(left) if left.is_zero() => return,
                Some(left) => left,
            }
        } else {
            timeout
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_cap_refuses_past_each_bound_and_frees_on_drop() {
        let limits = Limits {
            max_connections: 3,
            max_connections_per_ip: 2,
            ..Limits::default()
        };
        let cap = ConnectionCap::new(&limits);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = cap.admit(a).unwrap();
        let _a2 = cap.admit(a).unwrap();
        assert_eq!(cap.admit(a).unwrap_err(), Hit::ConnectionsPerIp);
        let _b1 = cap.admit(b).unwrap();
        assert_eq!(cap.admit(b).unwrap_err(), Hit::Connections);
        drop(a1);
        assert_eq!(cap.open(), 2);
        let _b2 = cap.admit(b).unwrap();
    }

    #[test]
    fn body_memory_is_returned_when_the_holder_drops() {
        let m = BodyMemory::new(100);
        let mut held = None;
        m.take(&mut held, 60).unwrap();
        m.take(&mut held, 40).unwrap();
        assert_eq!(m.take(&mut None, 1).unwrap_err(), Hit::BodyMemory);
        drop(held);
        assert_eq!(m.available(), 100);
    }

    fn refused_field(l: Limits) -> &'static str {
        match l.validate() {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn buffer_bounds_that_cannot_work_are_refused_naming_the_field() {
        assert!(Limits::default().validate().is_ok());
        let d = Limits::default;
        for (l, want) in [
            (
                Limits {
                    quic_send_window_bytes: 0,
                    ..d()
                },
                "limits.quic_send_window_bytes",
            ),
            (
                Limits {
                    quic_receive_window_bytes: 1 << 62,
                    quic_stream_receive_window_bytes: 1 << 20,
                    ..d()
                },
                "limits.quic_receive_window_bytes",
            ),
            (
                Limits {
                    quic_stream_receive_window_bytes: 8 << 20,
                    quic_receive_window_bytes: 4 << 20,
                    ..d()
                },
                "limits.quic_stream_receive_window_bytes",
            ),
            (
                Limits {
                    h2_connection_window_bytes: 1 << 31,
                    ..d()
                },
                "limits.h2_connection_window_bytes",
            ),
            (
                Limits {
                    h2_stream_window_bytes: 8 << 20,
                    h2_connection_window_bytes: 4 << 20,
                    ..d()
                },
                "limits.h2_stream_window_bytes",
            ),
            (
                Limits {
                    h2_send_buffer_bytes: 1 << 32,
                    ..d()
                },
                "limits.h2_send_buffer_bytes",
            ),
            (
                Limits {
                    h1_buffer_bytes: 4096,
                    ..d()
                },
                "limits.h1_buffer_bytes",
            ),
            (
                Limits {
                    h1_buffer_bytes: 16 << 10,
                    max_header_bytes: 32 << 10,
                    ..d()
                },
                "limits.h1_buffer_bytes",
            ),
        ] {
            assert_eq!(refused_field(l), want);
        }
    }

    #[test]
    fn the_memory_bound_grows_with_every_buffer_and_the_connection_cap() {
        let d = Limits::default();
        let base = d.memory_bound();
        assert_eq!(
            base.total,
            u64::from(d.max_connections) * base.h1_connection.max(base.h2_connection).max(base.h3_connection)
                + d.body_memory_bytes
        );
        let grown = |l: Limits| l.memory_bound();
        assert!(
            grown(Limits {
                h1_buffer_bytes: d.h1_buffer_bytes * 2,
                ..d.clone()
            })
            .h1_connection
                > base.h1_connection
        );
        assert!(
            grown(Limits {
                h2_send_buffer_bytes: d.h2_send_buffer_bytes * 2,
                ..d.clone()
            })
            .h2_connection
                > base.h2_connection
        );
        assert!(
            grown(Limits {
                h2_connection_window_bytes: d.h2_connection_window_bytes * 2,
                ..d.clone()
            })
            .h2_connection
                > base.h2_connection
        );
        assert!(
            grown(Limits {
                quic_send_window_bytes: d.quic_send_window_bytes * 2,
                ..d.clone()
            })
            .h3_connection
                > base.h3_connection
        );
        assert!(
            grown(Limits {
                quic_receive_window_bytes: d.quic_receive_window_bytes * 2,
                ..d.clone()
            })
            .h3_connection
                > base.h3_connection
        );
        assert!(
            grown(Limits {
                max_streams_per_connection: 256,
                ..d.clone()
            })
            .h2_connection
                > base.h2_connection
        );
        assert!(
            grown(Limits {
                max_connections: 20_000,
                ..d.clone()
            })
            .total
                > base.total
        );
        assert!(
            grown(Limits {
                body_memory_bytes: 128 << 20,
                ..d.clone()
            })
            .total
                > base.total
        );
        // Printed in KiB, total first (the process test reads it back).
        assert!(base
            .to_string()
            .starts_with(&format!("{} KiB in all", base.total.div_ceil(1024))));
    }

    #[tokio::test]
    async fn a_connection_is_idle_only_without_requests_in_progress() {
        let a = Activity::new();
        let req = a.start();
        let idle = a.idle_for(Duration::from_millis(50));
        tokio::pin!(idle);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut idle)
                .await
                .is_err(),
            "idle while a request is in progress"
        );
        drop(req);
        // A liveness bound, far above the 50 ms it needs.
        tokio::time::timeout(Duration::from_secs(10), &mut idle)
            .await
            .expect("idle once the last request ended");
        assert_eq!(a.requests(), 1);
    }
}
