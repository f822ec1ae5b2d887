//! The admin port, plain HTTP/1.1 (bind it to loopback or a management network):
//! - `GET /metrics`: counters in Prometheus text format;
//! - `GET /connections`: the live connections and their congestion controllers (JSON);
//! - `POST /connections/{id}/cc?to=NAME&mode=full|part`: switch a live connection's
//!   controller (Floo §3.4), the operator's way to do what a gear does through
//!   [`crate::LiveConnections::switch`].

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use gearbox_cc::{Cca, SwitchMode};
use http::{Method, StatusCode};
use http_body_util::Full;
use tokio_util::sync::CancellationToken;

use crate::live::{LiveConnections, SwitchError};
use crate::Metrics;

pub(crate) async fn serve(
    metrics: Arc<Metrics>,
    live: Arc<LiveConnections>,
    listener: tokio::net::TcpListener,
    header_timeout: std::time::Duration,
    cancel: CancellationToken,
) {
    loop {
        let (stream, _) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    continue;
                }
            },
        };
        let m = metrics.clone();
        let live = live.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let resp = route(&m, &live, req.method(), req.uri());
                async move { Ok::<_, Infallible>(resp) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(io, svc)
                .await;
        });
    }
}

fn reply(status: StatusCode, content_type: &str, body: String) -> http::Response<Full<Bytes>> {
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_default()
}

fn json_error(status: StatusCode, message: &str) -> http::Response<Full<Bytes>> {
    reply(
        status,
        "application/json",
        serde_json::json!({ "error": message }).to_string() + "\n",
    )
}

fn route(metrics: &Metrics, live: &LiveConnections, method: &Method, uri: &http::Uri) -> http::Response<Full<Bytes>> {
    let path = uri.path();
    match (method, path) {
        (&Method::GET, "/metrics") => reply(StatusCode::OK, "text/plain; version=0.0.4", metrics.render()),
        (&Method::GET, "/connections") => reply(
            StatusCode::OK,
            "application/json",
            serde_json::to_string(&live.list()).unwrap_or_default() + "\n",
        ),
        (&Method::POST, p) if p.starts_with("/connections/") && p.ends_with("/cc") => {
            let id = &p["/connections/".len()..p.len() - "/cc".len()];
            switch(live, id, uri.query().unwrap_or(""))
        }
        _ => json_error(
            StatusCode::NOT_FOUND,
            "try GET /metrics, GET /connections or POST /connections/{id}/cc?to=NAME&mode=full|part",
        ),
    }
}

fn switch(live: &LiveConnections, id: &str, query: &str) -> http::Response<Full<Bytes>> {
    let Ok(conn_id) = id.parse::<u64>() else {
        return json_error(
            StatusCode::BAD_REQUEST,
            &format!("connection id {id:?} is not a number"),
        );
    };
    let (mut to, mut mode) = (None, SwitchMode::Full);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "to" => match Cca::from_name(v) {
                Some(c) => to = Some(c),
                None => {
                    let valid: Vec<&str> = Cca::ALL.iter().map(|c| c.name()).collect();
                    return json_error(
                        StatusCode::BAD_REQUEST,
                        &format!("unknown congestion control {v:?} in `to`; valid: {}", valid.join(", ")),
                    );
                }
            },
            "mode" => match v {
                "full" => mode = SwitchMode::Full,
                "part" => mode = SwitchMode::Part,
                _ => {
                    return json_error(
                        StatusCode::BAD_REQUEST,
                        &format!("unknown `mode` {v:?}; valid: full, part"),
                    )
                }
            },
            _ => {
                return json_error(
                    StatusCode::BAD_REQUEST,
                    &format!("unknown parameter {k:?}; valid: to, mode"),
                )
            }
        }
    }
    let Some(to) = to else {
        return json_error(StatusCode::BAD_REQUEST, "missing `to` (the controller to switch to)");
    };
    match live.switch(conn_id, to, mode) {
        Ok(()) => reply(
            StatusCode::ACCEPTED,
            "application/json",
            serde_json::json!({ "conn_id": conn_id, "to": to, "mode": mode }).to_string() + "\n",
        ),
        Err(e @ SwitchError::NoConnection(_)) => json_error(StatusCode::NOT_FOUND, &e.to_string()),
        Err(e @ (SwitchError::NotSwitchable { .. } | SwitchError::Kernel { .. })) => {
            json_error(StatusCode::CONFLICT, &e.to_string())
        }
    }
}
