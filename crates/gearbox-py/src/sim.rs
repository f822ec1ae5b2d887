//! `gearbox._native.SimSession`: a simulator session a learner steps through from Python
//! (docs/sim.md "Sessions"; the gymnasium environments of `gearbox.sim` build on it).

use std::path::Path;
use std::time::Duration;

use gearbox_cc::{Cca, SwitchMode};
use gearbox_gear_api::{CcaPeriodGear, InitialWindowGear};
use gearbox_gears::floo::{observation, FixedCca, FlooGear, RandomCca, FEATURE_NAMES};
use gearbox_gears::tcpwise::{CwndTable, SharedTable, TcpWiseGear};
use gearbox_sim::{Session, SimConfig};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::to_py;

/// One simulation: `SimSession(config_toml, name="<config>")`, stepped with `advance`.
#[pyclass(module = "gearbox", name = "SimSession", unsendable)]
pub struct PySimSession {
    session: Session,
}

fn sim_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

#[pymethods]
impl PySimSession {
    /// A session from a simulation config's TOML text (docs/sim.md); `name` names it in
    /// errors.
    #[new]
    #[pyo3(signature = (config, name = "<config>"))]
    fn new(config: &str, name: &str) -> PyResult<Self> {
        let config = SimConfig::parse(config, Path::new(name)).map_err(sim_error)?;
        Ok(PySimSession {
            session: Session::new(&config).map_err(sim_error)?,
        })
    }

    /// Gives every connection accepted from now on its initial window from a Cwnd Table
    /// (TOML text, docs/tcpwise.md), drawn per connection by the edge's own QUIC gear
    /// (`gearbox_gears::tcpwise::TcpWiseGear`, TCP WISE §IV-A) seeded by `seed`; each
    /// record of such a connection carries the edge's `iw` object. `None` goes back to
    /// the config's `initial_window`. A bad table raises `ValueError` naming `name`.
    #[pyo3(signature = (table, seed = 0, name = "<cwnd table>"))]
    fn set_cwnd_table(&mut self, table: Option<&str>, seed: u64, name: &str) -> PyResult<()> {
        let gear = match table {
            None => None,
            Some(text) => {
                let table = CwndTable::parse(text).map_err(|e| PyValueError::new_err(format!("{name}: {e}")))?;
                Some(Box::new(TcpWiseGear::new(SharedTable::new(table), seed)) as Box<dyn InitialWindowGear>)
            }
        };
        self.session.set_initial_window_gear(gear);
        Ok(())
    }

    /// Runs `seconds` of simulated time; returns whether the run is finished.
    fn advance(&mut self, seconds: f64) -> PyResult<bool> {
        let dt = Duration::try_from_secs_f64(seconds)
            .map_err(|_| PyValueError::new_err(format!("seconds must be a finite number >= 0, got {seconds}")))?;
        self.session.advance(dt).map_err(sim_error)
    }

    /// Simulated seconds since the start.
    #[getter]
    fn now_s(&self) -> f64 {
        self.session.now().as_secs_f64()
    }

    /// Whether every request is done or the virtual-time limit is reached.
    #[getter]
    fn finished(&self) -> bool {
        self.session.finished()
    }

    /// Requests of the workload not done (yet; once finished, those the virtual-time limit
    /// cut off, which have no record).
    #[getter]
    fn unfinished(&self) -> usize {
        self.session.unfinished()
    }

    /// Each live connection's monitor over the period since the previous call (a list of
    /// dicts; Floo Table 2), each with the Floo Monitor's normalised state: `features`
    /// (in `floo_feature_names()` order; None on quinn's built-ins) and `missing`, the
    /// metrics that had no sample (docs/floo.md "State").
    fn monitor<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        #[derive(serde::Serialize)]
        struct WithState {
            #[serde(flatten)]
            monitor: gearbox_sim::ConnectionMonitor,
            features: Option<Vec<f32>>,
            missing: Option<u32>,
        }
        let out: Vec<WithState> = self
            .session
            .monitor()
            .into_iter()
            .map(|monitor| {
                let obs = monitor.stats().map(|s| observation(&s));
                WithState {
                    monitor,
                    features: obs.map(|o| o.values.to_vec()),
                    missing: obs.map(|o| o.missing),
                }
            })
            .collect();
        to_py(py, &out)
    }

    /// Switches connection `conn`'s controller to `cca` (`full` or `part` switching).
    #[pyo3(signature = (conn, cca, mode = "full"))]
    fn switch(&self, conn: usize, cca: &str, mode: &str) -> PyResult<()> {
        let to = Cca::from_name(cca).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown controller {cca:?}; valid: {}",
                Cca::ALL.map(Cca::name).join(", ")
            ))
        })?;
        let mode = switch_mode(mode)?;
        self.session.switch(conn, to, mode).map_err(PyValueError::new_err)
    }

    /// Runs the session to its end with a Rust gear choosing every connection's
    /// controller every `period_s` (docs/floo.md): `gear` is a controller name (static),
    /// `"random"` (seeded by `seed`) or `"floo"` (the policy in `model_dir`); `mode` is
    /// `full` or `part` switching. Returns `{periods, decisions, switches}`.
    #[pyo3(signature = (gear, period_s = 12.0, mode = "full", model_dir = None, seed = 0))]
    fn drive<'py>(
        &mut self,
        py: Python<'py>,
        gear: &str,
        period_s: f64,
        mode: &str,
        model_dir: Option<std::path::PathBuf>,
        seed: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let period = Duration::try_from_secs_f64(period_s)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| PyValueError::new_err(format!("period_s must be a finite number > 0, got {period_s}")))?;
        let mode = switch_mode(mode)?;
        let mut gear: Box<dyn CcaPeriodGear> = match gear {
            "random" => Box::new(RandomCca::new(seed)),
            "floo" => {
                let dir = model_dir.ok_or_else(|| PyValueError::new_err("gear \"floo\" needs model_dir"))?;
                Box::new(FlooGear::load(&dir).map_err(sim_error)?)
            }
            name => Box::new(FixedCca(Cca::from_name(name).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "unknown gear {name:?}; valid: floo, random, {}",
                    Cca::ALL.map(Cca::name).join(", ")
                ))
            })?)),
        };
        let run = self.session.drive(gear.as_mut(), period, mode).map_err(sim_error)?;
        to_py(py, &run)
    }

    /// Client records (dicts, docs/telemetry.md) of the requests finished since the
    /// previous call.
    fn take_records<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let json = py.import("json")?;
        let list = PyList::empty(py);
        for line in self.session.take_records() {
            list.append(json.call_method1("loads", (line,))?)?;
        }
        Ok(list)
    }
}

/// The names of SAILfish's observation for a client with `paths` paths, in the order of
/// a `SimPageLoad.next_stream()`'s `features` (docs/sailfish.md).
#[pyfunction]
pub fn sailfish_feature_names(paths: usize) -> Vec<String> {
    gearbox_gears::path::sailfish::feature_names(paths)
}

/// The names of the Floo Monitor's normalised state, in the order of a monitor's
/// `features` (docs/floo.md "State").
#[pyfunction]
pub fn floo_feature_names() -> Vec<&'static str> {
    FEATURE_NAMES.to_vec()
}

fn switch_mode(mode: &str) -> PyResult<SwitchMode> {
    match mode {
        "full" => Ok(SwitchMode::Full),
        "part" => Ok(SwitchMode::Part),
        _ => Err(PyValueError::new_err(format!(
            "mode must be \"full\" or \"part\", got {mode:?}"
        ))),
    }
}

/// Writes the synthetic link trace of `preset` (docs/traces.md) for `seed`, `duration_s`
/// long, to `path` in mahimahi format, for a simulation config's `trace_file`.
#[pyfunction]
pub fn generate_trace(preset: &str, duration_s: f64, seed: u64, path: std::path::PathBuf) -> PyResult<()> {
    use gearbox_link::tracegen::Preset;
    let p = Preset::ALL.into_iter().find(|p| p.name() == preset).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown trace preset {preset:?}; valid: {}",
            Preset::ALL.map(Preset::name).join(", ")
        ))
    })?;
    let trace = p.generate(duration_s, seed).map_err(sim_error)?;
    trace
        .write_file(&path)
        .map_err(|e| PyValueError::new_err(format!("{}: {e}", path.display())))
}

/// A page load on a (multipath) client in virtual time, one stream-to-path decision at a
/// time: `SimPageLoad(config_toml, page_seed, name="<config>")` loads the page that
/// `page_seed` draws from the config's `workload` (a page workload) over the config's
/// paths (docs/sim.md "Page loads on several paths"; SAILfish §4.2.1).
#[pyclass(module = "gearbox", name = "SimPageLoad", unsendable)]
pub struct PySimPageLoad {
    load: gearbox_sim::PageLoad,
}

#[pymethods]
impl PySimPageLoad {
    #[new]
    #[pyo3(signature = (config, page_seed, name = "<config>"))]
    fn new(config: &str, page_seed: u64, name: &str) -> PyResult<Self> {
        let config = SimConfig::parse(config, Path::new(name)).map_err(sim_error)?;
        let page = gearbox_workload::WorkloadSpec::load(&config.workload)
            .and_then(|spec| spec.generate_page(page_seed))
            .map_err(|e| PyValueError::new_err(format!("{name}: workload: {e}")))?;
        Ok(PySimPageLoad {
            load: gearbox_sim::PageLoad::new(&config, &page).map_err(sim_error)?,
        })
    }

    /// Number of paths.
    #[getter]
    fn paths(&self) -> usize {
        self.load.paths()
    }

    /// Runs to the next stream that needs a path: a dict (object, kind, size_bytes,
    /// priority, now_ms, request and paths as a path scheduler sees them, and
    /// `features`: SAILfish's observation, computed by the Rust gear's own code,
    /// `sailfish_feature_names(paths)` order) or None when the page is loaded or the
    /// time limit came.
    fn next_stream<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        #[derive(serde::Serialize)]
        struct WithFeatures {
            #[serde(flatten)]
            request: gearbox_sim::StreamRequest,
            features: Vec<f32>,
        }
        let next = self.load.next_stream().map_err(sim_error)?.map(|request| WithFeatures {
            features: gearbox_gears::path::sailfish::features(&request.request, &request.paths),
            request,
        });
        to_py(py, &next)
    }

    /// Loads the rest of the page with a Rust path scheduler choosing every stream:
    /// one of `gearbox_gears::path::SCHEDULERS`, or "sailfish" with the policy in
    /// `model_dir`. Returns the outcome.
    #[pyo3(signature = (scheduler, model_dir = None))]
    fn run<'py>(
        &mut self,
        py: Python<'py>,
        scheduler: &str,
        model_dir: Option<std::path::PathBuf>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut gear: Box<dyn gearbox_gear_api::PathGear> = match scheduler {
            "sailfish" => {
                let dir = model_dir.ok_or_else(|| PyValueError::new_err("scheduler \"sailfish\" needs model_dir"))?;
                Box::new(gearbox_gears::path::SailfishGear::load(&dir, self.load.paths()).map_err(sim_error)?)
            }
            name => {
                gearbox_gears::path::scheduler(name).map_err(|e| PyValueError::new_err(format!("{e}, sailfish")))?
            }
        };
        let out = self.load.run_gear(gear.as_mut()).map_err(sim_error)?;
        to_py(py, &out)
    }

    /// Sends waiting stream `object` on `path`; `reason` goes to its record.
    #[pyo3(signature = (object, path, reason = ""))]
    fn assign(&mut self, object: usize, path: usize, reason: &str) -> PyResult<()> {
        self.load.assign(object, path, reason).map_err(sim_error)
    }

    /// Every object's path and times so far, and the page load time once done.
    fn outcome<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.load.outcome())
    }

    /// Client records (dicts, docs/telemetry.md) of the streams completed so far.
    fn records<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let json = py.import("json")?;
        let list = PyList::empty(py);
        for line in self.load.records() {
            list.append(json.call_method1("loads", (line,))?)?;
        }
        Ok(list)
    }
}
