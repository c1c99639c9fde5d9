//! The switch agent's control loop body: CPU-port packets in, telemetry reports out.
//!
//! - A polling CPU copy (HAWKEYE §3.4) triggers a collection: the telemetry registers of the
//!   last `epochs` epochs are read and turned into a [`TelemetryReport`] for that polling
//!   event. At most one register read per guard interval (default 100 µs; the artifact's is
//!   500 µs): the first
//!   poll after a quiet guard is read at once; polls arriving within the guard of the last
//!   read wait and are all served by one read when the guard has passed (or earlier, in the
//!   last epoch that still holds a waiting event's epoch in the ring). No event is ever
//!   answered with a read older than its own arrival (the artifact reuses the earlier read,
//!   which misses whatever happened since — e.g. a loop that froze in between). The same
//!   event arriving again by another port before its read (around a routing loop, or where
//!   a PFC branch meets the victim path; the data plane's dedupe keys on the arrival port)
//!   joins its report as a further polling context with its own PFC branch; a read waits
//!   `gather_ns` after an event's first arrival for such copies. A copy of an event already
//!   reported, or by a port already seen, is counted and ignored.
//! - Slots older than the window that no packet has touched since (a switch frozen behind a
//!   deadlock or a storm) are reported too, up to `aged_lookback_ns` back: they are what
//!   the switch's buffers still hold (see [`RegisterSnapshot::aged_epochs`]).
//! - An eviction CPU copy is kept until the next collection that covers its epoch and is
//!   reported there as an evicted flow record; if more evictions arrive than the agent keeps,
//!   the overflow is counted in the epoch's `lost_evictions` instead of vanishing.
//! - Reports are cut into chunks of at most `chunk_bytes` (an MTU) for streaming.

use crate::backend::{CpuFrame, CpuFrameKind, SwitchBackend};
use crate::collect::{paused_ports, CollectError, Eviction, Geometry, ReadCost, RegisterSnapshot};
use hawkmesh_wire::dataplane;
use hawkmesh_wire::polling::Polling;
use hawkmesh_wire::telemetry::{
    EpochTelemetry, PollingContext, PollingEgress, TelemetryReport, TelemetryWireError, TraceFlags,
    TELEMETRY_FORMAT_VERSION,
};
use hawkmesh_wire::topology::NodeId;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Default guard interval between register reads, ns: victims that poll at once poll
/// within microseconds of one another, so one read serves them, and no event waits more
/// than this for its read (the artifact's guard is 500 µs).
pub const DEFAULT_GUARD_NS: u64 = 100_000;

/// Default wait after an event's first polling copy before its read, ns: the polling packet
/// goes around a loop of up to five switches (1–2 µs links) and back within this, so the
/// arrivals by other ports join the report.
pub const DEFAULT_GATHER_NS: u64 = 30_000;

/// How long an event id is remembered after its first copy, ns of switch time (a copy of an
/// event older than this would be a new event to the agent; the data plane's dedupe
/// interval is 3 ms).
const REPORTED_RETENTION_NS: u64 = 1_000_000_000;

/// Default polling events the agent takes per second by each arrival port.
pub const DEFAULT_EVENTS_PER_PORT_PER_SEC: u32 = 20_000;

/// Default burst of polling events by one arrival port.
pub const DEFAULT_EVENT_BURST: u32 = 4_096;

/// One arrival port's budget of new polling events (a token bucket in switch time).
#[derive(Clone, Copy, Debug)]
struct Budget {
    /// Tokens × 10^9 (a token per event; refilled at `events_per_port_per_sec`).
    nano_tokens: u128,
    /// Switch time of the last refill, ns.
    at_ns: u64,
}

/// Agent settings.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// This switch's node id (in reports).
    pub switch: NodeId,
    /// The program variant's sizes.
    pub geometry: Geometry,
    /// At most one register read per this many ns of switch time.
    pub guard_ns: u64,
    /// Wait after an event's first polling copy before its read, ns (later copies of the
    /// event by other ports join the report).
    pub gather_ns: u64,
    /// Largest report chunk, bytes.
    pub chunk_bytes: usize,
    /// Eviction reports kept between collections.
    pub max_pending_evictions: usize,
    /// How far back before the poll intact ring slots older than the window are still
    /// reported (a frozen switch's last busy epochs), ns; 0 reports the window only.
    pub aged_lookback_ns: u64,
    /// New polling events taken per second by each arrival port (the data plane rate-limits
    /// host ports; this bounds the agent's work whatever gets through, and one port's flood
    /// does not use another's share). More are refused and counted.
    pub events_per_port_per_sec: u32,
    /// Polling events one arrival port may bring at once.
    pub event_burst: u32,
    /// Polling events waiting for a read at most (more are refused and counted).
    pub max_waiting: usize,
}

impl AgentConfig {
    /// Defaults for `switch`: default variant, [`DEFAULT_GUARD_NS`], 1500-byte chunks,
    /// intact slots up to 10 ms old.
    pub fn new(switch: NodeId) -> Self {
        AgentConfig {
            switch,
            geometry: Geometry::default_variant(),
            guard_ns: DEFAULT_GUARD_NS,
            gather_ns: DEFAULT_GATHER_NS,
            chunk_bytes: 1500,
            max_pending_evictions: 65_536,
            aged_lookback_ns: 10_000_000,
            events_per_port_per_sec: DEFAULT_EVENTS_PER_PORT_PER_SEC,
            event_burst: DEFAULT_EVENT_BURST,
            max_waiting: 4096,
        }
    }
}

/// What one polling event produced.
#[derive(Clone, Debug)]
pub struct Collection {
    /// Polling event id.
    pub event_id: u64,
    /// Switch time of the polling copy, ns.
    pub time_ns: u64,
    /// Switch time of the register read that served it, ns (at or after `time_ns`).
    pub read_ns: u64,
    /// Whether this event paid for the read (false: it shared the read of an event served
    /// before it in the same batch).
    pub read_registers: bool,
    /// Register read cost (zero when reused).
    pub cost: ReadCost,
    /// Wall time spent reading and encoding.
    pub took: Duration,
    /// The report.
    pub report: TelemetryReport,
    /// The report's chunks.
    pub chunks: Vec<Vec<u8>>,
}

/// Why the agent could not produce a report.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Reading the switch failed.
    #[error(transparent)]
    Collect(#[from] CollectError),
    /// Encoding failed.
    #[error(transparent)]
    Encode(#[from] TelemetryWireError),
}

/// Counters of the agent's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentStats {
    /// Polling copies received.
    pub polling_copies: u64,
    /// Polling copies ignored as repeats of an event already reported, or of a waiting
    /// event by a port it already arrived by.
    pub duplicate_events: u64,
    /// Copies of a waiting event by another port, joined to its report.
    pub later_arrivals: u64,
    /// Malformed CPU frames.
    pub malformed: u64,
    /// Register reads.
    pub register_reads: u64,
    /// Reports produced.
    pub reports: u64,
    /// Report bytes produced.
    pub report_bytes: u64,
    /// Evictions received.
    pub evictions: u64,
    /// Evictions that did not fit and were counted as lost.
    pub lost_evictions: u64,
    /// New polling events refused: their arrival port's budget was spent, or too many
    /// events waited (a flood, forged or not; no report is made for them).
    pub refused_events: u64,
}

/// One switch's agent.
#[derive(Debug)]
pub struct SwitchAgent<B: SwitchBackend> {
    config: AgentConfig,
    backend: B,
    /// Switch time of the last register read.
    last_read_ns: Option<u64>,
    /// Polling events waiting for the next read (arrived within the guard of the last):
    /// first arrival time, first copy, later copies by other ports.
    waiting: Vec<Waiting>,
    /// Event ids taken (waiting or reported) and when they first arrived, ns.
    reported: BTreeMap<u64, u64>,
    evictions: Vec<Eviction>,
    lost_evictions: u32,
    /// Per arrival port, its budget of new events.
    budgets: BTreeMap<u16, Budget>,
    stats: AgentStats,
}

impl<B: SwitchBackend> SwitchAgent<B> {
    /// An agent for the switch behind `backend` (the program's sizes in `config.geometry`).
    pub fn new(config: AgentConfig, backend: B) -> Self {
        SwitchAgent {
            config,
            backend,
            last_read_ns: None,
            waiting: Vec::new(),
            reported: BTreeMap::new(),
            evictions: Vec::new(),
            lost_evictions: 0,
            budgets: BTreeMap::new(),
            stats: AgentStats::default(),
        }
    }

    /// The backend (e.g. to deliver CPU frames in simulation).
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// Counters.
    pub fn stats(&self) -> AgentStats {
        self.stats
    }

    /// Handles every CPU-port packet waiting in the backend at switch time `now_ns`, and
    /// serves the polling events waiting for a read once the guard since the last read has
    /// passed.
    pub fn poll(&mut self, now_ns: u64) -> Result<Vec<Collection>, AgentError> {
        let frames = self
            .backend
            .poll_cpu()
            .map_err(|e| AgentError::Collect(CollectError::Backend(e)))?;
        for frame in frames {
            self.handle(frame);
        }
        // A waiting event is served when the guard has passed and the oldest waiting event
        // has gathered its copies by other ports, or at the latest in the last epoch that
        // still has its own epoch in the ring (short epochs, long guard).
        let geometry = self.config.geometry;
        let last_chance = |arrived: u64| {
            ((arrived >> geometry.epoch_log2_ns) + u64::from(geometry.epochs) - 1)
                << geometry.epoch_log2_ns
        };
        let gathered = self
            .waiting
            .iter()
            .map(|w| w.arrived_ns)
            .min()
            .is_some_and(|first| now_ns.saturating_sub(first) >= self.config.gather_ns);
        let due = (gathered
            && self
                .last_read_ns
                .is_none_or(|at| now_ns.saturating_sub(at) >= self.config.guard_ns))
            || self
                .waiting
                .iter()
                .any(|w| now_ns >= last_chance(w.arrived_ns));
        if self.waiting.is_empty() || !due {
            return Ok(Vec::new());
        }
        self.collect_waiting(now_ns)
    }

    /// Serves every waiting polling event now, guard or not (e.g. when the agent stops:
    /// nothing it accepted goes unreported).
    pub fn flush(&mut self, now_ns: u64) -> Result<Vec<Collection>, AgentError> {
        if self.waiting.is_empty() {
            return Ok(Vec::new());
        }
        self.collect_waiting(now_ns)
    }

    /// Polling events accepted and not reported yet.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn handle(&mut self, frame: CpuFrame) {
        match frame.kind {
            CpuFrameKind::Eviction => {
                self.stats.evictions += 1;
                match Eviction::parse(&frame.bytes, self.config.geometry.qdepth_unit_bytes) {
                    Some(eviction) if self.evictions.len() < self.config.max_pending_evictions => {
                        self.evictions.push(eviction)
                    }
                    Some(_) => {
                        self.stats.lost_evictions += 1;
                        self.lost_evictions = self.lost_evictions.saturating_add(1);
                    }
                    None => self.stats.malformed += 1,
                }
            }
            CpuFrameKind::Other => {}
            CpuFrameKind::Polling => {
                self.stats.polling_copies += 1;
                let Ok(polling) = Polling::parse_packet(&frame.bytes) else {
                    self.stats.malformed += 1;
                    return;
                };
                if self.reported.contains_key(&polling.event_id) {
                    // Another arrival of a waiting event by a port it has not come by yet
                    // carries the branch the data plane took from there.
                    let waiting = self
                        .waiting
                        .iter_mut()
                        .find(|w| w.first.event_id == polling.event_id);
                    match waiting {
                        Some(w)
                            if std::iter::once(&w.first).chain(&w.later).all(|p| {
                                p.context_ingress_port != polling.context_ingress_port
                            }) =>
                        {
                            self.stats.later_arrivals += 1;
                            w.later.push(polling);
                        }
                        _ => self.stats.duplicate_events += 1,
                    }
                    return;
                }
                if self.waiting.len() >= self.config.max_waiting
                    || !self.take_budget(polling.context_ingress_port, frame.time_ns)
                {
                    self.stats.refused_events += 1;
                    return;
                }
                self.reported.insert(polling.event_id, frame.time_ns);
                self.waiting.push(Waiting {
                    arrived_ns: frame.time_ns,
                    first: polling,
                    later: Vec::new(),
                });
            }
        }
    }

    /// Takes one event from `port`'s budget at switch time `now_ns`, if it has one.
    fn take_budget(&mut self, port: u16, now_ns: u64) -> bool {
        const NANO: u128 = 1_000_000_000;
        let burst = u128::from(self.config.event_burst.max(1)) * NANO;
        let rate = u128::from(self.config.events_per_port_per_sec);
        let budget = self.budgets.entry(port).or_insert(Budget {
            nano_tokens: burst,
            at_ns: now_ns,
        });
        let elapsed = u128::from(now_ns.saturating_sub(budget.at_ns));
        budget.nano_tokens = (budget.nano_tokens + elapsed * rate).min(burst);
        budget.at_ns = budget.at_ns.max(now_ns);
        if budget.nano_tokens >= NANO {
            budget.nano_tokens -= NANO;
            true
        } else {
            false
        }
    }

    /// One register read at `now_ns` serving every waiting polling event.
    fn collect_waiting(&mut self, now_ns: u64) -> Result<Vec<Collection>, AgentError> {
        let started = Instant::now();
        let geometry = self.config.geometry;
        let (snapshot, read_cost) = RegisterSnapshot::read(&mut self.backend, &geometry)?;
        let lookback = u64::from(geometry.epochs) * geometry.epoch_ns();
        let (paused_ports, status_cost) =
            paused_ports(&mut self.backend, &geometry, now_ns, lookback)?;
        let cost = ReadCost {
            registers: read_cost.registers + status_cost.registers,
            cells: read_cost.cells + status_cost.cells,
        };
        self.stats.register_reads += 1;
        self.last_read_ns = Some(now_ns);
        let current = now_ns >> geometry.epoch_log2_ns;
        let first = current.saturating_sub(u64::from(geometry.epochs) - 1);
        // Older than the window, so none with a zero lookback. A read that comes late (the
        // switch was unreachable for a while) also reports the epochs of its events' own
        // windows that the ring still holds intact.
        let by_lookback = now_ns.saturating_sub(self.config.aged_lookback_ns);
        let oldest_ns = match self.waiting.iter().map(|w| w.arrived_ns).min() {
            Some(at) if self.config.aged_lookback_ns > 0 => {
                by_lookback.min(at.saturating_sub(lookback))
            }
            _ => by_lookback,
        };
        let mut epochs = snapshot.aged_epochs(&geometry, current, oldest_ns);
        epochs.extend((first..=current).map(|epoch| snapshot.epoch(&geometry, epoch)));
        // Evicted flows join the epoch they were counted in; the rest stay pending
        // (their epoch may be read again) unless their slot has been overwritten.
        let mut keep = Vec::new();
        for eviction in self.evictions.drain(..) {
            match epochs
                .iter_mut()
                .find(|e| eviction.belongs_to(&geometry, e.epoch_id))
            {
                Some(epoch) => epoch.flows.push(eviction.record),
                None => keep.push(eviction),
            }
        }
        self.evictions = keep;
        if let Some(last) = epochs.last_mut() {
            last.lost_evictions = std::mem::take(&mut self.lost_evictions);
        }
        epochs.retain(|e| {
            !(e.ports.is_empty()
                && e.meters.is_empty()
                && e.flows.is_empty()
                && e.lost_evictions == 0)
        });
        let forget_before = now_ns.saturating_sub(REPORTED_RETENTION_NS);
        self.reported.retain(|_, arrived| *arrived >= forget_before);
        let mut out = Vec::new();
        for (index, waiting) in std::mem::take(&mut self.waiting).into_iter().enumerate() {
            let Waiting {
                arrived_ns,
                first: polling,
                later,
            } = waiting;
            let report = TelemetryReport {
                version: TELEMETRY_FORMAT_VERSION,
                switch: self.config.switch,
                event_id: polling.event_id,
                epoch_ns: geometry.epoch_ns(),
                polling: polling_context(&polling, &epochs),
                more_polling: later.iter().map(|p| polling_context(p, &epochs)).collect(),
                paused_ports: paused_ports.clone(),
                epochs: epochs.clone(),
            };
            let chunks = report.to_chunks(self.config.chunk_bytes)?;
            self.stats.reports += 1;
            self.stats.report_bytes += chunks.iter().map(|c| c.len() as u64).sum::<u64>();
            let first_served = index == 0;
            out.push(Collection {
                event_id: polling.event_id,
                time_ns: arrived_ns,
                read_ns: now_ns,
                read_registers: first_served,
                cost: if first_served {
                    cost
                } else {
                    ReadCost::default()
                },
                took: started.elapsed(),
                report,
                chunks,
            });
        }
        Ok(out)
    }
}

/// A polling event accepted and not read yet.
#[derive(Debug)]
struct Waiting {
    /// Switch time of its first copy, ns.
    arrived_ns: u64,
    /// Its first copy.
    first: Polling,
    /// Its copies by other ports since, in arrival order.
    later: Vec<Polling>,
}

/// Where the polling packet went from this switch, from its CPU copy's port context (the
/// data plane keeps one CPU copy per switch, made at ingress, and writes its own decisions
/// into it): along the victim path the victim's egress port (with the PFC bit when the
/// victim is paused there); on a PFC branch the ports the data plane chose (paused, and fed
/// from the polling packet's ingress port: HAWKEYE §3.4).
fn polling_context(polling: &Polling, epochs: &[EpochTelemetry]) -> PollingContext {
    let arrival = TraceFlags(polling.arrival_flags & TraceFlags::BOTH.0);
    let ingress = polling.context_ingress_port;
    let mut egress: Vec<PollingEgress> = Vec::new();
    let mut add = |port: u16, reason: u8| match egress.iter_mut().find(|e| e.port == port) {
        Some(existing) => existing.reason = TraceFlags(existing.reason.0 | reason),
        None => egress.push(PollingEgress {
            port,
            reason: TraceFlags(reason),
        }),
    };
    if arrival.victim_path() {
        // The data plane records the victim's forwarding choice in the copy; a copy
        // without it (no route here) falls back to the victim's flow record.
        let victim_port = (polling.context_egress_port != dataplane::NO_PORT)
            .then_some(polling.context_egress_port)
            .or_else(|| {
                epochs
                    .iter()
                    .rev()
                    .flat_map(|e| e.flows.iter())
                    .find(|f| f.flow == polling.victim)
                    .map(|f| f.egress_port)
            });
        if let Some(port) = victim_port {
            let paused = polling.context_flags & dataplane::POLLING_CONTEXT_VICTIM_PAUSED != 0;
            let pfc = if paused {
                TraceFlags::PFC_CAUSALITY.0
            } else {
                0
            };
            add(port, TraceFlags::VICTIM_PATH.0 | pfc);
        }
    }
    if arrival.pfc_causality() {
        for port in polling.pfc_branch_ports() {
            add(port, TraceFlags::PFC_CAUSALITY.0);
        }
    }
    egress.sort();
    PollingContext {
        ingress_port: ingress,
        flags: arrival,
        victim: polling.victim,
        egress,
    }
}
