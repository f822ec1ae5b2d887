"""Portable models: export helpers for the Rust evaluator in `crates/gearbox-policy`.

See docs/models.md for the model file and sidecar formats.
"""
