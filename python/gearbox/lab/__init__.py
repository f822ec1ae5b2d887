"""The gearbox lab: scenario files, the experiment runner over `gearbox emu`, reports.

- `gearbox.lab.scenario`: reading and checking scenario TOML, conditions, EMU.toml
  (a package, one module per job; its names are all importable from it);
- `gearbox.lab.sampling`: the WSP space-filling sampler (Floo §4.3.1);
- `gearbox.lab.environment`: the `gearbox` binary, root and the TUN device; `LabError`;
- `gearbox.lab.planning`: a scenario's runs and seeds, plan.json, conditions.json;
- `gearbox.lab.runner`: running every run through `gearbox emu`;
- `gearbox.lab.collect`: both ends' telemetry into one results table;
- `gearbox.lab.summary`: RCT statistics, reductions against the baselines, the text table;
- `gearbox.lab.report`: the self-contained HTML report.

Command line: `gearbox lab ...` or `python -m gearbox.lab ...`; docs/lab.md.
"""
