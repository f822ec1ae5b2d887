//! The relay's logic without I/O: which link a packet enters, where a link's
//! output goes next, and when the links need the clock again.
//!
//! Like `gearbox-link` itself (and quinn-proto), it takes `now` in every call
//! and hands packets back through a callback, so it is tested with invented
//! time and packets, no namespaces or root needed; `relay.rs` is the thin
//! epoll shell around it.
//!
//! A packet from the client namespace is routed by its IPv4 **source**
//! address, one from the server namespace by its **destination** address
//! ([`crate::addr`] maps an address to its path or /24). A population with a
//! shared access path chains two links per direction: prefix link then shared
//! link going up, shared link then (demultiplexed again by destination) prefix
//! link coming down.
//!
//! Wake-ups are a binary heap of `(time, link)` with lazy deletion: each link
//! remembers the time it is armed for, and a popped entry that no longer
//! matches is ignored. That keeps a population of thousands of links at
//! O(log n) per event instead of polling every link on every wake-up.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use bytes::Bytes;
use gearbox_link::{Link, LinkConfig, LinkError, LinkStats, PacketEvent};

use crate::addr::{client_addr, client_index};
use crate::config::EmuConfig;

/// Which namespace a packet leaves the relay towards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The server namespace (end of the uplink).
    Server,
    /// The client namespace (end of the downlink).
    Client,
}

/// Direction of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Client → server.
    Up,
    /// Server → client.
    Down,
}

impl Dir {
    /// `up` / `down`, as in the event log.
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::Up => "up",
            Dir::Down => "down",
        }
    }
}

/// Where a link's output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dest {
    Out(Side),
    Link(usize),
    /// The per-prefix downlink chosen by destination address (after a shared downlink).
    PrefixDown,
}

/// One link of the plan, before it is built.
#[derive(Debug, Clone)]
pub struct PlannedLink {
    /// Path name or `prefix<i>`.
    pub label: String,
    /// Direction.
    pub dir: Dir,
    /// Its configuration.
    pub config: LinkConfig,
    dest: Dest,
}

/// Every link of a topology, how packets are routed through them, and the
/// client addresses. Built from an [`EmuConfig`] without touching the system.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The links, in seed order (uplink, downlink of path 0, 1, …, then of prefix 0, 1, …).
    pub links: Vec<PlannedLink>,
    /// First link of the uplink of each entry (path or prefix).
    up_entry: Vec<usize>,
    /// First link of the downlink of each entry.
    down_entry: Vec<usize>,
    /// Per-prefix downlink, for [`Dest::PrefixDown`].
    prefix_down: Vec<usize>,
    /// Hosts per entry (1 for paths).
    hosts: u32,
    /// Client addresses, entry-major.
    pub client_addrs: Vec<std::net::Ipv4Addr>,
}

impl Plan {
    /// Lays out the links of `config`.
    pub fn new(config: &EmuConfig) -> Self {
        let mut links = Vec::new();
        let (mut up_entry, mut down_entry, mut prefix_down) = (Vec::new(), Vec::new(), Vec::new());
        let mut push = |label: &str, dir: Dir, config: &LinkConfig, dest: Dest| {
            links.push(PlannedLink {
                label: label.to_string(),
                dir,
                config: config.clone(),
                dest,
            });
            links.len() - 1
        };
        let (hosts, client_addrs) = match &config.population {
            None => {
                for p in &config.paths {
                    up_entry.push(push(&p.name, Dir::Up, &p.uplink, Dest::Out(Side::Server)));
                    down_entry.push(push(&p.name, Dir::Down, &p.downlink, Dest::Out(Side::Client)));
                }
                let n = config.paths.len() as u32;
                (1, (0..n).map(|p| client_addr(p, 0)).collect())
            }
            Some(pop) => {
                let shared = config.paths.first().map(|p| {
                    let up = push(&p.name, Dir::Up, &p.uplink, Dest::Out(Side::Server));
                    let down = push(&p.name, Dir::Down, &p.downlink, Dest::PrefixDown);
                    (up, down)
                });
                for (i, (up, down)) in pop.prefix_links.iter().enumerate() {
                    let label = format!("prefix{i}");
                    let up_dest = shared.map_or(Dest::Out(Side::Server), |(u, _)| Dest::Link(u));
                    up_entry.push(push(&label, Dir::Up, up, up_dest));
                    let d = push(&label, Dir::Down, down, Dest::Out(Side::Client));
                    prefix_down.push(d);
                    down_entry.push(shared.map_or(d, |(_, sd)| sd));
                }
                let addrs = (0..pop.prefixes)
                    .flat_map(|i| (0..pop.hosts_per_prefix).map(move |h| client_addr(i, h)))
                    .collect();
                (pop.hosts_per_prefix, addrs)
            }
        };
        Plan {
            links,
            up_entry,
            down_entry,
            prefix_down,
            hosts,
            client_addrs,
        }
    }

    /// The entry (path or prefix) of a client address.
    fn entry(&self, addr: [u8; 4]) -> Option<usize> {
        let (prefix, host) = client_index(addr)?;
        (host < self.hosts && (prefix as usize) < self.up_entry.len()).then_some(prefix as usize)
    }
}

/// Seed of link `k` from the run seed (splitmix64, so neighbouring links get
/// unrelated streams).
pub fn link_seed(seed: u64, k: usize) -> u64 {
    let mut z = (seed ^ k as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A link could not be built.
#[derive(Debug, thiserror::Error)]
#[error("link {label} ({dir}): {source}")]
pub struct BuildError {
    /// Path name or `prefix<i>`.
    pub label: String,
    /// `up` or `down`.
    pub dir: &'static str,
    /// Why.
    #[source]
    pub source: LinkError,
}

struct Slot {
    link: Link<Bytes>,
    dest: Dest,
    /// The wake-up time this link has a heap entry for.
    armed: Option<Duration>,
    /// Has events not yet drained.
    dirty: bool,
}

/// Final counters of one link.
#[derive(Debug, Clone)]
pub struct LinkReport {
    /// Path name or `prefix<i>`.
    pub label: String,
    /// Direction.
    pub dir: Dir,
    /// The link's counters.
    pub stats: LinkStats,
}

/// The relay's routing and timing state.
pub struct Core {
    plan: Plan,
    slots: Vec<Slot>,
    heap: BinaryHeap<Reverse<(Duration, usize)>>,
    logging: bool,
    dirty: Vec<usize>,
    /// How early packets leaving towards the client / server namespace are
    /// handed out ([`Core::set_delivery_lead`]).
    lead: [Duration; 2],
    /// Packets that matched no path (not IPv4, or an address outside the plan).
    pub unroutable_packets: u64,
}

fn side_index(side: Side) -> usize {
    match side {
        Side::Client => 0,
        Side::Server => 1,
    }
}

fn ipv4_addr(packet: &[u8], offset: usize) -> Option<[u8; 4]> {
    if packet.first()? >> 4 != 4 {
        return None;
    }
    packet.get(offset..offset + 4)?.try_into().ok()
}

impl Core {
    /// Builds every link of `plan` (reading trace files); `log_events` turns
    /// on each link's packet-event log.
    pub fn new(plan: Plan, seed: u64, log_events: bool) -> Result<Self, BuildError> {
        let mut slots = Vec::with_capacity(plan.links.len());
        for (k, p) in plan.links.iter().enumerate() {
            let mut link = Link::new(p.config.clone(), link_seed(seed, k)).map_err(|source| BuildError {
                label: p.label.clone(),
                dir: p.dir.as_str(),
                source,
            })?;
            link.set_event_log(log_events);
            slots.push(Slot {
                link,
                dest: p.dest,
                armed: None,
                dirty: false,
            });
        }
        Ok(Core {
            plan,
            slots,
            heap: BinaryHeap::new(),
            logging: log_events,
            dirty: Vec::new(),
            lead: [Duration::ZERO; 2],
            unroutable_packets: 0,
        })
    }

    /// Hands packets that leave the relay towards `side` to [`Core::poll`] `lead`
    /// before their delivery time (the time writing them and waking their
    /// reader takes; `crate::calibrate`). Links that feed another link are
    /// not affected. Takes effect as links are next re-armed.
    pub fn set_delivery_lead(&mut self, side: Side, lead: Duration) {
        self.lead[side_index(side)] = lead;
    }

    /// The lead of link `k`'s deliveries.
    fn lead_of(&self, k: usize) -> Duration {
        match self.slots[k].dest {
            Dest::Out(side) => self.lead[side_index(side)],
            Dest::Link(_) | Dest::PrefixDown => Duration::ZERO,
        }
    }

    /// The plan this core runs.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// A packet read from the client namespace at `now`.
    pub fn from_client(&mut self, now: Duration, packet: Bytes) {
        match ipv4_addr(&packet, 12).and_then(|a| self.plan.entry(a)) {
            Some(e) => self.enqueue(self.plan.up_entry[e], now, packet),
            None => self.unroutable_packets += 1,
        }
    }

    /// A packet read from the server namespace at `now`.
    pub fn from_server(&mut self, now: Duration, packet: Bytes) {
        match ipv4_addr(&packet, 16).and_then(|a| self.plan.entry(a)) {
            Some(e) => self.enqueue(self.plan.down_entry[e], now, packet),
            None => self.unroutable_packets += 1,
        }
    }

    fn enqueue(&mut self, k: usize, now: Duration, packet: Bytes) {
        let slot = &mut self.slots[k];
        slot.link.enqueue(now, packet);
        self.touched(k);
    }

    /// Re-arms link `k` and marks it for event draining.
    fn touched(&mut self, k: usize) {
        let lead = self.lead_of(k);
        let slot = &mut self.slots[k];
        let next = slot.link.next_wakeup_ahead(lead);
        if next != slot.armed {
            if let Some(t) = next {
                self.heap.push(Reverse((t, k)));
            }
            slot.armed = next;
        }
        if self.logging && !slot.dirty {
            slot.dirty = true;
            self.dirty.push(k);
        }
    }

    /// Runs every link that is due at `now`, handing packets that leave the
    /// relay to `out`.
    pub fn poll(&mut self, now: Duration, out: &mut impl FnMut(Side, Bytes)) {
        while let Some(&Reverse((t, k))) = self.heap.peek() {
            if t > now {
                break;
            }
            self.heap.pop();
            if self.slots[k].armed != Some(t) {
                continue;
            }
            self.slots[k].armed = None;
            let dest = self.slots[k].dest;
            let lead = self.lead_of(k);
            let mut moved = false;
            while let Some(p) = self.slots[k].link.poll_transmit_ahead(now, lead) {
                moved = true;
                match dest {
                    Dest::Out(side) => out(side, p),
                    Dest::Link(j) => self.enqueue(j, now, p),
                    Dest::PrefixDown => match ipv4_addr(&p, 16).and_then(|a| self.plan.entry(a)) {
                        Some(e) => self.enqueue(self.plan.prefix_down[e], now, p),
                        None => self.unroutable_packets += 1,
                    },
                }
            }
            self.touched(k);
            // A link that asks for `now` again without having delivered anything
            // would spin this loop forever; give it the next microsecond instead.
            let slot = &mut self.slots[k];
            if !moved && slot.armed.is_some_and(|t| t <= now) {
                let later = now + Duration::from_micros(1);
                slot.armed = Some(later);
                self.heap.push(Reverse((later, k)));
            }
        }
    }

    /// When [`Core::poll`] next has work (`None`: not until a packet arrives).
    pub fn next_wakeup(&mut self) -> Option<Duration> {
        while let Some(&Reverse((t, k))) = self.heap.peek() {
            if self.slots[k].armed == Some(t) {
                return Some(t);
            }
            self.heap.pop();
        }
        None
    }

    /// Hands every logged event, with its link's index, to `f`.
    pub fn drain_events(&mut self, f: &mut impl FnMut(usize, &PacketEvent)) {
        for k in std::mem::take(&mut self.dirty) {
            let slot = &mut self.slots[k];
            slot.dirty = false;
            for e in slot.link.drain_events() {
                f(k, &e);
            }
        }
    }

    /// Counters of every link, in plan order.
    pub fn reports(&self) -> Vec<LinkReport> {
        self.plan
            .links
            .iter()
            .zip(&self.slots)
            .map(|(p, s)| LinkReport {
                label: p.label.clone(),
                dir: p.dir,
                stats: *s.link.stats(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::SERVER_ADDR;

    fn packet(src: [u8; 4], dst: [u8; 4], len: usize) -> Bytes {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[9] = 17;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        Bytes::from(p)
    }

    fn config(text: &str) -> EmuConfig {
        EmuConfig::from_toml_str(text, "test.toml", None).unwrap()
    }

    /// Drives the core to `until` in 100 µs steps; returns (time, side, packet) of each exit.
    fn run(core: &mut Core, until: Duration) -> Vec<(Duration, Side, Bytes)> {
        let mut outs = Vec::new();
        let mut now = Duration::ZERO;
        while now <= until {
            core.poll(now, &mut |side, p| outs.push((now, side, p)));
            now += Duration::from_micros(100);
        }
        outs
    }

    const S: [u8; 4] = SERVER_ADDR.octets();

    #[test]
    fn a_single_path_delays_each_direction_by_its_own_delay() {
        let c = config(
            "topology = \"single\"\n[[path]]\n[path.uplink]\nrate_bps = 1_000_000_000\ndelay_ms = 10.0\n\
             [path.downlink]\nrate_bps = 1_000_000_000\ndelay_ms = 30.0\n",
        );
        let mut core = Core::new(Plan::new(&c), 1, false).unwrap();
        assert_eq!(core.plan().client_addrs, [std::net::Ipv4Addr::new(100, 64, 0, 1)]);
        core.from_client(Duration::ZERO, packet([100, 64, 0, 1], S, 1000));
        core.from_server(Duration::ZERO, packet(S, [100, 64, 0, 1], 1000));
        let outs = run(&mut core, Duration::from_millis(40));
        assert_eq!(outs.len(), 2);
        assert_eq!(outs[0].1, Side::Server);
        assert!(outs[0].0 >= Duration::from_millis(10) && outs[0].0 < Duration::from_micros(10_200));
        assert_eq!(outs[1].1, Side::Client);
        assert!(outs[1].0 >= Duration::from_millis(30) && outs[1].0 < Duration::from_micros(30_200));
        assert_eq!(core.next_wakeup(), None);
    }

    #[test]
    fn packets_outside_the_plan_are_counted_not_forwarded() {
        let c = config(
            "topology = \"single\"\n[[path]]\n[path.uplink]\nrate_bps = 1000000\n[path.downlink]\nrate_bps = 1000000\n",
        );
        let mut core = Core::new(Plan::new(&c), 1, false).unwrap();
        core.from_client(Duration::ZERO, packet([100, 64, 1, 1], S, 100)); // path 1 does not exist
        core.from_client(Duration::ZERO, Bytes::from_static(&[0x60; 40])); // IPv6
        core.from_client(Duration::ZERO, Bytes::from_static(&[0x45; 3])); // truncated
        core.from_server(Duration::ZERO, packet(S, [10, 0, 0, 2], 100));
        assert_eq!(core.unroutable_packets, 4);
        assert!(run(&mut core, Duration::from_millis(5)).is_empty());
    }

    #[test]
    fn multipath_sends_each_client_address_along_its_own_path() {
        let path = |d: u32| {
            format!("[[path]]\n[path.uplink]\nrate_bps = 1_000_000_000\ndelay_ms = {d}.0\n[path.downlink]\nrate_bps = 1_000_000_000\ndelay_ms = {d}.0\n")
        };
        let c = config(&format!("topology = \"multipath\"\n{}{}", path(5), path(25)));
        let mut core = Core::new(Plan::new(&c), 1, false).unwrap();
        core.from_server(Duration::ZERO, packet(S, [100, 64, 1, 1], 500));
        core.from_server(Duration::ZERO, packet(S, [100, 64, 0, 1], 500));
        let outs = run(&mut core, Duration::from_millis(30));
        assert_eq!(outs.len(), 2);
        assert_eq!(&outs[0].2[16..20], &[100, 64, 0, 1]);
        assert!(outs[0].0 >= Duration::from_millis(5) && outs[0].0 < Duration::from_millis(6));
        assert!(outs[1].0 >= Duration::from_millis(25) && outs[1].0 < Duration::from_millis(26));
    }

    #[test]
    fn population_prefixes_have_their_own_links_behind_the_shared_path() {
        let c = config(
            r#"
topology = "population"
[population]
prefixes = 3
hosts_per_prefix = 2
[population.uplink]
rate_bps = 1_000_000_000
delay_ms = 10.0
[population.downlink]
rate_bps = 1_000_000_000
delay_ms = 10.0
[[population.prefix]]
index = 2
[population.prefix.downlink]
delay_ms = 40.0
[[path]]
name = "access"
[path.uplink]
rate_bps = 1_000_000_000
delay_ms = 1.0
[path.downlink]
rate_bps = 1_000_000_000
delay_ms = 1.0
"#,
        );
        let plan = Plan::new(&c);
        assert_eq!(plan.links.len(), 2 + 3 * 2);
        assert_eq!(plan.client_addrs.len(), 6);
        assert_eq!(plan.client_addrs[5], std::net::Ipv4Addr::new(100, 64, 2, 2));
        let mut core = Core::new(plan, 1, true).unwrap();
        core.from_server(Duration::ZERO, packet(S, [100, 64, 2, 2], 500));
        core.from_server(Duration::ZERO, packet(S, [100, 64, 0, 1], 500));
        core.from_server(Duration::ZERO, packet(S, [100, 64, 0, 3], 500)); // host 3 of 2
        core.from_client(Duration::ZERO, packet([100, 64, 1, 2], S, 500));
        assert_eq!(core.unroutable_packets, 1);
        let outs = run(&mut core, Duration::from_millis(50));
        let times: Vec<_> = outs.iter().map(|(t, s, _)| (t.as_millis(), *s)).collect();
        // up: prefix 10 ms + shared 1 ms; down: shared 1 ms + prefix 10 or 40 ms.
        assert_eq!(times, [(11, Side::Server), (11, Side::Client), (41, Side::Client)]);
        let mut events = Vec::new();
        core.drain_events(&mut |k, e| events.push((k, *e)));
        // Shared down link (index 1) saw two packets; prefix 2's downlink (index 7) one.
        assert_eq!(
            events
                .iter()
                .filter(|(k, e)| *k == 1 && e.kind == gearbox_link::EventKind::Enqueue)
                .count(),
            2
        );
        assert!(events.iter().any(|(k, _)| *k == 7));
        let r = core.reports();
        assert_eq!(r[7].label, "prefix2");
        assert_eq!(r[7].stats.delivered_packets, 1);
    }

    #[test]
    fn link_seeds_differ_per_link_and_follow_the_run_seed() {
        assert_ne!(link_seed(0, 0), link_seed(0, 1));
        assert_ne!(link_seed(0, 0), link_seed(1, 0));
        assert_eq!(link_seed(7, 3), link_seed(7, 3));
    }
}
