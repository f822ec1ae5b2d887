//! gearbox's eBPF programs for kernel TCP, built with libbpf-rs and Debian's clang on
//! stable Rust (the C sources are in `bpf/`, compiled by `build.rs` and embedded here).
//!
//! - [`westwood`]: TCP Westwood+ as a `struct_ops` congestion controller, registered
//!   with the kernel under the name `westwood`, so `TCP_CONGESTION` can select it on a
//!   socket (at accept or on a live connection). Beyond the seeds: Floo §6 names eBPF
//!   as the way to bring its controller choice to kernel TCP.
//!
//! - [`iw`]: TCP WISE's initial window per client cluster, a `sock_ops` program that
//!   sets `TCP_BPF_IW` on each of the edge's passive connections from the Cwnd Table.
//!
//! Loading needs root (`CAP_BPF` and `CAP_NET_ADMIN`) and a kernel with BTF
//! (`/sys/kernel/btf/vmlinux`) and the BPF JIT; without them every call says which is
//! missing and the kernel's own controllers keep working.

pub mod iw;
pub mod westwood;

use std::sync::Once;

/// A BPF program could not be loaded or registered.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// The process lacks the privileges BPF needs.
    #[error("loading BPF programs needs root (CAP_BPF and CAP_NET_ADMIN); this process runs as uid {uid}")]
    NotRoot {
        /// The effective user id.
        uid: u32,
    },
    /// The kernel has no BTF, which `struct_ops` and CO-RE need.
    #[error("this kernel exposes no BTF (/sys/kernel/btf/vmlinux is missing); BPF congestion controllers need a kernel built with CONFIG_DEBUG_INFO_BTF")]
    NoBtf,
    /// Something the program needs from the system is missing.
    #[error("{what}: {message}")]
    Environment {
        /// The step that failed.
        what: &'static str,
        /// Why.
        message: String,
    },
    /// libbpf or the kernel refused the program.
    #[error("{what} failed: {source}")]
    Libbpf {
        /// The step that failed.
        what: &'static str,
        /// libbpf's error (the verifier's log goes to the `gearbox_bpf` tracing target).
        #[source]
        source: libbpf_rs::Error,
    },
}

/// Checks what every program here needs before libbpf is asked.
fn check_environment() -> Result<(), BpfError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        return Err(BpfError::NotRoot { uid });
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(BpfError::NoBtf);
    }
    Ok(())
}

/// Sends libbpf's messages (the verifier's log among them) to tracing instead of stderr.
fn route_libbpf_messages() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        fn log(level: libbpf_rs::PrintLevel, msg: String) {
            let msg = msg.trim_end();
            match level {
                libbpf_rs::PrintLevel::Warn => tracing::warn!(target: "gearbox_bpf", "libbpf: {msg}"),
                libbpf_rs::PrintLevel::Info => tracing::debug!(target: "gearbox_bpf", "libbpf: {msg}"),
                libbpf_rs::PrintLevel::Debug => tracing::trace!(target: "gearbox_bpf", "libbpf: {msg}"),
            }
        }
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Info, log)));
    });
}
