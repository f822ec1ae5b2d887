//! `gearbox._native.SimSession`: a simulator session a learner steps through from Python
//! (docs/sim.md "Sessions"; the gymnasium environments of `gearbox.sim` build on it).

use std::path::Path;
use std::time::Duration;

use gearbox_cc::{Cca, SwitchMode};
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

    /// Each live connection's monitor over the period since the previous call (a list of
    /// dicts; Floo Table 2).
    fn monitor<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.session.monitor())
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
        let mode = match mode {
            "full" => SwitchMode::Full,
            "part" => SwitchMode::Part,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "mode must be \"full\" or \"part\", got {mode:?}"
                )))
            }
        };
        self.session.switch(conn, to, mode).map_err(PyValueError::new_err)
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
