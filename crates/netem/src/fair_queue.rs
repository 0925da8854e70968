//! A device transmit queue discipline: per-flow fair queueing with a CoDel delay bound
//! and optional per-flow pacing (a bulk transfer once made a 4.7 ms ping take 9.87 s
//! because every frame waited in one FIFO behind the bulk flow's backlog).
//!
//! # Design
//!
//! [`Fq`] sits between the stack and a device that has a queue of its own. It is sans-IO
//! like the rest of this crate: every call takes `now`, nothing reads a clock, sleeps or spawns,
//! and [`Fq::next_time`] says when to come back if only paced frames are waiting.
//!
//! * **Flows.** The caller names a frame's flow with a 64-bit value ([`frame_flow`] hashes
//!   an Ethernet frame's IPv4 5-tuple). Flow values are mixed and reduced into a table of
//!   [`FqConfig::flows`] slots; flows that land on one slot share its queue (counted in
//!   [`FqStats::flow_collisions`]). Memory is therefore bounded whatever the number of
//!   flows: the table, plus the frames themselves, which [`FqConfig::limit_pkts`] and
//!   [`FqConfig::limit_bytes`] bound.
//! * **Scheduling: deficit round robin with sparse-flow priority**, the scheduler of
//!   FQ-CoDel (RFC 8290 §4). Each active slot sits on one of two lists. A slot that had
//!   nothing queued joins the *new* list with one quantum of credit; the new list is served
//!   before the *old* one, so a ping, a SYN or a DNS query leaves after at most one quantum
//!   of whatever is being served, never behind a bulk flow's backlog. A slot that spends its
//!   credit moves to the end of the old list with one more quantum (RFC 8290 §4.2); over a
//!   round every backlogged slot sends within one quantum (plus one frame) of the others,
//!   in bytes. A slot found empty on the new list goes to the old list once (so a flow that
//!   keeps re-entering as new cannot starve the old ones), from the old list it leaves.
//! * **Delay bound: CoDel per slot** (RFC 8289), run at dequeue on the slot chosen. The
//!   sojourn time of each frame (`now - enqueued`) is the estimator (§3.1); once it has
//!   stayed at or above `codel_target` for a whole `codel_interval` the slot enters the
//!   dropping state and drops from the head, the next drop following the control law
//!   `interval / sqrt(count)` (§§3.3, 4, 5.5); it leaves the dropping state as soon as a
//!   frame's sojourn falls below target or the slot holds at most one maximal frame.
//! * **Overflow**: when an enqueue takes the total over `limit_pkts` or `limit_bytes`, frames
//!   are dropped from the head of the slot with the largest byte backlog until it fits
//!   (RFC 8290 §4.1), so the flow causing the overflow pays for it.
//! * **Pacing** (optional, per frame): a frame enqueued with `pace_bps = Some(r)` may leave
//!   no earlier than the slot's previous paced departure plus that frame's `len × 8 / r`.
//!   A slot whose head must wait is taken off the lists and parked in a time-ordered set
//!   until it is due, then rejoins the old list; frames enqueued without a rate are never
//!   held by pacing (only by FIFO order within their slot, should they share one with a
//!   paced flow). Pacing holds are the sender's own choice, so CoDel does not count them:
//!   paced frames are never CoDel-dropped (the sender's TCP Small Queues budget keeps such a
//!   queue short).
//!
//! Every frame that does not come out of [`Fq::dequeue`] is handed to the caller's `dropped`
//! callback exactly once (with its `owner`, so TCP Small Queues credit can be returned) and
//! counted.

use core::time::Duration;
use std::collections::{BTreeSet, VecDeque};

use ember_core::time::Instant;

use crate::splitmix64;

/// Largest flow table [`Fq`] builds ([`FqConfig::flows`] is clamped to `1..=MAX_FLOWS`).
pub const MAX_FLOWS: u32 = 65_536;

/// [`frame_flow`]'s class for frames that are not IPv4 (or are malformed IPv4): this value
/// with the EtherType in the low 16 bits (`0x0800` for malformed IPv4, `0x0806` for ARP).
pub const CLASS_NON_IP: u64 = 0xFFFF_FFFF_0000_0000;

/// [`frame_flow`]'s class for frames shorter than an Ethernet header.
pub const CLASS_RUNT: u64 = 0xFFFF_FFFF_0001_0000;

/// Configuration of an [`Fq`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FqConfig {
    /// Deficit round robin credit per round, in bytes (default 1514: one full Ethernet
    /// frame at MTU 1500). 0 acts as 1.
    pub quantum: u32,
    /// Most frames held in total (default 10,240).
    pub limit_pkts: u32,
    /// Most bytes held in total (default 32 MiB).
    pub limit_bytes: usize,
    /// Flow table size (default 1024), clamped to `1..=`[`MAX_FLOWS`].
    pub flows: u32,
    /// CoDel's target sojourn time (default 5 ms; RFC 8289 §4.3).
    pub codel_target: Duration,
    /// CoDel's interval (default 100 ms; RFC 8289 §4.2).
    pub codel_interval: Duration,
    /// Whether CoDel drops at all (default true).
    pub codel: bool,
}

impl Default for FqConfig {
    fn default() -> Self {
        FqConfig {
            quantum: 1514,
            limit_pkts: 10_240,
            limit_bytes: 32 << 20,
            flows: 1024,
            codel_target: Duration::from_millis(5),
            codel_interval: Duration::from_millis(100),
            codel: true,
        }
    }
}

impl FqConfig {
    /// The defaults, with CoDel's target raised to the transmission time of one
    /// `max_frame`-byte frame at `rate_bps` where that is longer than 5 ms (RFC 8289 §4.3:
    /// on a slow link a single full frame already sits that long), and the interval to at
    /// least twenty targets.
    pub fn for_link(rate_bps: Option<u64>, max_frame: usize) -> FqConfig {
        let mut c = FqConfig::default();
        if let Some(rate) = rate_bps {
            let frame_time = pace_gap(max_frame, rate);
            if frame_time > c.codel_target {
                c.codel_target = frame_time;
                c.codel_interval = c.codel_interval.max(frame_time.saturating_mul(20));
            }
        }
        c
    }
}

/// The byte-queue limit for a device draining at `rate_bps` whose frames are at most
/// `max_frame` bytes: `max(2 × max_frame, 1 ms at the rate)`. Hand the device another frame
/// only while its [`TxBacklog`](crate::TxBacklog) is below this: the device's own FIFO then
/// holds about a millisecond, and everything else waits in the fair queue, where a new
/// flow can overtake. The same figure is the runtime's TCP Small Queues budget per
/// connection (`tcp_tsq_us`: bytes it may have in the device queue).
pub fn byte_queue_limit(rate_bps: u64, max_frame: usize) -> usize {
    let one_ms = usize::try_from(rate_bps / 8 / 1000).unwrap_or(usize::MAX);
    max_frame.saturating_mul(2).max(one_ms)
}

/// A frame in (or dropped from) the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QItem {
    /// The whole Ethernet frame.
    pub frame: Vec<u8>,
    /// The caller's tag (e.g. a connection key, for TCP Small Queues accounting); 0 = none.
    pub owner: u64,
    /// When it was enqueued.
    pub enqueued: Instant,
}

/// Counters of an [`Fq`]. Every frame given to `enqueue` is counted in `enqueued` and ends
/// in exactly one of `dequeued`, `drops_overlimit` or `codel_drops` (or is still queued).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FqStats {
    /// Frames given to `enqueue`.
    pub enqueued: u64,
    /// Frames handed out by `dequeue`.
    pub dequeued: u64,
    /// Frames dropped from the head of the fattest slot because the total went over
    /// `limit_pkts` or `limit_bytes`.
    pub drops_overlimit: u64,
    /// Frames CoDel dropped (sojourn above target for an interval).
    pub codel_drops: u64,
    /// Times an empty slot became active (joined the new-flows list).
    pub new_flows: u64,
    /// Frames that found their slot holding frames of a different flow value (a hash
    /// collision: the two flows share one queue).
    pub flow_collisions: u64,
    /// Times a slot was parked because its head frame had to wait for its pacing time.
    pub paced_waits: u64,
    /// Largest number of frames held at once.
    pub max_backlog_pkts: u64,
    /// Largest number of bytes held at once.
    pub max_backlog_bytes: u64,
}

impl core::ops::AddAssign for FqStats {
    /// Sums the counters; the high-water marks take the larger.
    fn add_assign(&mut self, o: FqStats) {
        self.enqueued += o.enqueued;
        self.dequeued += o.dequeued;
        self.drops_overlimit += o.drops_overlimit;
        self.codel_drops += o.codel_drops;
        self.new_flows += o.new_flows;
        self.flow_collisions += o.flow_collisions;
        self.paced_waits += o.paced_waits;
        self.max_backlog_pkts = self.max_backlog_pkts.max(o.max_backlog_pkts);
        self.max_backlog_bytes = self.max_backlog_bytes.max(o.max_backlog_bytes);
    }
}

/// A queued frame with what the scheduler needs besides the caller's item.
#[derive(Debug)]
struct Entry {
    item: QItem,
    flow: u64,
    pace: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    /// Not on a list: empty.
    Idle,
    /// On the new-flows list.
    New,
    /// On the old-flows list.
    Old,
    /// Parked in `throttled` until its pacing time.
    Throttled,
}

/// CoDel's per-queue state (RFC 8289 §5.2).
#[derive(Debug, Clone, Copy)]
struct Codel {
    /// When the sojourn time will have been above target for an interval (None: below).
    first_above: Option<Instant>,
    /// When the next drop is due while dropping.
    drop_next: Instant,
    /// Drops since entering the dropping state.
    count: u32,
    /// `count` when the dropping state was last entered.
    lastcount: u32,
    dropping: bool,
}

impl Codel {
    const fn new() -> Codel {
        Codel {
            first_above: None,
            drop_next: Instant::ZERO,
            count: 0,
            lastcount: 0,
            dropping: false,
        }
    }
}

#[derive(Debug)]
struct Flow {
    q: VecDeque<Entry>,
    bytes: usize,
    deficit: i64,
    at: Where,
    /// The flow value of the last frame enqueued here.
    last_flow: u64,
    /// Earliest departure of the next paced frame.
    time_next: Instant,
    codel: Codel,
}

impl Flow {
    fn new() -> Flow {
        Flow {
            q: VecDeque::new(),
            bytes: 0,
            deficit: 0,
            at: Where::Idle,
            last_flow: 0,
            time_next: Instant::ZERO,
            codel: Codel::new(),
        }
    }

    /// The head must wait for its pacing time.
    fn blocked(&self, now: Instant) -> bool {
        self.q
            .front()
            .is_some_and(|e| e.pace.is_some() && self.time_next > now)
    }
}

/// What one CoDel dequeue step found (RFC 8289 §5.5 `dodequeue`).
enum Pop {
    Empty,
    /// The head waits for its pacing time.
    Blocked,
    Got(Entry, bool),
}

/// A fair-queueing transmit queue: see the module documentation.
#[derive(Debug)]
pub struct Fq {
    cfg: FqConfig,
    flows: Vec<Flow>,
    new_list: VecDeque<u32>,
    old_list: VecDeque<u32>,
    /// Parked slots by due time.
    throttled: BTreeSet<(Instant, u32)>,
    /// Frames held in parked slots.
    throttled_pkts: usize,
    len: usize,
    bytes: usize,
    /// Largest frame seen (CoDel's `maxpacket`, RFC 8289 §5.3).
    max_packet: usize,
    stats: FqStats,
}

/// A slot's queue shrinks back to nothing when it empties with more than this capacity.
const KEEP_CAPACITY: usize = 64;

fn clamp_flows(n: u32) -> usize {
    n.clamp(1, MAX_FLOWS) as usize
}

impl Fq {
    /// An empty queue.
    pub fn new(cfg: FqConfig) -> Fq {
        let n = clamp_flows(cfg.flows);
        Fq {
            cfg,
            flows: (0..n).map(|_| Flow::new()).collect(),
            new_list: VecDeque::new(),
            old_list: VecDeque::new(),
            throttled: BTreeSet::new(),
            throttled_pkts: 0,
            len: 0,
            bytes: 0,
            max_packet: 0,
            stats: FqStats::default(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &FqConfig {
        &self.cfg
    }

    /// Replaces the configuration. Queued frames are kept (and keep their order within
    /// each flow); a different table size redistributes them over the new table (CoDel
    /// state starts afresh). Lower limits take effect at the next `enqueue`, which drops
    /// down to them.
    pub fn set_config(&mut self, cfg: FqConfig) {
        let n = clamp_flows(cfg.flows);
        self.cfg = cfg;
        if n == self.flows.len() {
            return;
        }
        let old = std::mem::replace(&mut self.flows, (0..n).map(|_| Flow::new()).collect());
        self.new_list.clear();
        self.old_list.clear();
        self.throttled.clear();
        self.throttled_pkts = 0;
        for f in old {
            for e in f.q {
                let i = self.slot(e.flow);
                let g = &mut self.flows[i];
                g.time_next = g.time_next.max(f.time_next);
                g.last_flow = e.flow;
                g.bytes += e.item.frame.len();
                g.q.push_back(e);
            }
        }
        for i in 0..n {
            let g = &mut self.flows[i];
            if g.q.is_empty() {
                continue;
            }
            g.deficit = i64::from(self.cfg.quantum.max(1));
            if g.q.front().is_some_and(|e| e.pace.is_some()) {
                // Due maybe already; the next dequeue releases it then.
                g.at = Where::Throttled;
                self.throttled_pkts += g.q.len();
                self.throttled.insert((g.time_next, i as u32));
            } else {
                g.at = Where::Old;
                self.old_list.push_back(i as u32);
            }
        }
    }

    fn slot(&self, flow: u64) -> usize {
        // Mixed first, so that small or structured flow values spread over the table.
        ((u128::from(splitmix64(flow)) * self.flows.len() as u128) >> 64) as usize
    }

    fn quantum(&self) -> i64 {
        i64::from(self.cfg.quantum.max(1))
    }

    /// Queues `frame` of flow `flow` at `now`. `owner` is returned with the frame (or its
    /// drop); `pace_bps`, if given, spaces this flow's paced frames (module docs). Frames
    /// dropped to keep within the limits (possibly this one) go to `dropped`.
    pub fn enqueue(
        &mut self,
        now: Instant,
        flow: u64,
        frame: Vec<u8>,
        owner: u64,
        pace_bps: Option<u64>,
        dropped: &mut dyn FnMut(QItem),
    ) {
        let len = frame.len();
        self.stats.enqueued += 1;
        self.max_packet = self.max_packet.max(len);
        let i = self.slot(flow);
        let quantum = self.quantum();
        let f = &mut self.flows[i];
        if !f.q.is_empty() && f.last_flow != flow {
            self.stats.flow_collisions += 1;
        }
        f.last_flow = flow;
        f.q.push_back(Entry {
            item: QItem {
                frame,
                owner,
                enqueued: now,
            },
            flow,
            pace: pace_bps,
        });
        f.bytes += len;
        self.len += 1;
        self.bytes += len;
        match f.at {
            Where::Idle => {
                if f.blocked(now) {
                    f.at = Where::Throttled;
                    self.throttled.insert((f.time_next, i as u32));
                    self.throttled_pkts += 1;
                    self.stats.paced_waits += 1;
                } else {
                    // RFC 8290 §4.1: a newly active queue joins the new-flows list with one
                    // quantum of credit.
                    f.at = Where::New;
                    f.deficit = quantum;
                    self.new_list.push_back(i as u32);
                    self.stats.new_flows += 1;
                }
            }
            Where::Throttled => self.throttled_pkts += 1,
            Where::New | Where::Old => {}
        }
        self.stats.max_backlog_pkts = self.stats.max_backlog_pkts.max(self.len as u64);
        self.stats.max_backlog_bytes = self.stats.max_backlog_bytes.max(self.bytes as u64);
        // RFC 8290 §4.1: over the limit, drop from the head of the fattest queue.
        while self.len > self.cfg.limit_pkts as usize || self.bytes > self.cfg.limit_bytes {
            let Some(fat) = (0..self.flows.len())
                .filter(|&j| !self.flows[j].q.is_empty())
                .max_by_key(|&j| (self.flows[j].bytes, std::cmp::Reverse(j)))
            else {
                break;
            };
            if let Some(e) = self.pop_head(fat) {
                if self.flows[fat].at == Where::Throttled {
                    self.throttled_pkts -= 1;
                    if self.flows[fat].q.is_empty() {
                        let t = self.flows[fat].time_next;
                        self.throttled.remove(&(t, fat as u32));
                        self.flows[fat].at = Where::Idle;
                    }
                }
                self.stats.drops_overlimit += 1;
                dropped(e.item);
            }
        }
    }

    /// Removes slot `i`'s head, keeping the totals.
    fn pop_head(&mut self, i: usize) -> Option<Entry> {
        let f = &mut self.flows[i];
        let e = f.q.pop_front()?;
        let len = e.item.frame.len();
        f.bytes -= len;
        self.len -= 1;
        self.bytes -= len;
        if f.q.is_empty() && f.q.capacity() > KEEP_CAPACITY {
            f.q = VecDeque::new();
        }
        Some(e)
    }

    /// RFC 8289 §5.5 `dodequeue`: takes slot `i`'s head and says whether its sojourn time
    /// has been above target for at least an interval.
    fn codel_pop(&mut self, i: usize, now: Instant) -> Pop {
        if self.flows[i].q.is_empty() {
            // An empty queue cannot be above target.
            self.flows[i].codel.first_above = None;
            return Pop::Empty;
        }
        if self.flows[i].blocked(now) {
            return Pop::Blocked;
        }
        let Some(e) = self.pop_head(i) else {
            return Pop::Empty;
        };
        let (target, interval) = (self.cfg.codel_target, self.cfg.codel_interval);
        let f = &mut self.flows[i];
        let sojourn = now.saturating_duration_since(e.item.enqueued);
        let mut ok_to_drop = false;
        // Below target, or too little left to be a standing queue (at most one maximal
        // frame: §5.3 `maxpacket`), or a paced frame whose wait was its sender's choice.
        if !self.cfg.codel || e.pace.is_some() || sojourn < target || f.bytes <= self.max_packet {
            f.codel.first_above = None;
        } else {
            match f.codel.first_above {
                None => f.codel.first_above = Some(now.saturating_add(interval)),
                Some(t) if now >= t => ok_to_drop = true,
                Some(_) => {}
            }
        }
        Pop::Got(e, ok_to_drop)
    }

    /// RFC 8289 §§3.3, 5.6: the next drop, `interval / sqrt(count)` after `t`.
    fn control_law(&self, t: Instant, count: u32) -> Instant {
        let iv = self.cfg.codel_interval.as_nanos();
        // interval · 2^31 / sqrt(count · 2^62), in integers (deterministic everywhere).
        let root = (u128::from(count.max(1)) << 62).isqrt();
        let ns = (iv << 31) / root.max(1);
        t.saturating_add(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
    }

    /// RFC 8289 §5.5 `dequeue`, on slot `i`: the head frame to send, after CoDel's drops.
    fn codel_dequeue(&mut self, i: usize, now: Instant, dropped: &mut dyn FnMut(QItem)) -> Pop {
        let mut r = self.codel_pop(i, now);
        let ok = |r: &Pop| matches!(r, Pop::Got(_, true));
        if self.flows[i].codel.dropping {
            if !ok(&r) {
                // Sojourn time below target: leave the dropping state.
                self.flows[i].codel.dropping = false;
            }
            while self.flows[i].codel.dropping && now >= self.flows[i].codel.drop_next {
                if let Pop::Got(e, _) = r {
                    self.stats.codel_drops += 1;
                    dropped(e.item);
                }
                let c = &mut self.flows[i].codel;
                c.count = c.count.saturating_add(1);
                r = self.codel_pop(i, now);
                if !ok(&r) {
                    self.flows[i].codel.dropping = false;
                } else {
                    let c = self.flows[i].codel;
                    self.flows[i].codel.drop_next = self.control_law(c.drop_next, c.count);
                }
            }
        } else if ok(&r) {
            // Above target for a whole interval: drop and enter the dropping state.
            if let Pop::Got(e, _) = r {
                self.stats.codel_drops += 1;
                dropped(e.item);
            }
            r = self.codel_pop(i, now);
            let interval = self.cfg.codel_interval;
            let c = &mut self.flows[i].codel;
            c.dropping = true;
            // If the queue went above target again soon after the last dropping state, the
            // drop rate that controlled it then is a good start (§5.5).
            let delta = c.count.wrapping_sub(c.lastcount);
            c.count = 1;
            if delta > 1 && now.saturating_duration_since(c.drop_next) < interval * 16 {
                c.count = delta;
            }
            let (count, at) = (c.count, now);
            let next = self.control_law(at, count);
            let c = &mut self.flows[i].codel;
            c.drop_next = next;
            c.lastcount = c.count;
        }
        r
    }

    /// Takes the slot at the front of the new (or old) list off it.
    fn pop_list(&mut self, new: bool) {
        if new {
            self.new_list.pop_front();
        } else {
            self.old_list.pop_front();
        }
    }

    /// Parks slot `i` (already off its list) until its pacing time.
    fn throttle(&mut self, i: usize) {
        let f = &mut self.flows[i];
        f.at = Where::Throttled;
        self.throttled_pkts += f.q.len();
        self.throttled.insert((f.time_next, i as u32));
        self.stats.paced_waits += 1;
    }

    /// The next frame to send at `now`, if any is eligible; CoDel's drops go to `dropped`.
    pub fn dequeue(&mut self, now: Instant, dropped: &mut dyn FnMut(QItem)) -> Option<QItem> {
        // Parked slots whose time has come rejoin the old list.
        while let Some(&(t, i)) = self.throttled.first() {
            if t > now {
                break;
            }
            self.throttled.pop_first();
            let f = &mut self.flows[i as usize];
            self.throttled_pkts -= f.q.len();
            f.at = Where::Old;
            self.old_list.push_back(i);
        }
        let quantum = self.quantum();
        loop {
            // RFC 8290 §4.2: new flows first, then old ones.
            let (i, from_new) = match (self.new_list.front(), self.old_list.front()) {
                (Some(&i), _) => (i as usize, true),
                (None, Some(&i)) => (i as usize, false),
                (None, None) => return None,
            };
            if self.flows[i].deficit <= 0 {
                // Credit spent: one more quantum, and to the back of the old list.
                self.pop_list(from_new);
                self.flows[i].deficit += quantum;
                self.flows[i].at = Where::Old;
                self.old_list.push_back(i as u32);
                continue;
            }
            match self.codel_dequeue(i, now, dropped) {
                Pop::Got(e, _) => {
                    let len = e.item.frame.len();
                    let f = &mut self.flows[i];
                    f.deficit -= len as i64;
                    if let Some(rate) = e.pace {
                        f.time_next = now.saturating_add(pace_gap(len, rate));
                    }
                    self.stats.dequeued += 1;
                    return Some(e.item);
                }
                Pop::Blocked => {
                    self.pop_list(from_new);
                    self.throttle(i);
                }
                Pop::Empty => {
                    self.pop_list(from_new);
                    if from_new {
                        // An emptied new flow goes round the old list once, so that it
                        // cannot starve the old flows by re-entering as new (§4.2).
                        self.flows[i].at = Where::Old;
                        self.old_list.push_back(i as u32);
                    } else {
                        self.flows[i].at = Where::Idle;
                    }
                }
            }
        }
    }

    /// When a paced slot becomes eligible, if every queued frame is held by pacing (the
    /// instant may already have passed: then `dequeue` now releases it). `None` when the
    /// queue is empty or some slot not held by pacing has frames (call `dequeue`).
    pub fn next_time(&self) -> Option<Instant> {
        if self.len == 0 || self.len > self.throttled_pkts {
            return None;
        }
        self.throttled.first().map(|&(t, _)| t)
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Frames queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes queued.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The counters.
    pub fn stats(&self) -> FqStats {
        self.stats.clone()
    }

    /// Queue slots' allocated capacity in frames (for the memory-bound tests).
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.flows.iter().map(|f| f.q.capacity()).sum()
    }
}

/// `len × 8 / rate` seconds, rounded up to a nanosecond (a zero rate counts as 1 bit/s).
/// Public for whoever feeds a device from an [`Fq`] (the runtime's `dev::feed_device`).
pub fn pace_gap(len: usize, rate: u64) -> Duration {
    let bits = (len as u128) * 8 * 1_000_000_000;
    let rate = u128::from(rate.max(1));
    let ns = bits.div_ceil(rate);
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// A flow value for an Ethernet frame: a seeded hash of its IPv4 5-tuple (addresses,
/// protocol, and TCP/UDP ports or the ICMP echo identifier). Fragments hash without ports
/// (every fragment of a datagram stays in one flow). Frames that are not IPv4 get
/// [`CLASS_NON_IP`]` | ethertype` (malformed IPv4 `CLASS_NON_IP | 0x0800`), frames shorter
/// than an Ethernet header [`CLASS_RUNT`]. Never panics.
pub fn frame_flow(frame: &[u8], seed: u64) -> u64 {
    if frame.len() < 14 {
        return CLASS_RUNT;
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let other = CLASS_NON_IP | u64::from(ethertype);
    if ethertype != 0x0800 {
        return other;
    }
    let ip = &frame[14..];
    if ip.len() < 20 || ip[0] >> 4 != 4 {
        return other;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ihl < 20 || ihl > ip.len() {
        return other;
    }
    let proto = ip[9];
    let addrs = u64::from_be_bytes([
        ip[12], ip[13], ip[14], ip[15], ip[16], ip[17], ip[18], ip[19],
    ]);
    // More-fragments flag or a fragment offset: no transport header to read.
    let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
    let l4 = &ip[ihl..];
    let ports = if fragment {
        0
    } else {
        match proto {
            6 | 17 if l4.len() >= 4 => u64::from(u32::from_be_bytes([l4[0], l4[1], l4[2], l4[3]])),
            // ICMP echo request / reply: the identifier names the "connection".
            1 if l4.len() >= 8 && (l4[0] == 8 || l4[0] == 0) => {
                u64::from(u16::from_be_bytes([l4[4], l4[5]]))
            }
            _ => 0,
        }
    };
    let h = splitmix64(seed ^ addrs);
    splitmix64(h ^ (u64::from(proto) << 32 | ports))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    /// A frame of `len` bytes (at least 16) tagged with flow `f` and sequence number `s`.
    fn tagged(f: u8, s: u32, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len.max(16)];
        v[0] = f;
        v[1..5].copy_from_slice(&s.to_be_bytes());
        v
    }

    fn tag(v: &[u8]) -> (u8, u32) {
        (v[0], u32::from_be_bytes([v[1], v[2], v[3], v[4]]))
    }

    fn no_drop(_: QItem) {
        panic!("unexpected drop");
    }

    fn cfg_nocodel() -> FqConfig {
        FqConfig {
            codel: false,
            ..FqConfig::default()
        }
    }

    #[test]
    fn drr_shares_bytes_fairly_within_one_quantum() {
        // Two backlogged flows with different frame sizes: whatever the prefix of the
        // output, their byte counts differ by at most one quantum plus one frame.
        let mut q = Fq::new(cfg_nocodel());
        for s in 0..2000 {
            q.enqueue(ms(0), 1, tagged(1, s, 1514), 0, None, &mut no_drop);
            q.enqueue(ms(0), 2, tagged(2, s, 300), 0, None, &mut no_drop);
        }
        let mut sent = [0i64; 3];
        let mut worst = 0;
        // Until flow 2 (the small-frame one, with more frames) could run dry.
        for _ in 0..2000 {
            let it = q.dequeue(ms(0), &mut no_drop).unwrap();
            let (f, _) = tag(&it.frame);
            sent[f as usize] += it.frame.len() as i64;
            worst = worst.max((sent[1] - sent[2]).abs());
        }
        assert!(sent[1] > 0 && sent[2] > 0);
        assert!(worst <= 1514 + 1514, "byte imbalance {worst}");
        // And over the whole run they are close to equal.
        assert!((sent[1] - sent[2]).abs() <= 1514 * 2);
    }

    #[test]
    fn a_sparse_flow_overtakes_a_backlog() {
        let mut q = Fq::new(cfg_nocodel());
        for s in 0..1000 {
            q.enqueue(ms(0), 1, tagged(1, s, 1514), 0, None, &mut no_drop);
        }
        // The bulk flow is being served.
        assert_eq!(tag(&q.dequeue(ms(0), &mut no_drop).unwrap().frame), (1, 0));
        assert_eq!(tag(&q.dequeue(ms(1), &mut no_drop).unwrap().frame), (1, 1));
        // A ping arrives: it is the very next frame out, ahead of 998 bulk frames.
        q.enqueue(ms(1), 7, tagged(7, 0, 98), 0, None, &mut no_drop);
        assert_eq!(tag(&q.dequeue(ms(1), &mut no_drop).unwrap().frame), (7, 0));
        assert_eq!(q.len(), 998);
        // Even arriving before anything was served, it waits at most one quantum.
        let mut q = Fq::new(cfg_nocodel());
        for s in 0..1000 {
            q.enqueue(ms(0), 1, tagged(1, s, 1514), 0, None, &mut no_drop);
        }
        q.enqueue(ms(0), 7, tagged(7, 0, 98), 0, None, &mut no_drop);
        let order: Vec<_> = (0..3)
            .map(|_| tag(&q.dequeue(ms(0), &mut no_drop).unwrap().frame).0)
            .collect();
        assert_eq!(order, vec![1, 7, 1]);
        // Without the new-flow rule (plain FIFO) it would have been the 1001st.
        assert_eq!(q.stats().new_flows, 2);
    }

    /// A TCP-like sender against a 10-frame-per-ms drain: it keeps `window` frames
    /// queued, grows the window by one frame every 10 ms and halves it (at most once per
    /// 10 ms) when a frame of its is dropped. Returns the sojourn times of the frames sent
    /// in the last second of `total_ms`, and the drops.
    fn responsive(q: &mut Fq, total_ms: u64) -> (Vec<Duration>, u64) {
        let mut window = 10u64;
        let mut queued = 0u64;
        let mut last_cut = 0u64;
        let mut s = 0;
        let mut sojourn = Vec::new();
        let mut drops = 0;
        for t in 0..total_ms {
            let mut dropped = 0u64;
            while queued < window {
                q.enqueue(ms(t), 1, tagged(1, s, 1000), 5, None, &mut |d| {
                    assert_eq!(d.owner, 5);
                    dropped += 1;
                });
                s += 1;
                queued += 1;
            }
            for _ in 0..10 {
                if let Some(it) = q.dequeue(ms(t), &mut |d| {
                    assert_eq!(d.owner, 5);
                    dropped += 1;
                }) {
                    queued -= 1;
                    if t + 1000 >= total_ms {
                        sojourn.push(ms(t) - it.enqueued);
                    }
                }
            }
            queued -= dropped;
            drops += dropped;
            if dropped > 0 && t >= last_cut + 10 {
                window = (window / 2).max(2);
                last_cut = t;
            } else if t % 10 == 0 {
                window += 1;
            }
        }
        (sojourn, drops)
    }

    #[test]
    fn codel_drops_under_a_standing_queue_only() {
        // A short burst: 50 frames at once, then drained at 10/ms: sojourn above 5 ms for
        // only a few ms, well under the 100 ms interval. No drop.
        let mut q = Fq::new(FqConfig::default());
        for s in 0..50 {
            q.enqueue(ms(0), 1, tagged(1, s, 1000), 0, None, &mut no_drop);
        }
        let mut t = 0;
        while !q.is_empty() {
            for _ in 0..10 {
                q.dequeue(ms(t), &mut no_drop);
            }
            t += 1;
        }
        assert_eq!(q.stats().codel_drops, 0);

        // A standing queue built by a sender that only backs off when it loses frames:
        // without CoDel its window (and the sojourn time) only grows: 10 + 500 frames after
        // 5 s, 51 ms. CoDel drops once the sojourn has stayed above 5 ms for 100 ms, and
        // keeps it near the target.
        let mut q = Fq::new(FqConfig::default());
        let (soj, drops) = responsive(&mut q, 5000);
        let st = q.stats();
        assert_eq!(drops, st.codel_drops);
        assert!(st.codel_drops >= 10, "{st:?}");
        assert_eq!(st.drops_overlimit, 0);
        let worst = soj.iter().max().copied().unwrap();
        assert!(
            worst <= Duration::from_millis(12),
            "worst sojourn {worst:?}"
        );
        let mut off = Fq::new(cfg_nocodel());
        let (soj, drops) = responsive(&mut off, 5000);
        assert_eq!(drops, 0);
        let worst = soj.iter().max().copied().unwrap();
        assert!(
            worst >= Duration::from_millis(40),
            "worst sojourn {worst:?}"
        );
    }

    #[test]
    fn codel_first_drop_waits_an_interval_then_speeds_up() {
        // An unresponsive standing queue (11 in, 10 out per ms): the sojourn time crosses
        // 5 ms after ~50 ms; the first drop comes one interval (100 ms) after the last frame
        // that left below target, and the gaps between drops then shrink as 1/sqrt(count).
        let mut q = Fq::new(FqConfig::default());
        let mut s = 0;
        let mut last_below = 0;
        let mut drop_times: Vec<u64> = Vec::new();
        for t in 0..3000u64 {
            for _ in 0..11 {
                q.enqueue(ms(t), 1, tagged(1, s, 1000), 0, None, &mut no_drop);
                s += 1;
            }
            for _ in 0..10 {
                let mut d = 0;
                if let Some(it) = q.dequeue(ms(t), &mut |_| d += 1) {
                    if drop_times.is_empty() && ms(t) - it.enqueued < Duration::from_millis(5) {
                        last_below = t;
                    }
                }
                drop_times.extend(std::iter::repeat_n(t, d));
            }
        }
        let lb = last_below;
        assert!(lb > 40, "{lb}");
        assert!(drop_times[0] >= lb + 100, "{} vs {lb}", drop_times[0]);
        assert!(drop_times[0] <= lb + 101, "{} vs {lb}", drop_times[0]);
        let gaps: Vec<u64> = drop_times.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.len() > 20);
        assert!(gaps[0] >= 95 && gaps[0] <= 101, "{gaps:?}");
        assert!(*gaps.last().unwrap() <= 20, "{gaps:?}");
        // Never faster than the control law allows: gap k is about 100 ms / sqrt(k + 1).
        for (k, g) in gaps.iter().enumerate() {
            let law = 100.0 / ((k + 2) as f64).sqrt();
            assert!((*g as f64) >= law - 1.5, "gap {k}: {g} ms < {law}");
        }
    }

    #[test]
    fn control_law_shrinks_as_one_over_sqrt_count() {
        let q = Fq::new(FqConfig::default());
        assert_eq!(q.control_law(ms(0), 1), ms(100));
        assert_eq!(q.control_law(ms(0), 4), ms(50));
        assert_eq!(q.control_law(ms(0), 100), ms(10));
        let two = q.control_law(ms(0), 2).as_nanos();
        assert!((70_710_000..70_711_000).contains(&two), "{two}");
        // Never panics at the extremes.
        let _ = q.control_law(Instant::MAX, u32::MAX);
        let _ = q.control_law(ms(0), 0);
    }

    #[test]
    fn pacing_spaces_frames_exactly_and_leaves_others_alone() {
        let mut q = Fq::new(cfg_nocodel());
        // 1500 bytes at 12 Mbit/s: exactly 1 ms apart.
        for s in 0..5 {
            q.enqueue(
                ms(0),
                1,
                tagged(1, s, 1500),
                0,
                Some(12_000_000),
                &mut no_drop,
            );
        }
        assert_eq!(q.next_time(), None);
        let mut t = ms(0);
        let mut departures = Vec::new();
        loop {
            match q.dequeue(t, &mut no_drop) {
                Some(it) => departures.push((t, tag(&it.frame).1)),
                None => match q.next_time() {
                    Some(n) => {
                        assert!(n > t);
                        // Unpaced traffic is not held meanwhile.
                        q.enqueue(t, 2, tagged(2, 0, 100), 0, None, &mut no_drop);
                        assert_eq!(q.next_time(), None);
                        assert_eq!(tag(&q.dequeue(t, &mut no_drop).unwrap().frame).0, 2);
                        // Nothing paced leaves even a nanosecond early.
                        assert!(q
                            .dequeue(n - Duration::from_nanos(1), &mut no_drop)
                            .is_none());
                        t = n;
                    }
                    None => break,
                },
            }
        }
        let want: Vec<_> = (0..5).map(|s| (ms(s), s as u32)).collect();
        assert_eq!(departures, want);
        assert!(q.stats().paced_waits >= 4);
        // A flow that went idle for longer than its gap is not held at all.
        q.enqueue(
            ms(100),
            1,
            tagged(1, 9, 1500),
            0,
            Some(12_000_000),
            &mut no_drop,
        );
        assert!(q.dequeue(ms(100), &mut no_drop).is_some());
        // Non-integral gaps round up: 3 bytes at 7 bit/s = 3.428571429 s.
        assert_eq!(pace_gap(3, 7), Duration::from_nanos(3_428_571_429));
        assert_eq!(pace_gap(1, 0), Duration::from_secs(8));
    }

    #[test]
    fn limits_hold_and_drops_report_their_owner() {
        let cfg = FqConfig {
            limit_pkts: 100,
            limit_bytes: 50_000,
            ..cfg_nocodel()
        };
        let mut q = Fq::new(cfg);
        let mut drops = Vec::new();
        // Flow 1 (owner 11) is fat, flow 2 (owner 22) small.
        for s in 0..10 {
            q.enqueue(ms(0), 2, tagged(2, s, 100), 22, None, &mut |d| {
                drops.push(d)
            });
        }
        for s in 0..200 {
            q.enqueue(ms(0), 1, tagged(1, s, 1000), 11, None, &mut |d| {
                drops.push(d)
            });
            assert!(q.len() <= 100 && q.bytes() <= 50_000);
        }
        // Only the fat flow paid, from its head (its oldest frames).
        assert!(drops.iter().all(|d| d.owner == 11));
        assert_eq!(tag(&drops[0].frame), (1, 0));
        assert_eq!(q.stats().drops_overlimit, drops.len() as u64);
        assert_eq!(q.bytes(), 10 * 100 + (200 - drops.len()) * 1000);
        // A frame bigger than the byte limit is dropped on its own.
        let mut q = Fq::new(FqConfig {
            limit_bytes: 1000,
            ..cfg_nocodel()
        });
        let mut d = Vec::new();
        q.enqueue(ms(0), 3, vec![0; 1001], 33, None, &mut |x| d.push(x));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].owner, 33);
        assert!(q.is_empty());
        assert_eq!(q.dequeue(ms(0), &mut no_drop), None);
    }

    #[test]
    fn set_config_keeps_frames_and_order() {
        let mut q = Fq::new(cfg_nocodel());
        for s in 0..20 {
            for f in 0..5u8 {
                let pace = (f == 4).then_some(1_000_000_000);
                q.enqueue(
                    ms(0),
                    u64::from(f),
                    tagged(f, s, 100),
                    0,
                    pace,
                    &mut no_drop,
                );
            }
        }
        q.set_config(FqConfig {
            flows: 2,
            ..cfg_nocodel()
        });
        assert_eq!(q.len(), 100);
        let mut next = [0u32; 5];
        let mut t = ms(0);
        while !q.is_empty() {
            match q.dequeue(t, &mut no_drop) {
                Some(it) => {
                    let (f, s) = tag(&it.frame);
                    assert_eq!(s, next[f as usize]);
                    next[f as usize] += 1;
                }
                None => t = q.next_time().expect("paced frames wait"),
            }
        }
        assert_eq!(next, [20; 5]);
    }

    fn ipv4(proto: u8, l4: &[u8], frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[20..22].copy_from_slice(&frag.to_be_bytes());
        f[23] = proto;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f.extend_from_slice(l4);
        f
    }

    #[test]
    fn link_sized_defaults() {
        assert_eq!(byte_queue_limit(100_000_000, 1514), 12_500);
        assert_eq!(byte_queue_limit(10_000_000, 1514), 3028);
        assert_eq!(byte_queue_limit(u64::MAX, usize::MAX), usize::MAX);
        assert_eq!(FqConfig::for_link(None, 1514), FqConfig::default());
        assert_eq!(
            FqConfig::for_link(Some(100_000_000), 1514),
            FqConfig::default()
        );
        // 1514 bytes at 1 Mbit/s take 12.112 ms.
        let slow = FqConfig::for_link(Some(1_000_000), 1514);
        assert_eq!(slow.codel_target, Duration::from_micros(12_112));
        assert_eq!(slow.codel_interval, Duration::from_micros(242_240));
        let _ = FqConfig::for_link(Some(0), usize::MAX);
    }

    #[test]
    fn frame_flow_separates_five_tuples() {
        let tcp = |sp: u16, dp: u16| {
            let mut l4 = vec![0u8; 20];
            l4[..2].copy_from_slice(&sp.to_be_bytes());
            l4[2..4].copy_from_slice(&dp.to_be_bytes());
            ipv4(6, &l4, 0)
        };
        let a = frame_flow(&tcp(1000, 80), 1);
        assert_eq!(a, frame_flow(&tcp(1000, 80), 1), "stable");
        assert_ne!(a, frame_flow(&tcp(1001, 80), 1));
        assert_ne!(a, frame_flow(&tcp(1000, 80), 2), "seeded");
        // Same ports over UDP: another flow.
        let mut u = tcp(1000, 80);
        u[23] = 17;
        assert_ne!(a, frame_flow(&u, 1));
        // ICMP echo by identifier; other ICMP types by addresses only.
        let echo = |t: u8, id: u16| {
            let mut l4 = vec![t, 0, 0, 0, 0, 0, 0, 1];
            l4[4..6].copy_from_slice(&id.to_be_bytes());
            ipv4(1, &l4, 0)
        };
        assert_ne!(frame_flow(&echo(8, 1), 0), frame_flow(&echo(8, 2), 0));
        assert_eq!(frame_flow(&echo(8, 1), 0), frame_flow(&echo(0, 1), 0));
        assert_eq!(frame_flow(&echo(3, 1), 0), frame_flow(&echo(3, 2), 0));
        // Fragments: all of a datagram in one flow.
        let first = ipv4(17, &[0, 1, 0, 2, 0, 0, 0, 0], 0x2000);
        let later = ipv4(17, &[9, 9, 9, 9], 0x0010);
        assert_eq!(frame_flow(&first, 3), frame_flow(&later, 3));
        // Non-IPv4, malformed and runts get fixed classes.
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(frame_flow(&arp, 9), CLASS_NON_IP | 0x0806);
        assert_eq!(frame_flow(&arp[..20], 9), CLASS_NON_IP | 0x0806);
        let mut bad = tcp(1, 2);
        bad[14] = 0x4f; // IHL 60 > what is there
        assert_eq!(frame_flow(&bad[..40], 9), CLASS_NON_IP | 0x0800);
        assert_eq!(frame_flow(&[1, 2, 3], 9), CLASS_RUNT);
        assert_eq!(frame_flow(&[], 9), CLASS_RUNT);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Enq {
            flow: u8,
            len: u16,
            pace: Option<u32>,
        },
        Deq,
        Step(u32),
        Config(u32, u32, u16),
    }

    fn any_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0u8..12, 0u16..3000, proptest::option::of(prop_oneof![0u32..10, 1_000u32..100_000_000]))
                .prop_map(|(flow, len, pace)| Op::Enq { flow, len, pace }),
            4 => Just(Op::Deq),
            2 => (0u32..50_000_000).prop_map(Op::Step),
            1 => (0u32..40, 0u32..40_000, 0u16..8).prop_map(|(p, b, f)| Op::Config(p, b, f)),
        ]
    }

    proptest! {
        #[test]
        fn frame_flow_is_total(bytes in proptest::collection::vec(any::<u8>(), 0..120),
                               ipv4 in any::<bool>(), seed in any::<u64>()) {
            let mut f = bytes;
            if ipv4 && f.len() >= 15 {
                f[12] = 0x08;
                f[13] = 0x00;
                f[14] = 0x40 | (f[14] & 0x0f);
            }
            prop_assert_eq!(frame_flow(&f, seed), frame_flow(&f, seed));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn every_frame_leaves_once_in_flow_order(
            flows in 1u32..8, quantum in 0u32..3000, codel in any::<bool>(),
            limit_pkts in 0u32..40, limit_bytes in 0usize..40_000,
            ops in proptest::collection::vec(any_op(), 0..300),
        ) {
            let cfg = FqConfig {
                quantum, limit_pkts, limit_bytes, flows, codel,
                codel_target: Duration::from_micros(500),
                codel_interval: Duration::from_millis(2),
            };
            let mut q = Fq::new(cfg.clone());
            let mut cur = cfg;
            let mut now = Instant::ZERO;
            // Each frame's (flow, seq) and its owner; every one must end in `out` or
            // `gone` exactly once.
            let mut next_seq: HashMap<u8, u32> = HashMap::new();
            let mut live: HashMap<(u8, u32), usize> = HashMap::new();
            let mut last_out: HashMap<u8, u32> = HashMap::new();
            let (mut len, mut bytes) = (0usize, 0usize);
            for op in ops {
                let mut gone: Vec<QItem> = Vec::new();
                let mut out: Option<QItem> = None;
                match op.clone() {
                    Op::Enq { flow, len: l, pace } => {
                        let s = next_seq.entry(flow).or_insert(0);
                        let frame = tagged(flow, *s, usize::from(l));
                        live.insert((flow, *s), frame.len());
                        len += 1;
                        bytes += frame.len();
                        let owner = (u64::from(flow) << 32) | u64::from(*s);
                        *s += 1;
                        q.enqueue(now, u64::from(flow), frame, owner,
                                  pace.map(u64::from), &mut |d| gone.push(d));
                    }
                    Op::Deq => {
                        out = q.dequeue(now, &mut |d| gone.push(d));
                        if out.is_none() && !q.is_empty() {
                            // Nothing eligible: only pacing may hold frames back.
                            prop_assert!(q.next_time().is_some_and(|t| t > now),
                                "frames held without a pacing time");
                        }
                    }
                    Op::Step(ns) => now = now.saturating_add(Duration::from_nanos(u64::from(ns))),
                    Op::Config(p, b, f) => {
                        cur = FqConfig { limit_pkts: p.max(1), limit_bytes: b as usize, flows: u32::from(f), ..cur };
                        q.set_config(cur.clone());
                    }
                }
                for d in gone {
                    let (f, s) = tag(&d.frame);
                    prop_assert_eq!(d.owner, (u64::from(f) << 32) | u64::from(s));
                    let l = live.remove(&(f, s));
                    prop_assert_eq!(l, Some(d.frame.len()), "dropped twice or never in");
                    len -= 1;
                    bytes -= d.frame.len();
                    // A drop is from the head of its slot: later frames of its flow are
                    // still ordered after anything already sent.
                    if let Some(&p) = last_out.get(&f) {
                        prop_assert!(s > p);
                    }
                }
                // CoDel's drops (above) precede the frame sent in the same call.
                if let Some(it) = out {
                    let (f, s) = tag(&it.frame);
                    prop_assert_eq!(it.owner, (u64::from(f) << 32) | u64::from(s));
                    let l = live.remove(&(f, s));
                    prop_assert_eq!(l, Some(it.frame.len()), "out twice or never in");
                    len -= 1;
                    bytes -= it.frame.len();
                    // Per-flow FIFO: sequence numbers only grow.
                    if let Some(&p) = last_out.get(&f) {
                        prop_assert!(s > p, "flow {} out of order: {} after {}", f, s, p);
                    }
                    last_out.insert(f, s);
                }
                prop_assert_eq!(q.len(), len);
                prop_assert_eq!(q.bytes(), bytes);
                prop_assert_eq!(q.is_empty(), len == 0);
                prop_assert_eq!(live.len(), len);
                // Limits hold after every enqueue (set_config defers to the next one).
                if matches!(op, Op::Enq { .. }) {
                    prop_assert!(q.len() <= cur.limit_pkts as usize && q.bytes() <= cur.limit_bytes);
                }
                let st = q.stats();
                prop_assert_eq!(st.enqueued, st.dequeued + st.drops_overlimit + st.codel_drops + len as u64);
                // Memory: slot capacities stay within twice the live frames plus a small
                // constant per slot.
                prop_assert!(q.capacity() <= 2 * len + (KEEP_CAPACITY + 8) * q.flows.len());
            }
            // Drain: everything that is left comes out (possibly CoDel-dropped), in order.
            let mut guard = 0;
            while !q.is_empty() {
                guard += 1;
                prop_assert!(guard < 100_000);
                let mut gone: Vec<QItem> = Vec::new();
                match q.dequeue(now, &mut |d| gone.push(d)) {
                    Some(it) => {
                        let (f, s) = tag(&it.frame);
                        prop_assert!(live.remove(&(f, s)).is_some());
                        if let Some(&p) = last_out.get(&f) { prop_assert!(s > p); }
                        last_out.insert(f, s);
                    }
                    None => {
                        let t = q.next_time();
                        prop_assert!(t.is_some() || !gone.is_empty() || q.is_empty());
                        if let Some(t) = t { now = now.max(t); }
                    }
                }
                for d in gone {
                    let (f, s) = tag(&d.frame);
                    prop_assert!(live.remove(&(f, s)).is_some());
                }
            }
            prop_assert!(live.is_empty());
            prop_assert_eq!(q.next_time(), None);
        }
    }

    #[test]
    fn limits_hold_after_every_enqueue_whatever_the_mix() {
        let mut q = Fq::new(FqConfig {
            limit_pkts: 64,
            limit_bytes: 20_000,
            flows: 4,
            ..FqConfig::default()
        });
        let mut n = 0u64;
        for s in 0..5000u32 {
            let flow = u64::from(s % 13);
            let pace = (s % 3 == 0).then_some(1_000_000);
            q.enqueue(
                ms(u64::from(s)),
                flow,
                tagged(1, s, (s as usize * 37) % 1600),
                0,
                pace,
                &mut |_| n += 1,
            );
            assert!(q.len() <= 64 && q.bytes() <= 20_000);
            if s % 4 == 0 {
                q.dequeue(ms(u64::from(s)), &mut |_| n += 1);
            }
        }
        let st = q.stats();
        assert_eq!(st.drops_overlimit + st.codel_drops, n);
        assert!(st.flow_collisions > 0);
    }
}
