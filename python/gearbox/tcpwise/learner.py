"""One learning iteration of TCP WISE (Algorithm 1's decision-making state, §IV-C3): from the
current Cwnd Table and the samples of the last interval θ, the next table.

Which samples are an entry's evidence: those the edge drew from the entry's current set, for
its cluster and hour (the record's `iw.cluster`, `iw.hour` and `iw.iw_set`); records drawn from
an older set, or for a cluster the table no longer has, are stale and left out. Of a cluster's
records, only the latest run of the current set counts, so that an entry kept for too few
samples keeps collecting across intervals (§IV-C3: "keep the same IW set in the next θ in
order to collect more data evidence"), while evidence from an earlier visit of the same set is
not mixed in.

Clusters and hours (§IV-C1, §IV-C3): the unit of learning is (cluster, hour). The records of the
`others` entry are split by client /24 (/48 for IPv6), and those of an entry without `hour` by
hour; a part with S_min samples of each IW gets an entry of its own, whose first set is
DecisionMaking on its own samples of the parent's set. The parts below S_min stay pooled in the
parent, which decides on their pooled samples. Starting new entries from the startup set
instead was rejected: the parent's set has just been measured on them.
"""

from __future__ import annotations

import ipaddress
import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace

from gearbox.tcpwise.algorithm import Decision, decision_making
from gearbox.tcpwise.config import LearnConfig
from gearbox.tcpwise.records import IwSample, client_ip
from gearbox.tcpwise.table import OTHERS, ClusterEntry, CwndTable, normalize_prefix

Key = tuple[str, int | None]


@dataclass
class LearnResult:
    """The next table and how it came about."""

    table: CwndTable
    decisions: dict[Key, Decision] = field(default_factory=dict)
    """DecisionMaking's outcome per entry of the next table that had one."""
    stale: int = 0
    """Samples drawn from a set or cluster the table no longer has."""
    carry: list[IwSample] = field(default_factory=list)
    """Samples that are still evidence next interval: those of entries kept for too few samples."""


def cluster_of(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, config: LearnConfig) -> str:
    """The user cluster of a client: its /24 (IPv4) or /48 (IPv6) (§IV-C1)."""
    length = config.prefix_v4 if ip.version == 4 else config.prefix_v6
    return str(ipaddress.ip_network(f"{ip}/{length}", strict=False))


def _entry_for(sample: IwSample, index: dict[Key, ClusterEntry]) -> ClusterEntry | None:
    try:
        cluster = normalize_prefix(sample.cluster)
    except ValueError:
        return None
    return index.get((cluster, sample.hour)) or index.get((cluster, None))


def _evidence(samples: list[IwSample], index: dict[Key, ClusterEntry]) -> tuple[dict[Key, list[IwSample]], int]:
    """Each entry's evidence: the latest run of its current set per (cluster, hour) of records."""
    by_record_key: dict[tuple[Key, Key], list[IwSample]] = defaultdict(list)
    stale = 0
    for s in samples:
        entry = _entry_for(s, index)
        if entry is None:
            stale += 1
            continue
        by_record_key[(entry.key, (s.cluster, s.hour))].append(s)
    evidence: dict[Key, list[IwSample]] = defaultdict(list)
    for (entry_key, _), run in by_record_key.items():
        current = sorted(index[entry_key].iw)
        run.sort(key=lambda s: s.time_unix_ms)
        start = len(run)
        while start > 0 and sorted(run[start - 1].iw_set) == current:
            start -= 1
        stale += start
        evidence[entry_key].extend(run[start:])
    return evidence, stale


def _latencies(samples: list[IwSample]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        out[s.iw].append(s.latency_ms)
    return out


def _latencies_per_cluster(
    clusters: list[list[IwSample]], iw_set: tuple[int, ...]
) -> tuple[dict[int, list[float]], int]:
    """Each IW's latencies in a pooled entry, compared per cluster (`LearnConfig.pooled_by_cluster`),
    from the pooled samples of each cluster (`learn` has grouped them by /24 already): a
    sample's latency over the median of its own cluster's samples, times the median of all the
    samples kept (so that the values read as milliseconds of a typical /24); clusters without a
    sample of every IW of the set are left out. Returns the latencies and the number of
    clusters kept."""
    wanted = set(iw_set)
    kept = [part for part in clusters if wanted <= {s.iw for s in part}]
    if not kept:
        return {}, 0
    scale = statistics.median(s.latency_ms for part in kept for s in part)
    out: dict[int, list[float]] = defaultdict(list)
    for part in kept:
        mid = statistics.median(s.latency_ms for s in part)
        for s in part:
            out[s.iw].append(s.latency_ms / mid * scale if mid > 0 else s.latency_ms)
    return out, len(kept)


def _losses(samples: list[IwSample]) -> dict[int, list[int]]:
    """Each IW's lost packets per response, of the samples that report them (the loss guard)."""
    out: dict[int, list[int]] = defaultdict(list)
    for s in samples:
        if s.retransmits is not None:
            out[s.iw].append(s.retransmits)
    return out


def _part_key(entry: ClusterEntry, s: IwSample, config: LearnConfig) -> Key | None:
    """The (cluster, hour) a sample of `entry` belongs to; None when it has no finer cluster."""
    hour = s.hour if (entry.hour is None and config.per_hour) else entry.hour
    if entry.prefix != OTHERS:
        return (normalize_prefix(entry.prefix), hour)
    ip = client_ip(s.client_addr)
    return (cluster_of(ip, config), hour) if ip is not None else None


def _chance_for(new_set: tuple[int, ...], old: ClusterEntry | None) -> float:
    if len(new_set) == 2:
        return old.chance_alpha if old is not None and len(old.iw) == 2 else 0.5
    return 1.0 / len(new_set)


def _bounded(entry: ClusterEntry, config: LearnConfig) -> tuple[tuple[int, ...], str | None]:
    """The entry's set with every IW in [min_iw, cap] (a table written under a larger cap)."""
    bounded = tuple(min(config.cap, max(config.min_iw, iw)) for iw in entry.iw)
    if bounded == entry.iw:
        return bounded, None
    return bounded, f"set {list(entry.iw)} brought into [{config.min_iw}, cap {config.cap}]: {list(bounded)}"


def learn(table: CwndTable, samples: list[IwSample], config: LearnConfig, now_unix_ms: int) -> LearnResult:
    """Algorithm 1's decision-making state over every entry of `table` (§IV-C3): the next table,
    version + 1, each entry's `reason` saying what changed and why."""
    index = table.index()
    evidence, stale = _evidence(samples, index)
    result = LearnResult(CwndTable(table.version + 1, config.cap, now_unix_ms, []), stale=stale)
    new_entries: list[ClusterEntry] = []
    for entry in table.entries:
        own = evidence.get(entry.key, [])
        parts: dict[Key | None, list[IwSample]] = defaultdict(list)
        for s in own:
            parts[_part_key(entry, s, config)].append(s)
        pooled: list[IwSample] = []
        pooled_by_cluster: dict[str, list[IwSample]] = defaultdict(list)
        for part, part_samples in sorted(parts.items(), key=lambda kv: str(kv[0])):
            lat = _latencies(part_samples)
            enough = all(len(lat.get(iw, ())) >= config.s_min for iw in set(entry.iw))
            if part is None or part == entry.key or part in index or not enough or len(set(entry.iw)) == 1:
                pooled.extend(part_samples)
                if part is not None:
                    pooled_by_cluster[part[0]].extend(part_samples)
                continue
            d = decision_making(entry.iw, lat, config, _losses(part_samples))
            origin = "cluster" if entry.prefix == OTHERS else "hour"
            new = ClusterEntry(
                prefix=part[0],
                hour=part[1],
                iw=d.iw_set,
                chance_alpha=_chance_for(d.iw_set, entry),
                best=d.best,
                reason=f"new {origin}: {len(part_samples)} samples of its own in {entry.prefix}"
                f"{'' if entry.hour is None else f' hour {entry.hour}'}; {d.reason}",
            )
            new_entries.append(new)
            result.decisions[new.key] = d
        iw_set, clamp_note = _bounded(entry, config)
        if config.pooled_by_cluster and entry.prefix == OTHERS:
            lat, kept = _latencies_per_cluster(list(pooled_by_cluster.values()), iw_set)
            d = decision_making(iw_set, lat, config, _losses(pooled))
            d = replace(d, reason=f"per-/24 normalised latencies of {kept} /24s with every IW of the set: {d.reason}")
        else:
            d = decision_making(iw_set, _latencies(pooled), config, _losses(pooled))
        if len(pooled) < len(own):
            note = f"{len(own) - len(pooled)} samples went to entries of their own; pooled rest: "
            d = replace(d, reason=note + d.reason)
        reason = d.reason if clamp_note is None else f"{clamp_note}; {d.reason}"
        best = d.best if d.moved else entry.best
        if best is not None:
            best = min(config.cap, max(config.min_iw, best))
        result.table.entries.append(
            ClusterEntry(entry.prefix, d.iw_set, entry.hour, _chance_for(d.iw_set, entry), best, reason)
        )
        result.decisions[entry.key] = d
        if not d.moved:
            result.carry.extend(pooled)
    if (OTHERS, None) not in index:
        startup = config.startup_set
        what = "fast start set" if config.fast_start else "startup set (α, α + Δ)"
        new_entries.append(
            ClusterEntry(OTHERS, startup, None, _chance_for(startup, None), None, f"startup: no `others` entry; {what}")
        )
    new_entries.sort(key=lambda e: (e.prefix != OTHERS, e.prefix, -1 if e.hour is None else e.hour))
    result.table.entries.extend(new_entries)
    return result
