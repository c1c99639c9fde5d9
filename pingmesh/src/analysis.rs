//! R-Pingmesh's analyzer (SIGCOMM'24 §4.3 and §5): every analysis period, sort the
//! anomalous probes by cause and locate what the network is to blame for.
//!
//! In order, for the probes uploaded in one period:
//!
//! 1. **Host down** (§4.3.1): a timeout to an RNIC whose host uploaded nothing for longer
//!    than [`AnalysisConfig::host_silence_ns`] (20 s) is the host's, not the network's.
//! 2. **QPN reset** (§4.3.1): a timeout to a queue pair number that is no longer the target
//!    RNIC's (its agent restarted) is probe noise.
//! 3. **CPU noise** (§6, Fig. 6): when several RNICs of one host would be called anomalous
//!    at once (step 4's ToR-mesh rule), or the host's answered probes show an end-host
//!    delay — answering (responder delay) or probing (prober delay) — above
//!    [`AnalysisConfig::cpu_noise_delay_ns`], that host's timeouts are CPU noise: several
//!    RNICs failing at once is far less likely than one busy CPU, and a busy CPU is late
//!    with its own probes' ACKs too. (A timeout with the first
//!    ACK but not the delay ACK is not taken as CPU noise by itself: the delay ACK may have
//!    been lost on a faulty link like any packet.) Not when ToR-mesh probes to or from the
//!    host's RNICs also show a high network RTT: the RNIC's port is paused (a PFC storm), and the
//!    CPU is only late with the burst the pause releases.
//! 4. **RNIC problems** (§4.3.2): an RNIC to which more than
//!    [`AnalysisConfig::rnic_timeout_share`] (10 %) of the ToR-mesh probes time out — or
//!    come back with a high network RTT (§6, Fig. 8 right: a PFC storm from an RNIC shows as
//!    high ToR-mesh RTT to it) — is anomalous for [`AnalysisConfig::rnic_hold_ns`] (a
//!    minute); every timeout and high-RTT probe to or from it is an RNIC problem.
//! 5. **Switch network problems** (§4.3.3): the remaining timeouts, and the remaining
//!    answered probes with a high network RTT — above [`AnalysisConfig::high_rtt_ns`], or
//!    above [`AnalysisConfig::high_rtt_factor`] times the period's cluster median (the
//!    anomaly is relative to what the fabric shows this period, as HAWKEYE's host trigger
//!    fires at a multiple of the usual RTT); when there are at least
//!    [`AnalysisConfig::min_votes`] of either, Algorithm 1 votes over the physical links
//!    between switches on their probe and ACK paths (host links are the RNIC's), and, with
//!    "link" replaced by "switch", over the switches; the most voted are the most
//!    suspicious.
//! 6. **SLA** (§5): RNIC drop rate, switch-network drop rate and P50–P999 of network RTT and
//!    end-host delay, for the whole cluster and for the service network (the service
//!    tracing probes).
//! 7. **Impact** (§4.3.4): a problem seen by service tracing, or located on a link the service
//!    uses, is P0 when the service metric degraded beyond its threshold and P1 otherwise;
//!    the others are P2. A degraded service without a P0 or P1 problem: the service network
//!    is innocent.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use hawkmesh_wire::topology::{NodeId, PortRef};

use crate::inventory::{Inventory, RnicId};

/// Which probing loop sent a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeSource {
    /// Between RNICs under one ToR.
    TorMesh,
    /// Across ToRs, on the controller's 5-tuples.
    InterTor,
    /// On a service connection's own 5-tuple.
    ServiceTracing,
}

/// How a probe ended, as uploaded by the prober.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeStatus {
    /// Both ACKs arrived.
    Answered {
        /// (⑤−②) − (④−③).
        network_rtt_ns: u64,
        /// (⑥−①) − (⑤−②).
        prober_delay_ns: u64,
        /// ④−③.
        responder_delay_ns: u64,
    },
    /// Not both ACKs within the timeout.
    Timeout {
        /// The first ACK arrived.
        ack: bool,
        /// The delay ACK arrived.
        delay_ack: bool,
    },
}

/// One uploaded probe result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeRecord {
    /// The prober RNIC.
    pub prober: RnicId,
    /// The target RNIC.
    pub target: RnicId,
    /// The loop that sent it.
    pub source: ProbeSource,
    /// The queue pair number the probe was addressed to.
    pub target_qpn: u32,
    /// ① on the prober's clock, in the analyzer's time base (ns).
    pub sent_ns: u64,
    /// How it ended.
    pub status: ProbeStatus,
    /// The links (egress ports, the prober's NIC first) the probe's 5-tuple takes, from path
    /// tracing; empty when unknown.
    /// Shared: a batch names each distinct path once, and its probes refer to it.
    pub path: Arc<[PortRef]>,
    /// The links its ACKs take back.
    pub ack_path: Arc<[PortRef]>,
}

/// The analyzer's settings (defaults: the paper's running parameters, §5).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AnalysisConfig {
    /// A host that uploaded nothing for this long is down.
    pub host_silence_ns: u64,
    /// An RNIC with more than this share of its ToR-mesh probes timing out is anomalous.
    pub rnic_timeout_share: f64,
    /// ToR-mesh probes to an RNIC needed before its share is judged.
    pub rnic_min_probes: u32,
    /// How long an anomalous RNIC's probes count as RNIC problems.
    pub rnic_hold_ns: u64,
    /// A responder delay above this marks its host as CPU-noisy for the period.
    pub cpu_noise_delay_ns: u64,
    /// Answered probes with a network RTT above this are anomalous (congestion).
    pub high_rtt_ns: u64,
    /// ... and so are those above this multiple of the period's median network RTT over the
    /// cluster (0 = only the absolute bound). The median is the fabric's usual RTT: most
    /// probes of a period meet no congestion.
    pub high_rtt_factor: f64,
    /// Anomalous probes of one kind needed before Algorithm 1 votes.
    pub min_votes: u32,
    /// A service metric degradation beyond this (a fraction) makes its problems P0.
    pub service_degradation_threshold: f64,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        AnalysisConfig {
            host_silence_ns: 20_000_000_000,
            rnic_timeout_share: 0.10,
            rnic_min_probes: 10,
            rnic_hold_ns: 60_000_000_000,
            cpu_noise_delay_ns: 10_000_000,
            high_rtt_ns: 1_000_000,
            // HAWKEYE's host agent triggers at 200–500 % of the usual RTT; the upper end
            // keeps path-length differences (a ToR-mesh RTT is a third of a 3-tier one)
            // well below it.
            high_rtt_factor: 5.0,
            min_votes: 3,
            service_degradation_threshold: 0.10,
        }
    }
}

/// Why a timeout happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeoutCause {
    /// The target's host stopped uploading.
    HostDown,
    /// The probe used a stale queue pair number.
    QpnReset,
    /// The responder's host was too busy to answer in time.
    CpuNoise,
    /// An anomalous RNIC (its link or ToR port included).
    Rnic,
    /// Somewhere in the switch network.
    SwitchNetwork,
}

/// What kind of problem a located problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProblemKind {
    /// An anomalous RNIC.
    Rnic,
    /// Drops in the switch network, located by voting.
    SwitchDrops,
    /// High network RTT in the switch network, located by voting.
    SwitchLatency,
    /// Several RNICs of one host failing to answer: its CPU.
    HostCpu,
    /// A host that stopped uploading.
    HostDown,
}

/// How urgent a problem is for the service (§4.3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Priority {
    /// Affects the service, whose metric degraded beyond its threshold: fix now.
    P0,
    /// Affects the service, metric within its threshold.
    P1,
    /// Outside the service network.
    P2,
}

/// One located problem.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// What it is.
    pub kind: ProblemKind,
    /// The RNIC (RNIC problems).
    pub rnic: Option<RnicId>,
    /// The host (host problems).
    pub host: Option<NodeId>,
    /// The most suspicious links with their votes (switch problems; ties all listed), each
    /// named by its lower end's port ([`Inventory::link_of`]).
    pub links: Vec<(PortRef, u32)>,
    /// The most suspicious switches with their votes.
    pub switches: Vec<(NodeId, u32)>,
    /// Anomalous probes behind it.
    pub probes: u32,
    /// Whether service tracing saw it or it lies in the service network.
    pub affects_service: bool,
    /// Its priority.
    pub priority: Priority,
}

/// Percentiles P50, P90, P99, P999 of a set of durations, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 90th.
    pub p90: u64,
    /// 99th.
    pub p99: u64,
    /// 99.9th.
    pub p999: u64,
}

impl Percentiles {
    pub(crate) fn of(mut samples: Vec<u64>) -> Self {
        if samples.is_empty() {
            return Percentiles::default();
        }
        samples.sort_unstable();
        // Nearest rank.
        let at = |q: f64| {
            let rank = (q * samples.len() as f64).ceil() as usize;
            samples[rank.clamp(1, samples.len()) - 1]
        };
        Percentiles {
            count: samples.len() as u64,
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
        }
    }
}

/// The SLA figures of one network (cluster or service) for one period.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sla {
    /// Probes judged (host-down and QPN-reset timeouts excluded).
    pub probes: u64,
    /// Share of them lost to RNIC problems.
    pub rnic_drop_rate: f64,
    /// Share lost in the switch network.
    pub switch_drop_rate: f64,
    /// Network RTT of the answered probes.
    pub network_rtt: Percentiles,
    /// End-host delay (prober + responder) of the answered probes.
    pub end_host_delay: Percentiles,
}

/// The result of one analysis period.
#[derive(Clone, Debug, PartialEq)]
pub struct PeriodReport {
    /// Start of the period (ns).
    pub start_ns: u64,
    /// End of the period (ns).
    pub end_ns: u64,
    /// Timeouts per cause.
    pub timeouts: BTreeMap<TimeoutCause, u64>,
    /// Located problems, most urgent first.
    pub problems: Vec<Problem>,
    /// The whole cluster's SLA.
    pub cluster: Sla,
    /// The service network's SLA (service tracing probes).
    pub service: Sla,
    /// The service's metric degraded and no P0/P1 problem was found.
    pub service_network_innocent: bool,
}

/// The analyzer's state across periods: anomalous RNICs and hosts' last uploads.
#[derive(Clone, Debug)]
pub struct Analyzer {
    config: AnalysisConfig,
    rnic_anomalous_until: BTreeMap<RnicId, u64>,
    last_upload: BTreeMap<NodeId, u64>,
}

impl Analyzer {
    /// An analyzer with `config`.
    pub fn new(config: AnalysisConfig) -> Self {
        Analyzer {
            config,
            rnic_anomalous_until: BTreeMap::new(),
            last_upload: BTreeMap::new(),
        }
    }

    /// Records that `host`'s agent uploaded at `at_ns`.
    pub fn uploaded(&mut self, host: NodeId, at_ns: u64) {
        let last = self.last_upload.entry(host).or_insert(at_ns);
        *last = (*last).max(at_ns);
    }

    /// The RNICs anomalous at `now_ns`.
    pub fn anomalous_rnics(&self, now_ns: u64) -> Vec<RnicId> {
        self.rnic_anomalous_until
            .iter()
            .filter(|(_, until)| **until > now_ns)
            .map(|(rnic, _)| *rnic)
            .collect()
    }

    /// Analyses the probes of the period `[start_ns, end_ns)`. `current_qpn` is the
    /// controller's comm info (each RNIC's current queue pair number);
    /// `service_degradation` the service metric's degradation in the period (a fraction,
    /// `None` without a service metric).
    pub fn analyse(
        &mut self,
        inventory: &Inventory,
        current_qpn: &BTreeMap<RnicId, u32>,
        probes: &[ProbeRecord],
        (start_ns, end_ns): (u64, u64),
        service_degradation: Option<f64>,
    ) -> PeriodReport {
        let cfg = self.config;
        let host_of = |rnic: RnicId| inventory.rnic(rnic).map(|r| r.host);
        let host_down = |host: Option<NodeId>| {
            host.is_some_and(|h| {
                self.last_upload
                    .get(&h)
                    .is_none_or(|last| end_ns.saturating_sub(*last) > cfg.host_silence_ns)
            })
        };

        // High network RTT (§4.3.3): above the absolute bound, or a multiple of the period's
        // median over every answered probe.
        let median_rtt = Percentiles::of(
            probes
                .iter()
                .filter_map(|p| match p.status {
                    ProbeStatus::Answered { network_rtt_ns, .. } => Some(network_rtt_ns),
                    ProbeStatus::Timeout { .. } => None,
                })
                .collect(),
        )
        .p50;
        let high_rtt = |rtt: u64| {
            rtt > cfg.high_rtt_ns
                || (cfg.high_rtt_factor > 0.0
                    && rtt as f64 > cfg.high_rtt_factor * median_rtt as f64)
        };
        // A probe that failed: timed out, or came back with a high network RTT.
        let failed = |probe: &ProbeRecord| match probe.status {
            ProbeStatus::Timeout { .. } => true,
            ProbeStatus::Answered { network_rtt_ns, .. } => high_rtt(network_rtt_ns),
        };
        // Per host: the largest end-host delay its RNICs showed, answering (responder delay)
        // or probing (prober delay: a busy CPU handles its own ACKs late too).
        let mut max_host_delay: HashMap<NodeId, u64> = HashMap::new();
        // Per RNIC: ToR-mesh probes to it and their failures.
        let mut tor_mesh: HashMap<RnicId, (u32, u32)> = HashMap::new();
        // Per RNIC: ToR-mesh probes to or from it and their failures.
        let mut tor_mesh_either: HashMap<RnicId, (u32, u32)> = HashMap::new();
        // Per host: ToR-mesh probes to or from its RNICs answered with a high network RTT.
        let mut slow_to_host: HashMap<NodeId, u32> = HashMap::new();
        for probe in probes {
            if let ProbeStatus::Answered {
                responder_delay_ns,
                prober_delay_ns,
                ..
            } = probe.status
            {
                for (rnic, delay) in [
                    (probe.target, responder_delay_ns),
                    (probe.prober, prober_delay_ns),
                ] {
                    if let Some(host) = host_of(rnic) {
                        let d = max_host_delay.entry(host).or_insert(0);
                        *d = (*d).max(delay);
                    }
                }
            }
            if probe.source == ProbeSource::TorMesh {
                let entry = tor_mesh.entry(probe.target).or_insert((0, 0));
                entry.0 += 1;
                if failed(probe) {
                    entry.1 += 1;
                }
                for rnic in [probe.prober, probe.target] {
                    let entry = tor_mesh_either.entry(rnic).or_insert((0, 0));
                    entry.0 += 1;
                    entry.1 += u32::from(failed(probe));
                }
                if let ProbeStatus::Answered { network_rtt_ns, .. } = probe.status {
                    if high_rtt(network_rtt_ns) {
                        // Either end's port may be the paused one (the probe or its ACK).
                        for rnic in [probe.target, probe.prober] {
                            if let Some(host) = host_of(rnic) {
                                *slow_to_host.entry(host).or_insert(0) += 1;
                            }
                        }
                    }
                }
            }
        }
        // RNIC anomaly from this period's ToR-mesh probes (§4.3.2), held for a minute.
        let failing: BTreeSet<RnicId> = tor_mesh
            .iter()
            .filter(|(_, (sent, lost))| {
                *sent >= cfg.rnic_min_probes
                    && f64::from(*lost) > cfg.rnic_timeout_share * f64::from(*sent)
            })
            .map(|(rnic, _)| *rnic)
            .collect();
        // CPU noise (§6): several RNICs of one host failing at once, or a host whose end-host
        // delay is high: its timeouts are its CPU's, and its RNICs are not anomalous for them.
        // Not a host whose RNICs' ToR-mesh probes (to or from them) also show a high network
        // RTT (at least `min_votes` of them): the trouble is then on the network side of the
        // RNIC — a PFC storm or a slow RNIC pausing its ToR port (§6, Fig. 8 right) — and a
        // late CPU only follows from the burst of packets the pause released at once.
        let mut failing_per_host: HashMap<NodeId, u32> = HashMap::new();
        for rnic in &failing {
            if let Some(host) = host_of(*rnic) {
                *failing_per_host.entry(host).or_insert(0) += 1;
            }
        }
        let cpu_noisy: BTreeSet<NodeId> = failing_per_host
            .iter()
            .filter(|(_, n)| **n >= 2)
            .map(|(host, _)| *host)
            .chain(
                max_host_delay
                    .iter()
                    .filter(|(host, d)| {
                        **d > cfg.cpu_noise_delay_ns
                            && slow_to_host.get(*host).copied().unwrap_or(0) < cfg.min_votes
                    })
                    .map(|(host, _)| *host),
            )
            .collect();
        // Beside the paper's rule (probes to it fail), an RNIC whose ToR-mesh probes to or
        // from it fail as often is a candidate for the explaining away below: when the
        // probes an RNIC sends are what is lost (its sending side flaps), its peers fail
        // as targets and it may not — explaining away then finds it, not them. Only for
        // that: the CPU-noise rule above counts the paper's failing RNICs alone.
        let over = |(sent, lost): (u32, u32)| {
            sent >= cfg.rnic_min_probes
                && f64::from(lost) > cfg.rnic_timeout_share * f64::from(sent)
        };
        let candidates: BTreeSet<RnicId> = failing
            .into_iter()
            .chain(
                tor_mesh_either
                    .iter()
                    .filter(|(_, counts)| over(**counts))
                    .map(|(rnic, _)| *rnic),
            )
            .filter(|rnic| !host_of(*rnic).is_some_and(|h| cpu_noisy.contains(&h)))
            .collect();
        // One bad RNIC also fails its ToR peers' ToR-mesh probes (the probes it sends them
        // are lost too): explain failures away greedily. The candidate whose probes fail
        // most (any loop, either direction) is anomalous; the probes involving it are set
        // aside and the ToR-mesh rule is applied again to the rest, until no candidate is
        // left. A peer whose only failures were with the bad RNIC then passes.
        let mut confirmed: Vec<RnicId> = Vec::new();
        // Probes with an end on a CPU-noisy host are explained already.
        let noisy_end = |probe: &ProbeRecord| {
            [probe.prober, probe.target]
                .into_iter()
                .any(|r| host_of(r).is_some_and(|h| cpu_noisy.contains(&h)))
        };
        if !candidates.is_empty() {
            let mut set_aside: BTreeSet<RnicId> = BTreeSet::new();
            for _ in 0..candidates.len() {
                // (ToR-mesh to it: sent, lost), (any probe involving it: sent, lost),
                // (ToR-mesh to or from it: sent, lost).
                let mut tally: HashMap<RnicId, [u32; 6]> = HashMap::new();
                for probe in probes {
                    if set_aside.contains(&probe.prober)
                        || set_aside.contains(&probe.target)
                        || noisy_end(probe)
                    {
                        continue;
                    }
                    let lost = u32::from(failed(probe));
                    for (rnic, as_target) in [(probe.prober, false), (probe.target, true)] {
                        if !candidates.contains(&rnic) {
                            continue;
                        }
                        let t = tally.entry(rnic).or_insert([0; 6]);
                        if probe.source == ProbeSource::TorMesh {
                            if as_target {
                                t[0] += 1;
                                t[1] += lost;
                            }
                            t[4] += 1;
                            t[5] += lost;
                        }
                        t[2] += 1;
                        t[3] += lost;
                    }
                }
                let share = |n: u32, d: u32| f64::from(n) / f64::from(d.max(1));
                let worst = tally
                    .iter()
                    .filter(|(_, t)| over((t[0], t[1])) || over((t[4], t[5])))
                    .max_by(|(ra, a), (rb, b)| {
                        share(a[3], a[2])
                            .total_cmp(&share(b[3], b[2]))
                            .then(rb.cmp(ra))
                    })
                    .map(|(rnic, _)| *rnic);
                let Some(worst) = worst else {
                    break;
                };
                confirmed.push(worst);
                set_aside.insert(worst);
            }
        }
        for rnic in confirmed {
            self.rnic_anomalous_until
                .insert(rnic, end_ns.saturating_add(cfg.rnic_hold_ns));
        }
        let mut anomalous: BTreeSet<RnicId> =
            self.anomalous_rnics(start_ns + 1).into_iter().collect();
        // A common endpoint (beyond the paper): timeouts that no rule has explained, most of
        // which involve one RNIC, on paths that no single switch link explains as well, are
        // that RNIC's — an RNIC (or its cable) flapping for a short part of the period fails
        // fewer than the ToR-mesh rule's 10 % yet loses probes to and from many peers over
        // unrelated paths, which Algorithm 1 would turn into scattered link votes. Explained
        // away greedily; a switch link that every lost probe crosses always ties or wins, so
        // link faults stay with the voting, and an RNIC must be in at least half the
        // unexplained timeouts (a ToR-wide fault spreads them over its RNICs).
        loop {
            let unexplained: Vec<&ProbeRecord> = probes
                .iter()
                .filter(|probe| {
                    matches!(probe.status, ProbeStatus::Timeout { .. })
                        && !host_down(host_of(probe.target))
                        && current_qpn
                            .get(&probe.target)
                            .is_none_or(|qpn| *qpn == probe.target_qpn)
                        && !host_of(probe.target).is_some_and(|h| cpu_noisy.contains(&h))
                        && !anomalous.contains(&probe.target)
                        && !anomalous.contains(&probe.prober)
                })
                .collect();
            if (unexplained.len() as u32) < cfg.min_votes {
                break;
            }
            let mut involving: BTreeMap<RnicId, (u32, BTreeSet<RnicId>)> = BTreeMap::new();
            for probe in &unexplained {
                for (rnic, peer) in [(probe.prober, probe.target), (probe.target, probe.prober)] {
                    let entry = involving.entry(rnic).or_default();
                    entry.0 += 1;
                    entry.1.insert(peer);
                }
            }
            let Some((rnic, (count, peers))) = involving
                .into_iter()
                .max_by(|(ra, a), (rb, b)| a.0.cmp(&b.0).then(rb.cmp(ra)))
            else {
                break;
            };
            let (links, _) = vote(inventory, &unexplained);
            let top_link = links.first().map_or(0, |(_, votes)| *votes);
            if count < cfg.min_votes
                || (count as usize) * 2 < unexplained.len()
                || count <= top_link
                || peers.len() < 2
            {
                break;
            }
            anomalous.insert(rnic);
            self.rnic_anomalous_until
                .insert(rnic, end_ns.saturating_add(cfg.rnic_hold_ns));
        }

        let mut timeouts: BTreeMap<TimeoutCause, u64> = BTreeMap::new();
        let mut rnic_probes: BTreeMap<RnicId, (u32, bool)> = BTreeMap::new();
        let mut host_cpu: BTreeMap<NodeId, (u32, bool)> = BTreeMap::new();
        let mut down_hosts: BTreeMap<NodeId, (u32, bool)> = BTreeMap::new();
        let mut drop_paths: Vec<&ProbeRecord> = Vec::new();
        let mut slow_paths: Vec<&ProbeRecord> = Vec::new();
        let mut cluster = SlaAcc::default();
        let mut service = SlaAcc::default();
        let tally_high = |map: &mut BTreeMap<RnicId, (u32, bool)>, rnic, is_service: bool| {
            let entry = map.entry(rnic).or_insert((0, false));
            entry.0 += 1;
            entry.1 |= is_service;
        };
        for probe in probes {
            let target_host = host_of(probe.target);
            let is_service = probe.source == ProbeSource::ServiceTracing;
            let cause = match probe.status {
                ProbeStatus::Answered {
                    network_rtt_ns,
                    prober_delay_ns,
                    responder_delay_ns,
                } => {
                    let host_delay = prober_delay_ns.saturating_add(responder_delay_ns);
                    cluster.answered(network_rtt_ns, host_delay);
                    if is_service {
                        service.answered(network_rtt_ns, host_delay);
                    }
                    if high_rtt(network_rtt_ns) {
                        // High RTT to or from an anomalous RNIC is the RNIC's (a storming
                        // or slow RNIC's port is paused); the rest vote.
                        if anomalous.contains(&probe.target) {
                            tally_high(&mut rnic_probes, probe.target, is_service);
                        } else if anomalous.contains(&probe.prober) {
                            tally_high(&mut rnic_probes, probe.prober, is_service);
                        } else {
                            slow_paths.push(probe);
                        }
                    }
                    continue;
                }
                ProbeStatus::Timeout { .. } if host_down(target_host) => TimeoutCause::HostDown,
                ProbeStatus::Timeout { .. }
                    if current_qpn
                        .get(&probe.target)
                        .is_some_and(|qpn| *qpn != probe.target_qpn) =>
                {
                    TimeoutCause::QpnReset
                }
                ProbeStatus::Timeout { .. }
                    if target_host.is_some_and(|h| cpu_noisy.contains(&h)) =>
                {
                    TimeoutCause::CpuNoise
                }
                ProbeStatus::Timeout { .. }
                    if anomalous.contains(&probe.target) || anomalous.contains(&probe.prober) =>
                {
                    TimeoutCause::Rnic
                }
                ProbeStatus::Timeout { .. } => TimeoutCause::SwitchNetwork,
            };
            *timeouts.entry(cause).or_insert(0) += 1;
            let tally = |map: &mut BTreeMap<_, (u32, bool)>, key| {
                let entry = map.entry(key).or_insert((0, false));
                entry.0 += 1;
                entry.1 |= is_service;
            };
            match cause {
                TimeoutCause::HostDown => {
                    if let Some(h) = target_host {
                        tally(&mut down_hosts, h);
                    }
                }
                TimeoutCause::QpnReset => {}
                TimeoutCause::CpuNoise => {
                    if let Some(h) = target_host {
                        tally(&mut host_cpu, h);
                    }
                }
                TimeoutCause::Rnic => {
                    let rnic = if anomalous.contains(&probe.target) {
                        probe.target
                    } else {
                        probe.prober
                    };
                    tally(&mut rnic_probes, rnic);
                }
                TimeoutCause::SwitchNetwork => drop_paths.push(probe),
            }
            if matches!(
                cause,
                TimeoutCause::Rnic | TimeoutCause::SwitchNetwork | TimeoutCause::CpuNoise
            ) {
                cluster.lost(cause);
                if is_service {
                    service.lost(cause);
                }
            }
        }

        // The physical links the service's connections use (service tracing paths), named
        // as the votes name them.
        let service_links: BTreeSet<PortRef> = probes
            .iter()
            .filter(|p| p.source == ProbeSource::ServiceTracing)
            .flat_map(|p| p.path.iter().chain(p.ack_path.iter()))
            .map(|port| inventory.link_of(*port))
            .collect();
        let degraded = service_degradation.is_some_and(|d| d > cfg.service_degradation_threshold);
        let priority = |affects: bool| match (affects, degraded) {
            (true, true) => Priority::P0,
            (true, false) => Priority::P1,
            (false, _) => Priority::P2,
        };
        let mut problems = Vec::new();
        for (rnic, (count, seen_by_service)) in rnic_probes {
            problems.push(Problem {
                kind: ProblemKind::Rnic,
                rnic: Some(rnic),
                host: host_of(rnic),
                links: Vec::new(),
                switches: Vec::new(),
                probes: count,
                affects_service: seen_by_service,
                priority: priority(seen_by_service),
            });
        }
        for (kind, map) in [
            (ProblemKind::HostCpu, host_cpu),
            (ProblemKind::HostDown, down_hosts),
        ] {
            for (host, (count, seen_by_service)) in map {
                problems.push(Problem {
                    kind,
                    rnic: None,
                    host: Some(host),
                    links: Vec::new(),
                    switches: Vec::new(),
                    probes: count,
                    affects_service: seen_by_service,
                    priority: priority(seen_by_service),
                });
            }
        }
        for (kind, anomalous_probes) in [
            (ProblemKind::SwitchDrops, drop_paths),
            (ProblemKind::SwitchLatency, slow_paths),
        ] {
            if (anomalous_probes.len() as u32) < cfg.min_votes {
                continue;
            }
            let (links, switches) = vote(inventory, &anomalous_probes);
            let seen_by_service = anomalous_probes
                .iter()
                .any(|p| p.source == ProbeSource::ServiceTracing)
                || links.iter().any(|(l, _)| service_links.contains(l));
            problems.push(Problem {
                kind,
                rnic: None,
                host: None,
                links,
                switches,
                probes: anomalous_probes.len() as u32,
                affects_service: seen_by_service,
                priority: priority(seen_by_service),
            });
        }
        problems.sort_by(|a, b| {
            a.priority
                .cmp(&b.priority)
                .then(b.probes.cmp(&a.probes))
                .then(a.kind.cmp(&b.kind))
        });
        let service_network_innocent =
            degraded && !problems.iter().any(|p| p.priority != Priority::P2);
        PeriodReport {
            start_ns,
            end_ns,
            timeouts,
            problems,
            cluster: cluster.finish(),
            service: service.finish(),
            service_network_innocent,
        }
    }
}

/// The most suspicious links and switches, with their votes.
type Suspects = (Vec<(PortRef, u32)>, Vec<(NodeId, u32)>);

/// Algorithm 1: every link on the path of an anomalous probe or its ACK gets a vote (named
/// by its lower port, [`Inventory::link_of`]); the links with the most votes are the most suspicious — all of them when several
/// tie (one lost 5-tuple votes for its whole path: only other 5-tuples can narrow it). The
/// same with switches (footnote 5). Links of RNICs (host links) do not vote: a problem there
/// is the RNIC's.
fn vote(inventory: &Inventory, anomalous: &[&ProbeRecord]) -> Suspects {
    let hosts: BTreeSet<NodeId> = inventory.rnics().iter().map(|r| r.host).collect();
    let mut links: HashMap<PortRef, u32> = HashMap::new();
    let mut switches: HashMap<NodeId, u32> = HashMap::new();
    for probe in anomalous {
        // An RNIC's own link belongs to the RNIC, not to the switch network (§4.3.2,
        // footnote 4): only links between switches vote, each once per probe whichever
        // direction (probe or ACK) crossed it — a lost probe does not say which direction
        // lost it.
        let crossed: BTreeSet<PortRef> = probe
            .path
            .iter()
            .chain(probe.ack_path.iter())
            .filter(|port| !inventory.is_access_port(**port))
            .map(|port| inventory.link_of(*port))
            .collect();
        for link in crossed {
            *links.entry(link).or_insert(0) += 1;
        }
        // A switch votes once per probe even if both directions cross it.
        let crossed: BTreeSet<NodeId> = probe
            .path
            .iter()
            .chain(probe.ack_path.iter())
            .map(|p| p.node)
            .filter(|n| !hosts.contains(n))
            .collect();
        for node in crossed {
            *switches.entry(node).or_insert(0) += 1;
        }
    }
    (most_voted(links), most_voted(switches))
}

/// The keys with the most votes.
fn most_voted<K: Ord + Copy>(votes: HashMap<K, u32>) -> Vec<(K, u32)> {
    let Some(top) = votes.values().copied().max() else {
        return Vec::new();
    };
    let mut winners: Vec<(K, u32)> = votes.into_iter().filter(|(_, v)| *v == top).collect();
    winners.sort();
    winners
}

#[derive(Default)]
struct SlaAcc {
    probes: u64,
    rnic_lost: u64,
    switch_lost: u64,
    rtt: Vec<u64>,
    host_delay: Vec<u64>,
}

impl SlaAcc {
    fn answered(&mut self, rtt: u64, host_delay: u64) {
        self.probes += 1;
        self.rtt.push(rtt);
        self.host_delay.push(host_delay);
    }

    fn lost(&mut self, cause: TimeoutCause) {
        self.probes += 1;
        match cause {
            TimeoutCause::Rnic => self.rnic_lost += 1,
            TimeoutCause::SwitchNetwork => self.switch_lost += 1,
            _ => {}
        }
    }

    fn finish(self) -> Sla {
        let share = |n: u64| {
            if self.probes == 0 {
                0.0
            } else {
                n as f64 / self.probes as f64
            }
        };
        Sla {
            probes: self.probes,
            rnic_drop_rate: share(self.rnic_lost),
            switch_drop_rate: share(self.switch_lost),
            network_rtt: Percentiles::of(self.rtt),
            end_host_delay: Percentiles::of(self.host_delay),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hawkmesh_wire::topology::{FabricTopology, LinkDesc, NodeDesc, NodeKind, PortNo};

    const S: u64 = 1_000_000_000;

    /// Two ToRs (tor0, tor1) and two spines; `hosts` hosts with two NICs each: NIC 0 on
    /// tor0, NIC 1 on tor1 (a two-rail fabric, so one host has RNICs under both ToRs).
    fn two_rails(hosts: u32) -> FabricTopology {
        let mut t = FabricTopology::default();
        let mut ports: BTreeMap<NodeId, PortNo> = BTreeMap::new();
        let node = |t: &mut FabricTopology, name: &str, kind, ipv4| {
            let id = t.nodes.len() as NodeId;
            t.nodes.push(NodeDesc {
                id,
                name: name.into(),
                kind,
                tier: None,
                ipv4,
            });
            id
        };
        let mut link = |t: &mut FabricTopology, a: NodeId, b: NodeId| {
            let pa = *ports.entry(a).and_modify(|p| *p += 1).or_insert(0);
            let pb = *ports.entry(b).and_modify(|p| *p += 1).or_insert(0);
            t.links.push(LinkDesc {
                a: PortRef { node: a, port: pa },
                b: PortRef { node: b, port: pb },
                gbps: 100.0,
                delay_ns: 1_000,
            });
        };
        let tor0 = node(&mut t, "tor0", NodeKind::Switch, None);
        let tor1 = node(&mut t, "tor1", NodeKind::Switch, None);
        for s in 0..2 {
            let spine = node(&mut t, &format!("spine{s}"), NodeKind::Switch, None);
            link(&mut t, tor0, spine);
            link(&mut t, tor1, spine);
        }
        for h in 0..hosts {
            let host = node(
                &mut t,
                &format!("h{h}"),
                NodeKind::Host,
                Some([10, 0, h as u8, 1]),
            );
            link(&mut t, host, tor0);
            link(&mut t, host, tor1);
        }
        t
    }

    struct Lab {
        inv: Inventory,
        qpn: BTreeMap<RnicId, u32>,
        analyzer: Analyzer,
    }

    impl Lab {
        fn new(hosts: u32) -> Self {
            let inv = Inventory::from_topology(&two_rails(hosts)).unwrap();
            let qpn = (0..inv.rnics().len() as RnicId)
                .map(|r| (r, 100 + r))
                .collect();
            let mut analyzer = Analyzer::new(AnalysisConfig::default());
            for r in inv.rnics() {
                analyzer.uploaded(r.host, 0);
            }
            Lab { inv, qpn, analyzer }
        }

        /// RNIC `nic` of host `h`.
        fn rnic(&self, h: u32, nic: PortNo) -> RnicId {
            let host = self
                .inv
                .rnics()
                .iter()
                .position(|r| self.inv.name(r.host) == format!("h{h}") && r.nic == nic);
            host.unwrap() as RnicId
        }

        fn port(&self, switch: &str, toward: &str) -> PortRef {
            // Ports were numbered in link order; find the link between the two.
            let t = two_rails(self.inv.rnics().len() as u32 / 2);
            let a = t.node_by_name(switch).unwrap().id;
            let b = t.node_by_name(toward).unwrap().id;
            t.links
                .iter()
                .find_map(|l| {
                    if l.a.node == a && l.b.node == b {
                        Some(l.a)
                    } else if l.b.node == a && l.a.node == b {
                        Some(l.b)
                    } else {
                        None
                    }
                })
                .unwrap()
        }

        fn peer(&self, port: PortRef) -> Option<PortRef> {
            two_rails(self.inv.rnics().len() as u32 / 2).peer(port)
        }

        fn run(&mut self, probes: &[ProbeRecord], degradation: Option<f64>) -> PeriodReport {
            self.analyzer
                .analyse(&self.inv, &self.qpn, probes, (0, 20 * S), degradation)
        }
    }

    fn answered(rtt: u64) -> ProbeStatus {
        ProbeStatus::Answered {
            network_rtt_ns: rtt,
            prober_delay_ns: 2_000,
            responder_delay_ns: 3_000,
        }
    }

    const LOST: ProbeStatus = ProbeStatus::Timeout {
        ack: false,
        delay_ack: false,
    };

    fn probe(
        lab: &Lab,
        (prober, target): (RnicId, RnicId),
        source: ProbeSource,
        status: ProbeStatus,
        path: Vec<PortRef>,
    ) -> ProbeRecord {
        ProbeRecord {
            prober,
            target,
            source,
            target_qpn: lab.qpn[&target],
            sent_ns: S,
            status,
            // The ACKs come back the same way: out of each next hop's port toward it.
            ack_path: path.iter().rev().filter_map(|p| lab.peer(*p)).collect(),
            path: path.into(),
        }
    }

    /// ToR-mesh probes among the RNICs under tor0, all answered unless `lost` says.
    fn tor_mesh(lab: &Lab, hosts: u32, lost: impl Fn(RnicId) -> bool) -> Vec<ProbeRecord> {
        let mut out = Vec::new();
        for round in 0..10 {
            for a in 0..hosts {
                for b in 0..hosts {
                    if a == b {
                        continue;
                    }
                    let (pa, pb) = (lab.rnic(a, 0), lab.rnic(b, 0));
                    let status = if lost(pb) && round % 2 == 0 {
                        LOST
                    } else {
                        answered(5_000)
                    };
                    out.push(probe(
                        lab,
                        (pa, pb),
                        ProbeSource::TorMesh,
                        status,
                        Vec::new(),
                    ));
                }
            }
        }
        out
    }

    #[test]
    fn drops_on_one_link_are_located_by_voting() {
        let mut lab = Lab::new(4);
        let mut probes = tor_mesh(&lab, 4, |_| false);
        let bad = lab.port("tor0", "spine1");
        // Inter-ToR probes from NIC 0 (tor0) to NIC 1 of other hosts (tor1), half over
        // spine0 (answered), half over spine1 (lost on tor0 → spine1).
        for a in 0..4 {
            for b in 0..4 {
                if a == b {
                    continue;
                }
                for (spine, status) in [("spine0", answered(8_000)), ("spine1", LOST)] {
                    let path = vec![
                        lab.port(&format!("h{a}"), "tor0"),
                        lab.port("tor0", spine),
                        lab.port(spine, "tor1"),
                        lab.port("tor1", &format!("h{b}")),
                    ];
                    let pair = (lab.rnic(a, 0), lab.rnic(b, 1));
                    probes.push(probe(&lab, pair, ProbeSource::InterTor, status, path));
                }
            }
        }
        let report = lab.run(&probes, None);
        assert_eq!(report.timeouts.get(&TimeoutCause::SwitchNetwork), Some(&12));
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        let problem = &report.problems[0];
        assert_eq!(problem.kind, ProblemKind::SwitchDrops);
        // Every lost probe crossed tor0 – spine1 – tor1 and back: those two links get all 12
        // votes (one path: Algorithm 1 cannot tell them apart; host links do not vote); the
        // switches tor0, spine1 and tor1 tie likewise.
        assert_eq!(problem.links.len(), 2, "{:?}", problem.links);
        assert!(problem.links.iter().all(|(_, v)| *v == 12));
        assert!(
            problem.links.iter().any(|(l, _)| *l == bad),
            "{:?}",
            problem.links
        );
        let spine1 = two_rails(4).node_by_name("spine1").unwrap().id;
        assert_eq!(problem.switches.len(), 3, "{:?}", problem.switches);
        assert!(problem.switches.contains(&(spine1, 12)));
        assert_eq!(problem.priority, Priority::P2);
        assert!((report.cluster.switch_drop_rate - 12.0 / (120.0 + 24.0)).abs() < 1e-9);
        assert_eq!(report.cluster.rnic_drop_rate, 0.0);
    }

    #[test]
    fn an_rnic_losing_tor_mesh_probes_takes_its_other_timeouts_for_a_minute() {
        let mut lab = Lab::new(4);
        let sick = lab.rnic(2, 0);
        let mut probes = tor_mesh(&lab, 4, |r| r == sick);
        // An inter-ToR probe from the sick RNIC times out too: an RNIC problem, not a vote.
        let from_sick = probe(
            &lab,
            (sick, lab.rnic(0, 1)),
            ProbeSource::InterTor,
            LOST,
            vec![],
        );
        probes.push(from_sick.clone());
        let report = lab.run(&probes, None);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert_eq!(report.problems[0].kind, ProblemKind::Rnic);
        assert_eq!(report.problems[0].rnic, Some(sick));
        assert_eq!(report.timeouts.get(&TimeoutCause::Rnic), Some(&16));
        assert!(report.cluster.rnic_drop_rate > 0.1);
        // The next period: no ToR-mesh evidence, but the RNIC is still held anomalous.
        for r in lab.inv.rnics().to_vec() {
            lab.analyzer.uploaded(r.host, 39 * S);
        }
        let later = lab
            .analyzer
            .analyse(&lab.inv, &lab.qpn, &[from_sick], (20 * S, 40 * S), None);
        assert_eq!(later.timeouts.get(&TimeoutCause::Rnic), Some(&1));
        assert!(lab.analyzer.anomalous_rnics(90 * S).is_empty());
    }

    #[test]
    fn host_down_qpn_reset_and_cpu_noise_are_not_blamed_on_the_network() {
        let mut lab = Lab::new(4);
        let mut probes = tor_mesh(&lab, 4, |_| false);
        // h3 stopped uploading long ago.
        lab.analyzer = Analyzer::new(AnalysisConfig::default());
        for h in 0..3 {
            lab.analyzer
                .uploaded(lab.inv.rnic(lab.rnic(h, 0)).unwrap().host, 19 * S);
        }
        let to_h3 = probe(
            &lab,
            (lab.rnic(0, 0), lab.rnic(3, 1)),
            ProbeSource::InterTor,
            LOST,
            vec![],
        );
        // A probe to h1 with the QPN from before its agent restarted.
        let mut stale = probe(
            &lab,
            (lab.rnic(0, 0), lab.rnic(1, 1)),
            ProbeSource::InterTor,
            LOST,
            vec![],
        );
        stale.target_qpn = 7;
        // h2's CPU is busy: one probe answered after 50 ms of responder delay, one lost.
        let busy = probe(
            &lab,
            (lab.rnic(0, 0), lab.rnic(2, 1)),
            ProbeSource::InterTor,
            ProbeStatus::Answered {
                network_rtt_ns: 9_000,
                prober_delay_ns: 2_000,
                responder_delay_ns: 50_000_000,
            },
            vec![],
        );
        let slow_second = probe(
            &lab,
            (lab.rnic(0, 0), lab.rnic(2, 1)),
            ProbeSource::InterTor,
            ProbeStatus::Timeout {
                ack: true,
                delay_ack: false,
            },
            vec![],
        );
        probes.retain(|p| {
            lab.inv.rnic(p.target).unwrap().host != lab.inv.rnic(lab.rnic(3, 0)).unwrap().host
        });
        probes.extend([to_h3, stale, busy, slow_second]);
        let report = lab.run(&probes, None);
        assert_eq!(report.timeouts.get(&TimeoutCause::HostDown), Some(&1));
        assert_eq!(report.timeouts.get(&TimeoutCause::QpnReset), Some(&1));
        assert_eq!(report.timeouts.get(&TimeoutCause::CpuNoise), Some(&1));
        assert_eq!(report.timeouts.get(&TimeoutCause::SwitchNetwork), None);
        let kinds: Vec<ProblemKind> = report.problems.iter().map(|p| p.kind).collect();
        assert_eq!(kinds, vec![ProblemKind::HostCpu, ProblemKind::HostDown]);
    }

    #[test]
    fn an_rnic_losing_a_few_probes_to_many_peers_over_unrelated_paths_is_the_rnic() {
        // A flapping RNIC: down for a short part of the period, it fails 2 of the 30
        // ToR-mesh probes to it (under the 10 % rule) and loses inter-ToR probes to and
        // from peers over both spines — no switch link explains them all.
        let mut lab = Lab::new(4);
        let flapping = lab.rnic(2, 0);
        let mut probes = tor_mesh(&lab, 4, |_| false);
        let mut lost_to_it = 0;
        for p in probes.iter_mut() {
            if p.target == flapping && lost_to_it < 2 {
                p.status = LOST;
                lost_to_it += 1;
            }
        }
        for (peer, spine, outward) in [
            (0, "spine0", true),
            (1, "spine1", true),
            (3, "spine0", false),
            (0, "spine1", false),
        ] {
            let (from, to) = if outward { (2, peer) } else { (peer, 2) };
            let (from_nic, to_nic) = if outward { (0, 1) } else { (1, 0) };
            let (from_tor, to_tor) = if outward {
                ("tor0", "tor1")
            } else {
                ("tor1", "tor0")
            };
            let path = vec![
                lab.port(&format!("h{from}"), from_tor),
                lab.port(from_tor, spine),
                lab.port(spine, to_tor),
                lab.port(to_tor, &format!("h{to}")),
            ];
            let pair = (lab.rnic(from, from_nic), lab.rnic(to, to_nic));
            probes.push(probe(&lab, pair, ProbeSource::InterTor, LOST, path));
        }
        let report = lab.run(&probes, None);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert_eq!(report.problems[0].kind, ProblemKind::Rnic);
        assert_eq!(report.problems[0].rnic, Some(flapping));
        assert_eq!(report.timeouts.get(&TimeoutCause::Rnic), Some(&6));
        assert_eq!(report.timeouts.get(&TimeoutCause::SwitchNetwork), None);
        // The same losses all on one link stay the link's: it explains them as well.
        let mut lab = Lab::new(4);
        let mut probes = tor_mesh(&lab, 4, |_| false);
        for (from, to) in [(2, 0), (2, 1), (2, 3)] {
            let path = vec![
                lab.port(&format!("h{from}"), "tor0"),
                lab.port("tor0", "spine1"),
                lab.port("spine1", "tor1"),
                lab.port("tor1", &format!("h{to}")),
            ];
            let pair = (lab.rnic(from, 0), lab.rnic(to, 1));
            probes.push(probe(&lab, pair, ProbeSource::InterTor, LOST, path));
        }
        let report = lab.run(&probes, None);
        let kinds: Vec<ProblemKind> = report.problems.iter().map(|p| p.kind).collect();
        assert_eq!(kinds, vec![ProblemKind::SwitchDrops]);
    }

    #[test]
    fn an_rnic_whose_own_probes_are_lost_is_blamed_and_not_the_peers_they_fail_to_reach() {
        // Probes the sick RNIC sends are lost; probes to it are answered. Its peers each
        // see a third of the ToR-mesh probes to them fail (the paper's rule names them);
        // explaining away over probes to or from an RNIC finds the sick one.
        let mut lab = Lab::new(4);
        let sick = lab.rnic(1, 0);
        let mut probes = tor_mesh(&lab, 4, |_| false);
        for p in probes.iter_mut() {
            if p.prober == sick {
                p.status = LOST;
            }
        }
        let report = lab.run(&probes, None);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert_eq!(report.problems[0].kind, ProblemKind::Rnic);
        assert_eq!(report.problems[0].rnic, Some(sick));
        assert_eq!(report.timeouts.get(&TimeoutCause::Rnic), Some(&30));
    }

    #[test]
    fn a_dead_rnic_is_blamed_and_not_its_tor_peers_whose_probes_to_it_fail() {
        let mut lab = Lab::new(4);
        let dead = lab.rnic(2, 0);
        // Every probe to or from the dead RNIC is lost: its three peers each see a third
        // of their ToR-mesh probes fail (those from the dead one), over the 10 % rule.
        let mut probes = Vec::new();
        for _ in 0..10 {
            for a in 0..4 {
                for b in 0..4 {
                    if a == b {
                        continue;
                    }
                    let (pa, pb) = (lab.rnic(a, 0), lab.rnic(b, 0));
                    let status = if pa == dead || pb == dead {
                        LOST
                    } else {
                        answered(5_000)
                    };
                    probes.push(probe(&lab, (pa, pb), ProbeSource::TorMesh, status, vec![]));
                }
            }
        }
        let report = lab.run(&probes, None);
        let blamed: Vec<Option<RnicId>> = report.problems.iter().map(|p| p.rnic).collect();
        assert_eq!(blamed, vec![Some(dead)], "{:?}", report.problems);
        assert_eq!(lab.analyzer.anomalous_rnics(S), vec![dead]);
        assert_eq!(report.timeouts.get(&TimeoutCause::Rnic), Some(&60));
    }

    #[test]
    fn two_rnics_of_one_host_dropping_at_once_is_its_cpu_not_two_rnics() {
        let mut lab = Lab::new(4);
        // Both RNICs of h1 lose ToR-mesh probes in the same period.
        let (a, b) = (lab.rnic(1, 0), lab.rnic(1, 1));
        let mut probes = tor_mesh(&lab, 4, |r| r == a);
        for round in 0..10 {
            for other in [0, 2, 3] {
                let status = if round % 2 == 0 {
                    LOST
                } else {
                    answered(5_000)
                };
                probes.push(probe(
                    &lab,
                    (lab.rnic(other, 1), b),
                    ProbeSource::TorMesh,
                    status,
                    vec![],
                ));
            }
        }
        let report = lab.run(&probes, None);
        assert_eq!(report.timeouts.get(&TimeoutCause::Rnic), None);
        assert_eq!(report.timeouts.get(&TimeoutCause::CpuNoise), Some(&30));
        assert_eq!(report.problems.len(), 1);
        assert_eq!(report.problems[0].kind, ProblemKind::HostCpu);
        assert!(lab.analyzer.anomalous_rnics(S).is_empty());
    }

    #[test]
    fn service_impact_sets_the_priority_and_an_innocent_network_is_said_so() {
        let mut lab = Lab::new(4);
        let mut probes = tor_mesh(&lab, 4, |_| false);
        let path = |lab: &Lab, a: u32, b: u32| {
            vec![
                lab.port(&format!("h{a}"), "tor0"),
                lab.port("tor0", "spine0"),
                lab.port("spine0", "tor1"),
                lab.port("tor1", &format!("h{b}")),
            ]
        };
        // Service tracing on h0 → h1 meets high RTT on its path, like the inter-ToR probes.
        for (a, b) in [(0, 1), (2, 3), (3, 2)] {
            for _ in 0..2 {
                probes.push(probe(
                    &lab,
                    (lab.rnic(a, 0), lab.rnic(b, 1)),
                    ProbeSource::InterTor,
                    answered(3_000_000),
                    path(&lab, a, b),
                ));
            }
        }
        probes.push(probe(
            &lab,
            (lab.rnic(0, 0), lab.rnic(1, 1)),
            ProbeSource::ServiceTracing,
            answered(2_500_000),
            path(&lab, 0, 1),
        ));
        let degraded = lab.run(&probes, Some(0.3));
        assert_eq!(degraded.problems.len(), 1, "{:?}", degraded.problems);
        assert_eq!(degraded.problems[0].kind, ProblemKind::SwitchLatency);
        assert_eq!(degraded.problems[0].priority, Priority::P0);
        assert!(!degraded.service_network_innocent);
        assert_eq!(degraded.service.network_rtt.p50, 2_500_000);
        let within = lab.run(&probes, Some(0.05));
        assert_eq!(within.problems[0].priority, Priority::P1);
        // Healthy network, degraded service: the network is innocent.
        let healthy = tor_mesh(&lab, 4, |_| false);
        let report = lab.run(&healthy, Some(0.5));
        assert!(report.problems.is_empty());
        assert!(report.service_network_innocent);
        assert_eq!(report.cluster.network_rtt.p999, 5_000);
        assert_eq!(report.cluster.end_host_delay.p50, 5_000);
    }

    /// Inter-ToR probes from every host's NIC 0 (tor0) to the others' NIC 1 (tor1), one over
    /// each spine, with the status `status(spine)` gives.
    fn inter_tor(lab: &Lab, status: impl Fn(&str) -> ProbeStatus) -> Vec<ProbeRecord> {
        let mut out = Vec::new();
        for a in 0..4 {
            for b in 0..4 {
                if a == b {
                    continue;
                }
                for spine in ["spine0", "spine1"] {
                    let path = vec![
                        lab.port(&format!("h{a}"), "tor0"),
                        lab.port("tor0", spine),
                        lab.port(spine, "tor1"),
                        lab.port("tor1", &format!("h{b}")),
                    ];
                    let pair = (lab.rnic(a, 0), lab.rnic(b, 1));
                    out.push(probe(lab, pair, ProbeSource::InterTor, status(spine), path));
                }
            }
        }
        out
    }

    #[test]
    fn rtt_far_above_the_periods_median_is_congestion_located_by_voting() {
        let mut lab = Lab::new(4);
        // 120 ToR-mesh probes at 5 µs: the median. Over spine1, 80 µs of queueing: far
        // under the absolute 1 ms, but 16 times the median.
        let mut probes = tor_mesh(&lab, 4, |_| false);
        probes.extend(inter_tor(&lab, |spine| {
            answered(if spine == "spine1" { 80_000 } else { 8_000 })
        }));
        let report = lab.run(&probes, None);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        let problem = &report.problems[0];
        assert_eq!(problem.kind, ProblemKind::SwitchLatency);
        assert_eq!(problem.probes, 12);
        let hot = lab.inv.link_of(lab.port("tor0", "spine1"));
        assert!(problem.links.iter().any(|(l, v)| *l == hot && *v == 12));
        assert!(report.timeouts.is_empty());
        // Only the absolute bound: 80 µs is not high.
        let mut lab = Lab::new(4);
        lab.analyzer = Analyzer::new(AnalysisConfig {
            high_rtt_factor: 0.0,
            ..AnalysisConfig::default()
        });
        for r in lab.inv.rnics().to_vec() {
            lab.analyzer.uploaded(r.host, 0);
        }
        assert!(lab.run(&probes, None).problems.is_empty());
        // Path lengths alone (8 µs against a 5 µs median) are not congestion.
        let mut lab = Lab::new(4);
        let mut healthy = tor_mesh(&lab, 4, |_| false);
        healthy.extend(inter_tor(&lab, |_| answered(8_000)));
        assert!(lab.run(&healthy, None).problems.is_empty());
    }

    #[test]
    fn high_rtt_to_an_rnic_on_its_tor_mesh_is_the_rnics_and_does_not_vote() {
        let mut lab = Lab::new(4);
        // h2's NIC 1 (under tor1) pauses its ToR port (a PFC storm): a third of the ToR-mesh
        // probes to it, and the inter-ToR probes to it, come back after 400 µs.
        let storming = lab.rnic(2, 1);
        let mut probes = Vec::new();
        for round in 0..10 {
            for a in 0..4 {
                for b in 0..4 {
                    if a == b {
                        continue;
                    }
                    let (pa, pb) = (lab.rnic(a, 1), lab.rnic(b, 1));
                    let slow = pb == storming && round % 3 == 0;
                    let status = answered(if slow { 400_000 } else { 5_000 });
                    probes.push(probe(&lab, (pa, pb), ProbeSource::TorMesh, status, vec![]));
                }
            }
        }
        probes.extend(
            inter_tor(&lab, |_| answered(8_000))
                .into_iter()
                .map(|mut p| {
                    if p.target == storming {
                        p.status = answered(400_000);
                    }
                    p
                }),
        );
        let report = lab.run(&probes, None);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        let problem = &report.problems[0];
        assert_eq!(
            (problem.kind, problem.rnic),
            (ProblemKind::Rnic, Some(storming))
        );
        // 12 ToR-mesh probes (4 rounds × 3 peers) and 6 inter-ToR ones (3 probers × 2
        // spines).
        assert_eq!(problem.probes, 18);
        assert_eq!(lab.analyzer.anomalous_rnics(S), vec![storming]);
        assert!(report.timeouts.is_empty());
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let p = Percentiles::of((1..=1000).collect());
        assert_eq!(
            (p.count, p.p50, p.p90, p.p99, p.p999),
            (1000, 500, 900, 990, 999)
        );
        assert_eq!(Percentiles::of(Vec::new()), Percentiles::default());
    }
}
