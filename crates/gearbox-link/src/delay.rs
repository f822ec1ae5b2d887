//! Stage 4: propagation delay and jitter.
//!
//! Every packet that leaves the rate stage at `t` is delivered at
//! `t + delay + j`, with `j` uniform in `[-jitter, +jitter]` (netem's default
//! jitter shape, which Floo uses through `tc`: Floo §4.3.1, Table 4 —
//! jitter/RTT 0-0.2, at most 20 ms) and the total clamped at zero.
//!
//! Jitter does **not** reorder packets unless `allow_reorder` is set: a packet
//! is never delivered before the one ahead of it (its time is raised to its
//! predecessor's). Real paths rarely reorder, and a reordering emulator would
//! punish TCP for something the network did not do; netem's reordering under
//! jitter is a known pitfall we do not reproduce by default. The cost is that
//! mean delay rises a little above `delay` when jitter is large relative to
//! packet spacing.
//!
//! In order mode the line is a `VecDeque` (times are non-decreasing); with
//! reordering it is a binary heap keyed by (time, arrival order).

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// Delay parameters.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DelayParams {
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Half-width of the uniform jitter.
    pub jitter: Duration,
    /// Let jitter reorder packets.
    pub allow_reorder: bool,
}

#[derive(Debug)]
struct Timed<P> {
    at: Duration,
    order: u64,
    packet: P,
}

impl<P> PartialEq for Timed<P> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl<P> Eq for Timed<P> {}
impl<P> PartialOrd for Timed<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<P> Ord for Timed<P> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// The delay line.
#[derive(Debug)]
pub struct DelayLine<P> {
    params: DelayParams,
    fifo: VecDeque<Timed<P>>,
    heap: BinaryHeap<Reverse<Timed<P>>>,
    /// Delivery time of the last packet put in, for the no-reorder clamp.
    last_at: Duration,
    order: u64,
}

impl<P> DelayLine<P> {
    /// An empty delay line.
    pub fn new(params: DelayParams) -> Self {
        DelayLine {
            params,
            fifo: VecDeque::with_capacity(1024),
            heap: BinaryHeap::new(),
            last_at: Duration::ZERO,
            order: 0,
        }
    }

    /// Changes delay/jitter for packets put in from now on; packets already in
    /// flight keep their delivery times (they are already on the wire).
    pub fn set_params(&mut self, params: DelayParams) {
        if params.allow_reorder != self.params.allow_reorder {
            // Move what is in flight to the structure of the new mode.
            let mut items: Vec<Timed<P>> = self.fifo.drain(..).chain(self.heap.drain().map(|r| r.0)).collect();
            items.sort();
            for it in items {
                self.last_at = self.last_at.max(it.at);
                if params.allow_reorder {
                    self.heap.push(Reverse(it));
                } else {
                    self.fifo.push_back(it);
                }
            }
        }
        self.params = params;
    }

    /// The parameters in force.
    pub fn params(&self) -> DelayParams {
        self.params
    }

    /// Puts in a packet that left the rate stage at `departed`; returns its delivery time.
    #[inline]
    pub fn push(&mut self, departed: Duration, packet: P, rng: &mut ChaCha8Rng) -> Duration {
        let mut at = departed.saturating_add(self.params.delay);
        if !self.params.jitter.is_zero() {
            let j = self.params.jitter.as_secs_f64() * (2.0 * rng.random::<f64>() - 1.0);
            at = if j >= 0.0 {
                at.saturating_add(crate::secs(j))
            } else {
                at.saturating_sub(crate::secs(-j))
            };
        }
        self.order += 1;
        if self.params.allow_reorder {
            self.heap.push(Reverse(Timed {
                at,
                order: self.order,
                packet,
            }));
        } else {
            at = at.max(self.last_at);
            self.fifo.push_back(Timed {
                at,
                order: self.order,
                packet,
            });
        }
        self.last_at = self.last_at.max(at);
        at
    }

    /// Delivery time of the next packet, if any.
    pub fn next_at(&self) -> Option<Duration> {
        if self.params.allow_reorder {
            self.heap.peek().map(|r| r.0.at)
        } else {
            self.fifo.front().map(|t| t.at)
        }
    }

    /// Takes the next packet if its delivery time is <= `now`.
    #[inline]
    pub fn pop(&mut self, now: Duration) -> Option<(Duration, P)> {
        if self.next_at()? > now {
            return None;
        }
        let t = if self.params.allow_reorder {
            self.heap.pop().map(|r| r.0)
        } else {
            self.fifo.pop_front()
        }?;
        Some((t.at, t.packet))
    }

    /// Packets in flight.
    pub fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn run(params: DelayParams) -> Vec<(Duration, u64)> {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut line = DelayLine::new(params);
        for i in 0..10_000u64 {
            line.push(Duration::from_micros(i * 100), i, &mut rng);
        }
        std::iter::from_fn(|| line.pop(Duration::MAX)).collect()
    }

    #[test]
    fn delay_without_reordering_keeps_order_under_jitter() {
        let params = DelayParams {
            delay: Duration::from_millis(20),
            jitter: Duration::from_millis(4),
            allow_reorder: false,
        };
        let out = run(params);
        assert_eq!(out.len(), 10_000);
        assert!(out.windows(2).all(|w| w[0].1 < w[1].1 && w[0].0 <= w[1].0));
        // Every packet waits at least delay - jitter, and jitter really varies it.
        for (i, (t, _)) in out.iter().enumerate() {
            let sent = Duration::from_micros(i as u64 * 100);
            assert!(*t >= sent + Duration::from_millis(16));
        }
        let spread: Vec<Duration> = out
            .iter()
            .enumerate()
            .map(|(i, (t, _))| *t - Duration::from_micros(i as u64 * 100))
            .collect();
        assert!(
            spread
                .iter()
                .max()
                .unwrap()
                .saturating_sub(*spread.iter().min().unwrap())
                > Duration::from_millis(3)
        );
    }

    #[test]
    fn delay_with_reordering_allowed_does_reorder() {
        let params = DelayParams {
            delay: Duration::from_millis(20),
            jitter: Duration::from_millis(4),
            allow_reorder: true,
        };
        let out = run(params);
        assert_eq!(out.len(), 10_000);
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "delivered in time order");
        assert!(out.windows(2).any(|w| w[0].1 > w[1].1), "some packet overtook another");
    }
}
