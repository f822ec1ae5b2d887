//! Switching a live QUIC connection's congestion controller at the edge (Floo §3.4),
//! through the edge's admin port, while our client keeps using the connection.

mod common;

use std::time::Duration;

use common::{bounded, Site};
use gearbox_cc::{Cca, QuicCc};
use gearbox_client::{Request, TransportPref};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One plain HTTP/1.1 exchange with the admin port: (status, body).
async fn admin(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("admin port");
    let req = format!("{method} {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("admin request");
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.expect("admin response");
    let status = raw[9..12].parse().expect("status code");
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Our edge serving on loopback with an admin port and a telemetry file.
struct Running {
    tcp: std::net::SocketAddr,
    quic: std::net::SocketAddr,
    admin: std::net::SocketAddr,
    telemetry: std::path::PathBuf,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
}

async fn start(site: &Site, tweak: impl FnOnce(&mut gearbox_edge::EdgeConfig)) -> Running {
    start_with(site, tweak, None).await
}

async fn start_with(
    site: &Site,
    tweak: impl FnOnce(&mut gearbox_edge::EdgeConfig),
    period: Option<gearbox_edge::floo::PeriodGear>,
) -> Running {
    let telemetry = site.path().join("edge.jsonl");
    let mut config = gearbox_edge::EdgeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        telemetry: Some(telemetry.clone()),
        ..gearbox_edge::EdgeConfig::default()
    };
    tweak(&mut config);
    let edge = site
        .edge_with(config, |g| {
            if let Some(p) = period {
                g.set_period_gear(p);
            }
        })
        .await;
    let (tcp, quic, admin) = (edge.tcp_addr(), edge.quic_addr(), edge.admin_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(edge.serve(async {
        let _ = stopped.await;
    }));
    Running {
        tcp,
        quic,
        admin,
        telemetry,
        stop,
        server,
    }
}

impl Running {
    /// Stops the edge (drop the client first) and returns its telemetry records.
    async fn stop(self) -> Vec<serde_json::Value> {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(5), self.server).await;
        std::fs::read_to_string(&self.telemetry)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Waits until the edge has finished (and recorded) `n` requests over `protocol`: the
/// edge writes a request's record when the client has acknowledged its last byte,
/// shortly after the client has the body.
async fn served(addr: std::net::SocketAddr, protocol: &str, n: u64) {
    let want = format!("gearbox_requests_total{{protocol=\"{protocol}\"}} {n}");
    while !admin(addr, "GET", "/metrics").await.1.contains(&want) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_quic_connection_switches_controller_and_every_switch_is_recorded() {
    let site = Site::new();
    let edge = start(&site, |c| c.cc = QuicCc::Suite(Cca::Cubic)).await;
    let (quic, admin_addr) = (edge.quic, edge.admin);
    let client = site.client();
    let url = format!("https://{quic}/bytes/200000");
    let get = || async {
        client
            .request(Request::get(&url, TransportPref::Quic))
            .await
            .expect("GET over QUIC")
    };
    bounded(async {
        get().await;
        served(admin_addr, "h3", 1).await;
        let (status, body) = admin(admin_addr, "GET", "/connections").await;
        assert_eq!(status, 200, "{body}");
        let conns: serde_json::Value = serde_json::from_str(&body).unwrap();
        let conn = &conns[0];
        assert_eq!(
            (conn["transport"].as_str(), conn["cca"].as_str()),
            (Some("quic"), Some("cubic"))
        );
        let id = conn["conn_id"].as_u64().unwrap();

        // Bad requests are refused with the reason, and change nothing.
        let (status, body) = admin(admin_addr, "POST", &format!("/connections/{id}/cc?to=vegas")).await;
        assert_eq!(status, 400);
        assert!(body.contains("newreno, cubic, bbr, copa, westwood, vivace"), "{body}");
        let (status, _) = admin(admin_addr, "POST", "/connections/999999/cc?to=bbr").await;
        assert_eq!(status, 404);

        // Part switch (P-Floo): immediate at the controller's next event.
        let (status, body) = admin(admin_addr, "POST", &format!("/connections/{id}/cc?to=bbr&mode=part")).await;
        assert_eq!(status, 202, "{body}");
        let second = get().await;
        assert!(!second.record.new_connection, "the same connection carries on");
        assert_eq!(second.body.len(), 200_000);
        served(admin_addr, "h3", 2).await;
        // The edge's record of the second request names the controller now running.
        // A switch to what already runs is a recorded no-op.
        let (status, _) = admin(admin_addr, "POST", &format!("/connections/{id}/cc?to=bbr")).await;
        assert_eq!(status, 202);
        // Full switch back to Cubic: waits for BBR's converged phase (at most the
        // configured bound), so keep the connection busy until it has happened.
        let (status, _) = admin(admin_addr, "POST", &format!("/connections/{id}/cc?to=cubic&mode=full")).await;
        assert_eq!(status, 202);
        loop {
            get().await;
            let (_, body) = admin(admin_addr, "GET", "/connections").await;
            let conns: serde_json::Value = serde_json::from_str(&body).unwrap();
            if conns[0]["switches"].as_u64() == Some(2) {
                assert_eq!(conns[0]["cca"], "cubic");
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (_, metrics) = admin(admin_addr, "GET", "/metrics").await;
        assert!(
            metrics.contains("gearbox_cc_switches_total{from=\"cubic\",to=\"bbr\",mode=\"part\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics.contains("gearbox_cc_switches_total{from=\"bbr\",to=\"cubic\",mode=\"full\"} 1"),
            "{metrics}"
        );
    })
    .await;
    drop(client);
    let records = edge.stop().await;
    let switches: Vec<&serde_json::Value> = records.iter().filter(|r| r["event"] == "cc_switch").collect();
    let outcome = |i: usize| {
        (
            switches[i]["from"].as_str().unwrap(),
            switches[i]["to"].as_str().unwrap(),
            switches[i]["mode"].as_str().unwrap(),
            switches[i]["outcome"].as_str().unwrap(),
        )
    };
    assert_eq!(switches.len(), 3, "{switches:?}");
    assert_eq!(outcome(0), ("cubic", "bbr", "part", "switched"));
    assert_eq!(outcome(1), ("bbr", "bbr", "full", "no_op"));
    assert_eq!(outcome(2), ("bbr", "cubic", "full", "switched"));
    assert!(switches[2]["deferred_s"].as_f64().unwrap() <= 2.0 + 1e-9);
    for s in &switches {
        assert!(s["cwnd_before"].as_u64().unwrap() > 0 && s["cwnd_after"].as_u64().unwrap() > 0);
    }
    // Requests after the first switch report the controller then running.
    let after: Vec<&str> = records
        .iter()
        .filter(|r| r["path"] == "/bytes/200000")
        .map(|r| r["transport"]["cc"].as_str().unwrap())
        .collect();
    assert_eq!(after[0], "cubic");
    assert_eq!(after[1], "bbr");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_tcp_connection_switches_kernel_controller_and_refuses_what_the_kernel_lacks() {
    let site = Site::new();
    let edge = start(&site, |c| c.tcp_cc = Some(gearbox_cc::TcpCc::Cubic)).await;
    let (tcp, admin_addr) = (edge.tcp, edge.admin);
    let client = site.client();
    let url = format!("https://{tcp}/bytes/200000");
    bounded(async {
        client
            .request(Request::get(&url, TransportPref::Tcp))
            .await
            .expect("GET over TCP");
        served(admin_addr, "h2", 1).await;
        let (_, body) = admin(admin_addr, "GET", "/connections").await;
        let conns: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (conns[0]["transport"].as_str(), conns[0]["cca"].as_str()),
            (Some("tcp"), Some("cubic"))
        );
        let id = conns[0]["conn_id"].as_u64().unwrap();
        let (status, body) = admin(admin_addr, "POST", &format!("/connections/{id}/cc?to=bbr")).await;
        assert_eq!(status, 202, "{body}");
        let (_, body) = admin(admin_addr, "GET", "/connections").await;
        let conns: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(conns[0]["cca"], "bbr", "the kernel switched the live socket at once");
        let second = client
            .request(Request::get(&url, TransportPref::Tcp))
            .await
            .expect("GET over TCP");
        assert!(!second.record.new_connection);
        assert_eq!(second.body.len(), 200_000);
        let (status, body) = admin(admin_addr, "POST", &format!("/connections/{id}/cc?to=copa")).await;
        assert_eq!(status, 409);
        assert!(
            body.contains("no kernel TCP implementation") && body.contains("the kernel offers"),
            "{body}"
        );
        let (_, metrics) = admin(admin_addr, "GET", "/metrics").await;
        assert!(
            metrics.contains("gearbox_cc_switches_total{from=\"cubic\",to=\"bbr\",mode=\"kernel\"} 1"),
            "{metrics}"
        );
    })
    .await;
    drop(client);
    let records = edge.stop().await;
    let switches: Vec<&serde_json::Value> = records.iter().filter(|r| r["event"] == "cc_switch").collect();
    assert_eq!(switches.len(), 1, "{switches:?}");
    assert_eq!(
        (
            switches[0]["transport"].as_str(),
            switches[0]["from"].as_str(),
            switches[0]["to"].as_str()
        ),
        (Some("tcp"), Some("cubic"), Some("bbr"))
    );
    assert_eq!(switches[0]["outcome"], "switched");
    // The edge's records of the two requests name the server socket's controller.
    let ccs: Vec<&str> = records
        .iter()
        .filter(|r| r["path"] == "/bytes/200000")
        .map(|r| r["transport"]["cc"].as_str().unwrap())
        .collect();
    assert_eq!(ccs, ["cubic", "bbr"]);
}

/// A period gear that always asks for one controller and keeps what it was shown.
struct Recording {
    to: Cca,
    seen: Seen,
}

impl gearbox_gear_api::CcaPeriodGear for Recording {
    fn choose(
        &mut self,
        stats: &gearbox_gear_api::ConnectionStats,
        _now: std::time::Instant,
    ) -> gearbox_gear_api::Decision<Cca> {
        self.seen.lock().unwrap().push(stats.clone());
        gearbox_gear_api::Decision::new(self.to, format!("test: always {}", self.to))
    }
}

type Seen = std::sync::Arc<std::sync::Mutex<Vec<gearbox_gear_api::ConnectionStats>>>;

/// An edge whose period gear asks for `to` every 200 ms, and what the gear is shown.
async fn recording_edge(
    site: &Site,
    tweak: impl FnOnce(&mut gearbox_edge::EdgeConfig),
    to: Cca,
    mode: gearbox_cc::SwitchMode,
) -> (Running, Seen) {
    let seen = Seen::default();
    let gear = gearbox_edge::floo::PeriodGear {
        gear: Box::new(Recording { to, seen: seen.clone() }),
        period: Duration::from_millis(200),
        mode,
    };
    (start_with(site, tweak, Some(gear)).await, seen)
}

/// One 300 kB GET over QUIC on `client`'s pooled connection, then the edge's first live
/// connection (its admin `/connections`) as it stands after it.
async fn get_and_first_connection(
    client: &gearbox_client::Client,
    url: &str,
    admin_addr: std::net::SocketAddr,
) -> serde_json::Value {
    let r = client
        .request(Request::get(url, TransportPref::Quic))
        .await
        .expect("GET over QUIC");
    assert_eq!(r.body.len(), 300_000);
    let (_, body) = admin(admin_addr, "GET", "/connections").await;
    let conns: serde_json::Value = serde_json::from_str(&body).unwrap();
    conns[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_period_gear_sees_each_live_connections_monitor_and_its_choice_is_switched_and_recorded() {
    let site = Site::new();
    let (edge, seen) = recording_edge(
        &site,
        |c| c.cc = QuicCc::Suite(Cca::Cubic),
        Cca::Copa,
        gearbox_cc::SwitchMode::Part,
    )
    .await;
    let (quic, admin_addr) = (edge.quic, edge.admin);
    let client = site.client();
    let url = format!("https://{quic}/bytes/300000");
    bounded(async {
        // Keep one connection busy until the gear has switched it to Copa.
        loop {
            let conn = get_and_first_connection(&client, &url, admin_addr).await;
            if conn["cca"] == "copa" {
                assert_eq!(conn["switches"], 1);
                break;
            }
        }
    })
    .await;
    drop(client);
    let records = edge.stop().await;
    let seen = seen.lock().unwrap().clone();
    // The gear saw the connection's own transport state and the application's.
    let first = &seen[0];
    assert_eq!(first.cca, Cca::Cubic);
    assert!(first.bytes_sent > 300_000, "{first:?}");
    // (On loopback the minimum RTT can round to 0 ms: present, not positive.)
    assert!(
        first.max_delivery_rate_bps.unwrap() > 0 && first.min_rtt_ms.is_some(),
        "{first:?}"
    );
    assert!(first.cwnd_bytes > 0 && first.srtt_ms.unwrap() >= first.min_rtt_ms.unwrap());
    assert!(
        seen.iter().any(|s| s.response_wait_ms.is_some_and(|w| w >= 0.0)),
        "the HTTP/3 path reports each response's wait: {seen:?}"
    );
    let decisions: Vec<&serde_json::Value> = records.iter().filter(|r| r["event"] == "cc_decision").collect();
    assert!(!decisions.is_empty());
    let d = decisions[0];
    assert_eq!((d["cca"].as_str(), d["choice"].as_str()), (Some("cubic"), Some("copa")));
    assert_eq!(d["reason"], "test: always copa");
    assert_eq!(d["switched"], true);
    assert_eq!(d["stats"]["bytes_sent"].as_u64(), Some(first.bytes_sent));
    // A decision that finds Copa running leaves it.
    assert!(decisions
        .iter()
        .filter(|d| d["cca"] == "copa")
        .all(|d| d["switched"] == false));
    let switches: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["event"] == "cc_switch" && r["outcome"] == "switched")
        .collect();
    assert_eq!(switches.len(), 1, "{switches:?}");
    assert_eq!(
        (switches[0]["from"].as_str(), switches[0]["to"].as_str()),
        (Some("cubic"), Some("copa"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_period_gear_reads_tcp_info_and_switches_the_kernel_controller() {
    let site = Site::new();
    let (edge, seen) = recording_edge(
        &site,
        |c| c.tcp_cc = Some(gearbox_cc::TcpCc::Cubic),
        Cca::Bbr,
        gearbox_cc::SwitchMode::Full,
    )
    .await;
    let (tcp, admin_addr) = (edge.tcp, edge.admin);
    let client = site.client();
    let url = format!("https://{tcp}/bytes/300000");
    bounded(async {
        loop {
            client
                .request(Request::get(&url, TransportPref::Tcp))
                .await
                .expect("GET over TCP");
            let (_, body) = admin(admin_addr, "GET", "/connections").await;
            let conns: serde_json::Value = serde_json::from_str(&body).unwrap();
            if conns[0]["cca"] == "bbr" {
                break;
            }
        }
    })
    .await;
    drop(client);
    let records = edge.stop().await;
    let seen = seen.lock().unwrap().clone();
    let first = &seen[0];
    assert_eq!(
        (first.transport, first.cca),
        (gearbox_gear_api::Transport::Tcp, Cca::Cubic)
    );
    assert!(first.bytes_sent > 300_000 && first.srtt_ms.is_some(), "{first:?}");
    assert!(first.cwnd_bytes > 0 && first.response_wait_ms.is_none(), "{first:?}");
    let d = records.iter().find(|r| r["event"] == "cc_decision").unwrap();
    assert_eq!(
        (d["transport"].as_str(), d["cca"].as_str(), d["choice"].as_str()),
        (Some("tcp"), Some("cubic"), Some("bbr"))
    );
    let s = records
        .iter()
        .find(|r| r["event"] == "cc_switch" && r["outcome"] == "switched")
        .unwrap();
    assert_eq!(
        (s["from"].as_str(), s["to"].as_str(), s["mode"].as_str()),
        (Some("cubic"), Some("bbr"), Some("kernel"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gear_made_switch_leaves_the_connections_loss_and_rtt_a_second_before_and_after_it() {
    let site = Site::new();
    let (edge, _seen) = recording_edge(
        &site,
        |c| c.cc = QuicCc::Suite(Cca::Cubic),
        Cca::Bbr,
        // Part: a full switch out of Cubic's slow start waits for convergence, and the
        // gear's request every 200 ms would restart the wait on loopback.
        gearbox_cc::SwitchMode::Part,
    )
    .await;
    let (quic, admin_addr) = (edge.quic, edge.admin);
    let client = site.client();
    let url = format!("https://{quic}/bytes/300000");
    bounded(async {
        // Busy until the gear has switched the connection to BBR, then for the second
        // after (the effect's window closes at the connection's first event after it).
        let mut switched: Option<std::time::Instant> = None;
        while switched.is_none_or(|t| t.elapsed() < Duration::from_millis(1500)) {
            let conn = get_and_first_connection(&client, &url, admin_addr).await;
            if switched.is_none() && conn["cca"] == "bbr" {
                switched = Some(std::time::Instant::now());
            }
        }
    })
    .await;
    drop(client);
    let records = edge.stop().await;
    let switch = records
        .iter()
        .find(|r| r["event"] == "cc_switch" && r["outcome"] == "switched")
        .expect("the gear's switch");
    let effects: Vec<&serde_json::Value> = records.iter().filter(|r| r["event"] == "cc_switch_effect").collect();
    assert_eq!(effects.len(), 1, "one switch, one effect: {effects:?}");
    let e = effects[0];
    assert_eq!(e["conn_id"], switch["conn_id"]);
    assert_eq!(e["at_s"], switch["at_s"]);
    assert_eq!(
        (e["from"].as_str(), e["to"].as_str(), e["mode"].as_str()),
        (Some("cubic"), Some("bbr"), Some("part"))
    );
    assert_eq!(e["before"]["cwnd_bytes"], switch["cwnd_before"]);
    assert!(e["time_unix_ms"].as_f64() >= switch["time_unix_ms"].as_f64());
    for side in ["before", "after"] {
        let w = &e[side];
        assert!(w["sent_bytes"].as_u64().unwrap() > 0, "{side}: {w}");
        assert!(
            w["lost_bytes"].as_u64().unwrap() <= w["sent_bytes"].as_u64().unwrap(),
            "{side}: {w}"
        );
        assert!(
            w["loss_rate"].as_f64().is_some() && w["srtt_ms"].as_f64().is_some(),
            "{side}: {w}"
        );
        assert!(w["cwnd_bytes"].as_u64().unwrap() > 0, "{side}: {w}");
    }
    assert_eq!(e["after"]["span_s"], 1.0);
    assert!(e["before"]["span_s"].as_f64().unwrap() > 0.0);
}
