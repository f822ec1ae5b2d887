"""WiseTrans (docs/papers.md): the data, training and evaluation half of the transport gear.

The gear itself is Rust (crates/gearbox-gears, docs/wisetrans.md). Here, one file per
pipeline: `dataset` (paired TCP-only / QUIC-only lab runs -> labelled rows), `train`
(Fig. 14 grid, Table II, export of models/wisetrans), `evaluate` (regions, Ideal, deep dive,
generalisation). `python -m gearbox.wisetrans` or `gearbox lab wisetrans` runs them.
"""
