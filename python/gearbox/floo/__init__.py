"""Floo: the congestion controller of each connection, chosen every selection period by a
policy trained with PPO in the simulator (Floo §3; docs/floo.md).

- `gearbox.floo.scenarios`: the network conditions of training and of the held-apart
  evaluation (Floo §4.3.1 and §5.1: real-world-like traces plus WSP-sampled Table 4
  parameters);
- `gearbox.floo.ppo`: PPO for discrete actions in JAX (flax + optax), the learner
  (Floo §3.3, Appendix D);
- `gearbox.floo.train`: `gearbox learn floo`;
- `gearbox.floo.export`: the trained actor as a `gearbox-mlp` model file with its
  sidecar, which `gearbox-policy` evaluates in Rust on the edge;
- `gearbox.floo.evaluate`: `gearbox lab floo evaluate`.

Submodules are imported on demand: `ppo` needs the `floo` extra (jax, flax, optax).
"""
