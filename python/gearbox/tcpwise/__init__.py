"""TCP WISE's Performance Oriented Learning (TCP WISE §IV-C, Algorithm 1): the learner that
reads the edge's telemetry and writes the next Cwnd Table (docs/tcpwise.md, "Learning").

One module per concern: `config` (the parameters), `table` (the Cwnd Table file), `records`
(the edge's telemetry), `algorithm` (DecisionMaking of Algorithm 1, pure), `learner` (one
learning iteration over a table and samples), `__main__` (the command line).
"""

from gearbox.tcpwise.algorithm import Decision, decision_making
from gearbox.tcpwise.config import LearnConfig, load_config
from gearbox.tcpwise.learner import learn
from gearbox.tcpwise.records import IwSample, RecordError, read_samples
from gearbox.tcpwise.table import ClusterEntry, CwndTable, TableError, read_table, write_table

__all__ = [
    "ClusterEntry",
    "CwndTable",
    "Decision",
    "IwSample",
    "LearnConfig",
    "RecordError",
    "TableError",
    "decision_making",
    "learn",
    "load_config",
    "read_samples",
    "read_table",
    "write_table",
]
