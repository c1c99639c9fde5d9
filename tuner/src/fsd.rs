//! The flow-size distribution (FSD) from the ToR sketches (PARALEON §III-B).
//!
//! Every monitor interval λ_MI each ToR's control plane reads and resets its Elastic Sketch
//! and hands [`TorMonitor::update`] the bytes each flow sent in the interval. The monitor
//! keeps each flow's history and assigns one of three states (Fig. 3):
//!
//! 1. **elephant** (E): its aggregated bytes Φ(f) ≥ τ (τ = 1 MB, Table III);
//! 2. **potential elephant** (PE): Φ(f) < τ, but active (bytes > 0) in each of the last δ
//!    intervals (δ = 3, the window);
//! 3. **mice** (M): Φ(f) < τ and active for fewer than δ intervals in a row.
//!
//! A flow with no bytes for δ intervals has finished and is forgotten (Fig. 4's f₃); one
//! with no bytes in this interval is not in this interval's distribution (it is not active).
//!
//! A PE flow counts as an elephant with a weight and as a mouse with the rest: its
//! "likelihood of transitioning to E ... refined as more monitor intervals elapse" (§III-B,
//! which leaves the formula open). The monitor learns the likelihood from the flows it has
//! seen ([`Likelihood`]): per state (M or PE) and tenth of τ that Φ was in, the share of
//! the intervals flows spent there whose flow went on to pass τ. Counted per interval,
//! not per flow, because the distribution is per interval: a slow elephant is in it for
//! more intervals than a mouse of the same Φ. A flow's outcome counts as soon as it is
//! known: an elephant's when it passes τ, a mouse's the first interval it is idle below τ
//! (not a window later, which would count the mice of the last δ intervals after the
//! elephants of the same time and overweigh the elephants while traffic grows), revised
//! to an elephant's if it comes back and passes τ. A flow still under way counts too, at
//! the likelihood of the state and tenth of τ it has reached: counting only the outcomes
//! known would leave out the slow elephants while they are under way and underweigh the
//! elephants while a backlog grows. A PE flow's prior, [`PRIOR_FLOWS`] intervals' worth,
//! is Φ/τ (it grows with each active interval and reaches 1 at the transition).
//!
//! A mouse is weighted the same way, its prior the pooled likelihood of the mice (0 before
//! any flow is seen): a size this fabric's mice rarely have is weighed like its mice, not
//! as a mouse for sure (an all-to-all round's first interval, where every flow is young
//! and small, after rounds of 12 MB flows). Within ms intervals a young elephant
//! (active fewer than δ intervals, Φ < τ) is a mouse by its state, and in a congested
//! fabric, where flows take many intervals to pass τ, those young elephants are a good part
//! of the elephants: counting every mouse as a mouse underestimates the elephant share (by
//! 2.4 points on FB_Hadoop at λ_MI = 1 ms in docs/paraleon-eval as of 0f45d66, before these
//! weights; docs/history.md). The states stay the paper's
//! (they drive nothing else); only the distribution's weights are learnt.
//!
//! A heavy part shared by more flows than it has buckets loses some of them each interval
//! (PARALEON reads the heavy part only, §IV-A). Two of Elastic Sketch's own answers keep
//! the distribution whole ([`TorMonitor::update_sketch`]): a remembered flow whose bucket
//! another flow holds is looked up in the light part (its packets went there: it lost the
//! vote, or was evicted), so a collision does not read as the flow going idle — which
//! would reset its streak and count it as a mouse; and the flows that reached the sketch
//! are counted by linear counting over the heavy part's empty buckets, the ones neither
//! held nor remembered (new this interval, they lost their bucket to a flow that came
//! first) counted as young mice at the mice rows' likelihood. FB_Hadoop at 30 % load over
//! 100 ms, λ_MI = 0.5 / 1 / 2 / 5 ms: FSD accuracy 0.989 / 0.995 / 0.990 / 0.982 before,
//! the heavy part alone (at 5 ms a quarter of the active flows were in no readout: the
//! mice, so the elephants' share was overestimated by up to 3 points; at 0.5 ms a
//! collided elephant read as idle, underestimated by up to 3), 0.991 / 0.993 / 0.993 /
//! 0.991 after (docs/history.md).
//!
//! [`Fsd`] is the distribution: flows (weighted) per size bin (log₂ bins of Φ from 1 KB),
//! elephants and mice. The switches insert each packet into one sketch only (the
//! insert-once mark, Keypoint 1), so a flow is in exactly one ToR's monitor and the
//! network-wide distribution is the plain sum of the local ones ([`Fsd::add`]).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use serde::Serialize;

/// A flow's identity in the sketch (the data plane's fingerprint, or a 5-tuple hash).
pub type FlowId = u64;

/// Size bins: bin 0 is Φ < 1 KB, bin k (1 ≤ k < [`BINS`] − 1) is 2^(k−1) KB ≤ Φ < 2^k KB,
/// the last bin everything from 2^(BINS−2) KB (16 MB) up.
pub const BINS: usize = 16;

/// The bin of `bytes`.
pub fn bin_of(bytes: u64) -> usize {
    let kb = bytes / 1_000;
    if kb == 0 {
        return 0;
    }
    ((64 - kb.leading_zeros()) as usize).min(BINS - 1)
}

/// Settings of the monitor (PARALEON Table III).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MonitorConfig {
    /// τ: the elephant threshold, bytes (1 MB).
    pub tau_bytes: u64,
    /// δ: the window, intervals (3).
    pub window: u32,
    /// Flows a ToR remembers at most: beyond, the one idle longest is forgotten first
    /// (a sketch readout cannot make the monitor grow without bound).
    pub max_flows: usize,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            tau_bytes: 1_000_000,
            window: 3,
            max_flows: 1 << 16,
        }
    }
}

/// The ternary state of a flow (Fig. 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FlowState {
    /// Φ < τ, active for fewer than δ intervals in a row.
    Mice,
    /// Φ < τ, active in each of the last δ intervals.
    PotentialElephant,
    /// Φ ≥ τ.
    Elephant,
}

#[derive(Clone, Copy, Debug)]
struct FlowRecord {
    total: u64,
    streak: u32,
    idle: u32,
    state: FlowState,
    /// The interval it was last in a readout, and its bytes there.
    seen: u64,
    bytes: u64,
    /// Intervals it spent in each [`Likelihood`] bucket as a mouse and as a PE flow whose
    /// outcome is not yet counted (all zero once counted).
    as_mice: [u16; LIKELIHOOD_BUCKETS],
    as_pe: [u16; LIKELIHOOD_BUCKETS],
    /// Intervals counted as a mouse's outcome when it first went idle below τ: they turn
    /// to an elephant's if it comes back and passes τ.
    ended_mice: [u16; LIKELIHOOD_BUCKETS],
    ended_pe: [u16; LIKELIHOOD_BUCKETS],
    /// Some of `as_mice`/`as_pe` is not zero (not to scan them every interval).
    unresolved: bool,
    /// Some of `ended_mice`/`ended_pe` is not zero.
    ended_below_tau: bool,
    /// The [`Likelihood`] row it is in now (its pending intervals are counted there).
    row: u8,
}

/// Intervals of prior in each row of the learnt likelihood (weight Φ/τ for a PE flow, the
/// mice rows' pooled likelihood for a mouse: [`Likelihood::weight`]).
pub const PRIOR_FLOWS: f64 = 8.0;

/// Intervals counted per bucket at most: beyond, the bucket's counts are halved, so the
/// likelihood follows a fabric whose traffic changes.
const LIKELIHOOD_MEMORY: f64 = 4_096.0;

/// Buckets of the learnt likelihood: tenths of τ.
pub const LIKELIHOOD_BUCKETS: usize = 10;

/// Outcomes of one state's intervals per tenth of τ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Outcomes {
    /// Intervals whose flow went on to pass τ.
    pub elephant: [f64; LIKELIHOOD_BUCKETS],
    /// Intervals whose flow's outcome is known (passed τ, or forgotten below it).
    pub known: [f64; LIKELIHOOD_BUCKETS],
}

impl Outcomes {
    /// Counts `intervals` as an elephant's or a mouse's and zeroes them; a mouse's are
    /// kept in `ended` in case the flow comes back.
    fn record(
        &mut self,
        intervals: &mut [u16; LIKELIHOOD_BUCKETS],
        ended: &mut [u16; LIKELIHOOD_BUCKETS],
        elephant: bool,
    ) {
        for (b, n) in intervals.iter_mut().enumerate() {
            if *n == 0 {
                continue;
            }
            if self.known[b] >= LIKELIHOOD_MEMORY {
                self.known[b] /= 2.0;
                self.elephant[b] /= 2.0;
            }
            self.known[b] += f64::from(*n);
            if elephant {
                self.elephant[b] += f64::from(*n);
            } else {
                ended[b] = ended[b].saturating_add(*n);
            }
            *n = 0;
        }
    }

    /// A flow counted as a mouse's came back and passed τ: its `ended` intervals were an
    /// elephant's (within what the halved counts still hold).
    fn revise(&mut self, ended: &mut [u16; LIKELIHOOD_BUCKETS]) {
        for (b, n) in ended.iter_mut().enumerate() {
            self.elephant[b] = (self.elephant[b] + f64::from(*n)).min(self.known[b]);
            *n = 0;
        }
    }
}

/// Rows of the likelihood: a state below τ (M, then PE) and a tenth of τ.
const ROWS: usize = 2 * LIKELIHOOD_BUCKETS;

/// The row of `state` (M or PE) at bucket `b`.
fn row_of(state: FlowState, b: usize) -> usize {
    match state {
        FlowState::PotentialElephant => LIKELIHOOD_BUCKETS + b,
        _ => b,
    }
}

/// The likelihood that a flow below τ becomes an elephant, learnt from the flows this
/// monitor has seen, per state and tenth of τ (a row).
///
/// A row's likelihood is the share of the intervals spent in it whose flow went on to pass
/// τ. Flows still under way are not left out: an interval of a flow whose outcome is not
/// known yet counts with the likelihood of the row the flow is in now (a survival
/// argument: it has reached that row, so its chances are that row's). Counting only the
/// outcomes already known would leave out the slow elephants while they are under way —
/// in a congested fabric the ones that take longest — and underweigh the elephants while
/// a backlog grows (FB_Hadoop at 30 % load: 0.45 against a true 0.76 after 400 ms). Φ
/// only grows, so a flow's row now is at or above the rows of its past intervals, and
/// one pass from the top row down solves the rows' mutual dependence.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Likelihood {
    /// Intervals flows spent as mice, by known outcome.
    pub mice: Outcomes,
    /// Intervals flows spent as potential elephants, by known outcome.
    pub potential_elephants: Outcomes,
    /// Intervals of flows whose outcome is not known yet: `[row spent in][row now]`.
    #[serde(skip)]
    pending: Box<[[f64; ROWS]; ROWS]>,
    /// Per row, the elephant intervals and the intervals (known, and pending at the rows'
    /// likelihoods), as of the last [`Likelihood::refresh`].
    #[serde(skip)]
    expected: [(f64, f64); ROWS],
    /// The mice rows' pooled likelihood (the prior of a mouse row with few intervals).
    #[serde(skip)]
    mice_prior: f64,
}

impl Default for Likelihood {
    fn default() -> Self {
        Likelihood {
            mice: Outcomes::default(),
            potential_elephants: Outcomes::default(),
            pending: Box::new([[0.0; ROWS]; ROWS]),
            expected: [(0.0, 0.0); ROWS],
            mice_prior: 0.0,
        }
    }
}

impl Likelihood {
    /// The bucket of Φ = `total` (below τ).
    fn bucket(total: u64, tau: u64) -> usize {
        ((total as f64 / tau.max(1) as f64 * LIKELIHOOD_BUCKETS as f64) as usize)
            .min(LIKELIHOOD_BUCKETS - 1)
    }

    /// The elephant weight of a flow in `state` below τ with Φ = `total`, as of the last
    /// refresh. A row's prior, [`PRIOR_FLOWS`] intervals' worth: for a PE flow Φ/τ (it
    /// grows with each active interval and reaches 1 at the transition); for a mouse, the
    /// mice rows' pooled likelihood (0 before any), so that a size seen rarely as a mouse
    /// is weighed like the mice this fabric has, not as a mouse for sure.
    pub fn weight(&self, state: FlowState, total: u64, tau: u64) -> f64 {
        if state == FlowState::Elephant {
            return 1.0;
        }
        let row = row_of(state, Self::bucket(total, tau));
        let prior = if state == FlowState::PotentialElephant {
            (total as f64 / tau.max(1) as f64).clamp(0.0, 1.0)
        } else {
            self.mice_prior
        };
        let (e, n) = self.expected[row];
        (e + PRIOR_FLOWS * prior) / (n + PRIOR_FLOWS)
    }

    /// Recomputes the rows' likelihoods from the known outcomes and the pending intervals
    /// (before an interval's flows are weighed).
    fn refresh(&mut self) {
        let mut w = [0.0; ROWS];
        let (mut pooled_e, mut pooled_n) = (0.0, 0.0);
        // PE rows from the top, then the mice rows from the top: a pending interval's row
        // now is its own or one solved before it.
        for row in (0..ROWS).rev() {
            let b = row % LIKELIHOOD_BUCKETS;
            let (outcomes, prior) = if row >= LIKELIHOOD_BUCKETS {
                (
                    &self.potential_elephants,
                    (b as f64 + 0.5) / LIKELIHOOD_BUCKETS as f64,
                )
            } else {
                (&self.mice, self.mice_prior)
            };
            let (mut e, mut n) = (outcomes.elephant[b], outcomes.known[b]);
            let mut own = 0.0;
            for (now, p) in self.pending[row].iter().enumerate() {
                if *p <= 0.0 {
                    continue;
                }
                if now == row {
                    own = *p;
                } else {
                    e += p * w[now];
                }
                n += p;
            }
            // This row's own pending intervals count at its own likelihood: w (n + prior)
            // = e + own·w + prior·w₀, solved for w.
            w[row] = (e + PRIOR_FLOWS * prior) / (n - own + PRIOR_FLOWS);
            self.expected[row] = (e + own * w[row], n);
            if row < LIKELIHOOD_BUCKETS {
                pooled_e += e + own * w[row];
                pooled_n += n;
            }
        }
        self.mice_prior = if pooled_n > 0.0 {
            pooled_e / pooled_n
        } else {
            0.0
        };
    }

    /// `r` spent this interval in `row`: its pending intervals move to that row.
    fn spend(&mut self, r: &mut FlowRecord, row: usize) {
        if r.unresolved && usize::from(r.row) != row {
            let from = usize::from(r.row);
            // Φ only grows: its past intervals are at or below the bucket it was in.
            for b in 0..=from % LIKELIHOOD_BUCKETS {
                for (spent, n) in [(b, r.as_mice[b]), (LIKELIHOOD_BUCKETS + b, r.as_pe[b])] {
                    if n > 0 {
                        self.pending[spent][from] -= f64::from(n);
                        self.pending[spent][row] += f64::from(n);
                    }
                }
            }
        }
        r.row = row as u8;
        let b = row % LIKELIHOOD_BUCKETS;
        let n = if row >= LIKELIHOOD_BUCKETS {
            &mut r.as_pe[b]
        } else {
            &mut r.as_mice[b]
        };
        *n = n.saturating_add(1);
        self.pending[row][row] += 1.0;
        r.unresolved = true;
    }

    /// `r`'s pending intervals leave the pending table (resolved or forgotten).
    fn unpend(&mut self, r: &FlowRecord) {
        if !r.unresolved {
            return;
        }
        let now = usize::from(r.row);
        for b in 0..=now % LIKELIHOOD_BUCKETS {
            self.pending[b][now] -= f64::from(r.as_mice[b]);
            self.pending[LIKELIHOOD_BUCKETS + b][now] -= f64::from(r.as_pe[b]);
        }
    }

    fn record(&mut self, r: &mut FlowRecord, elephant: bool) {
        self.unpend(r);
        self.mice
            .record(&mut r.as_mice, &mut r.ended_mice, elephant);
        self.potential_elephants
            .record(&mut r.as_pe, &mut r.ended_pe, elephant);
        if elephant {
            self.mice.revise(&mut r.ended_mice);
            self.potential_elephants.revise(&mut r.ended_pe);
            r.ended_below_tau = false;
        } else if r.unresolved {
            r.ended_below_tau = true;
        }
        r.unresolved = false;
    }
}

/// A hasher for flow ids (sketch fingerprints): one multiply-xorshift of the 64-bit id
/// (SipHash's DoS resistance is not needed: a monitor holds at most `max_flows`, and a
/// readout is one heavy part).
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowIdHasher(u64);

impl Hasher for FlowIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01B3);
        }
    }

    fn write_u64(&mut self, id: u64) {
        // SplitMix64's finaliser.
        let mut z = id ^ self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.0 = z ^ (z >> 31);
    }
}

type FlowMap<V> = HashMap<FlowId, V, BuildHasherDefault<FlowIdHasher>>;

/// A flow-size distribution: weighted flow counts per size bin, and the weighted elephant
/// and mouse counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Fsd {
    /// Flows per size bin ([`bin_of`]); a flow's elephant weight below τ sits in τ's bin.
    pub bins: [f64; BINS],
    /// Elephants (flows below τ by their weight).
    pub elephants: f64,
    /// Mice (flows below τ by the rest of their weight).
    pub mice: f64,
    /// Elephant flows proper (Φ ≥ τ).
    pub elephant_flows: u32,
    /// Potential elephants.
    pub potential_elephants: u32,
}

/// Which flows dominate (PARALEON §III-C: the direction the knobs are driven in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Dominant {
    /// Elephants: throughput-friendly.
    Elephants,
    /// Mice: delay-friendly.
    Mice,
}

impl Fsd {
    /// Flows in the distribution (weighted).
    pub fn flows(&self) -> f64 {
        self.elephants + self.mice
    }

    /// Adds another distribution (the network-wide FSD is the sum of the ToRs').
    pub fn add(&mut self, other: &Fsd) {
        for (a, b) in self.bins.iter_mut().zip(other.bins.iter()) {
            *a += b;
        }
        self.elephants += other.elephants;
        self.mice += other.mice;
        self.elephant_flows += other.elephant_flows;
        self.potential_elephants += other.potential_elephants;
    }

    /// The sum of `parts`.
    pub fn sum<'a>(parts: impl IntoIterator<Item = &'a Fsd>) -> Fsd {
        let mut total = Fsd::default();
        for part in parts {
            total.add(part);
        }
        total
    }

    /// The elephants' share of the flows (0 when there are none).
    pub fn elephant_share(&self) -> f64 {
        let flows = self.flows();
        if flows > 0.0 {
            self.elephants / flows
        } else {
            0.0
        }
    }

    /// The dominant flow type and its proportion μ (≥ 0.5), PARALEON Alg. 1 l.14. With no
    /// flows, mice at 0.5 (nothing to favour).
    pub fn dominant(&self) -> (Dominant, f64) {
        let e = self.elephant_share();
        if self.flows() > 0.0 && e >= 0.5 {
            (Dominant::Elephants, e)
        } else {
            (
                Dominant::Mice,
                if self.flows() > 0.0 { 1.0 - e } else { 0.5 },
            )
        }
    }

    /// Counts one flow of `bytes` in `state`: an elephant whole, any other split by its
    /// elephant weight `w` (0–1; the elephant part sits in τ's bin).
    fn count(&mut self, bytes: u64, state: FlowState, tau: u64, w: f64) {
        if state == FlowState::Elephant {
            self.bins[bin_of(bytes)] += 1.0;
            self.elephants += 1.0;
            self.elephant_flows += 1;
            return;
        }
        if state == FlowState::PotentialElephant {
            self.potential_elephants += 1;
        }
        self.count_below_tau(bytes, tau, w, 1.0);
    }

    /// Counts `n` flows of `bytes` below τ, each split by its elephant weight `w`.
    fn count_below_tau(&mut self, bytes: u64, tau: u64, w: f64, n: f64) {
        let w = w.clamp(0.0, 1.0);
        if w > 0.0 {
            self.bins[bin_of(tau)] += w * n;
        }
        self.bins[bin_of(bytes)] += (1.0 - w) * n;
        self.elephants += w * n;
        self.mice += (1.0 - w) * n;
    }
}

/// KL(p ‖ q) over the size bins, each smoothed by `epsilon` flows so that an empty bin on
/// one side is finite (PARALEON §III-A: tuning is triggered when KL(R_t, R_{t−1}) > θ).
/// Both empty: 0.
pub fn kl_divergence(p: &Fsd, q: &Fsd, epsilon: f64) -> f64 {
    let (sp, sq): (f64, f64) = (p.bins.iter().sum(), q.bins.iter().sum());
    if sp <= 0.0 && sq <= 0.0 {
        return 0.0;
    }
    let n = BINS as f64;
    let (np, nq) = (sp + epsilon * n, sq + epsilon * n);
    p.bins
        .iter()
        .zip(q.bins.iter())
        .map(|(a, b)| {
            let pa = (a + epsilon) / np;
            let qb = (b + epsilon) / nq;
            pa * (pa / qb).ln()
        })
        .sum::<f64>()
        .max(0.0)
}

/// One ToR's monitor: the sliding window over its sketch readouts.
#[derive(Clone, Debug)]
pub struct TorMonitor {
    config: MonitorConfig,
    flows: FlowMap<FlowRecord>,
    forgotten: u64,
    interval: u64,
    likelihood: Likelihood,
}

impl TorMonitor {
    /// An empty monitor.
    pub fn new(config: MonitorConfig) -> Self {
        TorMonitor {
            config,
            flows: FlowMap::default(),
            forgotten: 0,
            interval: 0,
            likelihood: Likelihood::default(),
        }
    }

    /// What the flows that ended below and above τ say (the weights' source).
    pub fn likelihood(&self) -> &Likelihood {
        &self.likelihood
    }

    /// Flows remembered.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Flows forgotten over [`MonitorConfig::max_flows`].
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    /// The flows remembered (seen within the window): the control plane asks the sketch
    /// for those the heavy part no longer holds (a flow that lost its bucket to another
    /// still sends, into the light part: `dataplane::sketch::displaced`), so a collision
    /// does not read as the flow going idle.
    pub fn remembered(&self) -> impl Iterator<Item = FlowId> + '_ {
        self.flows.keys().copied()
    }

    /// The state of `flow`, if it is remembered.
    pub fn state(&self, flow: FlowId) -> Option<FlowState> {
        self.flows.get(&flow).map(|r| r.state)
    }

    /// One monitor interval: the bytes each flow sent in it (a flow twice is summed; one
    /// not given sent nothing). Returns this ToR's distribution of the active flows.
    pub fn update(&mut self, readout: impl IntoIterator<Item = (FlowId, u64)>) -> Fsd {
        self.interval += 1;
        let now = self.interval;
        // Pass 1: this interval's bytes per flow (a flow given twice is summed).
        for (flow, bytes) in readout {
            if bytes == 0 {
                continue;
            }
            if !self.flows.contains_key(&flow) && self.flows.len() >= self.config.max_flows {
                self.evict_one();
            }
            let r = self.flows.entry(flow).or_insert(FlowRecord {
                total: 0,
                streak: 0,
                idle: 0,
                state: FlowState::Mice,
                seen: 0,
                bytes: 0,
                as_mice: [0; LIKELIHOOD_BUCKETS],
                as_pe: [0; LIKELIHOOD_BUCKETS],
                ended_mice: [0; LIKELIHOOD_BUCKETS],
                ended_pe: [0; LIKELIHOOD_BUCKETS],
                unresolved: false,
                ended_below_tau: false,
                row: 0,
            });
            if r.seen != now {
                r.seen = now;
                r.bytes = 0;
            }
            r.bytes = r.bytes.saturating_add(bytes);
        }
        // Pass 2: states. Flows not in this readout are idle one more interval and are
        // forgotten after the window; the others are counted.
        let (tau, window) = (self.config.tau_bytes, self.config.window.max(1));
        let mut fsd = Fsd::default();
        // This interval's weights come from what was known before it.
        self.likelihood.refresh();
        let likelihood = &mut self.likelihood;
        self.flows.retain(|_, r| {
            if r.seen != now {
                r.streak = 0;
                r.idle += 1;
                if r.state == FlowState::PotentialElephant {
                    r.state = FlowState::Mice;
                }
                if r.unresolved {
                    // Idle below τ: its intervals as M and PE count as a mouse's now
                    // (revised if it comes back and passes τ).
                    likelihood.record(r, false);
                }
                return r.idle < window;
            }
            r.total = r.total.saturating_add(r.bytes);
            r.streak = r.streak.saturating_add(1);
            r.idle = 0;
            r.state = if r.total >= tau || r.state == FlowState::Elephant {
                FlowState::Elephant
            } else if r.streak >= window {
                FlowState::PotentialElephant
            } else {
                FlowState::Mice
            };
            if r.state == FlowState::Elephant {
                if r.unresolved || r.ended_below_tau {
                    likelihood.record(r, true);
                }
            } else {
                likelihood.spend(r, row_of(r.state, Likelihood::bucket(r.total, tau)));
            }
            let w = likelihood.weight(r.state, r.total, tau);
            fsd.count(r.total, r.state, tau, w);
            true
        });
        fsd
    }

    /// One monitor interval from a sketch that can count the flows it cannot name:
    /// [`TorMonitor::update`] over the flows named (the heavy part's and the remembered
    /// ones displaced from it), plus [`TorMonitor::unnamed`] for the rest of the `reached`
    /// distinct flows (linear counting), which sent what the named ones did not of
    /// `bytes` (the interval's bytes in all).
    pub fn update_sketch(
        &mut self,
        named: impl IntoIterator<Item = (FlowId, u64)>,
        reached: f64,
        bytes: u64,
    ) -> Fsd {
        let mut ids: usize = 0;
        let mut named_bytes: u64 = 0;
        let counted = named.into_iter().inspect(|(_, b)| {
            ids += 1;
            named_bytes = named_bytes.saturating_add(*b);
        });
        let mut fsd = self.update(counted);
        let unnamed = reached - ids as f64;
        if unnamed >= 1.0 {
            let each = bytes.saturating_sub(named_bytes) as f64 / unnamed;
            fsd.add(&self.unnamed(unnamed, each as u64));
        }
        fsd
    }

    /// The flows the sketch saw this interval but cannot name: they reached the heavy part
    /// (linear counting over its empty buckets, `dataplane::sketch::distinct_flows`, counts
    /// them) yet neither hold a bucket nor are remembered, so they are new this interval
    /// and lost their bucket's vote to a flow that came first. `flows` of them sent
    /// `bytes_each` on average; each counts as a mouse does at that Φ (the likelihood of
    /// the mice rows, as of this interval's [`TorMonitor::update`], which comes first).
    /// Without them a heavy part shared by many flows drops the young mice first and the
    /// distribution leans to the elephants (FB_Hadoop at 30 %, λ_MI = 5 ms: a quarter of
    /// the active flows unnamed).
    pub fn unnamed(&self, flows: f64, bytes_each: u64) -> Fsd {
        let mut fsd = Fsd::default();
        if flows > 0.0 && flows.is_finite() {
            let tau = self.config.tau_bytes;
            let w = self.likelihood.weight(FlowState::Mice, bytes_each, tau);
            fsd.count_below_tau(bytes_each, tau, w, flows);
        }
        fsd
    }

    /// Makes room: forgets an eighth of the flows at once (one sort, not a scan per new
    /// flow), those not in this readout and idle longest first, then the smallest.
    fn evict_one(&mut self) {
        let now = self.interval;
        let mut order: Vec<(bool, u32, std::cmp::Reverse<u64>, FlowId)> = self
            .flows
            .iter()
            .map(|(id, r)| (r.seen != now, r.idle, std::cmp::Reverse(r.total), *id))
            .collect();
        let count = (order.len() / 8).max(1);
        order.sort_unstable_by(|a, b| b.cmp(a));
        for (_, _, _, id) in order.into_iter().take(count) {
            // Intervals not yet resolved are dropped (their outcome is unknown); one idle
            // below τ was counted as a mouse's when it went idle.
            if let Some(r) = self.flows.remove(&id) {
                self.likelihood.unpend(&r);
            }
            self.forgotten += 1;
        }
    }
}

/// The distribution naive Elastic Sketch gives (PARALEON §IV-B3's baseline): each interval
/// on its own, a flow an elephant only if it sent τ within the interval.
pub fn naive_fsd(readout: impl IntoIterator<Item = (FlowId, u64)>, tau_bytes: u64) -> Fsd {
    let mut this: HashMap<FlowId, u64> = HashMap::new();
    for (flow, bytes) in readout {
        if bytes > 0 {
            *this.entry(flow).or_insert(0) += bytes;
        }
    }
    let mut fsd = Fsd::default();
    for bytes in this.values() {
        let state = if *bytes >= tau_bytes {
            FlowState::Elephant
        } else {
            FlowState::Mice
        };
        fsd.count(*bytes, state, tau_bytes, 0.0);
    }
    fsd
}

/// The distribution of flows whose true sizes are known (ground truth: the simulator's
/// flow sizes), classified by `tau_bytes`.
pub fn truth_fsd(sizes: impl IntoIterator<Item = u64>, tau_bytes: u64) -> Fsd {
    let mut fsd = Fsd::default();
    for bytes in sizes {
        let state = if bytes >= tau_bytes {
            FlowState::Elephant
        } else {
            FlowState::Mice
        };
        fsd.count(bytes, state, tau_bytes, 0.0);
    }
    fsd
}

/// How well `measured` tells elephants from mice against `truth`: 1 − |e_m − e_t| over the
/// elephant shares (1 is exact).
pub fn accuracy(measured: &Fsd, truth: &Fsd) -> f64 {
    1.0 - (measured.elephant_share() - truth.elephant_share()).abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KB: u64 = 1_000;

    /// The flows a crowded heavy part could not name (linear counting says how many
    /// reached it) count as mice at the mice rows' likelihood, in the bin of the bytes the
    /// named flows did not send; an estimate under the named count takes none away.
    #[test]
    fn flows_the_sketch_cannot_name_count_as_young_mice() {
        let mut m = TorMonitor::new(MonitorConfig::default());
        let fsd = m.update_sketch([(1, 2_000 * KB), (2, 10 * KB)], 10.0, 2_050 * KB);
        assert!((fsd.flows() - 10.0).abs() < 1e-9, "{fsd:?}");
        // No flow seen yet: a mouse's weight is 0, the one elephant is a tenth.
        assert!((fsd.elephant_share() - 0.1).abs() < 1e-9, "{fsd:?}");
        // 40 KB over 8 unnamed flows: 5 KB each, bin 3 (4–8 KB).
        assert!(
            (fsd.bins[bin_of(5 * KB)] - 8.0).abs() < 1e-9,
            "{:?}",
            fsd.bins
        );
        let fsd = m.update_sketch([(1, 2_000 * KB), (3, 10 * KB)], 1.2, 2_010 * KB);
        assert!((fsd.flows() - 2.0).abs() < 1e-9, "{fsd:?}");

        // Where mice go on to pass τ, the unnamed weigh what such mice became.
        for round in 0..40u64 {
            let id = 100 + round;
            for step in 1..=12u64 {
                let mut readout = vec![(id, 100 * KB)];
                if step == 1 {
                    readout.push((1_000 + round, 3 * KB));
                }
                m.update(readout);
            }
        }
        let w = m.likelihood().weight(FlowState::Mice, 5 * KB, 1_000 * KB);
        assert!(w > 0.1, "mice became elephants: weight {w}");
        let unnamed = m.unnamed(5.0, 5 * KB);
        assert!((unnamed.elephants - 5.0 * w).abs() < 1e-9, "{unnamed:?}");
        assert!((unnamed.flows() - 5.0).abs() < 1e-9);
    }

    /// PARALEON Fig. 4 (δ = 3, τ = 1 MB): f₁ an elephant at once; f₂ mice, then PE from
    /// the third interval, then E at the seventh when Φ passes 1 MB; f₃ PE and then gone.
    #[test]
    fn the_papers_figure_4_walks_through_the_ternary_states() {
        let mut m = TorMonitor::new(MonitorConfig::default());
        let f2 = [25, 28, 33, 100, 216, 221, 423, 530];
        let f3 = [27, 19, 13, 12, 12, 6, 4];
        let f1 = [1_200, 2_500, 1_100];
        let mut states = Vec::new();
        for (i, b2) in f2.iter().enumerate() {
            let mut readout = vec![(2, b2 * KB)];
            if let Some(b) = f3.get(i) {
                readout.push((3, b * KB));
            }
            if let Some(b) = f1.get(i) {
                readout.push((1, b * KB));
            }
            m.update(readout);
            states.push((m.state(1), m.state(2), m.state(3)));
        }
        use FlowState::*;
        let f2_states: Vec<_> = states.iter().map(|s| s.1).collect();
        assert_eq!(
            f2_states,
            [
                Some(Mice),
                Some(Mice),
                Some(PotentialElephant),
                Some(PotentialElephant),
                Some(PotentialElephant),
                Some(PotentialElephant),
                Some(Elephant),
                Some(Elephant)
            ]
        );
        assert_eq!(states[0].0, Some(Elephant));
        assert_eq!(states[2].2, Some(PotentialElephant));
        // f₃ sent nothing at MI₈: not active, no longer a potential elephant.
        assert_eq!(states[7].2, Some(Mice));
        // f₁ idle from MI₄: forgotten once the window passed.
        assert_eq!(states[5].0, None);
    }

    /// With no flow ended yet, a potential elephant counts as an elephant by Φ/τ (its
    /// prior); the network-wide FSD is the sum.
    #[test]
    fn a_potential_elephant_is_weighted_and_distributions_add_up() {
        let mut a = TorMonitor::new(MonitorConfig::default());
        let mut fsd = Fsd::default();
        for _ in 0..3 {
            fsd = a.update([(7, 100 * KB), (8, 5 * KB)]);
        }
        // Flow 7: Φ = 300 KB, PE with weight 0.3; flow 8: Φ = 15 KB, PE with 0.015.
        assert_eq!(fsd.potential_elephants, 2);
        assert!((fsd.elephants - 0.315).abs() < 1e-9, "{fsd:?}");
        assert!((fsd.flows() - 2.0).abs() < 1e-9);
        let mut b = TorMonitor::new(MonitorConfig::default());
        let other = b.update([(9, 2_000 * KB)]);
        let total = Fsd::sum([&fsd, &other]);
        assert_eq!(total.elephant_flows, 1);
        assert!((total.flows() - 3.0).abs() < 1e-9);
        assert_eq!(total.dominant().0, Dominant::Mice);
        assert!((total.bins.iter().sum::<f64>() - 3.0).abs() < 1e-9);
    }

    /// The weights follow what this fabric's flows turned into: where flows that persist
    /// go on to pass τ, a PE flow at Φ = 300 KB and a young one at 100 KB weigh nearly 1;
    /// where they finish below it, nearly 0; with no flow ended yet, Φ/τ and 0.
    #[test]
    fn flows_below_tau_weigh_what_such_flows_became() {
        // 40 flows, 4 at a time, each 100 KB per interval for `active` intervals.
        let run = |m: &mut TorMonitor, active: u64| {
            for batch in 0..10u64 {
                for _ in 0..active {
                    m.update((0..4).map(|i| (batch * 4 + i + 1, 100 * KB)));
                }
                // Idle until they are forgotten.
                for _ in 0..3 {
                    m.update([]);
                }
            }
        };
        // A new flow at 100 KB per interval: its share as a mouse (Φ = 100 KB) and as a PE
        // flow (Φ = 300 KB).
        let probe = |m: &mut TorMonitor| {
            let young = m.update([(999, 100 * KB)]);
            m.update([(999, 100 * KB)]);
            let pe = m.update([(999, 100 * KB)]);
            assert_eq!((young.potential_elephants, pe.potential_elephants), (0, 1));
            (young.elephants, pe.elephants)
        };
        let mut fresh = TorMonitor::new(MonitorConfig::default());
        let (young, pe) = probe(&mut fresh);
        assert_eq!(young, 0.0);
        assert!((pe - 0.3).abs() < 1e-9);
        // 12 intervals × 100 KB: every flow passes τ (as a mouse at 100 and 200 KB, PE from
        // 300 to 900 KB).
        let mut elephants = TorMonitor::new(MonitorConfig::default());
        run(&mut elephants, 12);
        let l = elephants.likelihood();
        assert_eq!((l.mice.known[1], l.mice.elephant[1]), (40.0, 40.0));
        assert_eq!(l.potential_elephants.known[3], 40.0);
        assert_eq!(l.potential_elephants.elephant[9], 40.0);
        let (young, pe) = probe(&mut elephants);
        assert!(young > 0.8 && pe > 0.85, "{young} {pe}");
        // 6 intervals × 100 KB: every flow finishes at 600 KB.
        let mut mice = TorMonitor::new(MonitorConfig::default());
        run(&mut mice, 6);
        let l = mice.likelihood();
        assert_eq!(
            (
                l.potential_elephants.known[3],
                l.potential_elephants.elephant[3]
            ),
            (40.0, 0.0)
        );
        let (young, pe) = probe(&mut mice);
        assert!(young == 0.0 && pe < 0.06, "{young} {pe}");
    }

    /// A flow below τ counts as a mouse's outcome the interval it goes idle, not a window
    /// later (so mice are not counted after the elephants of the same time), and as an
    /// elephant's once it comes back and passes τ.
    #[test]
    fn a_flow_gone_idle_counts_as_a_mouse_at_once_and_is_revised_if_it_returns() {
        let mut m = TorMonitor::new(MonitorConfig::default());
        m.update([(7, 150 * KB)]);
        assert_eq!(m.likelihood().mice.known[1], 0.0);
        // One idle interval: counted, though it is still remembered.
        m.update([]);
        assert_eq!(m.state(7), Some(FlowState::Mice));
        let l = m.likelihood();
        assert_eq!((l.mice.known[1], l.mice.elephant[1]), (1.0, 0.0));
        // It comes back and passes τ: the interval it spent as a mouse was an elephant's.
        m.update([(7, 900 * KB)]);
        let l = m.likelihood();
        assert_eq!((l.mice.known[1], l.mice.elephant[1]), (1.0, 1.0));
        assert_eq!(m.state(7), Some(FlowState::Elephant));
        // Counted once: more intervals as an elephant change nothing.
        m.update([(7, 100 * KB)]);
        m.update([]);
        assert_eq!(m.likelihood().mice.known[1], 1.0);
    }

    /// Flows still under way count at the likelihood of the row they have reached: 40
    /// flows at 500 KB (PE, outcome unknown) make a young flow at 100 KB more likely an
    /// elephant than the outcomes known alone say; once they go idle below τ, less.
    #[test]
    fn flows_under_way_count_at_the_likelihood_of_where_they_are() {
        let known = |m: &mut TorMonitor| {
            // 20 flows pass τ at 100 KB per interval, then 10 end at 100 KB.
            for f in 0..20u64 {
                for _ in 0..11 {
                    m.update([(1_000 + f, 100 * KB)]);
                }
                for _ in 0..3 {
                    m.update([]);
                }
            }
            m.update((0..10u64).map(|f| (2_000 + f, 100 * KB)));
            for _ in 0..3 {
                m.update([]);
            }
        };
        let young = |m: &mut TorMonitor| {
            let fsd = m.update([(9_999, 100 * KB)]);
            assert_eq!(fsd.flows(), 1.0);
            fsd.elephants
        };
        let mut alone = TorMonitor::new(MonitorConfig::default());
        known(&mut alone);
        let mut under_way = TorMonitor::new(MonitorConfig::default());
        known(&mut under_way);
        for _ in 0..5 {
            alone.update([]);
            under_way.update((0..40u64).map(|f| (3_000 + f, 100 * KB)));
        }
        let (a, u) = (young(&mut alone.clone()), young(&mut under_way.clone()));
        // Known alone: 20 elephant intervals of 30 at 100 KB as a mouse, and 8 of prior at
        // the mice's pooled share (40 of 50): ~0.7. Under way: 40 more at the likelihood of
        // PE at 500 KB (20 elephants known there): ~0.8.
        assert!((0.6..0.75).contains(&a), "{a}");
        assert!(u > a + 0.07, "{u} vs {a}");
        // The 40 end below τ: their 40 intervals at 100 KB were a mouse's.
        under_way.update([]);
        let ended = young(&mut under_way);
        assert!(ended < a - 0.1, "{ended} vs {a}");
        assert_eq!(under_way.likelihood().mice.known[1], 70.0);
    }

    /// A mouse at a size this fabric's mice never had weighs like its mice: after rounds
    /// of flows that all passed τ at 400 KB an interval, the next round's first interval
    /// (every flow young, at 20 KB) is elephants, not mice.
    #[test]
    fn a_mouse_at_a_size_never_seen_weighs_like_this_fabrics_mice() {
        let mut m = TorMonitor::new(MonitorConfig::default());
        for round in 0..3u64 {
            for _ in 0..4 {
                m.update((0..20u64).map(|f| (round * 100 + f, 400 * KB)));
            }
            for _ in 0..3 {
                m.update([]);
            }
        }
        assert_eq!(m.likelihood().mice.known[0], 0.0);
        let first = m.update((0..20u64).map(|f| (1_000 + f, 20 * KB)));
        assert!(first.elephant_share() > 0.6, "{first:?}");
        // Where the mice were mice, a new size counts as a mouse.
        let mut mice = TorMonitor::new(MonitorConfig::default());
        for round in 0..3u64 {
            mice.update((0..20u64).map(|f| (round * 100 + f, 400 * KB)));
            for _ in 0..3 {
                mice.update([]);
            }
        }
        let first = mice.update((0..20u64).map(|f| (1_000 + f, 20 * KB)));
        assert!(first.elephant_share() < 0.1, "{first:?}");
    }

    /// Within 1-ms intervals a congested elephant sends far below τ per interval: naive
    /// Elastic Sketch calls it a mouse for ever; the window sees it become one.
    #[test]
    fn the_window_finds_elephants_naive_elastic_sketch_misses() {
        let mut m = TorMonitor::new(MonitorConfig::default());
        let mut last = Fsd::default();
        let mut naive = Fsd::default();
        for _ in 0..12 {
            let readout = [(1, 120 * KB), (2, 90 * KB)];
            last = m.update(readout);
            naive = naive_fsd(readout, 1_000_000);
        }
        let truth = truth_fsd([5_000_000, 4_000_000], 1_000_000);
        assert_eq!(naive.elephant_share(), 0.0);
        assert_eq!(last.elephant_share(), 1.0);
        assert_eq!(accuracy(&last, &truth), 1.0);
        assert_eq!(accuracy(&naive, &truth), 0.0);
    }

    #[test]
    fn kl_divergence_is_zero_for_equal_shapes_and_grows_with_change() {
        let a = truth_fsd([10 * KB, 20 * KB, 2_000 * KB], 1_000_000);
        let doubled = truth_fsd(
            [10 * KB, 10 * KB, 20 * KB, 20 * KB, 2_000 * KB, 2_000 * KB],
            1_000_000,
        );
        assert!(kl_divergence(&a, &doubled, 1e-3) < 1e-3);
        let shifted = truth_fsd([5_000 * KB, 6_000 * KB, 7_000 * KB], 1_000_000);
        assert!(kl_divergence(&shifted, &a, 1e-3) > 1.0);
        assert_eq!(kl_divergence(&Fsd::default(), &Fsd::default(), 1e-3), 0.0);
        assert!(kl_divergence(&a, &Fsd::default(), 1e-3).is_finite());
    }

    /// A flood of distinct flows keeps the monitor at its bound, forgetting idle ones first.
    #[test]
    fn the_monitor_stays_bounded() {
        let mut m = TorMonitor::new(MonitorConfig {
            max_flows: 100,
            ..MonitorConfig::default()
        });
        m.update([(1, 2_000_000)]);
        for round in 0..10u64 {
            m.update((0..1_000u64).map(|i| (1_000 + round * 1_000 + i, 1_000)));
            assert!(m.flows() <= 100);
        }
        assert!(m.forgotten() >= 9_900);
        assert_eq!(bin_of(999), 0);
        assert_eq!(bin_of(1_000), 1);
        assert_eq!(bin_of(1_000_000), 10);
        assert_eq!(bin_of(u64::MAX), BINS - 1);
    }
}
