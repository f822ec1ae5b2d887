"""`gearbox lab wisetrans` (also `python -m gearbox.wisetrans`): WiseTrans data, training, evaluation.

gearbox lab wisetrans dataset [--no-run]    # lab runs (root) -> data/wisetrans/dataset.parquet
gearbox lab wisetrans train                 # -> models/wisetrans/{,mlp-}{tcp,quic}.json + sidecars, strawman.json
gearbox lab wisetrans evaluate [--no-run]   # eval regions (root) -> tables, data/wisetrans/eval.json
gearbox lab wisetrans all                   # the three in order
gearbox lab wisetrans demo                  # short version: one changing path, <= 5 min
"""

from __future__ import annotations

import sys

USAGE = __doc__ or ""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd == "dataset":
        from gearbox.wisetrans import dataset

        return dataset.main(rest)
    if cmd == "train":
        from gearbox.wisetrans import train

        return train.main(rest)
    if cmd == "evaluate":
        from gearbox.wisetrans import evaluate

        return evaluate.main(rest)
    if cmd == "demo":
        from gearbox.wisetrans import evaluate

        return evaluate.demo(rest)
    if cmd == "all":
        from gearbox.wisetrans import dataset, evaluate, train

        return dataset.main([]) or train.main([]) or evaluate.main([])
    print(f"gearbox lab wisetrans: unknown command {cmd!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
