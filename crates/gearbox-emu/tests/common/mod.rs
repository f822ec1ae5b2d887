//! Helpers shared by the emulator's test files.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use gearbox_emu::EmuConfig;

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
