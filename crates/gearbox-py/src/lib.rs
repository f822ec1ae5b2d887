//! `gearbox._native`: the Python face of gearbox's data plane, built by maturin.
//!
//! A thin shell. Every network call goes to [`BlockingClient`], which owns its tokio
//! runtime, and the GIL is released for the whole wait, so other Python threads run
//! meanwhile and several threads may share one client. Results cross as plain Python
//! values (bytes, dicts, lists): a Rust value is serialised to JSON and parsed by Python's
//! `json` module, so a record dict has exactly the keys, order and `null`s of the telemetry
//! schema (docs/telemetry.md) and the schema has one definition, the Rust one. Rejected
//! alternatives: a Python class per record type (a second copy of the schema to keep in
//! step), and an asyncio API (the lab drives requests from plain threads; bridging two
//! event loops adds a dependency and a failure mode for no measured gain).
//!
//! Errors: [`ClientError::kind`] picks the exception class, all under `GearboxError`, and
//! the exception carries the kind as `.kind` (the record's `error` field). Bad argument
//! values are `ValueError`s that name the valid choices. Nothing panics across the
//! boundary: a panic inside the client is caught and raised as `GearboxError`.

use std::any::Any;
use std::net::IpAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::RwLock;
use std::time::Duration;

use gearbox_cc::{QuicCc, TcpCc};
use gearbox_client::{
    BlockingClient, ClientConfig, ClientError, ClientRecord, PageLoad, PageLoadOptions, Request, Response,
    TransportPref, Trust,
};
use gearbox_dataplane::control::ControlConfig;
use gearbox_dataplane::tls::TlsError as CertError;
use gearbox_workload::{Limit, Page, WorkloadError, WorkloadSpec};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use serde::Serialize;

mod sim;

/// Trusted when a client is given neither `ca` nor `insecure` (as `gearbox get` does).
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

create_exception!(
    gearbox,
    GearboxError,
    PyException,
    "Base class of the errors of gearbox requests; `.kind` is the telemetry error kind (e.g. 'connect')."
);
create_exception!(
    gearbox,
    ConnectError,
    GearboxError,
    "The server could not be reached: its name did not resolve or the TCP connect failed."
);
create_exception!(
    gearbox,
    TlsError,
    GearboxError,
    "The TLS handshake failed (over TCP, or a TLS alert in the QUIC handshake), e.g. an untrusted certificate."
);
create_exception!(
    gearbox,
    QuicError,
    GearboxError,
    "The QUIC connection failed or was closed."
);
create_exception!(
    gearbox,
    RequestTimeout,
    GearboxError,
    "The connect timeout or the request timeout ran out."
);
create_exception!(
    gearbox,
    HttpError,
    GearboxError,
    "The HTTP exchange failed after the connection was up (reset stream, malformed response, lost connection)."
);
create_exception!(
    gearbox,
    BadUrl,
    GearboxError,
    "The URL cannot be requested (not https, no host, unparsable)."
);
create_exception!(
    gearbox,
    ConfigError,
    GearboxError,
    "The client cannot do what was asked: unreadable certificate files, a congestion controller the kernel \
     lacks, a local path index it does not have."
);
create_exception!(
    gearbox,
    BadPage,
    GearboxError,
    "A page given to load_page is not a loadable dependency graph."
);

/// Why a call into the data plane did not return a value.
enum Failure {
    /// The client failed the request (or could not be made).
    Client(ClientError),
    /// The client was closed before the call.
    Closed,
    /// Anything else, already a Python error.
    Py(PyErr),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure::Client(e)
    }
}

impl From<PyErr> for Failure {
    fn from(e: PyErr) -> Self {
        Failure::Py(e)
    }
}

/// The Python exception for a client error, chosen by its telemetry kind.
fn client_error(py: Python<'_>, e: &ClientError) -> PyErr {
    let message = e.to_string();
    let err = match e.kind() {
        "connect" | "resolve" => ConnectError::new_err(message),
        "tls" => TlsError::new_err(message),
        "quic" | "quic_silent" => QuicError::new_err(message),
        "timeout" => RequestTimeout::new_err(message),
        "http" => HttpError::new_err(message),
        "bad_url" => BadUrl::new_err(message),
        "config" | "path" => ConfigError::new_err(message),
        "page" => BadPage::new_err(message),
        _ => GearboxError::new_err(message),
    };
    // A failed setattr leaves a usable exception without `.kind`; nothing better to do.
    let _ = err.value(py).setattr("kind", e.kind());
    err
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Runs `f` with the GIL released and turns its failure, or a panic, into a Python error.
fn detached<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, Failure> + Send) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(Failure::Client(e))) => Err(client_error(py, &e)),
        Ok(Err(Failure::Closed)) => Err(PyValueError::new_err("the gearbox Client is closed")),
        Ok(Err(Failure::Py(e))) => Err(e),
        Err(payload) => Err(GearboxError::new_err(format!(
            "internal error in gearbox (please report it): {}",
            panic_message(&*payload)
        ))),
    }
}

/// A Python object from any serialisable value, through JSON (see the module docs).
fn to_py<'py>(py: Python<'py>, value: &impl Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value)
        .map_err(|e| GearboxError::new_err(format!("cannot convert a result to Python: {e}")))?;
    py.import("json")?.call_method1("loads", (text,))
}

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn workload_error(e: WorkloadError) -> PyErr {
    match e {
        WorkloadError::Read { .. } => PyOSError::new_err(e.to_string()),
        _ => value_error(e),
    }
}

const TRANSPORTS: [TransportPref; 4] = [
    TransportPref::Tcp,
    TransportPref::H1,
    TransportPref::Quic,
    TransportPref::Auto,
];

fn transport(name: &str) -> PyResult<TransportPref> {
    TRANSPORTS.into_iter().find(|t| t.name() == name).ok_or_else(|| {
        let valid: Vec<&str> = TRANSPORTS.iter().map(|t| t.name()).collect();
        PyValueError::new_err(format!("unknown transport {name:?}; valid: {}", valid.join(", ")))
    })
}

fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    if !(s.is_finite() && s > 0.0) {
        return Err(PyValueError::new_err(format!(
            "{what} must be a positive number of seconds, got {s}"
        )));
    }
    Duration::try_from_secs_f64(s).map_err(|e| PyValueError::new_err(format!("{what} = {s}: {e}")))
}

/// `ca` as one path (str or os.PathLike) or a list of them.
fn ca_files(ca: &Bound<'_, PyAny>) -> PyResult<Vec<PathBuf>> {
    if let Ok(one) = ca.extract::<PathBuf>() {
        return Ok(vec![one]);
    }
    ca.extract::<Vec<PathBuf>>()
        .map_err(|_| PyTypeError::new_err("ca must be a path (str or os.PathLike) or a list of paths"))
}

fn trust(ca: Option<&Bound<'_, PyAny>>, insecure: bool) -> PyResult<Trust> {
    match (ca, insecure) {
        (Some(_), true) => Err(PyValueError::new_err(
            "give either ca=<PEM file> or insecure=True, not both",
        )),
        (Some(ca), false) => Ok(Trust::Roots(ca_files(ca)?)),
        (None, true) => Ok(Trust::InsecureAny),
        (None, false) if Path::new(SYSTEM_CA_BUNDLE).exists() => {
            Ok(Trust::Roots(vec![PathBuf::from(SYSTEM_CA_BUNDLE)]))
        }
        (None, false) => Err(ConfigError::new_err(format!(
            "no ca given and no system CA bundle at {SYSTEM_CA_BUNDLE}; pass ca=<PEM file> or insecure=True"
        ))),
    }
}

/// An HTTPS client over pooled HTTP/1.1, HTTP/2 (TCP) and HTTP/3 (QUIC) connections;
/// every request is timed and returns its telemetry record.
///
/// Methods block until the request is done, with the GIL released, so threads can share
/// one client. Make clients after any `fork` (e.g. inside multiprocessing workers): the
/// client's runtime thread does not survive one. `with Client(...) as c:` closes it.
///
/// Args:
///     ca: certificate(s) or CA(s) to trust, PEM path or list of paths; default: the
///         system CA bundle.
///     insecure: accept any certificate (lab runs against throwaway certificates only).
///     local_addrs: local IP addresses, one connection pool per path (multipath); a
///         request's `path_index` picks one. Default: one path, the kernel picks the source.
///     quic_cc: QUIC congestion controller: newreno, cubic, bbr, copa, westwood, vivace (the suite's, switchable) or quinn-newreno, quinn-cubic, quinn-bbr (quinn's built-ins).
///     tcp_cc: kernel TCP congestion controller: reno, cubic, bbr or westwood (BPF, needs root) (default: the system's).
///     telemetry: JSON-lines file the records are appended to ("-": standard output).
///     connect_timeout_s: bound on TCP connect + TLS handshake, or the QUIC handshake.
///     request_timeout_s: bound on a whole request, connection setup included.
///     idle_timeout_s: a connection idle this long is closed instead of reused.
///     quic_initial_window_packets: QUIC initial window in 1200-byte packets (default:
///         RFC 9002's).
///     max_h1_connections_per_origin: HTTP/1.1 connections per origin and path.
///     control: upload every record to the control plane (docs/control.md): a dict with
///         `url` (https://HOST:PORT of `gearbox control serve`), `token` (role client),
///         `ca` (PEM the service's certificate is checked against) and optionally `spool`
///         (folder, default "gearbox-spool"), `batch_records`, `batch_interval_ms`,
///         `max_spool_bytes`, `final_upload_ms`, `timeout_ms`. Records are spooled on disk
///         and sent in batches with idempotency keys; `close` makes the last attempt and
///         what is left is sent by the next client on the same spool.
#[pyclass(module = "gearbox", name = "Client", frozen)]
struct PyClient {
    /// `None` once closed.
    inner: RwLock<Option<BlockingClient>>,
}

impl PyClient {
    /// Runs `f` on the client with the GIL released.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&BlockingClient) -> Result<T, ClientError> + Send,
    ) -> PyResult<T> {
        detached(py, || {
            let guard = self.inner.read().unwrap_or_else(|p| p.into_inner());
            let client = guard.as_ref().ok_or(Failure::Closed)?;
            Ok(f(client)?)
        })
    }
}

#[pymethods]
impl PyClient {
    #[new]
    #[pyo3(signature = (
        ca=None,
        insecure=false,
        local_addrs=None,
        quic_cc="cubic",
        tcp_cc=None,
        telemetry=None,
        connect_timeout_s=10.0,
        request_timeout_s=60.0,
        idle_timeout_s=30.0,
        quic_initial_window_packets=None,
        max_h1_connections_per_origin=6,
        control=None,
    ))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, one per ClientConfig field.
    fn new(
        py: Python<'_>,
        ca: Option<&Bound<'_, PyAny>>,
        insecure: bool,
        local_addrs: Option<Vec<String>>,
        quic_cc: &str,
        tcp_cc: Option<&str>,
        telemetry: Option<PathBuf>,
        connect_timeout_s: f64,
        request_timeout_s: f64,
        idle_timeout_s: f64,
        quic_initial_window_packets: Option<u32>,
        max_h1_connections_per_origin: usize,
        control: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let control = control.map(control_config).transpose()?;
        let local_addrs = local_addrs
            .unwrap_or_default()
            .iter()
            .map(|a| {
                IpAddr::from_str(a).map_err(|e| PyValueError::new_err(format!("local address {a:?} is not an IP: {e}")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        if max_h1_connections_per_origin == 0 {
            return Err(PyValueError::new_err(
                "max_h1_connections_per_origin must be at least 1",
            ));
        }
        let config = ClientConfig {
            trust: trust(ca, insecure)?,
            local_addrs,
            quic_cc: QuicCc::from_str(quic_cc).map_err(value_error)?,
            quic_initial_window_packets,
            tcp_cc: tcp_cc.map(TcpCc::from_str).transpose().map_err(value_error)?,
            connect_timeout: seconds("connect_timeout_s", connect_timeout_s)?,
            request_timeout: seconds("request_timeout_s", request_timeout_s)?,
            idle_timeout: seconds("idle_timeout_s", idle_timeout_s)?,
            max_h1_connections_per_origin,
            ..ClientConfig::default()
        };
        let client = detached(py, move || {
            Ok(match (&telemetry, &control) {
                (None, None) => BlockingClient::new(config)?,
                _ => BlockingClient::with_telemetry(config, telemetry.as_deref(), control.as_ref())?,
            })
        })?;
        Ok(PyClient {
            inner: RwLock::new(Some(client)),
        })
    }

    /// GET `url` (https://host:port/path) over `transport`: "tcp" (HTTP/2, or HTTP/1.1 if
    /// the server picks it), "h1" (HTTP/1.1 only), "quic" (HTTP/3) or "auto" (the client's
    /// transport gear decides).
    #[pyo3(signature = (url, transport="tcp"))]
    fn get(&self, py: Python<'_>, url: &str, transport: &str) -> PyResult<PyResponse> {
        let req = Request::get(url, self::transport(transport)?);
        let response = self.run(py, move |c| c.request(req))?;
        PyResponse::new(py, response)
    }

    /// Any request. `path_index` picks the local path (an index into `local_addrs`);
    /// `force_new_connection` opens a new connection instead of reusing a pooled one;
    /// `discard_body` counts the body without keeping it; `click` goes into the record.
    #[pyo3(signature = (
        method,
        url,
        body=None,
        transport="tcp",
        path_index=0,
        force_new_connection=false,
        headers=None,
        discard_body=false,
        click=None,
    ))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, one per Request field.
    fn request(
        &self,
        py: Python<'_>,
        method: &str,
        url: &str,
        body: Option<&[u8]>,
        transport: &str,
        path_index: usize,
        force_new_connection: bool,
        headers: Option<&Bound<'_, PyDict>>,
        discard_body: bool,
        click: Option<u32>,
    ) -> PyResult<PyResponse> {
        let mut req = Request::get(url, self::transport(transport)?);
        req.method = http::Method::from_bytes(method.as_bytes())
            .map_err(|_| PyValueError::new_err(format!("{method:?} is not an HTTP method")))?;
        req.body = bytes::Bytes::copy_from_slice(body.unwrap_or_default());
        req.path_index = path_index;
        req.force_new_connection = force_new_connection;
        req.discard_body = discard_body;
        req.click = click;
        for (name, value) in headers.map(|h| h.iter()).into_iter().flatten() {
            let name: String = name.extract()?;
            let value: String = value.extract()?;
            let header = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| PyValueError::new_err(format!("{name:?} is not a valid header name")))?;
            let value = http::HeaderValue::from_str(&value)
                .map_err(|_| PyValueError::new_err(format!("header {name}: {value:?} is not a valid value")))?;
            req.headers.append(header, value);
        }
        let response = self.run(py, move |c| c.request(req))?;
        PyResponse::new(py, response)
    }

    /// Loads a page from `origin` (https://host:port): each object is requested as soon as
    /// the objects it depends on are complete, all on one connection. `page` is a page dict
    /// (see `generate_page`) or an int seed for the built-in "page" workload. Returns a dict:
    /// page_load_ms, load_event_ms, protocol, transport, decision and objects (id, path, started_ms,
    /// completed_ms, status, record), ordered by id.
    #[pyo3(signature = (origin, page, transport="tcp", fresh_connection=true, path_index=0, click=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, one per PageLoadOptions field.
    fn load_page<'py>(
        &self,
        py: Python<'py>,
        origin: &str,
        page: &Bound<'py, PyAny>,
        transport: &str,
        fresh_connection: bool,
        path_index: usize,
        click: Option<u32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let page = page_from(py, page)?;
        let options = PageLoadOptions {
            transport: self::transport(transport)?,
            path_index,
            click,
            fresh_connection,
            reason: None,
        };
        let load = self.run(py, |c| c.load_page(origin, &page, &options))?;
        to_py(py, &PageLoadOut::from(&load))
    }

    /// Waits until every record so far is in the telemetry file.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |c| {
            c.flush_telemetry();
            Ok(())
        })
    }

    /// Flushes telemetry, closes every connection and stops the client's runtime. Later
    /// calls raise ValueError; closing again does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        detached(py, || {
            let client = self.inner.write().unwrap_or_else(|p| p.into_inner()).take();
            drop(client);
            Ok(())
        })
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> &'static str {
        if self.closed() {
            "<gearbox.Client closed>"
        } else {
            "<gearbox.Client open>"
        }
    }
}

/// The `control=` dict as the data plane's [`ControlConfig`], checked; an unknown key or a
/// bad value is a ValueError naming it.
fn control_config(obj: &Bound<'_, PyAny>) -> PyResult<ControlConfig> {
    let py = obj.py();
    if !obj.is_instance_of::<pyo3::types::PyDict>() {
        return Err(PyValueError::new_err(
            "control must be a dict: {\"url\": ..., \"token\": ..., \"ca\": ...}",
        ));
    }
    let text: String = py
        .import("json")?
        .call_method1("dumps", (obj,))
        .and_then(|t| t.extract())
        .map_err(|e| PyValueError::new_err(format!("control: not JSON-like: {e}")))?;
    let c: ControlConfig = serde_json::from_str(&text).map_err(|e| PyValueError::new_err(format!("control: {e}")))?;
    if c.policies.is_some() || c.poll_interval_s.is_some() {
        return Err(PyValueError::new_err(
            "control: policies, poll_interval_s: the Python client runs no transport gear with models to poll; `gearbox load --control ... --policies DIR` does",
        ));
    }
    c.validate().map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(c)
}

/// A complete response: `status`, `body` (bytes; empty with `discard_body`), `headers`
/// (dict, names in lower case, repeated headers joined by ", ") and `record`, the request's
/// telemetry record as a dict (docs/telemetry.md).
#[pyclass(module = "gearbox", name = "Response", frozen, get_all)]
struct PyResponse {
    status: u16,
    body: Py<PyBytes>,
    headers: Py<PyDict>,
    record: Py<PyAny>,
}

impl PyResponse {
    fn new(py: Python<'_>, r: Response) -> PyResult<Self> {
        let headers = PyDict::new(py);
        for (name, value) in &r.headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            match headers.get_item(name.as_str())? {
                Some(previous) => headers.set_item(name.as_str(), format!("{previous}, {value}"))?,
                None => headers.set_item(name.as_str(), value)?,
            }
        }
        Ok(PyResponse {
            status: r.status,
            body: PyBytes::new(py, &r.body).unbind(),
            headers: headers.unbind(),
            record: to_py(py, &r.record)?.unbind(),
        })
    }
}

#[pymethods]
impl PyResponse {
    fn __repr__(&self, py: Python<'_>) -> String {
        let record = self.record.bind(py);
        let field = |name: &str| record.get_item(name).ok().filter(|v| !v.is_none());
        let protocol = field("protocol").map_or_else(|| "?".to_string(), |v| v.to_string());
        let bytes = field("bytes").map_or_else(|| "?".to_string(), |v| v.to_string());
        let rct = field("rct_ms")
            .and_then(|v| v.extract::<f64>().ok())
            .map_or_else(|| "?".to_string(), |ms| format!("{ms:.3}"));
        format!(
            "<gearbox.Response {} {protocol} {bytes} bytes in {rct} ms>",
            self.status
        )
    }
}

/// What `load_page` returns, before it becomes a dict.
#[derive(Serialize)]
struct PageLoadOut<'a> {
    page_load_ms: f64,
    load_event_ms: f64,
    protocol: &'static str,
    transport: &'static str,
    decision: &'a str,
    objects: Vec<ObjectOut<'a>>,
}

#[derive(Serialize)]
struct ObjectOut<'a> {
    id: usize,
    path: &'a str,
    started_ms: f64,
    completed_ms: f64,
    status: u16,
    record: &'a ClientRecord,
}

impl<'a> From<&'a PageLoad> for PageLoadOut<'a> {
    fn from(load: &'a PageLoad) -> Self {
        PageLoadOut {
            page_load_ms: load.page_load_ms,
            load_event_ms: load.load_event_ms,
            protocol: load.protocol.name(),
            transport: load.protocol.transport(),
            decision: &load.decision,
            objects: load
                .objects
                .iter()
                .map(|o| ObjectOut {
                    id: o.id,
                    path: &o.path,
                    started_ms: o.started_ms,
                    completed_ms: o.completed_ms,
                    status: o.status,
                    record: &o.record,
                })
                .collect(),
        }
    }
}

/// A page from a page dict, or generated from an int seed by the built-in "page" workload.
fn page_from(py: Python<'_>, page: &Bound<'_, PyAny>) -> PyResult<Page> {
    if let Ok(seed) = page.extract::<u64>() {
        return gearbox_workload::generate_page(seed).map_err(workload_error);
    }
    let text: String = py
        .import("json")?
        .call_method1("dumps", (page,))
        .map_err(|e| PyTypeError::new_err(format!("page must be a page dict or an int seed: {e}")))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| BadPage::new_err(format!("not a page: {e}")))
}

/// The requests of a workload (a built-in name or a .toml file) for `seed`, in send order,
/// up to `duration_ms` of send times or `requests` requests (exactly one of them). Each is a
/// dict: send_at_ms, click, request_bytes, response_bytes, new_connection, client_index, path.
/// The same seed always gives the same requests.
#[pyfunction]
#[pyo3(signature = (name_or_path, seed, duration_ms=None, requests=None))]
fn workload_requests<'py>(
    py: Python<'py>,
    name_or_path: &str,
    seed: u64,
    duration_ms: Option<f64>,
    requests: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let limit = match (duration_ms, requests) {
        (Some(ms), None) if ms.is_finite() && ms >= 0.0 => Limit::DurationMs(ms),
        (Some(ms), None) => {
            return Err(PyValueError::new_err(format!(
                "duration_ms must be a finite number >= 0, got {ms}"
            )))
        }
        (None, Some(n)) => Limit::Requests(n),
        _ => return Err(PyValueError::new_err("give exactly one of duration_ms and requests")),
    };
    let spec = WorkloadSpec::load(name_or_path).map_err(workload_error)?;
    // Long workloads take a while to generate; other threads may run meanwhile.
    let generated = detached(py, || Ok(spec.generate(seed, limit)))?;
    to_py(py, &generated)
}

/// The names of the built-in workloads.
#[pyfunction]
fn workload_names() -> Vec<&'static str> {
    WorkloadSpec::builtin_names()
}

/// One page of a page workload (default: the built-in "page") for `seed`: a dict with
/// "objects", each with id, path, kind, size_bytes, priority (RFC 9218 urgency) and
/// depends_on (ids); object 0 is the HTML root. The same seed always gives the same page.
#[pyfunction]
#[pyo3(signature = (seed, workload="page"))]
fn generate_page<'py>(py: Python<'py>, seed: u64, workload: &str) -> PyResult<Bound<'py, PyAny>> {
    let page = WorkloadSpec::load(workload)
        .and_then(|spec| spec.generate_page(seed))
        .map_err(workload_error)?;
    to_py(py, &page)
}

/// Writes a self-signed certificate (PEM) for `names` (DNS names and IP addresses) and its
/// private key (PEM, PKCS#8), as `gearbox cert` does.
#[pyfunction]
fn make_cert(names: Vec<String>, cert_path: PathBuf, key_path: PathBuf) -> PyResult<()> {
    if names.is_empty() {
        return Err(PyValueError::new_err("give at least one name for the certificate"));
    }
    gearbox_dataplane::tls::write_self_signed(&names, &cert_path, &key_path).map_err(|e| match e {
        CertError::Write { .. } | CertError::Read { .. } => PyOSError::new_err(e.to_string()),
        _ => value_error(e),
    })
}

/// The WiseTrans Feature Extractor's features (crates/gearbox-gears, docs/wisetrans.md) of one
/// protocol's run, exactly as the gear computes them, so the training data cannot drift from
/// the deployed definitions. `records`: client records (dicts, JSON strings, or one JSONL
/// string). They are observed in completion order (`time_unix_ms + rct_ms`; a failed record at
/// `time_unix_ms`) and after each one the window of `protocol` ("tcp" or "quic") is read at
/// that record's completion time. Returns one dict per record, in the given order: the seven
/// features (NaN when missing), `requests`, `ok_requests` and `t_ms` (the completion time).
#[pyfunction]
#[pyo3(signature = (protocol, records, window_ms=10_000.0, max_requests=256))]
fn wisetrans_features<'py>(
    py: Python<'py>,
    protocol: &str,
    records: &Bound<'py, PyAny>,
    window_ms: f64,
    max_requests: usize,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    use gearbox_gears::transport::{FeatureExtractor, Transport};
    let transport = match protocol {
        "tcp" => Transport::Tcp,
        "quic" => Transport::Quic,
        other => {
            return Err(PyValueError::new_err(format!(
                "protocol must be \"tcp\" or \"quic\", got {other:?}"
            )))
        }
    };
    if !(window_ms.is_finite() && window_ms > 0.0) {
        return Err(PyValueError::new_err(format!(
            "window_ms must be a positive number, got {window_ms}"
        )));
    }
    let lines: Vec<String> = if let Ok(text) = records.extract::<String>() {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect()
    } else {
        let dumps = py.import("json")?.getattr("dumps")?;
        let mut out = Vec::new();
        for item in records.try_iter()? {
            let item = item?;
            out.push(match item.extract::<String>() {
                Ok(s) => s,
                Err(_) => dumps.call1((item,))?.extract()?,
            });
        }
        out
    };
    let mut parsed = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let r: gearbox_client::ClientRecord = serde_json::from_str(line)
            .map_err(|e| PyValueError::new_err(format!("record {i} is not a client record: {e}")))?;
        let done_ms = r.time_unix_ms
            + r.rct_ms
                .filter(|v| v.is_finite() && *v >= 0.0 && r.error.is_none())
                .unwrap_or(0.0);
        parsed.push((done_ms, r));
    }
    let mut order: Vec<usize> = (0..parsed.len()).collect();
    order.sort_by(|&a, &b| parsed[a].0.total_cmp(&parsed[b].0));
    let t0_ms = parsed.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let base = std::time::Instant::now();
    let mut fx = FeatureExtractor::new(Duration::from_secs_f64(window_ms / 1e3), max_requests);
    let mut out: Vec<Option<Bound<'py, PyDict>>> = vec![None; parsed.len()];
    for i in order {
        let (done_ms, record) = &parsed[i];
        let now = base + Duration::from_secs_f64(((done_ms - t0_ms) / 1e3).max(0.0));
        fx.observe(record, now);
        let f = fx.features(transport, now);
        let d = PyDict::new(py);
        for (name, value) in f.pairs() {
            d.set_item(name, value)?;
        }
        d.set_item("requests", f.requests)?;
        d.set_item("ok_requests", f.ok_requests)?;
        d.set_item("t_ms", *done_ms)?;
        out[i] = Some(d);
    }
    Ok(out.into_iter().flatten().collect())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<PyClient>()?;
    m.add_class::<PyResponse>()?;
    m.add_class::<sim::PySimSession>()?;
    m.add_class::<sim::PySimPageLoad>()?;
    m.add("GearboxError", py.get_type::<GearboxError>())?;
    m.add("ConnectError", py.get_type::<ConnectError>())?;
    m.add("TlsError", py.get_type::<TlsError>())?;
    m.add("QuicError", py.get_type::<QuicError>())?;
    m.add("RequestTimeout", py.get_type::<RequestTimeout>())?;
    m.add("HttpError", py.get_type::<HttpError>())?;
    m.add("BadUrl", py.get_type::<BadUrl>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("BadPage", py.get_type::<BadPage>())?;
    m.add_function(wrap_pyfunction!(sim::floo_feature_names, m)?)?;
    m.add_function(wrap_pyfunction!(sim::sailfish_feature_names, m)?)?;
    m.add_function(wrap_pyfunction!(sim::generate_trace, m)?)?;
    m.add_function(wrap_pyfunction!(workload_requests, m)?)?;
    m.add_function(wrap_pyfunction!(workload_names, m)?)?;
    m.add_function(wrap_pyfunction!(generate_page, m)?)?;
    m.add_function(wrap_pyfunction!(make_cert, m)?)?;
    m.add_function(wrap_pyfunction!(wisetrans_features, m)?)?;
    Ok(())
}
