//! The QUIC side: per-connection controller choice through `Incoming::accept_with`,
//! HTTP/3 through h3 on [`crate::h3_ack`], and "last byte acknowledged" from quinn.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use gearbox_dataplane::telemetry::{unix_ms_now, EdgeRecord, Protocol, Side, SCHEMA_VERSION};
use gearbox_dataplane::transport;
use gearbox_gear_api::{AcceptedConnection, IwChoice, Transport};
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;

use crate::h3_ack::{AckConnection, AckOutcome, AckWatch, Bidi};
use crate::live::AppCounters;
use crate::service::{respond, EdgeBody, RequestBody};
use crate::Shared;

/// Longest wait for the client to acknowledge a response's last byte.
const ACK_WAIT_LIMIT: Duration = Duration::from_secs(10);
/// How long a connection that was sent GOAWAY waits for requests already on their way.
const GOAWAY_LINGER: Duration = Duration::from_millis(500);

type H3Stream = h3::server::RequestStream<Bidi<Bytes>, Bytes>;

struct Conn {
    shared: Arc<Shared>,
    id: u64,
    peer: SocketAddr,
    quinn: quinn::Connection,
    cc: String,
    watch: AckWatch,
    /// The connection's initial window and where it came from (TCP WISE's record).
    iw: Option<IwChoice>,
    /// Application-level counters for Floo's Monitor.
    app: Arc<AppCounters>,
}

fn record(shared: &Shared, id: u64, peer: SocketAddr, error: &str) -> EdgeRecord {
    EdgeRecord {
        side: Side::Edge,
        schema: SCHEMA_VERSION,
        time_unix_ms: unix_ms_now(),
        conn_id: id,
        client_addr: peer.to_string(),
        protocol: Some(Protocol::H3),
        method: String::new(),
        path: String::new(),
        status: None,
        bytes: 0,
        server_time_ms: None,
        server_time_source: None,
        transport: None,
        error: (!error.is_empty()).then(|| error.to_string()),
        iw: None,
    }
    .with_shared(shared)
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
    let quinn = match tokio::time::timeout(handshake, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "QUIC handshake failed");
            shared.telemetry.write(&record(&shared, id, peer, "quic_handshake"));
            return;
        }
        Err(_) => {
            shared
                .telemetry
                .write(&record(&shared, id, peer, "quic_handshake_timeout"));
            return;
        }
    };
    let _open = shared.metrics.connection(Protocol::H3);
    let watch = AckWatch::default();
    let mut h3conn = match h3::server::builder()
        .build::<_, Bytes>(AckConnection::new(quinn.clone(), watch.clone()))
        .await
    {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "HTTP/3 setup failed");
            return;
        }
    };
    let conn = Arc::new(Conn {
        shared: shared.clone(),
        id,
        peer,
        quinn,
        cc,
        watch,
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
                r = h3conn.accept() => r,
            }
        };
        match next {
            Ok(Some(resolver)) => {
                let conn = conn.clone();
                shared.tracker.spawn(requests.track_future(async move {
                    match resolver.resolve_request().await {
                        Ok((req, stream)) => request(conn, req, stream).await,
                        Err(e) => tracing::debug!(error = %e, "bad HTTP/3 request"),
                    }
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
}

async fn request(conn: Arc<Conn>, req: http::Request<()>, mut stream: H3Stream) {
    let time_unix_ms = unix_ms_now();
    let (parts, ()) = req.into_parts();
    let mut rec = record(&conn.shared, conn.id, conn.peer, "");
    rec.iw = conn.iw.clone();
    rec.time_unix_ms = time_unix_ms;
    rec.method = parts.method.to_string();
    rec.path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let outcome = serve(&conn, parts, &mut stream).await;
    match outcome {
        Ok((status, bytes, first_byte, ack)) => {
            rec.status = Some(status);
            rec.bytes = bytes;
            let (at, source) = match ack {
                Some(AckOutcome::Acked(at)) => (at, "quic_stream_acked"),
                _ => (Instant::now(), "written"),
            };
            rec.server_time_ms = Some(at.saturating_duration_since(first_byte).as_secs_f64() * 1e3);
            rec.server_time_source = Some(source.into());
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
    if rec.error.is_none() {
        conn.shared.metrics.request(Protocol::H3, rec.bytes);
    }
}

/// Sends the response head and body, adding the body bytes written to `bytes`; returns
/// when the first body byte could go. Counts each written chunk out of `app`'s unsent
/// bytes when the size was known (and so counted in).
async fn send_body(
    stream: &mut H3Stream,
    head: http::response::Parts,
    payload: &mut EdgeBody,
    app: &AppCounters,
    counted: bool,
    bytes: &mut u64,
) -> Result<Instant, Box<dyn std::error::Error + Send + Sync>> {
    stream.send_response(http::Response::from_parts(head, ())).await?;
    let first_byte = Instant::now();
    while let Some(frame) = payload.frame().await {
        if let Ok(data) = frame?.into_data() {
            let n = data.len() as u64;
            stream.send_data(data).await?;
            *bytes += n;
            if counted {
                app.written(n);
            }
        }
    }
    Ok(first_byte)
}

/// Reads the request body, answers, and waits for the acknowledgement of the last byte.
async fn serve(
    conn: &Conn,
    parts: http::request::Parts,
    stream: &mut H3Stream,
) -> Result<(u16, u64, Instant, Option<AckOutcome>), Box<dyn std::error::Error + Send + Sync>> {
    let limit = conn.shared.config.max_bytes;
    let mut body = BytesMut::new();
    while let Some(mut chunk) = stream.recv_data().await? {
        if body.len() as u64 + chunk.remaining() as u64 > limit {
            return Err(format!("request body over {limit} bytes").into());
        }
        while chunk.has_remaining() {
            let c = chunk.chunk();
            body.extend_from_slice(c);
            let n = c.len();
            chunk.advance(n);
        }
    }
    crate::service::added_processing(conn.shared.config.quic_processing_ms).await;
    let resp = respond(&conn.shared, parts, RequestBody::Buffered(body.freeze())).await;
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
    let sent = send_body(stream, head, &mut payload, &conn.app, known.is_some(), &mut bytes).await;
    if let Some(n) = known {
        // What a failed or short body left counted in.
        conn.app.written(n.saturating_sub(bytes));
    }
    let first_byte = sent?;
    conn.app.finished(generated.elapsed());
    let acked = conn.watch.watch(stream.send_id());
    // (`send_body` has written every byte: the stream is finished below.)
    stream.finish().await?;
    let ack = tokio::time::timeout(ACK_WAIT_LIMIT, acked)
        .await
        .ok()
        .and_then(Result::ok);
    Ok((status, bytes, first_byte, ack))
}
