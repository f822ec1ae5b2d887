//! A blocking front for callers without an async runtime (the Python API, via PyO3).
//!
//! The client owns a small multi-threaded tokio runtime. One worker thread keeps
//! connection tasks (quinn's endpoint driver, hyper's connection futures) running between
//! calls, so a pooled connection answers keep-alives and is still usable on the next
//! call; a current-thread runtime would only run them inside a call. Rejected
//! alternative: a runtime per call, which would drop every pooled connection each time.

use std::path::Path;

use gearbox_dataplane::control::ControlConfig;
use gearbox_dataplane::telemetry::TelemetrySink;
use gearbox_workload::Page;

use crate::client::{Client, Request, Response};
use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::gear::{TransportGear, TransportPref};
use crate::page::{PageLoad, PageLoadOptions};

/// A [`Client`] with its own runtime; every method blocks until the request is done.
pub struct BlockingClient {
    client: Client,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for BlockingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingClient")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl BlockingClient {
    /// A blocking client with `config` (whose telemetry sink, if any, must have been made
    /// inside some runtime; use [`BlockingClient::with_telemetry_file`] otherwise).
    pub fn new(config: ClientConfig) -> Result<Self, ClientError> {
        let runtime = runtime()?;
        let client = Client::new(config)?;
        Ok(BlockingClient { client, runtime })
    }

    /// A blocking client that appends its records to `path` (`-`: standard output).
    pub fn with_telemetry_file(config: ClientConfig, path: &Path) -> Result<Self, ClientError> {
        Self::with_telemetry(config, Some(path), None)
    }

    /// A blocking client whose records go to `file` if given and, with `control`, to the
    /// control plane: spooled and uploaded in batches (docs/control.md, "Native upload and
    /// polling"); dropping the client makes the last upload attempt.
    pub fn with_telemetry(
        mut config: ClientConfig,
        file: Option<&Path>,
        control: Option<&ControlConfig>,
    ) -> Result<Self, ClientError> {
        let runtime = runtime()?;
        config.telemetry = {
            let _entered = runtime.enter();
            match (file, control) {
                (Some(path), None) => TelemetrySink::to_file(path)
                    .map_err(|e| ClientError::Config(format!("cannot open telemetry file {}: {e}", path.display())))?,
                _ => TelemetrySink::open(file, control).map_err(|e| ClientError::Config(e.to_string()))?,
            }
        };
        let client = Client::new(config)?;
        Ok(BlockingClient { client, runtime })
    }

    /// GET `url` over `transport`.
    pub fn get(&self, url: &str, transport: TransportPref) -> Result<Response, ClientError> {
        self.request(Request::get(url, transport))
    }

    /// Any request.
    pub fn request(&self, req: Request) -> Result<Response, ClientError> {
        self.runtime.block_on(self.client.request(req))
    }

    /// A page load; see [`Client::load_page_with`].
    pub fn load_page(&self, origin: &str, page: &Page, options: &PageLoadOptions) -> Result<PageLoad, ClientError> {
        self.runtime.block_on(self.client.load_page_with(origin, page, options))
    }

    /// Replaces the transport gear.
    pub fn set_gear(&self, gear: Box<dyn TransportGear>) {
        self.client.set_gear(gear);
    }

    /// Writes every queued record to the telemetry file.
    pub fn flush_telemetry(&self) {
        self.runtime.block_on(self.client.flush_telemetry());
    }

    /// The async client inside, for callers that also run async code.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl Drop for BlockingClient {
    fn drop(&mut self) {
        // block_on panics inside another runtime; records are then flushed by the sink's
        // own task when the runtime shuts down (and uploaded by the next client on the spool).
        if tokio::runtime::Handle::try_current().is_err() {
            self.runtime.block_on(async {
                self.client.close_connections().await;
                self.client.config().telemetry.finish().await;
            });
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ClientError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gearbox-client")
        .enable_all()
        .build()
        .map_err(|e| ClientError::Config(format!("cannot start the client runtime: {e}")))
}
