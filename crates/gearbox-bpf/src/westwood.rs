//! TCP Westwood+ for kernel TCP: the BPF `struct_ops` controller of
//! `bpf/westwood.bpf.c`, registered under the name [`NAME`].
//!
//! The kernel keeps a `struct_ops` controller registered for as long as its link is
//! open, so the registration lives as long as the process that made it: gearbox
//! registers on first use ([`ensure`]) and keeps the link in a process-wide slot.
//! Sockets already running the controller hold their own reference and keep it after
//! that. Registration is global to the machine (not per network namespace): when
//! another process (another gearbox edge, or a kernel `tcp_westwood` module) already
//! offers `westwood`, [`ensure`] uses that one.

use std::sync::Mutex;

use libbpf_rs::MapCore;

use crate::{check_environment, route_libbpf_messages, BpfError};

/// The name the controller is registered under (what `TCP_CONGESTION` selects).
pub const NAME: &str = "westwood";

/// The compiled program (`build.rs`).
const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/westwood.bpf.o"));

/// The loaded object and the link that keeps the controller registered.
struct Registration {
    _link: libbpf_rs::Link,
    _object: libbpf_rs::Object,
}

static REGISTRATION: Mutex<Option<Registration>> = Mutex::new(None);

/// Who provides the `westwood` controller the kernel now offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// This process registered it (now or earlier).
    ThisProcess,
    /// It was already offered (another process's registration or a kernel module).
    AlreadyOffered,
}

/// Makes sure the kernel offers [`NAME`], registering the BPF controller if needed.
/// Cheap once registered. Errors say what is missing (root, BTF) or what libbpf and
/// the kernel refused.
pub fn ensure() -> Result<Provider, BpfError> {
    let mut slot = REGISTRATION.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_some() {
        return Ok(Provider::ThisProcess);
    }
    if kernel_offers(NAME) {
        return Ok(Provider::AlreadyOffered);
    }
    match register() {
        Ok(registration) => {
            *slot = Some(registration);
            tracing::info!(target: "gearbox_bpf", "registered the BPF TCP congestion controller {NAME:?}");
            Ok(Provider::ThisProcess)
        }
        // Another process registered it between the check and our attempt.
        Err(_) if kernel_offers(NAME) => Ok(Provider::AlreadyOffered),
        Err(e) => Err(e),
    }
}

/// Forgets a registration this process holds that the kernel no longer lists, so the
/// next [`ensure`] registers again. (Not needed in normal operation; the edge calls it
/// when a socket refuses `westwood` to recover from another process's exit.)
pub fn forget_if_gone() {
    let mut slot = REGISTRATION.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_some() && !kernel_offers(NAME) {
        *slot = None;
    }
}

fn register() -> Result<Registration, BpfError> {
    check_environment()?;
    route_libbpf_messages();
    let libbpf = |what| move |source| BpfError::Libbpf { what, source };
    let open = libbpf_rs::ObjectBuilder::default()
        .name("gearbox_westwood")
        .map_err(libbpf("naming the BPF object"))?
        .open_memory(OBJECT)
        .map_err(libbpf("opening the Westwood+ BPF object"))?;
    let mut object = open.load().map_err(libbpf(
        "loading the Westwood+ BPF programs (see the gearbox_bpf log for the verifier's output)",
    ))?;
    let link = {
        let mut map = object
            .maps_mut()
            .find(|m| m.name() == "westwood")
            .ok_or(BpfError::Libbpf {
                what: "finding the Westwood+ struct_ops map",
                source: libbpf_rs::Error::from(std::io::Error::from(std::io::ErrorKind::NotFound)),
            })?;
        map.attach_struct_ops()
            .map_err(libbpf("registering the Westwood+ struct_ops controller"))?
    };
    Ok(Registration {
        _link: link,
        _object: object,
    })
}

/// Whether the kernel lists `name` in `tcp_available_congestion_control`.
pub fn kernel_offers(name: &str) -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|s| s.split_whitespace().any(|n| n == name))
        .unwrap_or(false)
}
