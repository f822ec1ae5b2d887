//! Hedging a slow QUIC request over TCP (`gearbox_client::hedge`), against our edge and
//! quinn through a front whose UDP side can throttle what the edge sends the client:
//! datagrams keep coming (so the path is not silent) but slowly, as under a UDP rate
//! limit. Assertions are on the records (which copy answered, when the hedge started,
//! the connection reused), never on elapsed time.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::bounded;
use gearbox_client::{
    Bytes, Client, ClientConfig, HedgeRule, Protocol, Request, StaticTransport, TransportPref, Trust,
};

/// While throttled, the front lets one datagram from the edge through per this interval
/// (about 60-70 kB/s with QUIC's 1.2-1.4 kB packets): a 300 kB response takes seconds
/// over QUIC, and a PING is always answered within a second, so the silence rule stays out.
const PACE: Duration = Duration::from_millis(20);

/// A front for our edge on one port: its TCP side forwards connections to the edge's
/// TCP listener untouched; its UDP side relays datagrams both ways, and while `throttle`
/// is set, queues the edge's datagrams and releases one per [`PACE`] (none dropped).
/// Returns the port and the throttle switch.
async fn throttling_front(edge_quic: SocketAddr, edge_tcp: SocketAddr) -> (u16, Arc<AtomicBool>) {
    let front = common::udp_front_with_tcp_to(edge_tcp).await;
    let port = front.local_addr().unwrap().port();
    let front = Arc::new(front);
    let throttle = Arc::new(AtomicBool::new(false));
    // The edge's datagrams leave in order through one pacer.
    let (to_client, mut paced) = tokio::sync::mpsc::unbounded_channel::<(Vec<u8>, SocketAddr)>();
    let (out, slow) = (front.clone(), throttle.clone());
    tokio::spawn(async move {
        while let Some((datagram, client)) = paced.recv().await {
            if slow.load(Ordering::Relaxed) {
                tokio::time::sleep(PACE).await;
            }
            let _ = out.send_to(&datagram, client).await;
        }
    });
    // One socket towards the edge per client address (several clients share the front).
    tokio::spawn(async move {
        let mut backs: HashMap<SocketAddr, Arc<tokio::net::UdpSocket>> = HashMap::new();
        let mut up = vec![0u8; 65536];
        loop {
            let Ok((n, from)) = front.recv_from(&mut up).await else {
                return;
            };
            let back = match backs.get(&from) {
                Some(b) => b.clone(),
                None => {
                    let b = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
                    b.connect(edge_quic).await.unwrap();
                    let (reader, tx) = (b.clone(), to_client.clone());
                    tokio::spawn(async move {
                        let mut down = vec![0u8; 65536];
                        while let Ok(n) = reader.recv(&mut down).await {
                            if tx.send((down[..n].to_vec(), from)).is_err() {
                                return;
                            }
                        }
                    });
                    backs.insert(from, b.clone());
                    b
                }
            };
            let _ = back.send(&up[..n]).await;
        }
    });
    (port, throttle)
}

/// Our edge behind a throttling front, and a stop for the edge.
struct Setup {
    site: common::Site,
    origin: String,
    throttle: Arc<AtomicBool>,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<()>,
}

impl Setup {
    async fn new() -> Setup {
        let site = common::Site::new();
        let edge = site.default_edge().await;
        let (quic, tcp) = (edge.quic_addr(), edge.tcp_addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(edge.serve(async move {
            let _ = stopped.await;
        }));
        let (port, throttle) = throttling_front(quic, tcp).await;
        Setup {
            site,
            origin: format!("127.0.0.1:{port}"),
            throttle,
            stop,
            serving,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.origin)
    }

    /// A client whose `auto` requests go over QUIC (a gear that always picks it), with
    /// hedging set to `hedge`.
    fn client(&self, hedge: Option<HedgeRule>) -> Client {
        Client::with_gear(
            ClientConfig {
                trust: Trust::Roots(vec![self.site.cert()]),
                request_timeout: Duration::from_secs(40),
                hedge,
                ..ClientConfig::default()
            },
            Box::new(StaticTransport::new(TransportPref::Quic)),
        )
        .unwrap()
    }

    async fn finish(self, clients: &[&Client]) {
        for c in clients {
            c.close_connections().await;
        }
        let _ = self.stop.send(());
        let _ = bounded(self.serving).await;
    }
}

/// One request that must succeed; its record.
async fn ok(client: &Client, req: Request) -> gearbox_client::ClientRecord {
    let url = req.url.clone();
    let (result, record) = client.request_with_record(req).await;
    let response = result.unwrap_or_else(|e| panic!("{url}: {e}"));
    assert_eq!(response.status, 200, "{url}");
    record
}

#[tokio::test]
async fn a_quic_request_stalled_behind_a_throttled_udp_path_is_hedged_and_tcp_answers() {
    let s = Setup::new().await;
    let client = s.client(Some(HedgeRule::default()));
    bounded(async {
        // What TCP costs at the origin (a fixed TCP request counts), and a pooled QUIC
        // connection (a fixed QUIC request never hedges).
        let tcp = ok(&client, Request::get(s.url("/bytes/1000"), TransportPref::Tcp)).await;
        assert_eq!(tcp.protocol, Protocol::H2);
        let warm = ok(&client, Request::get(s.url("/bytes/1000"), TransportPref::Quic)).await;
        assert_eq!(warm.protocol, Protocol::H3);
        // UDP is throttled: the gear's QUIC request crawls; the hedge answers over TCP.
        s.throttle.store(true, Ordering::Relaxed);
        let (result, r) = client
            .request_with_record(Request::get(s.url("/bytes/300000"), TransportPref::Auto))
            .await;
        let response = result.expect("the hedge answers");
        assert_eq!(response.body.len(), 300_000);
        assert_eq!(r.error, None);
        assert_eq!(r.protocol, Protocol::H2, "the winner's protocol: {r:?}");
        assert_eq!(r.hedged, Some(Protocol::H2), "{r:?}");
        let at = r.hedge_at_ms.expect("when the hedge started");
        let delay = HedgeRule::default().delay(tcp.rct_ms, warm.rct_ms).unwrap();
        assert!(
            at >= delay.as_secs_f64() * 1e3,
            "hedged at {at} ms, before the rule's {delay:?}"
        );
        assert!(r.rct_ms.unwrap() >= at, "{r:?}");
        assert_eq!(r.retried_from, None, "a hedge is no retry");
        let decision = r.decision.as_deref().unwrap();
        assert!(decision.starts_with("static:quic"), "{decision}");
        assert!(decision.ends_with(";hedge=tcp-won"), "{decision}");
        assert_eq!(
            client.quic_broken_for(&s.origin),
            None,
            "a slow QUIC is not a broken one"
        );
        // The cancelled HTTP/3 stream left the pooled connection usable.
        s.throttle.store(false, Ordering::Relaxed);
        let after = ok(&client, Request::get(s.url("/bytes/1000"), TransportPref::Quic)).await;
        assert_eq!(after.protocol, Protocol::H3);
        assert_eq!(
            (after.conn_id, after.new_connection),
            (warm.conn_id, false),
            "the same QUIC connection"
        );
    })
    .await;
    s.finish(&[&client]).await;
}

#[tokio::test]
async fn a_non_idempotent_request_is_never_hedged() {
    let s = Setup::new().await;
    let client = s.client(Some(HedgeRule::default()));
    bounded(async {
        ok(&client, Request::get(s.url("/bytes/1000"), TransportPref::Tcp)).await;
        ok(&client, Request::get(s.url("/bytes/1000"), TransportPref::Quic)).await;
        s.throttle.store(true, Ordering::Relaxed);
        // A POST (not idempotent by its method), and a GET marked not idempotent.
        let post = Request::post(s.url("/bytes/100000"), Bytes::new(), TransportPref::Auto);
        let mut get = Request::get(s.url("/bytes/100000"), TransportPref::Auto);
        get.idempotent = Some(false);
        for req in [post, get] {
            let r = ok(&client, req).await;
            assert_eq!(r.protocol, Protocol::H3, "{r:?}");
            assert_eq!((r.hedged, r.hedge_at_ms), (None, None), "{r:?}");
            assert!(!r.decision.unwrap().contains(";hedge="));
        }
    })
    .await;
    s.finish(&[&client]).await;
}

#[tokio::test]
async fn a_quic_request_that_completes_before_the_delay_is_not_hedged() {
    let s = Setup::new().await;
    // A floor far above what a loopback request takes, so "fast" needs no clock here.
    let rule = HedgeRule {
        floor: Duration::from_secs(20),
        ..HedgeRule::default()
    };
    let client = s.client(Some(rule));
    bounded(async {
        ok(&client, Request::get(s.url("/bytes/1000"), TransportPref::Tcp)).await;
        let mut conn = None;
        for _ in 0..5 {
            let r = ok(&client, Request::get(s.url("/bytes/20000"), TransportPref::Auto)).await;
            assert_eq!(r.protocol, Protocol::H3, "{r:?}");
            assert_eq!((r.hedged, r.hedge_at_ms), (None, None), "{r:?}");
            assert_eq!(r.decision.as_deref(), Some("static:quic"));
            assert_eq!(*conn.get_or_insert(r.conn_id), r.conn_id, "one pooled connection");
        }
    })
    .await;
    s.finish(&[&client]).await;
}

#[tokio::test]
async fn fixed_transports_the_race_and_a_client_without_hedging_never_hedge() {
    let s = Setup::new().await;
    let hedging = s.client(Some(HedgeRule::default()));
    let off = s.client(ClientConfig::default().hedge);
    assert_eq!(ClientConfig::default().hedge, None, "off unless asked for");
    bounded(async {
        // No TCP request has completed at the origin yet: nothing to hedge against.
        s.throttle.store(true, Ordering::Relaxed);
        let r = ok(&hedging, Request::get(s.url("/bytes/100000"), TransportPref::Auto)).await;
        assert_eq!((r.protocol, r.hedged), (Protocol::H3, None), "{r:?}");
        s.throttle.store(false, Ordering::Relaxed);
        for c in [&hedging, &off] {
            ok(c, Request::get(s.url("/bytes/1000"), TransportPref::Tcp)).await;
            ok(c, Request::get(s.url("/bytes/1000"), TransportPref::Quic)).await;
        }
        s.throttle.store(true, Ordering::Relaxed);
        // QUIC-only and TCP-only are baselines; the race is Chromium's, which has no hedge.
        for transport in [TransportPref::Quic, TransportPref::Tcp, TransportPref::Race] {
            let r = ok(&hedging, Request::get(s.url("/bytes/100000"), transport)).await;
            assert_eq!((r.hedged, r.hedge_at_ms), (None, None), "{transport}: {r:?}");
            if transport == TransportPref::Quic {
                assert_eq!(r.protocol, Protocol::H3);
            }
        }
        // Hedging off (the default): the gear's QUIC request crawls to its end on QUIC.
        let r = ok(&off, Request::get(s.url("/bytes/100000"), TransportPref::Auto)).await;
        assert_eq!((r.protocol, r.hedged), (Protocol::H3, None), "{r:?}");
    })
    .await;
    s.finish(&[&hedging, &off]).await;
}
