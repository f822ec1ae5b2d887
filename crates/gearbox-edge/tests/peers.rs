//! The edge against independent clients: curl (HTTP/1.1, HTTP/2) and ngtcp2's
//! client (HTTP/3), each checked on both the bytes received and the edge's own
//! telemetry record. Missing peers are an error: `scripts/setup.sh` installs them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use gearbox_cc::{QuicCc, TcpCc};
mod common;

use common::{read_records, start, Running};
use gearbox_edge::{ConnectionGears, Edge, EdgeConfig};
use serde_json::Value;
use tokio::process::Command;

/// Liveness bound for any single peer run (not a performance check).
const PEER_BOUND: Duration = Duration::from_secs(60);

fn need(tool: &str) -> String {
    for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin"] {
        let p = Path::new(dir).join(tool);
        if p.exists() {
            return p.to_string_lossy().into_owned();
        }
    }
    panic!("{tool} is not installed; run scripts/setup.sh (it installs the test peers)");
}

async fn run(cmd: &mut Command) -> std::process::Output {
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    tokio::time::timeout(PEER_BOUND, cmd.output())
        .await
        .expect("peer finishes in bounded time")
        .expect("peer runs")
}

async fn curl(edge: &Running, version: &str, path: &str, out: &Path) -> (String, String) {
    let url = format!("https://localhost:{}{}", edge.tcp.port(), path);
    let o = run(Command::new(need("curl"))
        .args(["-sS", version, "--cacert"])
        .arg(edge.cert())
        .args(["--resolve", &format!("localhost:{}:127.0.0.1", edge.tcp.port())])
        .args(["-D", "-", "-o"])
        .arg(out)
        .args(["-w", "\n%{http_version} %{http_code} %{size_download}"])
        .arg(&url))
    .await;
    assert!(
        o.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let summary = text.lines().last().unwrap_or_default().to_string();
    (text, summary)
}

/// ngtcp2's client fetches `/bytes/{n}` over HTTP/3; returns its download folder.
async fn h3_get(edge: &Running, n: u64) -> PathBuf {
    let dl = edge.dir.path().join("dl");
    std::fs::create_dir_all(&dl).unwrap();
    let url = format!("https://127.0.0.1:{}/bytes/{n}", edge.quic.port());
    let o = run(Command::new(need("gtlsclient"))
        .args(["-q", "--timeout=1s"])
        .arg(format!("--download={}", dl.display()))
        .args(["127.0.0.1", &edge.quic.port().to_string(), &url]))
    .await;
    assert!(
        o.status.success(),
        "gtlsclient failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    dl
}

fn one<'a>(records: &'a [Value], path: &str) -> &'a Value {
    let found: Vec<_> = records.iter().filter(|r| r["path"] == path).collect();
    assert_eq!(found.len(), 1, "one record for {path}: {records:?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_fetches_over_http2_and_the_edge_records_the_acknowledged_transfer() {
    let edge = start(|c| c.tcp_cc = Some(TcpCc::Reno)).await;
    let out = edge.dir.path().join("body");
    let (headers, summary) = curl(&edge, "--http2", "/bytes/300000", &out).await;
    assert_eq!(summary, "2 200 300000");
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 300_000);
    let alt = format!("alt-svc: h3=\":{}\"", edge.quic.port());
    assert!(headers.to_lowercase().contains(&alt), "no {alt} in {headers}");
    let records = edge.stop().await;
    let r = one(&records, "/bytes/300000");
    assert_eq!(r["protocol"], "h2");
    assert_eq!(r["status"], 200);
    assert_eq!(r["bytes"], 300000);
    assert_eq!(r["server_time_source"], "tcp_unacked_zero");
    assert!(r["server_time_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(r["transport"]["cc"], "reno", "TCP_CONGESTION applied per socket");
    assert!(r["transport"]["cwnd_bytes"].as_u64().unwrap() > 0);
    assert!(r["transport"]["rtt_ms"].as_f64().is_some());
    // No timeout on loopback; the count is there where the kernel gives it (6.7+).
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release.split(['.', '-']).map(|p| p.trim().parse::<u32>().unwrap_or(0));
    if (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 7) {
        assert_eq!(r["transport"]["timeouts"], 0, "tcpi_total_rto: {r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_fetches_over_http1_and_gets_clear_errors_for_bad_paths() {
    let edge = start(|c| c.max_bytes = 1000).await;
    let out = edge.dir.path().join("body");
    let (_, summary) = curl(&edge, "--http1.1", "/bytes/1000", &out).await;
    assert_eq!(summary, "1.1 200 1000");
    let (_, summary) = curl(&edge, "--http1.1", "/bytes/1001", &out).await;
    assert!(summary.starts_with("1.1 400"), "{summary}");
    assert!(std::fs::read_to_string(&out).unwrap().contains("limit of 1000 bytes"));
    let (_, summary) = curl(&edge, "--http2", "/no/such/thing", &out).await;
    assert!(summary.starts_with("2 404"), "{summary}");
    let records = edge.stop().await;
    assert_eq!(one(&records, "/bytes/1000")["protocol"], "h1");
    assert_eq!(one(&records, "/bytes/1001")["status"], 400);
    assert_eq!(one(&records, "/no/such/thing")["status"], 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngtcp2_client_fetches_over_http3_and_the_edge_records_the_stream_acknowledgement() {
    let edge = start(|c| c.cc = QuicCc::Suite(gearbox_cc::Cca::Bbr)).await;
    let dl = h3_get(&edge, 200_000).await;
    assert_eq!(
        std::fs::metadata(dl.join("200000")).expect("downloaded file").len(),
        200_000
    );
    let records = edge.stop().await;
    let r = one(&records, "/bytes/200000");
    assert_eq!(r["protocol"], "h3");
    assert_eq!(r["bytes"], 200000);
    assert_eq!(r["server_time_source"], "quic_stream_acked");
    assert_eq!(
        r["transport"]["cc"], "bbr",
        "congestion controller chosen per connection"
    );
    assert!(r["transport"]["sent_packets"].as_u64().unwrap() > 100);
    assert!(
        r["transport"].get("timeouts").is_none(),
        "quinn counts no timeouts: {r}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_protocol() {
    let edge = start(|_| {}).await;
    let out = edge.dir.path().join("body");
    curl(&edge, "--http2", "/bytes/10", &out).await;
    curl(&edge, "--http2", "/bytes/20", &out).await;
    let admin = edge.admin;
    let o = run(Command::new(need("curl")).args(["-sS", &format!("http://{admin}/metrics")])).await;
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("gearbox_requests_total{protocol=\"h2\"} 2"), "{text}");
    assert!(
        text.contains("gearbox_response_bytes_total{protocol=\"h2\"} 30"),
        "{text}"
    );
    edge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_an_in_flight_transfer_finish_and_flushes_its_record() {
    let edge = start(|_| {}).await;
    // Outside the edge's directory, which goes away when the edge is stopped.
    let keep = tempfile::tempdir().unwrap();
    let out = keep.path().join("body");
    let url = format!("https://localhost:{}/bytes/20000000", edge.tcp.port());
    // A slow reader: 20 MB at 20 MB/s takes about a second, so the shutdown lands mid-transfer.
    let child = Command::new(need("curl"))
        .args(["-sS", "--http2", "--limit-rate", "20M", "--cacert"])
        .arg(edge.cert())
        .args(["--resolve", &format!("localhost:{}:127.0.0.1", edge.tcp.port()), "-o"])
        .arg(&out)
        .arg(&url)
        .kill_on_drop(true)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopping = tokio::spawn(edge.stop());
    let done = tokio::time::timeout(PEER_BOUND, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(done.status.success(), "curl: {}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 20_000_000);
    let records = stopping.await.unwrap();
    assert_eq!(one(&records, "/bytes/20000000")["bytes"], 20000000);
}

#[tokio::test]
async fn a_port_in_use_is_reported_as_such() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    gearbox_dataplane::tls::write_self_signed(&["localhost".into()], &cert, &key).unwrap();
    let config = EdgeConfig {
        listen: taken.local_addr().unwrap(),
        cert,
        key,
        ..EdgeConfig::default()
    };
    let gears = ConnectionGears::from_config(&config);
    let err = Edge::bind(config, gears).await.err().expect("bind fails").to_string();
    assert!(err.contains("already in use"), "{err}");
}

#[tokio::test]
async fn a_missing_certificate_names_the_file() {
    let config = EdgeConfig {
        cert: "/nonexistent/cert.pem".into(),
        ..EdgeConfig::default()
    };
    let gears = ConnectionGears::from_config(&config);
    let err = Edge::bind(config, gears).await.err().expect("bind fails").to_string();
    assert!(err.contains("/nonexistent/cert.pem"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_files_are_streamed_whole_and_everything_else_goes_to_the_upstream() {
    // The upstream origin: Python's own HTTP server over a directory of its own.
    let origin_dir = tempfile::tempdir().unwrap();
    std::fs::write(origin_dir.path().join("from-origin.txt"), "hello from the origin\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut origin = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
            "--directory",
        ])
        .arg(origin_dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs");
    let up = format!("127.0.0.1:{port}");
    let ready = async {
        while tokio::net::TcpStream::connect(&up).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(PEER_BOUND, ready).await.expect("origin starts");

    let site = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(site.path().join("big.bin"), &big).unwrap();
    let site_path = site.path().to_path_buf();
    let edge = start(move |c| {
        c.static_dir = Some(site_path);
        c.upstream = Some(format!("http://127.0.0.1:{port}"));
    })
    .await;
    let out = edge.dir.path().join("body");
    let (_, summary) = curl(&edge, "--http2", "/big.bin", &out).await;
    assert_eq!(summary, "2 200 3000000");
    assert_eq!(std::fs::read(&out).unwrap(), big, "the file arrives byte for byte");
    let (_, summary) = curl(&edge, "--http1.1", "/from-origin.txt", &out).await;
    assert_eq!(summary, "1.1 200 22");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hello from the origin\n");
    let (_, summary) = curl(&edge, "--http2", "/not-at-origin-either", &out).await;
    assert!(
        summary.starts_with("2 404"),
        "the origin's 404 comes through: {summary}"
    );
    let records = edge.stop().await;
    assert_eq!(one(&records, "/big.bin")["bytes"], 3000000);
    assert_eq!(one(&records, "/from-origin.txt")["status"], 200);
    let _ = origin.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_an_idle_http3_client_to_time_out() {
    let edge = start(|c| c.idle_timeout_ms = 60_000).await;
    let dl = edge.dir.path().join("dl");
    std::fs::create_dir_all(&dl).unwrap();
    let url = format!("https://127.0.0.1:{}/bytes/1000", edge.quic.port());
    // The client keeps its connection open, idle, for up to 60 s after the download.
    let client = Command::new(need("gtlsclient"))
        .args(["-q", "--timeout=60s"])
        .arg(format!("--download={}", dl.display()))
        .args(["127.0.0.1", &edge.quic.port().to_string(), &url])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let file = dl.join("1000");
    let downloaded = async {
        while std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0) < 1000 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(PEER_BOUND, downloaded)
        .await
        .expect("download completes");
    // Well under the 60 s idle timeout: the edge closes the idle connection itself.
    let records = tokio::time::timeout(Duration::from_secs(15), edge.stop())
        .await
        .expect("edge stops before the idle timeout");
    assert_eq!(one(&records, "/bytes/1000")["protocol"], "h3");
    let out = tokio::time::timeout(PEER_BOUND, client.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success(), "the client saw an orderly close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_processing_time_slows_only_the_protocol_it_is_set_for() {
    // A server made slower on QUIC (WiseTrans §IV-D's changed implementation): the h3
    // request takes the added 1.5 s at least, the h2 request far less. (The edge's
    // `server_time_ms` starts at the first response byte, so the clients time it.)
    let edge = start(|c| c.quic_processing_ms = 1500).await;
    let out = edge.dir.path().join("body");
    let t = std::time::Instant::now();
    let (_, summary) = curl(&edge, "--http2", "/bytes/1000", &out).await;
    let h2 = t.elapsed();
    assert_eq!(summary, "2 200 1000");
    let dl = edge.dir.path().join("dl");
    std::fs::create_dir_all(&dl).unwrap();
    let url = format!("https://127.0.0.1:{}/bytes/2000", edge.quic.port());
    let t = std::time::Instant::now();
    let o = run(Command::new(need("gtlsclient"))
        .args(["-q", "--timeout=5s"])
        .arg(format!("--download={}", dl.display()))
        .args(["127.0.0.1", &edge.quic.port().to_string(), &url]))
    .await;
    let h3 = t.elapsed();
    assert!(
        o.status.success(),
        "gtlsclient failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::metadata(dl.join("2000")).expect("downloaded file").len(), 2000);
    assert!(
        h3.as_millis() >= 1500,
        "h3 took {h3:?}, which must include the added 1.5 s"
    );
    assert!(h2.as_millis() < 1500, "h2 took {h2:?}: nothing is added to TCP");
    let records = edge.stop().await;
    assert_eq!(one(&records, "/bytes/2000")["protocol"], "h3");
}

/// The record for `path`, once the edge has written it (after the client acknowledged
/// the last byte, so a little after the client finished); polled for a bounded time.
async fn latest(edge: &Running, path: &str) -> Option<Value> {
    for _ in 0..100 {
        let found = read_records(&edge.telemetry())
            .into_iter()
            .rev()
            .find(|r| r["path"] == path);
        if found.is_some() {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// TCP WISE (docs/tcpwise.md): the Cwnd Table gives TCP connections their initial
/// window through the kernel's sock_ops program and QUIC connections through the gear
/// at accept; each record says which; a changed file is reloaded and a bad one refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cwnd_table_sets_initial_windows_on_tcp_and_quic_and_is_reloaded() {
    let tables = tempfile::tempdir().unwrap();
    let table = tables.path().join("cwnd.toml");
    let write = |version: u32, iw: u32| {
        let text =
            format!("version = {version}\ncap = 100\n[[cluster]]\nprefix = \"127.0.0.0/24\"\niw = [{iw}, {iw}]\n");
        // Write then rename: the edge never reads half a file.
        let tmp = tables.path().join("next.toml");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &table).unwrap();
    };
    write(1, 40);
    let t = table.clone();
    let edge = start(move |c| c.cwnd_table = Some(t)).await;
    let out = edge.dir.path().join("out");

    curl(&edge, "--http2", "/bytes/100000", &out).await;
    let r = latest(&edge, "/bytes/100000").await.expect("TCP record");
    assert_eq!(r["iw"]["source"], "kernel", "{r}");
    assert_eq!(r["iw"]["iw"], 40);
    assert_eq!(r["iw"]["cluster"], "127.0.0.0/24");
    assert_eq!(r["iw"]["iw_set"], serde_json::json!([40, 40]));

    h3_get(&edge, 100_001).await;
    let r = latest(&edge, "/bytes/100001").await.expect("QUIC record");
    assert_eq!(
        (r["iw"]["source"].as_str(), r["iw"]["iw"].as_u64()),
        (Some("table"), Some(40)),
        "{r}"
    );

    // A new table takes effect on new connections (the edge polls the file every second).
    write(2, 20);
    let mut seen = 0;
    for i in 0..30 {
        let path = format!("/bytes/{}", 100_010 + i);
        curl(&edge, "--http2", &path, &out).await;
        seen = latest(&edge, &path)
            .await
            .and_then(|r| r["iw"]["iw"].as_u64())
            .unwrap_or(0);
        if seen == 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(seen, 20, "the reloaded table applies");

    // A table with an IW below 3 is refused: the last good one stays.
    let bad = "version = 3\ncap = 100\n[[cluster]]\nprefix = \"127.0.0.0/24\"\niw = [2, 2]\n";
    std::fs::write(tables.path().join("next.toml"), bad).unwrap();
    std::fs::rename(tables.path().join("next.toml"), &table).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    curl(&edge, "--http2", "/bytes/100100", &out).await;
    let r = latest(&edge, "/bytes/100100").await.unwrap();
    assert_eq!(r["iw"]["iw"], 20, "{r}");
    edge.stop().await;
}

#[tokio::test]
async fn a_bad_cwnd_table_stops_the_edge_with_the_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("cwnd.toml");
    std::fs::write(
        &table,
        "version = 1\ncap = 100\n\n[[cluster]]\nprefix = \"10.0.0.0/8\"\niw = [5, 500]\n",
    )
    .unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    gearbox_dataplane::tls::write_self_signed(&["localhost".into()], &cert, &key).unwrap();
    let config = EdgeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        cert,
        key,
        cwnd_table: Some(table.clone()),
        ..EdgeConfig::default()
    };
    let gears = ConnectionGears::from_config(&config);
    let e = Edge::bind(config, gears).await.err().expect("refused").to_string();
    assert!(
        e.contains(&table.display().to_string()) && e.contains("line 4: cluster[0].iw[1]"),
        "{e}"
    );
}
