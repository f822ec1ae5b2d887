//! The two servers compared and what they serve: the same incompressible files and the
//! same certificate, our edge from this very binary, caddy from a generated Caddyfile.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use anyhow::Context;

use super::process::{free_port, Server};

/// Writes `len` bytes of xorshift noise (incompressible, so no layer can shortcut it).
pub(super) fn write_noise(path: &Path, len: u64) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
    );
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut block = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        for word in block.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes());
        }
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(())
}

fn caddyfile(port: u16, cert: &Path, key: &Path, www: &Path) -> String {
    format!(
        r#"{{
	admin off
	auto_https disable_redirects
	default_sni localhost
	skip_install_trust
	log {{
		output discard
	}}
	servers {{
		protocols h1 h2 h3
	}}
}}
:{port} {{
	bind 127.0.0.1
	tls {cert} {key}
	root * {www}
	file_server
}}
"#,
        cert = cert.display(),
        key = key.display(),
        www = www.display()
    )
}

/// Our edge (this binary's `gearbox edge`) serving `www`, with its log in `dir`.
pub(super) fn start_gearbox_edge(
    dir: &Path,
    cert: &Path,
    key: &Path,
    www: &Path,
    max_bytes: u64,
) -> anyhow::Result<Server> {
    let exe = std::env::current_exe().context("cannot find the gearbox binary")?;
    let edge_port = free_port()?;
    let mut cmd = Command::new(&exe);
    cmd.arg("edge")
        .args(["--listen", &SocketAddr::from(([127, 0, 0, 1], edge_port)).to_string()])
        .arg("--cert")
        .arg(cert)
        .arg("--key")
        .arg(key)
        .arg("--static-dir")
        .arg(www)
        .args(["--max-bytes", &max_bytes.to_string()])
        .env("GEARBOX_LOG", "warn");
    Server::start("gearbox edge", cmd, edge_port, dir.join("edge.log"))
}

/// caddy (`caddy`: the binary) serving `www`, with its configuration, state and log in `dir`.
pub(super) fn start_caddy(caddy: &Path, dir: &Path, cert: &Path, key: &Path, www: &Path) -> anyhow::Result<Server> {
    let caddy_port = free_port()?;
    let caddy_conf = dir.join("Caddyfile");
    std::fs::write(&caddy_conf, caddyfile(caddy_port, cert, key, www))?;
    let mut cmd = Command::new(caddy);
    cmd.args(["run", "--adapter", "caddyfile", "--config"])
        .arg(&caddy_conf)
        // Keep caddy's state (it writes some even with admin off) out of the user's home.
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir.join("caddy-data"))
        .env("XDG_CONFIG_HOME", dir.join("caddy-config"));
    Server::start("caddy", cmd, caddy_port, dir.join("caddy.log")).map_err(|e| {
        e.context(format!(
            "caddy is needed for the comparison ({}); run scripts/setup.sh",
            caddy.display()
        ))
    })
}
