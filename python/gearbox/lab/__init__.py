"""The gearbox lab: scenario files, the experiment runner over `gearbox emu`, reports.

- `gearbox.lab.scenario`: reading and checking scenario TOML, conditions, EMU.toml;
- `gearbox.lab.sampling`: the WSP space-filling sampler (Floo §4.3.1);
- `gearbox.lab.runner`: runs, the results table, RCT statistics and reductions;
- `gearbox.lab.report`: the self-contained HTML report.

Command line: `gearbox lab ...` or `python -m gearbox.lab ...`; docs/lab.md.
"""
