//! Helpers shared by the emulator's test files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use gearbox_emu::{EmuConfig, RunOptions};

static SERIAL: Mutex<()> = Mutex::new(());

/// Serialises the tests and checks the machine; panics with what is missing.
pub fn setup() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = gearbox_emu::check_environment() {
        panic!("emulator tests need root, /dev/net/tun and ip: {e}");
    }
    let ok = Command::new("iperf3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "iperf3 is missing: run scripts/setup.sh");
    guard
}

pub fn config(text: &str) -> EmuConfig {
    EmuConfig::from_toml_str(text, "test.toml", None).unwrap_or_else(|e| panic!("{e}"))
}

/// A symmetric single path; `{dir}` in `link` becomes `uplink` / `downlink`
/// (for sub-tables such as `[path.{dir}.queue]`).
pub fn single(link: &str) -> EmuConfig {
    config(&format!(
        "topology = \"single\"\n[[path]]\n[path.uplink]\n{}\n[path.downlink]\n{}\n",
        link.replace("{dir}", "uplink"),
        link.replace("{dir}", "downlink")
    ))
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gearbox-emu-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub mod transfer;

/// The `gearbox` binary (`transfer::gearbox`): `GEARBOX_BIN`, or the one `cargo build
/// -p gearbox-cli` left in this test's target folder. Missing is a failure, not a skip.
pub fn gearbox_bin() -> PathBuf {
    transfer::gearbox()
}

pub fn netns_list() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What [`edge_and_load`] left: the client's records, the load's JSON summary, and the
/// scratch folder.
pub struct EdgeAndLoad {
    pub records: Vec<serde_json::Value>,
    pub summary: serde_json::Value,
    pub dir: PathBuf,
}

/// `gearbox edge` on 10.0.0.1:4433 in the server namespace of `emu` and `gearbox load
/// --target https://10.0.0.1:4433 --insecure <load_args>` in the client's, at most
/// `duration`; panics unless the load exits 0.
pub fn edge_and_load(name: &str, emu: &EmuConfig, load_args: &str, duration: Duration) -> EdgeAndLoad {
    let bin = gearbox_bin();
    let dir = scratch(name);
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    gearbox_dataplane::tls::write_self_signed(&["10.0.0.1".into()], &cert, &key).unwrap();
    let telemetry = dir.join("client.jsonl");
    let summary = dir.join("load.json");
    let _ = std::fs::remove_file(&telemetry);
    let options = RunOptions {
        server: Some(format!(
            "exec {} edge --listen 10.0.0.1:4433 --cert {} --key {}",
            bin.display(),
            cert.display(),
            key.display()
        )),
        client: Some(format!(
            "exec {} load --target https://10.0.0.1:4433 --insecure {load_args} --telemetry {} --json > {}",
            bin.display(),
            telemetry.display(),
            summary.display()
        )),
        duration: Some(duration),
        ready_ports: vec!["4433/tcp".parse().unwrap(), "4433/udp".parse().unwrap()],
        ..RunOptions::default()
    };
    let outcome = gearbox_emu::run(emu, &options).unwrap_or_else(|e| panic!("emu run: {e}"));
    assert_eq!(
        outcome.exit_code, 0,
        "{name}: gearbox load failed (exit {})",
        outcome.exit_code
    );
    EdgeAndLoad {
        records: read_records(&telemetry),
        summary: serde_json::from_str(&std::fs::read_to_string(&summary).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", summary.display())),
        dir,
    }
}

/// The JSON lines of a telemetry file.
pub fn read_records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}
