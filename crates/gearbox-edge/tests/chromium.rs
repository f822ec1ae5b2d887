//! A real browser against the edge: headless Chromium loads a small page (HTML, a
//! stylesheet, two scripts, four images) from our edge over HTTP/2 and over HTTP/3.
//! The page's own script writes a marker into the DOM once the window's `load` event
//! has fired and it has checked every object; the test reads the DOM Chromium dumps
//! and the edge's telemetry, which must show every object fetched over the protocol
//! under test (for HTTP/3: nothing at all over TCP, so QUIC really carried the page).
//!
//! Chromium trusts our self-signed certificate through
//! `--ignore-certificate-errors-spki-list` (the SHA-256 of the certificate's
//! SubjectPublicKeyInfo, base64), which is also what its QUIC stack accepts; the
//! alternative, `--ignore-certificate-errors`, does not apply to QUIC. Chromium is
//! required: without it the test fails and says how to install it.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

mod common;

use base64::Engine as _;
use common::Running;

/// Liveness bound on one browser run (not a performance check).
const BROWSER_BOUND: Duration = Duration::from_secs(90);
/// Objects the page references, besides `/index.html` itself.
const OBJECTS: [&str; 7] = [
    "/style.css",
    "/first.js",
    "/second.js",
    "/red.png",
    "/green.png",
    "/blue.png",
    "/logo.svg",
];

/// One browser at a time: two Chromiums at once on a two-core machine only make
/// each other slow, and the bound above is meant for one.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An edge (the shared test harness) with the page in its static directory, inside the
/// edge's own scratch folder.
async fn start_edge() -> Running {
    common::start(|c| {
        let site = c
            .cert
            .parent()
            .expect("the certificate is in the scratch folder")
            .join("site");
        write_page(&site);
        c.static_dir = Some(site);
    })
    .await
}

/// The page: every object must have arrived and be usable before the marker is
/// written. `first.js` leaves a value that `second.js` reads; the stylesheet must have
/// applied its colour; each image must have decoded (a non-zero natural width).
fn write_page(site: &Path) {
    std::fs::create_dir_all(site).unwrap();
    let html = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>waiting</title>
<link rel="stylesheet" href="/style.css">
<script src="/first.js"></script>
<script src="/second.js"></script>
</head><body>
<p id="styled">gearbox</p>
<img src="/red.png" alt="red"><img src="/green.png" alt="green"><img src="/blue.png" alt="blue">
<img src="/logo.svg" alt="logo">
<div id="result">pending</div>
</body></html>
"#;
    let first = "window.gearboxFirst = 1;\n";
    let second = r#"window.addEventListener('load', function () {
  var ok = 0;
  if (window.gearboxFirst === 1) ok += 1;
  if (getComputedStyle(document.getElementById('styled')).color === 'rgb(1, 2, 3)') ok += 1;
  var imgs = document.images;
  for (var i = 0; i < imgs.length; i++) {
    if (imgs[i].complete && imgs[i].naturalWidth > 0) ok += 1;
  }
  var marker = 'loaded:' + ok + '/' + (2 + imgs.length);
  document.title = marker;
  document.getElementById('result').textContent = marker;
});
"#;
    let css = "#styled { color: rgb(1, 2, 3); }\n";
    let svg = r#"<svg xmlns="http://www.w3.org/2000/svg" width="24" height="24"><circle cx="12" cy="12" r="10" fill="orange"/></svg>"#;
    std::fs::write(site.join("index.html"), html).unwrap();
    std::fs::write(site.join("first.js"), first).unwrap();
    std::fs::write(site.join("second.js"), second).unwrap();
    std::fs::write(site.join("style.css"), css).unwrap();
    std::fs::write(site.join("logo.svg"), svg).unwrap();
    for (name, rgb) in [
        ("red.png", [220, 30, 30]),
        ("green.png", [30, 200, 30]),
        ("blue.png", [30, 30, 220]),
    ] {
        std::fs::write(site.join(name), png(16, 16, rgb)).unwrap();
    }
}

/// A valid RGB PNG of one colour (zlib with stored deflate blocks: no compressor needed).
fn png(width: u32, height: u32, rgb: [u8; 3]) -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32(&body).to_be_bytes());
    }
    // Each scanline: filter type 0 (none), then the pixels.
    let mut line = vec![0u8];
    line.extend(rgb.iter().cycle().take(3 * width as usize));
    let raw = line.repeat(height as usize);
    let (mut a, mut b) = (1u32, 0u32);
    for &x in &raw {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    let mut zlib = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65535).collect();
    for (i, block) in blocks.iter().enumerate() {
        zlib.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        zlib.extend_from_slice(&len.to_le_bytes());
        zlib.extend_from_slice(&(!len).to_le_bytes());
        zlib.extend_from_slice(block);
    }
    zlib.extend_from_slice(&((b << 16) | a).to_be_bytes());
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB, deflate, no filter, no interlace
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &zlib);
    chunk(&mut out, b"IEND", &[]);
    out
}

/// base64(SHA-256(SubjectPublicKeyInfo)) of the first certificate in a PEM file: the
/// form `--ignore-certificate-errors-spki-list` takes.
fn spki_sha256_base64(cert_pem: &Path) -> String {
    let der = gearbox_dataplane::tls::load_certs(cert_pem).expect("certificate loads");
    let (_, cert) = x509_parser::parse_x509_certificate(der[0].as_ref()).expect("certificate parses");
    let digest = ring::digest::digest(&ring::digest::SHA256, cert.tbs_certificate.subject_pki.raw);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

fn chromium() -> PathBuf {
    for p in [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!("chromium is not installed; run scripts/setup.sh (it installs the test peers)");
}

/// Chromium and every process it forks (zygote, renderer, GPU and network
/// services) share a process group of their own; dropping this kills the group, so
/// no browser process outlives the test, whether it passed, failed or timed out.
struct ProcessGroup(i32);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a negative pid signals the group we created; no memory is involved.
        unsafe {
            libc::kill(-self.0, libc::SIGKILL);
        }
    }
}

fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: getpgid(2) only reads the process table.
        if unsafe { libc::getpgid(pid) } == pgid {
            out.push(pid);
        }
    }
    out
}

/// What one browser run produced.
struct BrowserRun {
    dom: String,
    stderr: String,
}

/// Loads `https://localhost:PORT/` in headless Chromium and returns the DOM it dumps.
async fn load_in_chromium(edge: &Running, quic: bool) -> BrowserRun {
    let profile = tempfile::tempdir().unwrap();
    let spki = spki_sha256_base64(&edge.cert());
    let origin = format!("localhost:{}", edge.tcp.port());
    let mut cmd = std::process::Command::new(chromium());
    cmd.args([
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-extensions",
        "--host-resolver-rules=MAP localhost 127.0.0.1",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg(format!("--ignore-certificate-errors-spki-list={spki}"));
    if quic {
        assert_eq!(
            edge.quic.port(),
            edge.tcp.port(),
            "the edge serves QUIC on its TCP port number"
        );
        cmd.arg("--enable-quic")
            .arg(format!("--origin-to-force-quic-on={origin}"));
    } else {
        // The edge advertises h3 with Alt-Svc; this run is about HTTP/2 only.
        cmd.arg("--disable-quic");
    }
    cmd.args(["--dump-dom", "--virtual-time-budget=5000"])
        .arg(format!("https://{origin}/"))
        .stdin(Stdio::null())
        .process_group(0);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("chromium starts");
    let group = ProcessGroup(child.id().expect("chromium pid") as i32);
    let out = tokio::time::timeout(BROWSER_BOUND, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("chromium did not finish within {BROWSER_BOUND:?}"))
        .expect("chromium runs");
    let pgid = group.0;
    drop(group);
    for _ in 0..50 {
        if group_members(pgid).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(group_members(pgid).is_empty(), "chromium processes survived the run");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "chromium failed ({}): {stderr}", out.status);
    BrowserRun {
        dom: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    }
}

/// Loads the page over one protocol and checks the marker and the edge's records.
async fn page_loads_over(quic: bool, protocol: &str) {
    let _one = ONE_BROWSER.lock().await;
    let edge = start_edge().await;
    let run = load_in_chromium(&edge, quic).await;
    let records = edge.stop().await;
    let expected = format!("loaded:{n}/{n}", n = 2 + 4);
    assert!(
        run.dom.contains(&format!("<title>{expected}</title>")) && run.dom.contains(&expected),
        "the page did not finish loading over {protocol}: dumped DOM:\n{}\nchromium stderr:\n{}\nedge records: {records:#?}",
        run.dom,
        run.stderr
    );
    for path in std::iter::once("/").chain(OBJECTS) {
        let ok: Vec<_> = records
            .iter()
            .filter(|r| r["path"] == path && r["status"] == 200 && r["error"].is_null())
            .collect();
        assert!(!ok.is_empty(), "no successful edge record for {path}: {records:#?}");
        for r in &ok {
            assert_eq!(r["protocol"], protocol, "{path} was served over another protocol: {r}");
        }
    }
    let paths: Vec<_> = records
        .iter()
        .map(|r| {
            let text = |k: &str| r[k].as_str().unwrap_or("-").to_string();
            format!("{} {} {}", text("protocol"), r["status"], text("path"))
        })
        .collect();
    eprintln!("chromium over {protocol}: marker {expected}; edge records: {paths:?}");
    let others: Vec<_> = records.iter().filter(|r| r["protocol"] != protocol).collect();
    assert!(
        others.is_empty(),
        "requests or connections other than {protocol} reached the edge: {others:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_loads_a_page_with_all_its_objects_over_http2() {
    page_loads_over(false, "h2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_loads_a_page_with_all_its_objects_over_http3() {
    page_loads_over(true, "h3").await;
}
