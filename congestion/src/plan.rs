//! The Yellowstone study's sampling plan (§III-B), deterministic and source-agnostic:
//!
//! (ii) pick a switch uniformly at random, then one of its ports uniformly at random;
//! (iii) check the port is operational, else pick again; (iv) reset its counters
//! (`perfquery -R`); (v) read it 100 times, sleeping 100 ms after each read completes — a
//! *round*; (vii) pick the next port. Each read records tᵠ (just before the query) and tᵖ
//! (its turnaround), which Eq. 3 needs.
//!
//! The randomness is a seeded SplitMix64 ([`hawkmesh_wire::rng`]), the counters come from a
//! [`CounterSource`] (a perfquery/ethtool/SONiC/Tofino reader, a simulator, or the
//! [`ReplaySource`] of recorded samples) and time from a [`Clock`] (a [`ManualClock`] in
//! tests: nothing sleeps for real). [`Sampler::continuous`] samples chosen ports without
//! resets, for dashboards and the watchdog.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hawkmesh_wire::rng::SplitMix64;
use serde::{Deserialize, Serialize};

use crate::fitf::{fitf_round, FitfConfig, FitfError, Round};
use crate::parse::{samples_jsonl, ParseError};
use crate::sample::{PortId, PortKey, Sample};

/// Why a source or the plan could not go on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SourceError {
    /// The port is not operational.
    #[error("port {0} is down")]
    Down(String),
    /// The source does not know the port.
    #[error("unknown port {0}")]
    UnknownPort(String),
    /// A replay has no more samples of the port.
    #[error("no more recorded samples of port {0}")]
    Exhausted(String),
    /// No operational port was found in the allowed number of picks.
    #[error("no operational port found in {0} picks")]
    NoUpPort(usize),
    /// The source's output could not be parsed.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// The source failed otherwise (a process, a socket).
    #[error("source: {0}")]
    Other(String),
}

/// Where the counters come from.
pub trait CounterSource {
    /// The ports that can be sampled.
    fn ports(&self) -> Vec<PortId>;
    /// Whether `port` is operational (step iii).
    fn is_up(&mut self, port: &PortId) -> Result<bool, SourceError>;
    /// Resets `port`'s counters (step iv).
    fn reset(&mut self, port: &PortId) -> Result<(), SourceError>;
    /// Reads `port`'s counters.
    fn read(&mut self, port: &PortId) -> Result<Sample, SourceError>;
    /// Whether [`read`](Self::read) gives the query's own tᵠ and tᵖ (a replay); otherwise the
    /// sampler stamps them from its clock around the call.
    fn stamps_time(&self) -> bool {
        false
    }
}

/// Time, for the sampler.
pub trait Clock {
    /// Now, in ns.
    fn now_ns(&self) -> u64;
    /// Sleeps `ns`.
    fn sleep_ns(&mut self, ns: u64);
}

/// A clock that only moves when slept on or advanced (tests, simulation).
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now_ns: u64,
}

impl ManualClock {
    /// A clock at `now_ns`.
    pub fn at(now_ns: u64) -> Self {
        ManualClock { now_ns }
    }

    /// Moves the clock on by `ns`.
    pub fn advance(&mut self, ns: u64) {
        self.now_ns = self.now_ns.saturating_add(ns);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now_ns
    }
    fn sleep_ns(&mut self, ns: u64) {
        self.advance(ns);
    }
}

/// The wall clock (ns since the Unix epoch) and real sleeps.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
    fn sleep_ns(&mut self, ns: u64) {
        std::thread::sleep(Duration::from_nanos(ns));
    }
}

/// The plan's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SamplingPlan {
    /// The seed of the port choices.
    pub seed: u64,
    /// Reads per round (100 in the study).
    pub reads_per_round: usize,
    /// The sleep after each read completes, ns (100 ms in the study).
    pub spacing_ns: u64,
    /// Picks tried before giving up on finding an operational port.
    pub max_picks: usize,
    /// Whether to reset the counters before a round (step iv).
    pub reset: bool,
}

impl Default for SamplingPlan {
    fn default() -> Self {
        SamplingPlan {
            seed: 0,
            reads_per_round: 100,
            spacing_ns: 100_000_000,
            max_picks: 64,
            reset: true,
        }
    }
}

/// The reads of one round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    /// The round's number (0-based, per sampler).
    pub round: u64,
    /// The port observed.
    pub port: PortId,
    /// Its reads, in order.
    pub samples: Vec<Sample>,
}

impl RoundRecord {
    /// The round's FITF (Yellowstone Eq. 3).
    pub fn fitf(&self, cfg: &FitfConfig) -> Result<Round, FitfError> {
        fitf_round(&self.samples, cfg)
    }
}

/// Runs the plan over a source.
#[derive(Clone, Debug)]
pub struct Sampler {
    plan: SamplingPlan,
    rng: SplitMix64,
    rounds: u64,
}

impl Sampler {
    /// A sampler of `plan`, seeded by `plan.seed`.
    pub fn new(plan: SamplingPlan) -> Self {
        Sampler {
            plan,
            rng: SplitMix64::new(plan.seed),
            rounds: 0,
        }
    }

    /// The plan.
    pub fn plan(&self) -> &SamplingPlan {
        &self.plan
    }

    /// Steps ii–iii: a uniformly random node, then a uniformly random port of it, until one
    /// is operational.
    pub fn pick(&mut self, source: &mut dyn CounterSource) -> Result<PortId, SourceError> {
        let mut by_node: BTreeMap<String, Vec<PortId>> = BTreeMap::new();
        for p in source.ports() {
            by_node.entry(p.node.clone()).or_default().push(p);
        }
        for ports in by_node.values_mut() {
            ports.sort();
            ports.dedup();
        }
        let nodes: Vec<&Vec<PortId>> = by_node.values().collect();
        for _ in 0..self.plan.max_picks {
            let Some(ports) = self.rng.pick(&nodes) else {
                break;
            };
            let Some(port) = self.rng.pick(ports) else {
                continue;
            };
            if source.is_up(port)? {
                return Ok(port.clone());
            }
        }
        Err(SourceError::NoUpPort(self.plan.max_picks))
    }

    fn read_one(
        source: &mut dyn CounterSource,
        clock: &mut dyn Clock,
        port: &PortId,
    ) -> Result<Sample, SourceError> {
        let t0 = clock.now_ns();
        let mut s = source.read(port)?;
        let t1 = clock.now_ns();
        if !source.stamps_time() {
            s.t_query_ns = t0;
            s.turnaround_ns = t1.saturating_sub(t0);
        }
        Ok(s)
    }

    /// One round (steps ii–v): pick, reset, then the reads, sleeping the spacing after each
    /// read but the last.
    pub fn round(
        &mut self,
        source: &mut dyn CounterSource,
        clock: &mut dyn Clock,
    ) -> Result<RoundRecord, SourceError> {
        let port = self.pick(source)?;
        if self.plan.reset {
            source.reset(&port)?;
        }
        let mut samples = Vec::with_capacity(self.plan.reads_per_round.min(1 << 12));
        for i in 0..self.plan.reads_per_round {
            samples.push(Self::read_one(source, clock, &port)?);
            if i + 1 < self.plan.reads_per_round {
                clock.sleep_ns(self.plan.spacing_ns);
            }
        }
        let round = self.rounds;
        self.rounds += 1;
        Ok(RoundRecord {
            round,
            port,
            samples,
        })
    }

    /// `rounds` rounds one after the other (step vii).
    pub fn run(
        &mut self,
        source: &mut dyn CounterSource,
        clock: &mut dyn Clock,
        rounds: usize,
    ) -> Result<Vec<RoundRecord>, SourceError> {
        (0..rounds).map(|_| self.round(source, clock)).collect()
    }

    /// Continuous sampling of chosen ports, without resets: `sweeps` times, each port read
    /// once in order, then the spacing slept.
    pub fn continuous(
        &mut self,
        source: &mut dyn CounterSource,
        clock: &mut dyn Clock,
        ports: &[PortId],
        sweeps: usize,
    ) -> Result<Vec<Sample>, SourceError> {
        let mut out = Vec::with_capacity(ports.len().saturating_mul(sweeps).min(1 << 16));
        for _ in 0..sweeps {
            for p in ports {
                out.push(Self::read_one(source, clock, p)?);
            }
            clock.sleep_ns(self.plan.spacing_ns);
        }
        Ok(out)
    }
}

/// A source that replays recorded samples: each port's samples in recorded order, with their
/// recorded timing. Ports are up unless marked down; resets are recorded, not applied.
#[derive(Clone, Debug, Default)]
pub struct ReplaySource {
    ports: Vec<PortId>,
    queues: BTreeMap<PortKey, VecDeque<Sample>>,
    down: BTreeSet<PortKey>,
    resets: Vec<PortKey>,
}

impl ReplaySource {
    /// A replay of `samples`.
    pub fn from_samples(samples: Vec<Sample>) -> Self {
        let mut r = ReplaySource::default();
        for s in samples {
            let key = s.port.key();
            if !r.queues.contains_key(&key) {
                r.ports.push(s.port.clone());
            }
            r.queues.entry(key).or_default().push_back(s);
        }
        r
    }

    /// A replay of a JSON-lines recording ([`crate::parse::samples_jsonl`]).
    pub fn from_jsonl(text: &str) -> Result<Self, ParseError> {
        Ok(Self::from_samples(samples_jsonl(text)?))
    }

    /// Marks `port` down.
    pub fn set_down(&mut self, port: PortKey) {
        self.down.insert(port);
    }

    /// The resets asked for, in order.
    pub fn resets(&self) -> &[PortKey] {
        &self.resets
    }

    /// Samples left for `port`.
    pub fn remaining(&self, port: &PortKey) -> usize {
        self.queues.get(port).map_or(0, VecDeque::len)
    }
}

impl CounterSource for ReplaySource {
    fn ports(&self) -> Vec<PortId> {
        self.ports.clone()
    }

    fn is_up(&mut self, port: &PortId) -> Result<bool, SourceError> {
        let key = port.key();
        if !self.queues.contains_key(&key) {
            return Err(SourceError::UnknownPort(port.to_string()));
        }
        Ok(!self.down.contains(&key))
    }

    fn reset(&mut self, port: &PortId) -> Result<(), SourceError> {
        self.resets.push(port.key());
        Ok(())
    }

    fn read(&mut self, port: &PortId) -> Result<Sample, SourceError> {
        let key = port.key();
        if self.down.contains(&key) {
            return Err(SourceError::Down(port.to_string()));
        }
        self.queues
            .get_mut(&key)
            .ok_or_else(|| SourceError::UnknownPort(port.to_string()))?
            .pop_front()
            .ok_or_else(|| SourceError::Exhausted(port.to_string()))
    }

    fn stamps_time(&self) -> bool {
        true
    }
}
