//! The QUIC endpoint's own runtime. quinn reads every datagram of every connection in one
//! task (its endpoint driver) and runs each connection's packet work in another (its
//! connection driver). On the edge's main runtime those tasks queue behind HTTP/1.1 and
//! HTTP/2 work: under `gearbox bench load`'s HTTP/2 step the UDP socket's 32 MiB receive
//! buffer filled and the kernel dropped the idle QUIC connections' datagrams (70,194 in
//! one run). Here they run on threads of their own, which the TCP side cannot occupy:
//! the kernel's scheduler, not tokio's queue, shares the cores between them. HTTP/3
//! requests are still served on the main runtime (docs/edge.md "Memory", "Threads").

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

/// Name of the QUIC runtime's threads (as `top -H` and `/proc/PID/task/*/comm` show them).
pub const QUIC_THREAD_NAME: &str = "gearbox-quic";

/// A multi-threaded tokio runtime for quinn's drivers, shut down when dropped.
pub(crate) struct QuicRuntime {
    rt: Option<tokio::runtime::Runtime>,
}

impl QuicRuntime {
    /// Starts `threads` worker threads (at least one).
    pub(crate) fn start(threads: usize) -> io::Result<QuicRuntime> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name(QUIC_THREAD_NAME)
            .enable_all()
            .build()?;
        Ok(QuicRuntime { rt: Some(rt) })
    }

    /// The quinn runtime that spawns, times and registers sockets on these threads.
    pub(crate) fn quinn(&self) -> Arc<dyn quinn::Runtime> {
        let handle = match &self.rt {
            Some(rt) => rt.handle().clone(),
            None => tokio::runtime::Handle::current(),
        };
        Arc::new(OnHandle(handle))
    }
}

impl Drop for QuicRuntime {
    fn drop(&mut self) {
        // The edge drops this from inside its main runtime, where a blocking shutdown
        // is not allowed; quinn's drivers have finished or are abandoned by then.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// quinn's tokio runtime, bound to one runtime's handle instead of the caller's.
struct OnHandle(tokio::runtime::Handle);

impl fmt::Debug for OnHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnHandle(gearbox-quic)")
    }
}

impl quinn::Runtime for OnHandle {
    fn new_timer(&self, t: Instant) -> Pin<Box<dyn quinn::AsyncTimer>> {
        let _enter = self.0.enter();
        quinn::TokioRuntime.new_timer(t)
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        self.0.spawn(future);
    }

    fn wrap_udp_socket(&self, sock: std::net::UdpSocket) -> io::Result<Arc<dyn quinn::AsyncUdpSocket>> {
        // Registers the socket with this runtime's reactor, so its readiness wakes
        // the endpoint driver here.
        let _enter = self.0.enter();
        quinn::TokioRuntime.wrap_udp_socket(sock)
    }

    fn now(&self) -> Instant {
        quinn::TokioRuntime.now()
    }
}
