//! One edge on loopback for the integration tests: a throwaway certificate, an admin
//! port and a telemetry file in a temporary folder; stopped gracefully, it hands back its
//! records.

#![allow(dead_code)] // each test file uses its own part

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gearbox_edge::{ConnectionGears, Edge, EdgeConfig};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Liveness bound of a graceful stop (not a performance check).
pub const STOP_BOUND: Duration = Duration::from_secs(60);

pub struct Running {
    pub tcp: SocketAddr,
    pub quic: SocketAddr,
    pub admin: SocketAddr,
    pub dir: tempfile::TempDir,
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    pub fn telemetry(&self) -> PathBuf {
        self.dir.path().join("edge.jsonl")
    }

    /// Stops the edge gracefully and returns its telemetry records.
    pub async fn stop(mut self) -> Vec<Value> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(STOP_BOUND, &mut self.task)
            .await
            .expect("edge stops")
            .expect("edge task");
        read_records(&self.telemetry())
    }

    /// The admin port's `/metrics` text.
    pub async fn metrics(&self) -> String {
        self.admin_get("/metrics").await
    }

    /// The admin port's `/connections` (JSON, after the response's head).
    pub async fn connections(&self) -> String {
        self.admin_get("/connections").await
    }

    /// The admin port's whole response (head and body) to a GET of `path`.
    async fn admin_get(&self, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(self.admin).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        tokio::time::timeout(STOP_BOUND, s.read_to_string(&mut out))
            .await
            .expect("metrics within the bound")
            .unwrap();
        out
    }
}

pub fn read_records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("telemetry line is JSON"))
        .collect()
}

/// An edge on 127.0.0.1 (TCP and QUIC on one port, admin on another), its config
/// changed by `tweak`.
pub async fn start(tweak: impl FnOnce(&mut EdgeConfig)) -> Running {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("GEARBOX_TEST_LOG"))
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    gearbox_dataplane::tls::write_self_signed(&["localhost".into(), "127.0.0.1".into()], &cert, &key).unwrap();
    let mut config = EdgeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        cert,
        key,
        telemetry: Some(dir.path().join("edge.jsonl")),
        ..EdgeConfig::default()
    };
    tweak(&mut config);
    let gears = ConnectionGears::from_config(&config);
    let edge = Edge::bind(config, gears).await.expect("edge binds");
    let (tcp, quic) = (edge.tcp_addr(), edge.quic_addr());
    let admin = edge.admin_addr().expect("the test edge has an admin port");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(edge.serve(async move {
        let _ = rx.await;
    }));
    Running {
        tcp,
        quic,
        admin,
        dir,
        stop: Some(tx),
        task,
    }
}
