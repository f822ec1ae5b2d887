"""Floo: congestion-control selection per connection by a PPO policy (Floo §3.3).

* `gearbox.floo.ppo`: PPO for discrete actions in JAX (flax + optax), the learner;
* `gearbox.floo.export`: the trained actor as a `gearbox-mlp` model file with its sidecar,
  which `gearbox-policy` evaluates in Rust on the edge.

Submodules are imported on demand: `ppo` needs the `floo` extra (jax, flax, optax).
"""
