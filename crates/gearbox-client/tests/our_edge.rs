//! The client against gearbox's own edge: the `/bytes/{n}` route that workloads use,
//! GET and POST, over HTTP/1.1, HTTP/2 and HTTP/3.

mod common;

use common::{bounded, Site};
use gearbox_client::{Bytes, Protocol, Request, TransportPref};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_edge_serves_synthetic_sizes_and_accepts_uploads_on_every_protocol() {
    let site = Site::new();
    let edge = site.default_edge().await;
    let (tcp, quic) = (edge.tcp_addr(), edge.quic_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(edge.serve(async {
        let _ = stopped.await;
    }));
    let client = site.client();
    bounded(async {
        for (transport, addr, protocol) in [
            (TransportPref::Tcp, tcp, Protocol::H2),
            (TransportPref::H1, tcp, Protocol::H1),
            (TransportPref::Quic, quic, Protocol::H3),
        ] {
            let url = format!("https://{addr}/bytes/100000");
            let get = client
                .request(Request::get(&url, transport))
                .await
                .expect("GET /bytes/100000");
            assert_eq!((get.status, get.record.protocol), (200, protocol));
            assert_eq!(get.body.len(), 100_000, "{protocol}");
            assert_eq!(get.record.bytes, 100_000);

            let upload = Bytes::from(vec![7u8; 50_000]);
            let post = client
                .request(Request::post(&url, upload, transport))
                .await
                .expect("POST with a body");
            assert_eq!(post.status, 200, "{protocol}: the edge accepts an upload on /bytes/n");
            assert_eq!(post.body.len(), 100_000);
            assert!(!post.record.new_connection, "{protocol}: reused");
        }
    })
    .await;
    // Closing the client's connections lets the edge's graceful shutdown finish at once.
    drop(client);
    let _ = stop.send(());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), server).await;
}
