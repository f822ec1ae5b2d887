"""Floo: the congestion controller of each connection, chosen every selection period by a
policy trained with PPO in the simulator (docs/floo.md).

- `scenarios`: the network conditions of training and of the held-apart evaluation
  (Floo §4.3.1 and §5.1: real-world-like traces plus WSP-sampled Table 4 parameters);
- `ppo`: PPO in JAX (Floo §3.3, Appendix D);
- `train`: `gearbox learn floo`;
- `export`: the trained actor as a `gearbox-mlp` policy the edge evaluates;
- `evaluate`: `gearbox lab floo evaluate`.
"""
