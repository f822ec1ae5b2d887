"""DecisionMaking of Algorithm 1 (TCP WISE §IV-C3), for one user cluster and hour: pure, no
I/O, no clock, so that every branch is tested on invented latencies.

Algorithm 1, as the seed writes it:

    if user_i's data sample number < S_min: keep collecting, return IW_Set_i
    else: find the IW X with the best P(X)
          if X is the largest IW in IW_Set_i: return X, X + Δ
          else: return X, X − Δ

P is the 80th-percentile TCP latency (§IV-C2), so "best" is the least p80, and of IWs with
equal p80 the smallest (§IV-C2: "the smallest IW which could minimize the 80th percentile TCP
latency"). For the two-IW set (α, β = α + Δ) this is the prose's rule: β better moves both up
by Δ, otherwise both down by Δ. The sample test is per IW (§IV-C3: "for each IW, the user's
responses sample number must [be] larger than S_min"). The returned set keeps Algorithm 1's
order, the winner X first (α, the control) and the probe second (β).

The loss guard, gearbox's and off by default (`LearnConfig.loss_guard`, docs/tcpwise.md "The
loss guard"): when
the responses carry their lost packets, an IW is not the winner over a smaller IW Y of the set
if it lost, per response, more than `loss_guard_share` × (IW − Y) packets more than Y did; the
least p80 among the IWs left wins. On a path whose bottleneck holds a few packets, the larger
IW of an A/B pair finishes sooner by taking the shared queue from its neighbours, and the
seed's comparison then climbs while every connection of the cluster slows down; the extra
packets it loses are the sign that the path cannot hold them.

Bounds, gearbox's: the probe stays in [min_iw, cap]. When X ± Δ leaves it, the probe is the
bound itself, and when X already sits on the bound the probe is the only neighbour left, on the
other side (X = 3 wins: the set is (3, 8), not (3, 3), so the A/B test goes on and notices
when a larger IW becomes better). A set of one IW (`[n, n]`) is pinned: not under test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gearbox.stats import percentile
from gearbox.tcpwise.config import LearnConfig


@dataclass(frozen=True)
class Decision:
    """The outcome of DecisionMaking for one (cluster, hour)."""

    iw_set: tuple[int, ...]
    """The set for the next interval (the input set when kept)."""
    moved: bool
    """Whether a decision was made (False: too few samples, or a pinned IW)."""
    best: int | None
    """X, the IW of least p80 (smallest on ties); None when no decision was made."""
    reason: str
    """What happened and why, for the table's `reason`."""
    counts: Mapping[int, int]
    """Samples per IW of the set."""
    p80_ms: Mapping[int, float]
    """The objective per IW (empty when no decision was made)."""


def _ms(x: float) -> str:
    return f"{x:.1f} ms"


def probe_for(winner: int, largest: bool, config: LearnConfig) -> int:
    """The probe IW beside the winner X: X + Δ when X is the set's largest, else X − Δ, kept in
    [min_iw, cap] (module doc: at a bound the probe turns to the other side)."""
    lo, hi = config.min_iw, config.cap
    probe = winner + config.delta if largest else winner - config.delta
    if probe > hi:
        probe = hi if winner < hi else max(lo, winner - config.delta)
    if probe < lo:
        probe = lo if winner > lo else min(hi, winner + config.delta)
    return probe


def _mean_losses(
    iws: Sequence[int], lost_packets: Mapping[int, Sequence[int]] | None, config: LearnConfig
) -> dict[int, float]:
    """Mean lost packets per response of each IW that has S_min responses reporting them."""
    if not lost_packets:
        return {}
    return {
        iw: sum(lost_packets[iw]) / len(lost_packets[iw]) for iw in iws if len(lost_packets.get(iw, ())) >= config.s_min
    }


def _excess_loss(iw: int, iws: Sequence[int], lost: Mapping[int, float], config: LearnConfig) -> int | None:
    """The smaller IW of the set that `iw` lost too many more packets than (the loss guard),
    or None when there is none (the smallest IW never has one)."""
    if iw not in lost:
        return None
    for y in iws:
        if y < iw and y in lost and lost[iw] - lost[y] > config.loss_guard_share * (iw - y):
            return y
    return None


def decision_making(
    iw_set: Sequence[int],
    latencies_ms: Mapping[int, Sequence[float]],
    config: LearnConfig,
    lost_packets: Mapping[int, Sequence[int]] | None = None,
) -> Decision:
    """Algorithm 1's DecisionMaking: the set for the next interval from this interval's
    latencies of each IW of `iw_set` (§IV-C3); `lost_packets`, each response's lost packets
    per IW where the stack reported them, feed the loss guard (module doc)."""
    iws = sorted(set(iw_set))
    counts = {iw: len(latencies_ms.get(iw, ())) for iw in iws}
    n = "/".join(str(counts[iw]) for iw in iws)
    if len(iws) == 1:
        return Decision(tuple(iw_set), False, None, f"single IW {iws[0]}: pinned, not under test", counts, {})
    short = [iw for iw in iws if counts[iw] < config.s_min]
    if short:
        few = ", ".join(f"IW {iw} has {counts[iw]}" for iw in short)
        return Decision(
            tuple(iw_set), False, None, f"keep: {few} < S_min {config.s_min} samples, collecting more", counts, {}
        )
    p = {iw: percentile(latencies_ms[iw], config.percentile) for iw in iws}
    by_p = sorted(iws, key=lambda iw: (p[iw], iw))
    lost = _mean_losses(iws, lost_packets, config) if config.loss_guard else {}
    guarded = [(iw, _excess_loss(iw, iws, lost, config)) for iw in by_p]
    winner = next(iw for iw, worse_than in guarded if worse_than is None)
    largest = winner == iws[-1]
    probe = probe_for(winner, largest, config)
    new_set = (winner, probe)
    pname = f"p{config.percentile:g}"
    others = [iw for iw in iws if iw != winner]
    tie = [iw for iw in others if p[iw] == p[winner]]
    rivals = ", ".join(f"IW {iw} {_ms(p[iw])}" for iw in others)
    head = f"IW {winner} {pname} {_ms(p[winner])} {'= (smallest of a tie)' if tie else '<'} {rivals} (n = {n})"
    if winner != by_p[0]:
        lead, y = guarded[0]
        head = (
            f"IW {lead} {pname} {_ms(p[lead])} is least, but loss guard: IW {lead} lost {lost[lead]:.1f} packets per"
            f" response against IW {y}'s {lost[y]:.1f}, more than {config.loss_guard_share:g} × the {lead - y} extra;"
            f" IW {winner} wins ({', '.join(f'IW {iw} {_ms(p[iw])}' for iw in iws)}, n = {n})"
        )
    wanted = winner + config.delta if largest else winner - config.delta
    if probe == wanted:
        step = f"move {'up' if largest else 'down'} by {config.delta}"
    elif probe in (config.min_iw, config.cap) and probe != winner:
        bound = "floor" if probe == config.min_iw else "cap"
        step = f"{winner} {'+' if largest else '−'} {config.delta} is past the {bound} {probe}: probe {probe}"
    else:
        bound = "floor" if winner == config.min_iw else "cap"
        step = f"{winner} is at the {bound}: probe the other side, {probe}"
    if sorted(new_set) == iws:
        step += ", set kept"
    return Decision(new_set, True, winner, f"{head}: {step} -> {list(new_set)}", counts, p)
