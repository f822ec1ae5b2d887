//! The QUIC side: per-connection controller choice through `Incoming::accept_with`,
//! HTTP/3 through h3 on [`crate::h3_ack`], and "last byte acknowledged" from quinn.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gearbox_dataplane::telemetry::{unix_ms_now, EdgeRecord, Protocol};
use gearbox_dataplane::transport;
use gearbox_gear_api::{AcceptedConnection, IwChoice, Transport};
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;

use crate::h3_ack::{AckConnection, AckOutcome, AckWatch, Bidi, SendHalf};
use crate::limits::{Activity, Hit};
use crate::live::AppCounters;
use crate::service::{respond, EdgeBody, RequestBody};
use crate::{bounded_handshake, Handshake, Shared, GOAWAY_LINGER};

/// Longest wait for the client to acknowledge a response's last byte. Past it (or
/// [`GOAWAY_LINGER`] into a shutdown) the record's server time ends at the write instead.
const ACK_WAIT_LIMIT: Duration = Duration::from_secs(10);

type H3Stream = h3::server::RequestStream<Bidi<Bytes>, Bytes>;
type H3Send = h3::server::RequestStream<SendHalf<Bytes>, Bytes>;

struct Conn {
    shared: Arc<Shared>,
    id: u64,
    peer: SocketAddr,
    quinn: quinn::Connection,
    cc: String,
    watch: AckWatch,
    /// The edge's shutdown.
    cancel: CancellationToken,
    /// The connection's initial window and where it came from (TCP WISE's record).
    iw: Option<IwChoice>,
    /// Application-level counters for Floo's Monitor.
    app: Arc<AppCounters>,
}

fn record(shared: &Shared, id: u64, peer: SocketAddr, error: &str) -> EdgeRecord {
    EdgeRecord {
        error: (!error.is_empty()).then(|| error.to_string()),
        ..EdgeRecord::for_connection(id, peer, Some(Protocol::H3), unix_ms_now())
    }
    .with_shared(shared)
}

/// The record of a stream or connection that a limit stopped before it became a request.
fn limit_record(conn: &Conn, hit: Hit, status: Option<u16>) -> EdgeRecord {
    let mut rec = record(&conn.shared, conn.id, conn.peer, "");
    rec.error = Some(hit.name().to_string());
    rec.status = status;
    rec
}

trait WithShared {
    fn with_shared(self, shared: &Shared) -> Self;
}

impl WithShared for EdgeRecord {
    fn with_shared(self, shared: &Shared) -> Self {
        if self.error.is_some() {
            shared.metrics.handshake_failures_quic.fetch_add(1, Ordering::Relaxed);
        }
        self
    }
}

pub(crate) async fn accept_loop(shared: Arc<Shared>, endpoint: quinn::Endpoint, cancel: CancellationToken) {
    loop {
        let incoming = tokio::select! {
            _ = cancel.cancelled() => break,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => break,
            },
        };
        let peer = incoming.remote_address();
        let id = shared.conn_id();
        let admission = match shared.connections.admit(peer.ip()) {
            Ok(a) => a,
            Err(hit) => {
                // CONNECTION_REFUSED before any handshake work.
                incoming.refuse();
                shared.metrics.limit_hits.count(hit);
                let mut rec = record(&shared, id, peer, "");
                rec.protocol = None;
                rec.error = Some(hit.name().to_string());
                shared.telemetry.write(&rec);
                continue;
            }
        };
        let accepted = AcceptedConnection::new(id, peer, Transport::Quic, unix_ms_now());
        let (choice, iw) = shared.gears.quic(&accepted);
        let (config, control) = match shared.quic_config(&choice) {
            Ok(c) => c,
            Err(e) => {
                // Only a gear can get here (the static choice was validated at start).
                tracing::warn!(%peer, error = %e, "gear's initial window refused; connection refused");
                incoming.refuse();
                shared.telemetry.write(&record(&shared, id, peer, "quic_handshake"));
                continue;
            }
        };
        match incoming.accept_with(config) {
            Ok(connecting) => {
                let shared2 = shared.clone();
                let cancel2 = cancel.clone();
                let cc = choice.cc.name().to_string();
                let live = shared.live.register(id, peer, Transport::Quic, control);
                let app = live.app();
                shared.tracker.spawn(async move {
                    connection(shared2, connecting, id, peer, cc, iw, app, cancel2).await;
                    drop(live);
                    drop(admission);
                });
            }
            Err(e) => {
                tracing::debug!(%peer, error = %e, "QUIC connection refused");
                shared.telemetry.write(&record(&shared, id, peer, "quic_handshake"));
            }
        }
    }
    endpoint.set_server_config(None);
}

#[allow(clippy::too_many_arguments)] // one per piece of the accept's outcome
async fn connection(
    shared: Arc<Shared>,
    connecting: quinn::Connecting,
    id: u64,
    peer: SocketAddr,
    cc: String,
    iw: Option<IwChoice>,
    app: Arc<AppCounters>,
    cancel: CancellationToken,
) {
    let handshake = Duration::from_millis(shared.config.handshake_timeout_ms);
    let quinn = match bounded_handshake(connecting, handshake, &cancel).await {
        Handshake::Done(Ok(c)) => c,
        Handshake::Done(Err(e)) => {
            tracing::debug!(%peer, error = %e, "QUIC handshake failed");
            shared.telemetry.write(&record(&shared, id, peer, "quic_handshake"));
            return;
        }
        Handshake::TimedOut => {
            shared
                .telemetry
                .write(&record(&shared, id, peer, "quic_handshake_timeout"));
            return;
        }
        Handshake::ShutDown => {
            shared
                .telemetry
                .write(&record(&shared, id, peer, "shutdown_in_handshake"));
            return;
        }
    };
    let _open = shared.metrics.connection(Protocol::H3);
    let watch = AckWatch::default();
    let limits = &shared.config.limits;
    let mut h3conn = match h3::server::builder()
        // h3 answers 431 itself to a larger field section (RFC 9114 §4.2.2).
        .max_field_section_size(limits.max_header_bytes.into())
        .build::<_, Bytes>(AckConnection::new(quinn.clone(), watch.clone()))
        .await
    {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "HTTP/3 setup failed");
            return;
        }
    };
    let activity = Activity::new();
    let idle = Duration::from_millis(limits.connection_idle_timeout_ms);
    let conn = Arc::new(Conn {
        shared: shared.clone(),
        id,
        peer,
        quinn,
        cc,
        watch,
        cancel: cancel.clone(),
        iw,
        app,
    });
    // Requests of this connection, so that a shutdown closes it only once they are done.
    let requests = tokio_util::task::TaskTracker::new();
    let mut closing = false;
    loop {
        let next = if closing {
            // After GOAWAY only requests already on their way can arrive; a client that
            // keeps the connection open idle must not hold the shutdown up.
            match tokio::time::timeout(GOAWAY_LINGER, h3conn.accept()).await {
                Ok(r) => r,
                Err(_) => break,
            }
        } else {
            tokio::select! {
                _ = cancel.cancelled() => {
                    // GOAWAY: the client finishes what it sent and opens no more requests here.
                    closing = true;
                    let _ = h3conn.shutdown(0).await;
                    continue;
                }
                _ = activity.idle_for(idle) => {
                    // Idle: GOAWAY, then the orderly close below.
                    closing = true;
                    shared.metrics.limit_hits.count(Hit::Idle);
                    if activity.requests() == 0 {
                        shared.telemetry.write(&limit_record(&conn, Hit::Idle, None));
                    }
                    let _ = h3conn.shutdown(0).await;
                    continue;
                }
                r = h3conn.accept() => r,
            }
        };
        match next {
            Ok(Some(resolver)) => {
                let conn = conn.clone();
                let active = activity.start();
                let head_timeout = Duration::from_millis(limits.header_read_timeout_ms);
                shared.tracker.spawn(requests.track_future(async move {
                    match tokio::time::timeout(head_timeout, resolver.resolve_request()).await {
                        Ok(Ok((req, stream))) => request(conn, req, stream).await,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "bad HTTP/3 request");
                            // h3 has answered 431 itself to an oversize field section.
                            if let h3::error::StreamError::HeaderTooBig { .. } = e {
                                conn.shared.metrics.limit_hits.count(Hit::Headers);
                                conn.shared
                                    .telemetry
                                    .write(&limit_record(&conn, Hit::Headers, Some(431)));
                            }
                        }
                        Err(_) => {
                            // Dropping the resolver ends the stream with no response.
                            conn.shared.metrics.limit_hits.count(Hit::HeaderTimeout);
                            conn.shared
                                .telemetry
                                .write(&limit_record(&conn, Hit::HeaderTimeout, None));
                        }
                    }
                    drop(active);
                }));
            }
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "HTTP/3 connection ended");
                break;
            }
        }
    }
    if closing {
        requests.close();
        requests.wait().await;
        // H3_NO_ERROR (RFC 9114 §8.1): an orderly close once every request is answered.
        conn.quinn.close(quinn::VarInt::from_u32(0x100), b"edge shutting down");
    }
    tracing::debug!(%peer, "HTTP/3 connection closed");
}

async fn request(conn: Arc<Conn>, req: http::Request<()>, stream: H3Stream) {
    let time_unix_ms = unix_ms_now();
    let (parts, ()) = req.into_parts();
    let mut rec = record(&conn.shared, conn.id, conn.peer, "");
    rec.iw = conn.iw.clone();
    rec.time_unix_ms = time_unix_ms;
    rec.method = parts.method.to_string();
    rec.path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let outcome = serve(&conn, parts, stream).await;
    match outcome {
        Ok((status, bytes, first_byte, (at, source), hit)) => {
            rec.error = hit.map(|h| h.name().to_string());
            rec.status = Some(status);
            rec.bytes = bytes;
            rec.server_time_ms = Some(at.saturating_duration_since(first_byte).as_secs_f64() * 1e3);
            rec.server_time_source = Some(source.into());
        }
        Err(e) if e.is::<SendTimedOut>() => {
            conn.shared.metrics.limit_hits.count(Hit::SendTimeout);
            rec.error = Some(Hit::SendTimeout.name().into());
            if let Some(cut) = e.downcast_ref::<SendTimedOut>() {
                rec.status = Some(cut.status);
                rec.bytes = cut.bytes;
            }
        }
        Err(e) => {
            tracing::debug!(error = %e, "HTTP/3 request failed");
            rec.error = Some("reset".into());
        }
    }
    // The controller running now: a switch may have changed it since the accept.
    let cc = conn.shared.live.status(conn.id).map(|s| s.cca.name().to_string());
    rec.transport = Some(transport::quic_snapshot(&conn.quinn, cc.as_deref().unwrap_or(&conn.cc)));
    conn.shared.telemetry.write(&rec);
    // Counted once its record is complete, so a reader of /metrics that sees the count
    // knows the record (and the controller it names) is settled.
    if rec.status.is_some() {
        conn.shared.metrics.request(Protocol::H3, rec.bytes);
    }
}

/// A response stream reset because the client took none of it for `send_timeout_ms`.
#[derive(Debug)]
struct SendTimedOut {
    /// The response's status (its head went out).
    status: u16,
    /// Body bytes written before the limit.
    bytes: u64,
}

impl std::fmt::Display for SendTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client took no response bytes within limits.send_timeout_ms")
    }
}

impl std::error::Error for SendTimedOut {}

/// Sends the response head and body, adding the body bytes written to `bytes`; returns
/// when the first body byte could go. Counts each written chunk out of `app`'s unsent
/// bytes when the size was known (and so counted in).
async fn send_body(
    send: &mut H3Send,
    head: http::response::Parts,
    payload: &mut EdgeBody,
    app: &AppCounters,
    counted: bool,
    bytes: &mut u64,
    send_timeout: std::time::Duration,
) -> Result<Instant, Box<dyn std::error::Error + Send + Sync>> {
    let status = head.status.as_u16();
    send.send_response(http::Response::from_parts(head, ())).await?;
    let first_byte = Instant::now();
    while let Some(frame) = payload.frame().await {
        if let Ok(data) = frame?.into_data() {
            let n = data.len() as u64;
            if tokio::time::timeout(send_timeout, send.send_data(data)).await.is_err() {
                // H3_REQUEST_CANCELLED (RFC 9114 §8.1): the client took nothing for the limit.
                send.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
                return Err(Box::new(SendTimedOut { status, bytes: *bytes }));
            }
            *bytes += n;
            if counted {
                app.written(n);
            }
        }
    }
    Ok(first_byte)
}

/// Answers (reading the request body as the route needs it), and waits for the
/// acknowledgement of the last byte.
async fn serve(
    conn: &Conn,
    parts: http::request::Parts,
    stream: H3Stream,
) -> Result<(u16, u64, Instant, (Instant, &'static str), Option<Hit>), Box<dyn std::error::Error + Send + Sync>> {
    let (mut send, recv): (H3Send, _) = stream.split();
    crate::service::added_processing(conn.shared.config.quic_processing_ms).await;
    let resp = respond(&conn.shared, parts, RequestBody::H3(Box::new(recv))).await;
    let hit = crate::service::hit_of(&resp);
    let (mut head, mut payload) = resp.into_parts();
    // hyper sets Content-Length from an exact body size on HTTP/1.1 and HTTP/2; h3 leaves it to us.
    if let Some(n) = http_body::Body::size_hint(&payload).exact() {
        head.headers
            .entry(http::header::CONTENT_LENGTH)
            .or_insert_with(|| http::HeaderValue::from(n));
    }
    let status = head.status.as_u16();
    // Floo's app-level monitor (Table 2): the response is generated now; it waits (Qws)
    // until its last byte is in QUIC's send buffer, and counts as unsent until then.
    let generated = Instant::now();
    let known = http_body::Body::size_hint(&payload).exact();
    conn.app.generated(known.unwrap_or(0));
    let mut bytes = 0u64;
    let send_timeout = std::time::Duration::from_millis(conn.shared.config.limits.send_timeout_ms);
    let sent = send_body(
        &mut send,
        head,
        &mut payload,
        &conn.app,
        known.is_some(),
        &mut bytes,
        send_timeout,
    )
    .await;
    if let Some(n) = known {
        // What a failed or short body left counted in.
        conn.app.written(n.saturating_sub(bytes));
    }
    let first_byte = sent?;
    conn.app.finished(generated.elapsed());
    let acked = conn.watch.watch(send.send_id());
    send.finish().await?;
    let written = Instant::now();
    // A client that vanished without closing (its CONNECTION_CLOSE lost, its endpoint
    // gone) never acknowledges: at shutdown that must not hold the edge up.
    let shutdown = async {
        conn.cancel.cancelled().await;
        tokio::time::sleep(GOAWAY_LINGER).await;
    };
    let ack = tokio::select! {
        r = tokio::time::timeout(ACK_WAIT_LIMIT, acked) => r.ok().and_then(Result::ok),
        _ = shutdown => None,
    };
    let end = match ack {
        Some(AckOutcome::Acked(at)) => (at, "quic_stream_acked"),
        _ => (written, "written"),
    };
    Ok((status, bytes, first_byte, end, hit))
}
