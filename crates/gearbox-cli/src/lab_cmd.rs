//! `gearbox lab`: the lab (scenarios, experiment runner, reports) is Python
//! (`python/gearbox/lab`, docs/lab.md); this subcommand only execs it with the
//! same arguments, so that `gearbox` stays the one front door.
//!
//! Which Python: `$GEARBOX_PYTHON`, else the repository's `.venv/bin/python`
//! (found from this binary's place, `<repo>/target/{release,debug}/gearbox`),
//! else `python3` from PATH. The child gets `GEARBOX_BIN` (this binary, unless
//! already set) so that the lab drives the same build, and `<repo>/python` on
//! `PYTHONPATH` so that it runs from a checkout even before `pip install`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;

/// Arguments of `gearbox lab`: everything after `lab`, passed on untouched
/// (`gearbox lab --help` is the Python side's help).
#[derive(Args, Debug)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct LabArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Runs `-m MODULE` through `runpy` (argv: `-c BOOTSTRAP MODULE PROG ARGS...`), after
/// checking that the package is importable, so that a missing package gets a sentence
/// instead of a traceback. `PROG` becomes `sys.argv[0]`, the name the module's usage shows.
const BOOTSTRAP: &str = r#"
import importlib.util, runpy, sys
module, prog = sys.argv[1], sys.argv[2]
if sys.version_info < (3, 11):
    sys.stderr.write("%s needs Python 3.11+, %s is %s: run scripts/setup.sh\n" % (prog, sys.executable, sys.version.split()[0]))
    sys.exit(2)
try:
    found = importlib.util.find_spec(module) is not None
except ImportError:
    found = False
if not found:
    sys.stderr.write(
        "%s: the Python package %s is not installed for %s: run scripts/setup.sh "
        "(or scripts/python-setup.sh)\n" % (prog, module, sys.executable)
    )
    sys.exit(2)
sys.argv = [prog] + sys.argv[3:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"#;

/// The repository root when this binary is `<repo>/target/<profile>/gearbox`.
fn repo_root(exe: &Path) -> Option<PathBuf> {
    let root = exe.parent()?.parent()?.parent()?;
    root.join("python").join("gearbox").is_dir().then(|| root.to_path_buf())
}

/// The command that runs the Python lab with `args`, and the Python it uses.
pub(crate) fn python_lab(args: &[String]) -> anyhow::Result<(Command, OsString)> {
    python_module("gearbox.lab", "gearbox lab", args)
}

/// The command that runs `python -m module` with `args` (its usage naming `prog`), and the
/// Python it uses.
pub(crate) fn python_module(module: &str, prog: &str, args: &[String]) -> anyhow::Result<(Command, OsString)> {
    let exe = std::env::current_exe().ok();
    let repo = exe.as_deref().and_then(repo_root);
    let venv_python = repo.as_ref().map(|r| r.join(".venv").join("bin").join("python"));
    let python: OsString = match std::env::var_os("GEARBOX_PYTHON") {
        Some(p) => p,
        None => match venv_python.filter(|p| p.is_file()) {
            Some(p) => p.into_os_string(),
            None => "python3".into(),
        },
    };
    let mut cmd = Command::new(&python);
    cmd.arg("-c").arg(BOOTSTRAP).arg(module).arg(prog).args(args);
    if std::env::var_os("GEARBOX_BIN").is_none() {
        if let Some(exe) = &exe {
            cmd.env("GEARBOX_BIN", exe);
        }
    }
    if let Some(repo) = &repo {
        let mut paths = vec![repo.join("python")];
        if let Some(old) = std::env::var_os("PYTHONPATH") {
            paths.extend(std::env::split_paths(&old));
        }
        cmd.env("PYTHONPATH", std::env::join_paths(paths)?);
    }
    Ok((cmd, python))
}

/// Why the lab's (or a learner's) Python could not be started.
pub(crate) fn start_error(python: &OsString, err: &std::io::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "gearbox's Python side (lab, learners) needs Python 3.11+ with the gearbox package, but `{}` could not be started ({err}): \
         run scripts/setup.sh, or set GEARBOX_PYTHON",
        Path::new(python).display()
    )
}

/// Execs the Python lab; returns only on failure to start it.
pub fn run(a: LabArgs) -> anyhow::Result<()> {
    let (mut cmd, python) = python_lab(&a.args)?;
    let err = cmd.exec();
    Err(start_error(&python, &err))
}
