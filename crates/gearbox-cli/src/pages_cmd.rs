//! `gearbox pages`: the page kit (seeded static sites following FlexHTTP's measured page set, and
//! their Table 1 features) is Python (`python/gearbox/pages/`, docs/flexhttp.md "Page kit"); this
//! subcommand execs `python -m gearbox.pages` with the same arguments, the way `gearbox control`
//! does (lab_cmd.rs says which Python and how it is found).

use std::os::unix::process::CommandExt;

use clap::Args;

/// Everything after `pages`, passed on untouched (`--help` is the Python side's).
#[derive(Args, Debug)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct PagesArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Execs the page kit's command line; returns only on failure to start it.
pub fn run(a: PagesArgs) -> anyhow::Result<()> {
    let (mut cmd, python) = crate::lab_cmd::python_module("gearbox.pages", "gearbox pages", &a.args)?;
    // runpy replaces argv[0] with the module's path: the usage's name goes by the environment.
    cmd.env("GEARBOX_PAGES_PROG", "gearbox pages");
    let err = cmd.exec();
    Err(crate::lab_cmd::start_error(&python, &err))
}
