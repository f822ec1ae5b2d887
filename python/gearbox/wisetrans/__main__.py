"""`gearbox lab wisetrans` (also `python -m gearbox.wisetrans`): WiseTrans data, training, evaluation.

gearbox lab wisetrans dataset [--no-run]    # lab runs (root) -> data/wisetrans/dataset.parquet
gearbox lab wisetrans train                 # -> models/wisetrans/{,mlp-}{tcp,quic}.json + sidecars, strawman.json
gearbox lab wisetrans dataset-bbr [--no-run]  # the same lab runs with the edge's QUIC on BBR (Fig. 11's
                                            #   changed implementation) -> data/wisetrans/dataset-bbr.parquet
gearbox lab wisetrans train-bbr             # v1 retrained on it -> models/wisetrans-bbr/
gearbox lab wisetrans evaluate [--no-run]   # eval regions (root) -> tables, data/wisetrans/eval.json
gearbox lab wisetrans all                   # the five above in order: the whole report
gearbox lab wisetrans demo                  # short version: one changing path, <= 5 min
"""

from __future__ import annotations

import sys

USAGE = __doc__ or ""

# Fig. 11's retrained arm: the training data again with the edge's QUIC on BBR. The grid, the
# traces and the two UDP-policing parts (the WSP parts are left out to keep it to ~15 minutes).
DATASET_BBR = [
    "--out",
    "out/wisetrans/dataset-bbr",
    "--dataset",
    "data/wisetrans/dataset-bbr.parquet",
    "--edge-arg=--cc",
    "--edge-arg=bbr",
    *("--scenario", "scenarios/wisetrans-dataset-grid.toml"),
    *("--scenario", "scenarios/wisetrans-dataset-traces.toml"),
    *("--scenario", "scenarios/wisetrans-dataset-udp.toml"),
    *("--scenario", "scenarios/wisetrans-dataset-policer.toml"),
]
TRAIN_BBR = [
    *("--dataset", "data/wisetrans/dataset-bbr.parquet"),
    *("--model-dir", "models/wisetrans-bbr"),
    *("--results-dir", "data/wisetrans/bbr"),
    "--export-only",
]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd == "dataset":
        from gearbox.wisetrans import dataset

        return dataset.main(rest)
    if cmd == "dataset-bbr":
        from gearbox.wisetrans import dataset

        return dataset.main(DATASET_BBR + rest)
    if cmd == "train":
        from gearbox.wisetrans import train

        return train.main(rest)
    if cmd == "train-bbr":
        from gearbox.wisetrans import train

        return train.main(TRAIN_BBR + rest)
    if cmd == "evaluate":
        from gearbox.wisetrans import evaluate

        return evaluate.main(rest)
    if cmd == "demo":
        from gearbox.wisetrans import evaluate

        return evaluate.demo(rest)
    if cmd == "all":
        from gearbox.wisetrans import dataset, evaluate, train

        return (
            dataset.main([])
            or dataset.main(DATASET_BBR)
            or train.main([])
            or train.main(TRAIN_BBR)
            or evaluate.main([])
        )
    print(f"gearbox lab wisetrans: unknown command {cmd!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
