//! Queue replay and flow contribution (HAWKEYE Alg. 1 `ReplayQueue` l.21-27 and
//! `Contribution` l.28-37).
//!
//! # What the paper says and how we read it
//!
//! * Alg. 1 l.22-25 rebuilds a port's enqueue sequence from per-flow packet counts: packet `j`
//!   of flow `f` is placed at `j · T / pkt_num(f)`, i.e. each flow is spread evenly over the
//!   epoch `T`. Our flow records also carry each flow's first and last enqueue offset in the
//!   epoch, so we spread the flow evenly over *that* window instead (the paper's rule is the
//!   special case window = epoch, and is what we fall back to when a record has no timing).
//!   Without the window a micro-burst and a long flow look alike, which §4.2 names as the
//!   main source of imprecision ("as the epoch increases, the accuracy of flow contention
//!   identification decreases").
//! * Alg. 1 l.31 counts, for each packet, the packets "in qdepth(pkt)": those queued ahead
//!   of it at enqueue. We obtain them by draining the replayed arrivals through a FIFO at the
//!   port's line rate (taken from the topology): the queue at any time holds the most recent
//!   arrivals not yet served. Time is cut into bins and arrivals are fluid within a bin;
//!   pairs within one bin are ignored (they wait for each other symmetrically).
//! * Paused packets are left out of the replay (§3.5.1: "the port-flow edge construction
//!   excludes the paused packets in queues"): they queue because of PFC, not contention.
//! * Weights: Alg. 1 l.32 counts `W[f_i][f_j]`, the packets of `f_j` ahead of each packet
//!   of `f_i`; l.34 then divides by `f_i`'s packet count before l.36 sums over flows. That
//!   normalisation makes the sum count *flows* rather than packets: one small flow waiting
//!   behind a long flow weighs as much as the long flow's hundreds of packets waiting behind
//!   micro-bursts, and a long flow blocked by bursts comes out as a contributor — the very
//!   case §3.5.1 (citing PrintQueue) says must be a victim. We therefore keep the counts
//!   `W` as they are (packet-waits) and compute, for each flow, `Σ_i W[f_i][f_j] −
//!   Σ_k W[f_j][f_k]`: the queueing its packets imposed on others minus the queueing they
//!   suffered. Self pairs cancel, the weights sum to zero over the port, and the sign
//!   follows the text of §3.5.1 (positive = contributor). Alg. 1 l.36 as typeset swaps the
//!   indices (`Σ w(f_i, f_j) − Σ w(f_j, f_i)` for `Contrb[f_i]`); we follow the text.
//! * Contention among equals (identical incast bursts and nothing else) is zero-sum for
//!   every flow, although the queue is real. When no flow is a net contributor, each flow is
//!   weighted by its share of the arrivals above line rate that grew the queue
//!   ([`ReplayMode::TimedGrowth`]).
//!
//! With bins `k`, arrivals `a_j(k)`, total `A_k`, queue `q_k` at the start of bin `k` and
//! `φ_m(k)` the fraction of bin `m`'s arrivals still queued at bin `k`, the contribution is
//! `Σ_k a_j(k) (Ψ_k − q_k)` with `Ψ_m = Σ_{k>m} φ_m(k) A_k` (the arrivals that found bin
//! `m`'s packets ahead). The cost is linear in flows × bins plus bins × queue length,
//! never in packets.
//!
//! When some flow at the port has no timing, the replay degenerates to the paper's even
//! spreading over the epoch; with a FIFO at line rate that shows no queue at all, so for
//! that case we use the paper's own `qdepth(pkt)`: each flow's packets see a queue of the
//! flow's observed mean depth, filled in proportion to the flows' packet counts, giving
//! `w(f_i, f_j) = K_i n_j / N` and a contribution `n_j ΣK / N − K_j`.

/// One flow at the replayed port in one epoch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplayFlow {
    /// Non-paused packets of the flow.
    pub packets: f64,
    /// First and last enqueue offset in the epoch (ns), when known.
    pub window: Option<(u32, u32)>,
    /// Mean queue depth its non-paused packets saw, in packets (used only without timing).
    pub mean_depth_packets: f64,
}

/// How the contributions were obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayMode {
    /// Arrivals replayed over each flow's enqueue window through a FIFO at line rate.
    Timed,
    /// As `Timed`, but the flows were equals (no net exchange), so each is weighted by its
    /// share of the arrivals above line rate that grew the queue.
    TimedGrowth,
    /// No timing for some flow: the paper's even spreading with observed per-flow depths.
    Untimed,
}

/// Result of one replay.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayResult {
    /// The method used.
    pub mode: ReplayMode,
    /// Contribution of each input flow (same order): positive = contributor.
    pub contributions: Vec<f64>,
    /// Whether any replayed packet met a queue.
    pub queue_built: bool,
}

/// Replays one port-epoch. `service_packets_per_ns` is the port's line rate in packets per
/// ns; `bins` the time resolution (at least 1).
pub fn replay(
    flows: &[ReplayFlow],
    epoch_ns: u64,
    service_packets_per_ns: f64,
    bins: usize,
) -> ReplayResult {
    let timed = flows.iter().all(|f| f.window.is_some() || f.packets <= 0.0);
    if timed && service_packets_per_ns > 0.0 && epoch_ns > 0 {
        replay_timed(flows, epoch_ns, service_packets_per_ns, bins.max(1))
    } else {
        replay_untimed(flows)
    }
}

fn replay_untimed(flows: &[ReplayFlow]) -> ReplayResult {
    let total: f64 = flows.iter().map(|f| f.packets.max(0.0)).sum();
    let depth_sum: f64 = flows
        .iter()
        .filter(|f| f.packets > 0.0)
        .map(|f| f.mean_depth_packets.max(0.0))
        .sum();
    let contributions = flows
        .iter()
        .map(|f| {
            if f.packets <= 0.0 || total <= 0.0 {
                0.0
            } else {
                f.packets * depth_sum / total - f.mean_depth_packets.max(0.0)
            }
        })
        .collect();
    ReplayResult {
        mode: ReplayMode::Untimed,
        contributions,
        queue_built: depth_sum > 0.0,
    }
}

/// One flow spread evenly over its enqueue window (HAWKEYE Alg. 1 l.24 with the window in
/// place of the epoch): a partial first bin, full bins of `per_bin` packets, a partial last
/// bin.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Spread {
    first_bin: usize,
    last_bin: usize,
    first_amount: f64,
    per_bin: f64,
    last_amount: f64,
}

impl Spread {
    fn new(flow: &ReplayFlow, bin_ns: f64, bins: usize) -> Option<Spread> {
        if flow.packets <= 0.0 {
            return None;
        }
        let (first, last) = flow.window.unwrap_or((0, 0));
        let start = f64::from(first);
        let end = f64::from(last.max(first)) + 1.0;
        let density = flow.packets / (end - start);
        let first_bin = ((start / bin_ns) as usize).min(bins - 1);
        let last_bin = ((f64::from(last.max(first)) / bin_ns) as usize).clamp(first_bin, bins - 1);
        if first_bin == last_bin {
            return Some(Spread {
                first_bin,
                last_bin,
                first_amount: flow.packets,
                per_bin: 0.0,
                last_amount: 0.0,
            });
        }
        let first_amount = density * ((first_bin + 1) as f64 * bin_ns - start).max(0.0);
        let per_bin = density * bin_ns;
        let middle = (last_bin - first_bin - 1) as f64 * per_bin;
        let last_amount = (flow.packets - first_amount - middle).max(0.0);
        Some(Spread {
            first_bin,
            last_bin,
            first_amount,
            per_bin,
            last_amount,
        })
    }

    /// Adds the flow's arrivals to `point` (per-bin adds) and `range` (a difference array).
    fn add_to(&self, point: &mut [f64], range: &mut [f64]) {
        point[self.first_bin] += self.first_amount;
        if self.last_bin > self.first_bin {
            point[self.last_bin] += self.last_amount;
            range[self.first_bin + 1] += self.per_bin;
            range[self.last_bin] -= self.per_bin;
        }
    }

    /// `Σ_k a(k) · value_k`, given `prefix[k] = Σ_{i<k} value_i`.
    fn weighted(&self, value: &[f64], prefix: &[f64]) -> f64 {
        let mut sum = self.first_amount * value[self.first_bin];
        if self.last_bin > self.first_bin {
            sum += self.last_amount * value[self.last_bin];
            sum += self.per_bin * (prefix[self.last_bin] - prefix[self.first_bin + 1]);
        }
        sum
    }
}

fn prefix_sums(values: &[f64]) -> Vec<f64> {
    let mut prefix = Vec::with_capacity(values.len() + 1);
    let mut running = 0.0;
    prefix.push(0.0);
    for value in values {
        running += value;
        prefix.push(running);
    }
    prefix
}

/// Below this many packets a queue counts as empty.
const EMPTY_QUEUE_PACKETS: f64 = 0.5;
/// When no flow is waited on more than this many packet-waits beyond its own waiting, the
/// contention is among equals.
const SYMMETRIC_CONTENTION_PACKETS: f64 = 1.0;

fn replay_timed(
    flows: &[ReplayFlow],
    epoch_ns: u64,
    service_packets_per_ns: f64,
    bins: usize,
) -> ReplayResult {
    let bin_ns = epoch_ns as f64 / bins as f64;
    let service = service_packets_per_ns * bin_ns;
    let spreads: Vec<Option<Spread>> = flows.iter().map(|f| Spread::new(f, bin_ns, bins)).collect();
    let mut arrivals = vec![0.0f64; bins];
    let mut range = vec![0.0f64; bins + 1];
    for spread in spreads.iter().flatten() {
        spread.add_to(&mut arrivals, &mut range);
    }
    let mut running = 0.0;
    for (k, arrival) in arrivals.iter_mut().enumerate() {
        running += range[k];
        *arrival += running;
    }
    // FIFO at line rate: queue at the start of each bin (HAWKEYE Alg. 1 l.31 qdepth(pkt)).
    let mut queue = vec![0.0f64; bins];
    let mut level = 0.0f64;
    let mut queue_built = false;
    for k in 0..bins {
        queue[k] = level;
        if level >= EMPTY_QUEUE_PACKETS && arrivals[k] > 0.0 {
            queue_built = true;
        }
        level = (level + arrivals[k] - service).max(0.0);
    }
    if !queue_built {
        return ReplayResult {
            mode: ReplayMode::Timed,
            contributions: vec![0.0; flows.len()],
            queue_built,
        };
    }
    // Ψ_m = Σ_{k>m} φ_m(k) A_k: arrivals that found (part of) bin m still queued ahead.
    // The queue at bin k holds the latest q_k packets that arrived before it (FIFO), i.e.
    // the bins (m*, k) in full and part of bin m*: a range update, done with a difference
    // array and a binary search over arrival prefix sums (O(bins · log bins)).
    let prefix = prefix_sums(&arrivals);
    let mut waited_on = vec![0.0f64; bins];
    let mut full_range = vec![0.0f64; bins + 1];
    for k in 1..bins {
        if arrivals[k] <= 0.0 || queue[k] < EMPTY_QUEUE_PACKETS {
            continue;
        }
        let target = (prefix[k] - queue[k]).max(0.0);
        // Largest m < k with prefix[m] <= target.
        let head = prefix[..k]
            .partition_point(|p| *p <= target)
            .saturating_sub(1);
        let covered_of_head = (prefix[head + 1] - target).clamp(0.0, arrivals[head]);
        if arrivals[head] > 0.0 {
            waited_on[head] += arrivals[k] * covered_of_head / arrivals[head];
        }
        if head + 1 < k {
            full_range[head + 1] += arrivals[k];
            full_range[k] -= arrivals[k];
        }
    }
    let mut running = 0.0;
    for m in 0..bins {
        running += full_range[m];
        waited_on[m] += running;
    }
    // Per-packet exchange Ψ_k − q_k, summed over each flow's packets.
    let exchange: Vec<f64> = waited_on.iter().zip(&queue).map(|(w, q)| w - q).collect();
    let exchange_prefix = prefix_sums(&exchange);
    let contributions: Vec<f64> = spreads
        .iter()
        .map(|s| s.map_or(0.0, |s| s.weighted(&exchange, &exchange_prefix)))
        .collect();
    let symmetric = contributions
        .iter()
        .all(|c| *c < SYMMETRIC_CONTENTION_PACKETS);
    if !symmetric {
        return ReplayResult {
            mode: ReplayMode::Timed,
            contributions,
            queue_built,
        };
    }
    // Contention among equals (e.g. identical incast bursts): the exchange is zero-sum and
    // names nobody, yet the queue exists. Blame the arrivals that grew it: in each bin whose
    // arrivals exceed the line rate, a flow is charged its share of the excess.
    let excess: Vec<f64> = arrivals
        .iter()
        .map(|a| if *a > service { 1.0 - service / a } else { 0.0 })
        .collect();
    let excess_prefix = prefix_sums(&excess);
    let growth = spreads
        .iter()
        .map(|s| s.map_or(0.0, |s| s.weighted(&excess, &excess_prefix)))
        .collect();
    ReplayResult {
        mode: ReplayMode::TimedGrowth,
        contributions: growth,
        queue_built,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: u64 = 100_000; // 100 µs
    const LINE: f64 = 100.0 / 8.0 / 1000.0; // 100 Gbit/s in 1000-byte packets per ns

    fn timed(packets: f64, first: u32, last: u32) -> ReplayFlow {
        ReplayFlow {
            packets,
            window: Some((first, last)),
            mean_depth_packets: 0.0,
        }
    }

    #[test]
    fn flows_below_line_rate_build_no_queue() {
        let flows = [timed(300.0, 0, 99_000), timed(400.0, 0, 99_000)];
        let result = replay(&flows, EPOCH, LINE, 200);
        assert!(!result.queue_built);
        assert_eq!(result.contributions, vec![0.0, 0.0]);
    }

    #[test]
    fn micro_bursts_contribute_and_the_long_flow_they_block_is_a_victim() {
        // A long flow at ~50 % of line rate all epoch; four bursts of 150 packets each at
        // line rate within 15 µs (about 3.3× the port's rate together).
        let mut flows = vec![timed(600.0, 0, 99_900)];
        for _ in 0..4 {
            flows.push(timed(150.0, 40_000, 55_000));
        }
        let result = replay(&flows, EPOCH, LINE, 200);
        assert_eq!(result.mode, ReplayMode::Timed);
        assert!(result.queue_built);
        let long = result.contributions[0];
        assert!(long < 0.0, "long flow must be a victim, got {long}");
        for burst in &result.contributions[1..] {
            assert!(*burst > 0.0, "bursts must contribute, got {burst}");
        }
    }

    #[test]
    fn identical_bursts_alone_are_all_blamed_for_the_queue() {
        let flows = [timed(400.0, 10_000, 30_000), timed(400.0, 10_000, 30_000)];
        let result = replay(&flows, EPOCH, LINE, 200);
        assert_eq!(result.mode, ReplayMode::TimedGrowth);
        assert!(result.contributions.iter().all(|c| *c > 100.0));
        assert!((result.contributions[0] - result.contributions[1]).abs() < 1e-6);
    }

    #[test]
    fn untimed_replay_follows_the_paper_formula() {
        let flows = [
            ReplayFlow {
                packets: 300.0,
                window: None,
                mean_depth_packets: 10.0,
            },
            ReplayFlow {
                packets: 100.0,
                window: None,
                mean_depth_packets: 30.0,
            },
        ];
        let result = replay(&flows, EPOCH, LINE, 200);
        assert_eq!(result.mode, ReplayMode::Untimed);
        // n_j ΣK / N − K_j
        assert!((result.contributions[0] - (300.0 * 40.0 / 400.0 - 10.0)).abs() < 1e-9);
        assert!((result.contributions[1] - (100.0 * 40.0 / 400.0 - 30.0)).abs() < 1e-9);
    }
}
