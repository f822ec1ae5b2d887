"""Scenario files: strict reading, errors that name the file and field, grids, EMU.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gearbox.lab import scenario as sc

REPO = Path(__file__).resolve().parents[2]

BASE = """
name = "t"
duration_s = 8
policies = ["tcp", "quic"]
[workload]
name = "app"
seed = 1
[[path]]
bandwidth_mbps = 20
rtt_ms = 20
"""


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def error_of(tmp_path: Path, text: str) -> sc.ScenarioError:
    with pytest.raises(sc.ScenarioError) as e:
        sc.load(write(tmp_path, text))
    return e.value


def test_a_minimal_scenario_reads_with_defaults(tmp_path: Path) -> None:
    s = sc.load(write(tmp_path, BASE))
    assert s.name == "t" and s.topology == "single" and s.repetitions == 1 and s.seed == 1
    assert [p.name for p in s.policies] == ["tcp", "quic"]
    assert all(p.baseline for p in s.policies)
    assert s.run_timeout_s == 2 * 8 + 30
    assert len(sc.conditions(s)) == 1


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("colour = 1\n", "colour"),
        ("[workload]\nname = 'app'\nsede = 2\n", "workload.sede"),
    ],
)
def test_an_unknown_top_level_or_workload_field_is_refused_by_name(tmp_path: Path, extra: str, field: str) -> None:
    text = extra + BASE if "workload" not in extra else BASE.replace('[workload]\nname = "app"\nseed = 1\n', extra)
    e = error_of(tmp_path, text)
    assert e.field_path == field
    assert "unknown field" in str(e) and str(tmp_path / "s.toml") in str(e)


def test_an_unknown_field_deep_in_a_schedule_is_named_with_its_path(tmp_path: Path) -> None:
    text = BASE + "[[path.schedule]]\nat_s = 1\nrtt_ms = 30\n[[path.schedule]]\nat_s = 2\nbandwith_mbps = 3\n"
    e = error_of(tmp_path, text)
    assert e.field_path == "path[0].schedule[1].bandwith_mbps"
    assert "unknown field `bandwith_mbps`" in str(e)


def test_an_unknown_policer_field_is_named(tmp_path: Path) -> None:
    text = BASE + 'policer = { action = "block", protocol = "udp", rate = 3 }\n'
    assert error_of(tmp_path, text).field_path == "path[0].policer.rate"


@pytest.mark.parametrize(
    ("line", "field", "words"),
    [
        ("loss_rate = 2", "path[0].loss_rate", "[0, 1]"),
        ("buffer_bdp = 0", "path[0].buffer_bdp", "> 0"),
        ("rtt_ms = -5", "path[0].rtt_ms", "> 0"),
        ("bandwidth_mbps = 'fast'", "path[0].bandwidth_mbps", "number"),
        ("queue_discipline = 'red'", "path[0].queue_discipline", "drop_tail"),
        ("trace = { preset = 'lunar', seed = 1 }", "path[0].trace.preset", "wifi"),
        (
            "policer = { action = 'rate_limit', protocol = 'udp', rate_bps = 0, burst_bytes = 1 }",
            "path[0].policer.rate_bps",
            ">= 1",
        ),
        ("loss = { model = 'bernoulli', loss_rate = 0.1 }", "path[0].loss", "only one"),
    ],
)
def test_bad_path_values_are_refused_naming_the_field(tmp_path: Path, line: str, field: str, words: str) -> None:
    key = line.split(" = ")[0]
    path = "\n".join(x for x in ("bandwidth_mbps = 20", "rtt_ms = 20") if not x.startswith(key + " ")) + "\n"
    text = BASE.replace("bandwidth_mbps = 20\nrtt_ms = 20\n", path + line + "\n")
    if key == "loss":
        text = text.replace(line, "loss_rate = 0.1\n" + line)
    e = error_of(tmp_path, text)
    assert e.field_path == field, str(e)
    assert words in e.message


def test_bad_top_level_values_are_refused(tmp_path: Path) -> None:
    assert error_of(tmp_path, BASE.replace("duration_s = 8", "duration_s = 0")).field_path == "duration_s"
    assert error_of(tmp_path, "repetitions = 0\n" + BASE).field_path == "repetitions"
    assert error_of(tmp_path, BASE.replace('name = "app"', 'name = "videos"')).field_path == "workload.name"
    assert error_of(tmp_path, 'topology = "mesh"\n' + BASE).field_path == "topology"
    e = error_of(tmp_path, BASE.replace('["tcp", "quic"]', '["tcp", "bbr"]'))
    assert e.field_path == "policies[1]" and "[policies.bbr]" in e.message


def test_a_schedule_out_of_time_order_is_refused(tmp_path: Path) -> None:
    text = BASE + "[[path.schedule]]\nat_s = 5\nrtt_ms = 30\n[[path.schedule]]\nat_s = 2\nrtt_ms = 40\n"
    assert error_of(tmp_path, text).field_path == "path[0].schedule[1].at_s"


def test_a_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    e = error_of(tmp_path, "name = \n")
    assert "not valid TOML" in str(e) and "s.toml" in str(e)


def test_a_single_topology_takes_exactly_one_path(tmp_path: Path) -> None:
    text = BASE + "[[path]]\nbandwidth_mbps = 5\n"
    assert error_of(tmp_path, text).field_path == "path"


def test_a_path_needs_a_rate(tmp_path: Path) -> None:
    assert error_of(tmp_path, BASE.replace("bandwidth_mbps = 20\n", "")).field_path == "path[0]"


def test_policies_map_names_to_flags_and_reserved_flags_are_refused(tmp_path: Path) -> None:
    text = BASE.replace('policies = ["tcp", "quic"]\n', "") + (
        '[policies.tcp]\n[policies.bbr]\nproto = "quic"\nedge_args = ["--cc", "bbr"]\nlabel = "BBR"\n'
    )
    s = sc.load(write(tmp_path, text))
    tcp, bbr = s.policies
    assert (tcp.proto, tcp.baseline, tcp.label) == ("tcp", True, "HTTP/2 over TCP")
    assert (bbr.proto, bbr.edge_args, bbr.baseline, bbr.label) == ("quic", ["--cc", "bbr"], False, "BBR")
    bad = text.replace('edge_args = ["--cc", "bbr"]', 'edge_args = ["--listen", "0.0.0.0:1"]')
    assert error_of(tmp_path, bad).field_path == "policies.bbr.edge_args"
    no_proto = text.replace('proto = "quic"\n', "")
    assert error_of(tmp_path, no_proto).field_path == "policies.bbr.proto"


def test_model_and_gear_config_paths_are_relative_to_the_scenario_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "models" / "wt").mkdir(parents=True)
    (tmp_path / "exp" / "gear").mkdir(parents=True)
    (tmp_path / "exp" / "gear" / "probe.toml").write_text("")
    policy = BASE.replace('policies = ["tcp", "quic"]\n', "") + (
        '[policies.tcp]\n[policies.v2]\nproto = "auto"\n'
        'load_args = ["--gear", "wisetrans-v2", "--model-dir", "../models/wt", '
        '"--gear-config=gear/probe.toml", "--concurrency", "4"]\n'
    )
    scenario = write(tmp_path / "exp", policy)
    monkeypatch.chdir(tmp_path / "models")  # not where the scenario is: the working directory does not matter
    v2 = sc.load(Path("../exp/s.toml")).policies[-1]
    assert v2.load_args == [
        "--gear",
        "wisetrans-v2",
        "--model-dir",
        str(tmp_path / "models" / "wt"),
        "--gear-config",
        str(tmp_path / "exp" / "gear" / "probe.toml"),
        "--concurrency",
        "4",
    ]
    assert v2.model_dir == str(tmp_path / "models" / "wt")
    # A missing settings file is refused at once; a missing model folder is the runner's to refuse.
    e = error_of(tmp_path / "exp", policy.replace("gear/probe.toml", "gear/nope.toml"))
    assert (e.source, e.field_path) == (str(scenario), "policies.v2.load_args")
    assert e.message == (
        f"--gear-config gear/nope.toml: no such file {tmp_path / 'exp' / 'gear' / 'nope.toml'} "
        "(paths in a scenario are relative to its folder)"
    )
    assert sc.load(write(tmp_path / "exp", policy.replace("models/wt", "models/none"))).policies[-1].model_dir
    e = error_of(tmp_path / "exp", policy.replace(', "--concurrency", "4"]', ', "--model-dir"]'))
    assert e.field_path == "policies.v2.load_args" and e.message.startswith("--model-dir needs a value")


def test_a_grid_expands_to_the_full_product_in_order(tmp_path: Path) -> None:
    text = BASE + "[grid]\nbandwidth_mbps = [5, 50]\nloss_rate = [0, 0.01, 0.02]\n"
    conds = sc.conditions(sc.load(write(tmp_path, text)))
    assert [c.id for c in conds] == [f"c{i:03d}" for i in range(6)]
    assert [c.params for c in conds] == [
        {"bandwidth_mbps": b, "loss_rate": loss} for b in (5.0, 50.0) for loss in (0.0, 0.01, 0.02)
    ]
    assert conds[1].label == "bandwidth_mbps=5 loss_rate=0.01"


def test_grid_values_are_checked_and_unknown_grid_keys_refused(tmp_path: Path) -> None:
    assert error_of(tmp_path, BASE + "[grid]\nloss_rate = [0, 1.5]\n").field_path == "grid.loss_rate[1]"
    assert error_of(tmp_path, BASE + "[grid]\ncolour = [1]\n").field_path == "grid.colour"
    assert error_of(tmp_path, BASE + "[grid]\nrtt_ms = []\n").field_path == "grid.rtt_ms"


def test_sweeping_bandwidth_over_a_trace_is_refused(tmp_path: Path) -> None:
    text = BASE.replace("bandwidth_mbps = 20", 'trace = { preset = "wifi" }') + "[grid]\nbandwidth_mbps = [5]\n"
    assert error_of(tmp_path, text).field_path == "grid.bandwidth_mbps"


def test_a_grid_times_a_sample_gives_every_combination(tmp_path: Path) -> None:
    text = BASE + "[grid]\nbandwidth_mbps = [5, 50]\n[sample]\nn = 3\nseed = 2\n[sample.ranges]\nrtt_ms = [10, 200]\n"
    conds = sc.conditions(sc.load(write(tmp_path, text)))
    assert len(conds) == 6
    assert all(10 <= c.params["rtt_ms"] <= 200 for c in conds)
    assert [c.params["bandwidth_mbps"] for c in conds] == [5.0] * 3 + [50.0] * 3


def test_sample_ranges_are_checked(tmp_path: Path) -> None:
    assert (
        error_of(tmp_path, BASE + "[sample]\nn = 3\n[sample.ranges]\nrtt_ms = [200, 10]\n").field_path
        == "sample.ranges.rtt_ms"
    )
    assert (
        error_of(tmp_path, BASE + '[sample]\nn = 3\nmethod = "lhs"\n[sample.ranges]\nrtt_ms = [1, 2]\n').field_path
        == "sample.method"
    )
    assert error_of(tmp_path, BASE + "[sample]\nn = 3\n").field_path == "sample.ranges"


def test_a_path_compiles_to_both_directions_of_link_config(tmp_path: Path) -> None:
    text = BASE.replace(
        "rtt_ms = 20\n", "rtt_ms = 40\nuplink_bandwidth_mbps = 5\nloss_rate = 0.01\nbuffer_bdp = 1.5\njitter_ms = 4\n"
    )
    text += "[[path.schedule]]\nat_s = 2.5\nbandwidth_mbps = 10\nloss_rate = 0\n"
    text += 'policer = { action = "block", protocol = "udp" }\n'
    s = sc.load(write(tmp_path, text))
    emu = sc.emu_config(s, sc.conditions(s)[0], lambda ref, seed: Path("/x"))
    down, up = emu["path"][0]["downlink"], emu["path"][0]["uplink"]
    assert down["rate_bps"] == 20_000_000 and up["rate_bps"] == 5_000_000
    assert down["delay_ms"] == up["delay_ms"] == 20.0 and down["base_rtt_ms"] == 40.0
    assert down["jitter_ms"] == 2.0
    assert down["queue"] == {"limit_bdp": 1.5}
    assert down["loss"] == {"model": "bernoulli", "loss_rate": 0.01}
    assert down["schedule"] == [
        {
            "at_ms": 2500.0,
            "rate_bps": 10_000_000,
            "loss": {"model": "none"},
            "policer": {"action": "block", "protocol": "udp"},
        }
    ]
    # The uplink has its own rate, so the schedule's bandwidth leaves it alone.
    assert "rate_bps" not in up["schedule"][0]


def test_grid_values_replace_the_paths_own(tmp_path: Path) -> None:
    s = sc.load(write(tmp_path, BASE + "[grid]\nrtt_ms = [100]\n"))
    emu = sc.emu_config(s, sc.conditions(s)[0], lambda ref, seed: Path("/x"))
    assert emu["path"][0]["downlink"]["delay_ms"] == 50.0
    assert sc.condition_values(s, sc.conditions(s)[0])["rtt_ms"] == 100.0


def test_the_emu_toml_written_reads_back_as_the_same_config(tmp_path: Path) -> None:
    s = sc.load(REPO / "scenarios" / "demo.toml")
    emu = sc.emu_config(s, sc.conditions(s)[0], lambda ref, seed: tmp_path / f"{ref.preset}-{seed}.trace")
    assert tomllib.loads(sc.dumps_toml(emu)) == emu


def test_the_emu_toml_keeps_characters_outside_the_basic_plane(tmp_path: Path) -> None:
    """A trace file whose path has an emoji: JSON-style `\\ud83d\\ude80` surrogate escapes
    are not TOML, so the file must hold the character itself."""
    folder = tmp_path / "traces \U0001f680"
    folder.mkdir()
    (folder / "up\u00e9.trace").write_text("1\n")
    s = sc.load(write(tmp_path, BASE.replace("bandwidth_mbps = 20", 'trace = "traces \U0001f680/up\u00e9.trace"')))

    def user_file(ref: sc.TraceRef, seed: int) -> Path:
        assert ref.file is not None  # a user's file is used as it is (the runner's TraceFiles)
        return ref.file

    emu = sc.emu_config(s, sc.conditions(s)[0], user_file)
    text = sc.dumps_toml(emu)
    assert "\U0001f680" in text
    back = tomllib.loads(text)
    assert back == emu
    assert back["path"][0]["downlink"]["trace_file"] == str(folder / "up\u00e9.trace")


def test_a_population_compiles_prefix_overrides(tmp_path: Path) -> None:
    text = BASE.replace('name = "t"', 'name = "t"\ntopology = "population"') + (
        "[population]\nprefixes = 4\nhosts_per_prefix = 2\n[[population.prefix]]\nindex = 3\nrtt_ms = 120\n"
    )
    s = sc.load(write(tmp_path, text))
    pop = sc.emu_config(s, sc.conditions(s)[0], lambda ref, seed: Path("/x"))["population"]
    assert pop["prefixes"] == 4 and pop["downlink"]["delay_ms"] == 10.0
    assert pop["prefix"] == [
        {"index": 3, "uplink": pop["prefix"][0]["uplink"], "downlink": pop["prefix"][0]["downlink"]}
    ]
    assert pop["prefix"][0]["downlink"]["delay_ms"] == 60.0
    bad = text.replace("index = 3", "index = 9")
    assert error_of(tmp_path, bad).field_path == "population.prefix[0].index"


def test_seeds_are_shared_by_policies_and_differ_between_repetitions(tmp_path: Path) -> None:
    s = sc.load(write(tmp_path, "repetitions = 2\n" + BASE))
    c = sc.conditions(s)[0]
    assert sc.workload_seed(s, 0) == 1 and sc.workload_seed(s, 1) == 2
    assert sc.link_seed(s, c, 0) != sc.link_seed(s, c, 1)
    assert sc.link_seed(s, c, 0) == sc.link_seed(s, c, 0)
    assert sc.derive_seed(1, "link", 0, 0) == 2189722986  # stable across runs and machines


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "scenarios").glob("*.toml")))
def test_the_shipped_scenarios_are_valid(name: str) -> None:
    s = sc.load(REPO / "scenarios" / f"{name}.toml")
    assert sc.conditions(s)
    assert {"tcp"} <= {p.name for p in s.policies}
    for p in s.policies:  # the gear settings files and models they name are shipped
        for flag, value in zip(p.load_args, p.load_args[1:], strict=False):
            if flag == "--gear-config":
                assert Path(value).is_file(), f"{name}: policy {p.name} names {value}"
        if p.model_dir is not None:
            assert Path(p.model_dir).is_relative_to(REPO / "models"), p.model_dir
            assert any(Path(p.model_dir).glob("*.json")), f"{name}: policy {p.name}: no model in {p.model_dir}"


def test_the_preset_names_match_the_binary(gearbox_bin: Path) -> None:
    import subprocess

    out = subprocess.run([str(gearbox_bin), "trace", "presets"], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"this gearbox build has no `trace` subcommand: {out.stderr.strip()}")
    assert tuple(out.stdout.split()) == sc.TRACE_PRESETS


def test_a_control_table_reads_its_pushes_and_names_what_is_wrong(tmp_path: Path) -> None:
    from gearbox.lab import control

    (tmp_path / "pol").mkdir()
    text = BASE + '[control]\npoll_s = 0.5\n[[control.push]]\ngear = "tcpwise"\ndir = "pol"\n'
    s = sc.load(write(tmp_path, text + '[[control.push]]\ngear = "wisetrans"\ndir = "pol"\nat_s = 4\n'))
    assert s.control is not None and s.control.poll_s == 0.5
    assert [(p.gear, p.dir, p.at_s) for p in s.control.pushes] == [
        ("tcpwise", tmp_path / "pol", 0.0),
        ("wisetrans", tmp_path / "pol", 4.0),
    ]
    assert "control.push[0].gear" in str(error_of(tmp_path, text.replace('"tcpwise"', '"cubic"')))
    e = str(error_of(tmp_path, text.replace('dir = "pol"', 'dir = "nope"')))
    assert "control.push[0].dir" in e and "no such folder" in e
    e = str(error_of(tmp_path, text + "at_s = 8\n"))
    assert "control.push[0].at_s" in e and "duration_s" in e
    e = str(error_of(tmp_path, text + "when = 1\n"))
    assert "control.push[0].when" in e and "unknown field" in e
    # Which clients poll: a WiseTrans gear (the default of `auto`), not a static or racing one.
    assert control.polls_transport_models("auto", [])
    assert control.polls_transport_models("auto", ["--gear", "mlp", "--model-dir", "m"])
    assert not control.polls_transport_models("auto", ["--gear=race"])
    assert not control.polls_transport_models("quic", [])


def test_control_jobs_are_the_services_jobs_checked_as_it_checks_them(tmp_path: Path) -> None:
    """`[control.jobs.NAME]` (docs/lab.md, "Control plane"): the run's control plane's
    `[jobs.NAME]`, `{scenario}` made the scenario's folder, bad keys named by their field."""
    import tomllib

    from gearbox.control.config import parse as parse_control
    from gearbox.lab import control

    (tmp_path / "pol").mkdir()
    text = (
        BASE
        + '[control]\n[[control.push]]\ngear = "tcpwise"\ndir = "pol"\n'
        + '[control.jobs.tcpwise]\ngear = "tcpwise"\nevery_s = 6.0\nside = "edge"\n'
        + 'command = ["{python}", "learn", "--config", "{scenario}/learn.toml", "{telemetry}"]\n'
    )
    s = sc.load(write(tmp_path, text))
    assert s.control is not None
    job = s.control.jobs["tcpwise"]
    assert job["command"] == ["{python}", "learn", "--config", f"{tmp_path.resolve()}/learn.toml", "{telemetry}"]
    # What the run's control.toml gets is what the service reads.
    parsed = parse_control(tomllib.loads(control.jobs_toml(s.control.jobs)), None).jobs["tcpwise"]
    assert (parsed.gear, parsed.every_s, parsed.side, parsed.command) == ("tcpwise", 6.0, "edge", job["command"])
    e = str(error_of(tmp_path, text.replace("every_s = 6.0", "every_s = 0")))
    assert "control.jobs.tcpwise.every_s" in e and "positive" in e, e
    e = str(error_of(tmp_path, text + "when = 1\n"))
    assert "control.jobs.tcpwise.when" in e and "unknown key" in e, e
    e = str(error_of(tmp_path, text.replace('side = "edge"', 'side = "both"')))
    assert "control.jobs.tcpwise.side" in e, e
