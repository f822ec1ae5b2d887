"""Floo's scenarios, training command and evaluation, end to end in the simulator
(docs/floo.md). The PPO learner itself is tested in test_floo_ppo.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("jax")

from gearbox._native import SimSession, floo_feature_names  # noqa: E402
from gearbox.floo import evaluate, scenarios, train  # noqa: E402


def test_the_evaluation_set_is_floos_mix_within_table_4_and_apart_from_training() -> None:
    ev = scenarios.evaluation_set()
    assert len(ev) == 60
    assert [sum(s.cls == c for s in ev) for c in ("wifi", "cellular-stationary", "cellular-mobile")] == [10, 20, 30]
    for s in ev:
        assert 10.0 <= s.rtt_ms <= 300.0
        assert 0.0 <= s.jitter_ms <= min(20.0, 0.2 * s.rtt_ms) + 1e-9
        assert 0.0 <= s.loss_rate <= 0.05
        assert 0.3 <= s.buffer_bdp <= 1.5
        assert s.preset in scenarios.CLASSES[s.cls]
    tr = scenarios.training_set(200)
    assert not {s.trace_seed for s in ev} & {s.trace_seed for s in tr}
    assert not {(s.rtt_ms, s.loss_rate, s.buffer_bdp) for s in ev} & {(s.rtt_ms, s.loss_rate, s.buffer_bdp) for s in tr}
    assert scenarios.evaluation_set() == ev  # seeded
    with pytest.raises(ValueError, match="unknown scenario classes"):
        scenarios.sample({"dsl": 3}, 1, "x")


def test_a_scenario_is_a_simulation_config_whose_monitor_carries_the_floo_state(tmp_path: Path) -> None:
    s = scenarios.evaluation_set({"cellular-mobile": 1})[0]
    session = SimSession(s.config(tmp_path, 30.0, seed=3), s.name)
    session.advance(12.0)
    (m,) = session.monitor()
    assert len(m["features"]) == len(floo_feature_names()) == 16
    assert m["features"][12] == 1.0  # starts on Cubic: its one-hot
    assert m["missing"] >= 0
    assert list(tmp_path.glob("*.trace")), "the scenario's trace was generated into the cache"


def test_learn_floo_trains_exports_a_policy_the_rust_gear_loads(tmp_path: Path) -> None:
    out = tmp_path / "floo"
    args = ["--out", str(out), "--steps", "64", "--envs", "1", "--scenarios", "3", "--episode-s", "40"]
    assert train.main([*args, "--rollout-steps", "32"]) == 0
    meta = json.loads((out / "policy.meta.json").read_text())
    assert [f["name"] for f in meta["features"]] == floo_feature_names()
    assert meta["class_labels"] == ["cubic", "bbr", "copa", "westwood"]
    history = json.loads((out / "history.json").read_text())
    assert [h["steps"] for h in history] == [32, 64]
    info = json.loads((out / "policy.json").read_text())["info"]
    assert (info["reward"], info["baseline_cc"], info["start_cc"]) == ("baseline", "copa", "copa")
    s = scenarios.evaluation_set({"wifi": 1})[0]
    session = SimSession(s.config(tmp_path, 30.0, seed=1), s.name)
    run = session.drive("floo", 5.0, "full", str(out))
    assert run["decisions"] >= 1


def test_learn_floo_normalises_each_episodes_rewards_on_request(tmp_path: Path) -> None:
    # Floo §3.3's episode-level normalisation: PPO learns from rewards of unit spread per
    # episode, the policy records the option, and the history keeps the raw returns.
    out = tmp_path / "floo"
    args = ["--out", str(out), "--steps", "16", "--envs", "1", "--scenarios", "3", "--episode-s", "60"]
    assert train.main([*args, "--rollout-steps", "8", "--episode-reward-norm", "std"]) == 0
    info = json.loads((out / "policy.json").read_text())["info"]
    assert info["ppo"]["episode_reward_norm"] == "std"
    history = json.loads((out / "history.json").read_text())
    assert len(history) == 2 and history[-1]["steps"] >= 16
    for h in history:
        assert h["reward_std"] == pytest.approx(
            1.0, abs=0.15
        )  # whole episodes of std 1, cut by rollouts (0.3-0.4 without)


def test_evaluate_ranks_schemes_against_the_hindsight_best_static(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    code = evaluate.main(
        ["--out", str(out), "--scenarios", "3", "--duration-s", "30", "--period-s", "6"]
        + ["--schemes", "cubic,bbr,random", "--jobs", "1"]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenarios"] == 3
    schemes = summary["schemes"]
    assert set(schemes) == {"cubic", "bbr", "static_opt", "random"}
    # Static_Opt is the per-scenario best of the statics, so no static beats it anywhere.
    for s in ("cubic", "bbr"):
        assert schemes[s]["ratio_to_static_opt_mean"] >= 1.0
    assert schemes["static_opt"]["ratio_to_static_opt_mean"] == 1.0
    assert schemes["random"]["switches_per_minute"] > 0.0
    assert schemes["cubic"]["switches_per_minute"] == 0.0
    assert "| static_opt |" in (out / "report.md").read_text()
    rows = (out / "runs.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 * 3


def test_evaluate_refuses_bad_schemes_and_a_missing_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        evaluate.main(["--out", str(tmp_path), "--schemes", "cubic,vegas"])
    assert "unknown ['vegas']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate.main(["--out", str(tmp_path), "--schemes", "cubic,floo", "--model-dir", str(tmp_path / "none")])
    assert "no policy.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate.main(["--out", str(tmp_path), "--schemes", "cubic", "--start-cc", "vegas"])
    assert "--start-cc: unknown controller 'vegas'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main(["--out", str(tmp_path), "--start-cc", "vivace"])
    assert "--start-cc must be one of" in capsys.readouterr().err


def test_an_emulator_scenario_is_a_lab_scenario_with_one_policy_per_scheme(tmp_path: Path) -> None:
    from gearbox.floo import emulate
    from gearbox.lab.scenario import load

    s = scenarios.evaluation_set({"wifi": 1})[0]
    for proto, schemes in (("quic", ["cubic", "copa", "floo", "p-floo"]), ("tcp", ["cubic", "bbr", "floo"])):
        file = tmp_path / f"{proto}.toml"
        file.write_text(emulate.lab_scenario(s, schemes, 20.0, 7, tmp_path / "model", 12.0, proto))
        sc = load(file)
        assert [p.name for p in sc.policies] == schemes
        assert {p.proto for p in sc.policies} == {proto}
        floo = next(p for p in sc.policies if p.name == "floo")
        assert floo.edge_args[:4] == ["--tcp-cc" if proto == "tcp" else "--cc", "cubic", "--gear", "floo"]
        assert sc.paths[0].trace.preset == s.preset and sc.paths[0].rtt_ms == s.rtt_ms
    with pytest.raises(ValueError, match="no kernel TCP implementation"):
        emulate.edge_args("copa", tmp_path, 12.0, "tcp")
    # A policy trained to start on Copa starts there on QUIC; the kernel has no Copa.
    model = tmp_path / "copa-start"
    model.mkdir()
    (model / "policy.json").write_text(json.dumps({"info": {"start_cc": "copa"}}))
    assert emulate.edge_args("floo", model, 12.0)[:4] == ["--cc", "copa", "--gear", "floo"]
    assert emulate.edge_args("p-floo", model, 12.0, "tcp")[:2] == ["--tcp-cc", "cubic"]


def test_the_gears_actions_are_read_from_the_edges_telemetry(tmp_path: Path) -> None:
    from gearbox.floo import emulate

    run = tmp_path / "c000-floo-r0"
    run.mkdir()
    lines = [
        {"event": "cc_decision", "choice": "copa"},
        {"event": "cc_decision", "choice": "copa"},
        {"event": "cc_decision", "choice": "bbr"},
        {"event": "cc_switch", "to": "copa", "outcome": "switched"},
        {"side": "edge", "status": 200},
    ]
    (run / "edge.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    # P-Floo's runs (`c000-p-floo-r0`) are not Floo's.
    (tmp_path / "c000-p-floo-r0").mkdir()
    (tmp_path / "c000-p-floo-r0" / "edge.jsonl").write_text(json.dumps({"event": "cc_decision", "choice": "bbr"}))
    choices, outcomes = emulate.gear_actions(tmp_path, "floo")
    assert choices == {"copa": 2, "bbr": 1}
    assert outcomes == {"copa:switched": 1}
    assert emulate.gear_actions(tmp_path, "cubic") == ({}, {})
    assert emulate.gear_actions(tmp_path, "p-floo") == ({"bbr": 1}, {})


def test_the_level_reward_scores_each_periods_mean_rct_and_a_bad_name_is_refused(tmp_path: Path) -> None:
    import math

    from gearbox.sim.envs import LEVEL_RCT_MS, CcaSelectionEnv

    s = scenarios.evaluation_set({"wifi": 1})[0]
    env = CcaSelectionEnv(scenarios=[s.config(tmp_path, 60.0, seed=2)], period_s=6.0, reward="level")
    env.reset(seed=1)
    seen = 0
    for _ in range(8):
        _, reward, done, _, info = env.step(0)
        rct = info["mean_rct_ms"]
        assert reward == (math.log(LEVEL_RCT_MS / rct) if rct else 0.0)
        seen += rct is not None
        if done:
            break
    assert seen >= 1
    with pytest.raises(ValueError, match="reward must be one of gradient, level, baseline"):
        CcaSelectionEnv(reward="power")


def test_the_baseline_reward_is_zero_for_the_baselines_own_choice_and_not_otherwise(tmp_path: Path) -> None:
    from gearbox.sim.envs import CcaSelectionEnv

    s = scenarios.evaluation_set({"cellular-mobile": 1})[0]
    config = s.config(tmp_path, 90.0, seed=2)

    def rewards(action: int) -> tuple[list[float], dict]:
        env = CcaSelectionEnv(scenarios=[config], period_s=6.0, reward="baseline", start_cca="copa")
        env.reset(seed=4)
        out, info, done = [], {}, False
        while not done:
            _, reward, done, _, info = env.step(action)
            out.append(reward)
        return out, info

    # Copa all along is the reference run itself: every period's requests took as long.
    same, info = rewards(2)
    assert same and all(r == 0.0 for r in same)
    assert info["episode_baseline_rct_ms"] == pytest.approx(info["episode_mean_rct_ms"])
    # Westwood+ from the first period on is a different run: some period differs.
    other, info = rewards(3)
    assert any(r != 0.0 for r in other)
    assert info["episode_baseline_rct_ms"] != pytest.approx(info["episode_mean_rct_ms"])
    with pytest.raises(ValueError, match="baseline_cca must be one of"):
        CcaSelectionEnv(reward="baseline", baseline_cca="vegas")
    with pytest.raises(ValueError, match="start_cca must be one of"):
        CcaSelectionEnv(start_cca="reno")


def test_a_switch_is_charged_the_switch_cost_and_a_stay_is_not(tmp_path: Path) -> None:
    import numpy as np

    from gearbox.sim.envs import ACTIONS, OBS_NAMES, CcaSelectionEnv

    s = scenarios.evaluation_set({"cellular-mobile": 1})[0]
    config = s.config(tmp_path, 90.0, seed=2)
    one_hot = [OBS_NAMES.index(f"cca_{a}") for a in ACTIONS]
    copa, cubic = ACTIONS.index("copa"), ACTIONS.index("cubic")
    # From a Copa start: stay, ask for Cubic, ask again, back to Copa, then stay on Copa.
    plan = [copa, cubic, cubic, copa] + [copa] * 20

    def run(cost: float) -> tuple[list[float], list[bool], list[bool], dict]:
        env = CcaSelectionEnv(scenarios=[config], period_s=6.0, reward="baseline", start_cca="copa", switch_cost=cost)
        obs, _ = env.reset(seed=4)
        rewards, switched, expected, info, done = [], [], [], {}, False
        for action in plan:
            # A switch: a choice other than the controller the observation's one-hot says runs.
            running = int(np.argmax(obs[one_hot])) if obs[one_hot].any() else None
            expected.append(running is not None and action != running)
            obs, reward, done, _, info = env.step(action)
            rewards.append(reward)
            switched.append(env.last_switched)
            if done:
                break
        assert done, "the plan covers the episode"
        return rewards, switched, expected, info

    free, free_switched, _, free_info = run(0.0)
    charged, switched, expected, info = run(0.25)
    # The cost changes rewards, not the simulation: the same switches, the same requests.
    assert switched == free_switched == expected
    assert switched[0] is False and switched[1] is True and switched[-1] is False
    assert info["episode_switches"] == free_info["episode_switches"] == sum(switched)
    assert info["episode_mean_rct_ms"] == free_info["episode_mean_rct_ms"]
    for r, r0, sw in zip(charged, free, switched, strict=True):
        assert r == (r0 - 0.25 if sw else r0)
    # Copa all along from a Copa start: never a switch, every reward the reference's 0.
    env = CcaSelectionEnv(scenarios=[config], period_s=6.0, reward="baseline", start_cca="copa", switch_cost=0.25)
    env.reset(seed=4)
    done = False
    while not done:
        _, reward, done, _, info = env.step(copa)
        assert reward == 0.0 and not env.last_switched
    assert info["episode_switches"] == 0
    with pytest.raises(ValueError, match="switch_cost must be a finite number >= 0"):
        CcaSelectionEnv(switch_cost=-0.1)


def test_learn_floo_records_the_switch_cost(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "floo"
    args = ["--out", str(out), "--steps", "16", "--envs", "2", "--scenarios", "3", "--episode-s", "40"]
    assert train.main([*args, "--rollout-steps", "8", "--switch-cost", "0.1", "--in-process"]) == 0
    info = json.loads((out / "policy.json").read_text())["info"]
    assert info["switch_cost"] == 0.1
    with pytest.raises(SystemExit):
        train.main([*args, "--switch-cost", "-1"])
    assert "--switch-cost must be a finite number >= 0" in capsys.readouterr().err


def test_with_cc_sets_the_start_controller_of_a_config(tmp_path: Path) -> None:
    from gearbox.sim.envs import with_cc

    s = scenarios.evaluation_set({"wifi": 1})[0]
    text = with_cc(s.config(tmp_path, 30.0, seed=1, cc="cubic"), "bbr")
    session = SimSession(text, s.name)
    session.advance(6.0)
    (m,) = session.monitor()
    assert m["cca"] == "bbr"
    assert text.count("cc =") == 1


def test_a_constant_policy_through_the_gear_path_costs_nothing_when_it_starts_on_its_choice(tmp_path: Path) -> None:
    # `fixed-copa` starts every connection on --start-cc and switches it to Copa at the
    # first period: from a Copa start it must be exactly static Copa; from a Cubic start
    # it is a different run (the gear path's first period).
    def mean_rct(start: str) -> dict:
        out = tmp_path / start
        args = ["--out", str(out), "--scenarios", "2", "--duration-s", "40", "--period-s", "6", "--jobs", "1"]
        assert evaluate.main([*args, "--schemes", "copa,fixed-copa", "--start-cc", start]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["start_cc"] == start
        return {k: v["mean_rct_ms"] for k, v in summary["schemes"].items()}

    same = mean_rct("copa")
    assert same["fixed-copa"] == same["copa"]
    assert mean_rct("westwood")["fixed-copa"] != same["copa"]


def test_evaluate_starts_learned_schemes_where_the_policy_was_trained(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    assert evaluate.trained_start_cc(model) == "cubic"  # no policy: the old default
    (model / "policy.json").write_text(json.dumps({"info": {"start_cc": "copa"}}))
    assert evaluate.trained_start_cc(model) == "copa"
    (model / "policy.json").write_text("{not json")
    assert evaluate.trained_start_cc(model) == "cubic"


def test_diagnose_runs_a_policy_a_constant_and_the_loss_rule_through_the_gear_path(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from gearbox.floo import diagnose

    common = ["--scenarios", "2", "--duration-s", "30", "--period-s", "6", "--jobs", "1", "--cache", str(tmp_path)]
    assert diagnose.main(["--fixed", "bbr", "--start-cc", "copa", *common]) == 0
    out = capsys.readouterr().out
    assert "pooled mean RCT" in out and "'bbr'" in out and "cubic" not in out.split("choices")[1]
    model = tmp_path / "m"
    assert (
        train.main(
            ["--out", str(model), "--steps", "32", "--envs", "1", "--scenarios", "2", "--episode-s", "30"]
            + ["--rollout-steps", "32"]
        )
        == 0
    )
    assert diagnose.main(["--model-dir", str(model), *common]) == 0
    out = capsys.readouterr().out
    assert "mean class probabilities" in out and "max_delivery_rate_log10_mbps" in out
    assert diagnose.main(["--loss-rule", "0.001", "0.01", "--switch", "part", *common]) == 0
    with pytest.raises(SystemExit):
        diagnose.main(["--model-dir", str(tmp_path / "none")])


def test_seeds_judges_a_recipe_over_learner_seeds_with_the_evaluations_own_runs(tmp_path: Path) -> None:
    from gearbox.floo import seeds

    recipe = tmp_path / "recipe"
    learn = ["--steps", "8", "--envs", "1", "--scenarios", "3", "--episode-s", "40", "--rollout-steps", "8"]
    small = ["--scenarios", "3", "--duration-s", "30", "--period-s", "6"]
    out = tmp_path / "seeds"
    args = ["--recipe", f"r={recipe}", "--seeds", "1,2", "--sets", "7,8", *small, "--out", str(out)]
    assert seeds.main([*args, "--train", "--", *learn]) == 0
    assert all((recipe / f"seed-{n}" / "policy.json").is_file() for n in (1, 2))
    result = json.loads((out / "seeds.json").read_text())
    assert result["sets"] == [7, 8] and result["scenarios"] == 3
    per_seed = result["policies"]["r"]
    for s in ("7", "8"):
        spread = result["recipes"]["r"][s]
        xs = [per_seed[f"seed {n}"][s]["mean_rct_ms"] for n in (1, 2)]
        assert spread["seeds"] == 2
        assert spread["mean_rct_ms"] == {"mean": pytest.approx(sum(xs) / 2), "min": min(xs), "max": max(xs)}
    # The same figures as `gearbox lab floo evaluate` of that policy on that set.
    ev = tmp_path / "eval"
    assert (
        evaluate.main(
            [*small, "--model-dir", str(recipe / "seed-2"), "--seed", "8", "--jobs", "1", "--out", str(ev)]
            + ["--schemes", "cubic,bbr,copa,westwood,vivace,floo"]
        )
        == 0
    )
    summary = json.loads((ev / "summary.json").read_text())["schemes"]
    got = per_seed["seed 2"]["8"]
    assert got["mean_rct_ms"] == summary["floo"]["mean_rct_ms"]
    assert got["static_opt_ms"] == summary["static_opt"]["mean_rct_ms"]
    assert got["vs_copa"] == pytest.approx(summary["floo"]["mean_rct_ms"] / summary["copa"]["mean_rct_ms"] - 1)
    assert "| r | 2 |" in (out / "report.md").read_text()
    # Trained seeds are kept, not retrained; a missing policy is refused.
    before = (recipe / "seed-1" / "policy.json").read_bytes()
    assert seeds.main([*args, "--train", "--", *learn]) == 0
    assert (recipe / "seed-1" / "policy.json").read_bytes() == before
    with pytest.raises(SystemExit):
        seeds.main(["--recipe", f"r={recipe}", "--seeds", "3", *small, "--out", str(out)])
