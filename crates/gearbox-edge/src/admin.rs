//! The admin port: `/metrics` in Prometheus text format, over plain HTTP/1.1.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use tokio_util::sync::CancellationToken;

use crate::Metrics;

pub(crate) async fn serve(metrics: Arc<Metrics>, listener: tokio::net::TcpListener, cancel: CancellationToken) {
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
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let m = m.clone();
                async move {
                    let resp = if req.uri().path() == "/metrics" {
                        http::Response::builder()
                            .header(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")
                            .body(Full::new(Bytes::from(m.render())))
                    } else {
                        http::Response::builder()
                            .status(404)
                            .body(Full::new(Bytes::from_static(b"try /metrics\n")))
                    };
                    Ok::<_, Infallible>(resp.unwrap_or_default())
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, svc)
                .await;
        });
    }
}
