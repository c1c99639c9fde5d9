//! Hostmesh (Liu et al., APNet'24 slides): probing without a controller in rail-optimised
//! clusters.
//!
//! In a rail-optimised fabric the RNICs of one host sit on different rail switches, so a
//! probe from one of a host's RNICs to another of its RNICs must cross the top tier. Each
//! host therefore probes between its own RNICs, changing the probe's 5-tuple (its UDP source
//! port) at every probe so that over time the probes take every ECMP path above the rails —
//! no pinglist, no controller, no other host's comm info (the slides: "Need No
//! Controller!"). Both ends are on one host:
//!
//! - **One-way latency** is ③ − ② (receive completion minus send completion, one clock), and
//!   the host's **processing delay** (④ − ①) − (③ − ②) — with no responder on another host,
//!   no CPU noise from a busy responder.
//! - **One-way loss**: the host knows whether the probe arrived; a lost probe lost it on its
//!   own path, not on an ACK's way back — the slides' "locate network problems more
//!   accurately".
//!
//! Analysis of one period ([`analyse`]): every probe's path is known (path tracing), so each
//! element a probe crosses — the source RNIC (its link up), the destination RNIC (its link
//! down) and every switch egress port in between, one direction of a link each — has a loss
//! ratio. Greedily (the slides' "filter out anomalous probes caused by RNICs", then Alg. 1
//! voting, in one explain-away loop): of the elements losing more than
//! [`HostmeshConfig::loss_share`] of their probes, the one with the most lost probes
//! weighed by its ratio is faulty; every probe through it is explained and set
//! aside; repeat. An RNIC that fails loses the probes of every path to and from it; a link
//! that fails loses only the probes
//! that cross it, in the directions that fail. Places the probes cannot tell apart are
//! reported together (with two rails, rail A → spine and spine → rail B carry the very same
//! probes). The same loop over probes with a one-way latency far above the period's median
//! finds latency problems.

use std::collections::{BTreeMap, BTreeSet};

use hawkmesh_wire::topology::{NodeId, PortRef};

use crate::analysis::Percentiles;
use crate::inventory::{Inventory, RnicId};
use crate::pinglist::ROCE_SOURCE_PORT_MIN;
use crate::rng::SplitMix64;

/// Hostmesh's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostmeshConfig {
    /// Probes per second each RNIC sends.
    pub pps_per_rnic: f64,
    /// Seeds the source ports.
    pub seed: u64,
    /// An element losing more than this share of the probes through it is faulty.
    pub loss_share: f64,
    /// ... and so is one whose probes are this share slow.
    pub slow_share: f64,
    /// A one-way latency above this multiple of the period's median is slow.
    pub slow_factor: f64,
    /// Probes through an element needed before its ratio is judged.
    pub min_probes: u32,
    /// Lost (or slow) probes through it needed as well.
    pub min_anomalous: u32,
}

impl Default for HostmeshConfig {
    fn default() -> Self {
        HostmeshConfig {
            pps_per_rnic: 20.0,
            seed: 1,
            loss_share: 0.05,
            slow_share: 0.2,
            // HAWKEYE's trigger range ends at 500 % of the usual RTT.
            slow_factor: 5.0,
            min_probes: 10,
            min_anomalous: 3,
        }
    }
}

/// One host's probing plan: every ordered pair of its RNICs on different switches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPlan {
    /// The host.
    pub host: NodeId,
    /// (source, destination) RNICs.
    pub pairs: Vec<(RnicId, RnicId)>,
}

/// Every host's plan; hosts whose RNICs share one switch have none (their probes would not
/// leave it: that is the Clos case, where Hostmesh needs a controller after all).
pub fn plan(inventory: &Inventory) -> Vec<HostPlan> {
    let mut by_host: BTreeMap<NodeId, Vec<RnicId>> = BTreeMap::new();
    for (id, rnic) in inventory.rnics().iter().enumerate() {
        by_host.entry(rnic.host).or_default().push(id as RnicId);
    }
    by_host
        .into_iter()
        .filter_map(|(host, rnics)| {
            let tor = |r: RnicId| inventory.rnic(r).map(|r| r.tor);
            let pairs: Vec<(RnicId, RnicId)> = rnics
                .iter()
                .flat_map(|a| rnics.iter().map(move |b| (*a, *b)))
                .filter(|(a, b)| a != b && tor(*a) != tor(*b))
                .collect();
            (!pairs.is_empty()).then_some(HostPlan { host, pairs })
        })
        .collect()
}

/// The UDP source port of probe `n` of `pair` (a RoCEv2 port, different at every probe: the
/// 5-tuple keeps changing so that ECMP spreads the probes over every path).
pub fn source_port(seed: u64, pair: (RnicId, RnicId), n: u64) -> u16 {
    let mut rng = SplitMix64::new(
        seed ^ (u64::from(pair.0) << 40) ^ (u64::from(pair.1) << 20) ^ n.wrapping_mul(0x9E37),
    );
    let span = u64::from(u16::MAX - ROCE_SOURCE_PORT_MIN) + 1;
    ROCE_SOURCE_PORT_MIN + rng.below(span) as u16
}

/// How a one-way probe ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OneWay {
    /// It arrived.
    Arrived {
        /// ③ − ②.
        latency_ns: u64,
        /// (④ − ①) − (③ − ②).
        processing_ns: u64,
    },
    /// It never arrived within the timeout.
    Lost,
}

/// One probe between two RNICs of a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OneWayRecord {
    /// Sending RNIC.
    pub src: RnicId,
    /// Receiving RNIC.
    pub dst: RnicId,
    /// ①, ns.
    pub sent_ns: u64,
    /// How it ended.
    pub outcome: OneWay,
    /// Its path (egress ports, the sending NIC first), from path tracing.
    pub path: Vec<PortRef>,
}

/// What a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HostmeshProblemKind {
    /// An RNIC (or its link) loses probes to and from it.
    RnicDrops,
    /// A switch link loses probes, in the directions listed.
    LinkDrops,
    /// An RNIC's probes are slow (its port paused, a PFC storm).
    RnicLatency,
    /// A switch link's probes are slow.
    LinkLatency,
}

/// A located problem. When the probes cannot tell several places apart (a host with two
/// RNICs only probes between those two, so either could be the one failing), all are listed.
#[derive(Clone, Debug, PartialEq)]
pub struct HostmeshProblem {
    /// What.
    pub kind: HostmeshProblemKind,
    /// The suspect RNICs (RNIC problems).
    pub rnics: Vec<RnicId>,
    /// The failing directions of the suspect links, each named by its egress port (link
    /// problems).
    pub directions: Vec<PortRef>,
    /// Anomalous probes explained.
    pub anomalous: u32,
    /// Probes through it.
    pub probes: u32,
}

/// One period's result.
#[derive(Clone, Debug, PartialEq)]
pub struct HostmeshReport {
    /// Start, ns.
    pub start_ns: u64,
    /// End, ns.
    pub end_ns: u64,
    /// Probes.
    pub probes: u64,
    /// Lost ones.
    pub lost: u64,
    /// One-way latency of the arrived.
    pub latency: Percentiles,
    /// Hosts' processing delay.
    pub processing: Percentiles,
    /// Located problems, RNICs first.
    pub problems: Vec<HostmeshProblem>,
}

/// An element a probe crosses: an RNIC sending (its link up), an RNIC receiving (its link
/// down), one direction of a switch link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Element {
    RnicTx(RnicId),
    RnicRx(RnicId),
    Egress(PortRef),
}

impl Element {
    fn rnic(self) -> Option<RnicId> {
        match self {
            Element::RnicTx(r) | Element::RnicRx(r) => Some(r),
            Element::Egress(_) => None,
        }
    }
}

fn elements(inventory: &Inventory, record: &OneWayRecord) -> Vec<Element> {
    let mut out = vec![Element::RnicTx(record.src), Element::RnicRx(record.dst)];
    // Host links (either end) are the RNICs'; the rest are one direction of a switch link.
    out.extend(
        record
            .path
            .iter()
            .filter(|p| !inventory.is_access_port(**p))
            .map(|p| Element::Egress(*p)),
    );
    out.sort();
    out.dedup();
    out
}

/// What one round of the explain-away loop found: elements that explain the same anomalous
/// probes (the probes cannot tell them apart: all are suspects), with the counts.
struct Finding {
    elements: Vec<Element>,
    anomalous: u32,
    probes: u32,
}

/// The explain-away loop over the records `anomalous` marks.
///
/// An element's ratio is its anomalous share; an RNIC whose probes took several fabric
/// paths is a candidate only when its anomalous probes lie on more than one of them (an
/// RNIC that fails loses probes on every path, while a good RNIC's probes that cross a bad
/// link fail on that path only). The highest score — anomalous probes × ratio — wins; ties
/// go to the higher ratio, then to an element on a physical link already found (one link
/// failing both ways is likelier than two links failing), then to an RNIC, then to the
/// lowest id. Every element whose unexplained anomalous probes
/// are exactly the winner's is reported with it.
fn explain(
    inventory: &Inventory,
    records: &[OneWayRecord],
    anomalous: &dyn Fn(&OneWayRecord) -> bool,
    share: f64,
    config: &HostmeshConfig,
) -> Vec<Finding> {
    let crossed: Vec<Vec<Element>> = records.iter().map(|r| elements(inventory, r)).collect();
    // The fabric part of a probe's path (what its RNICs do not own).
    let class: Vec<Vec<Element>> = crossed
        .iter()
        .map(|e| {
            e.iter()
                .filter(|x| matches!(x, Element::Egress(_)))
                .copied()
                .collect()
        })
        .collect();
    let bad: Vec<bool> = records.iter().map(anomalous).collect();
    let mut explained = vec![false; records.len()];
    let mut found: Vec<Finding> = Vec::new();
    let mut blamed_links: BTreeSet<PortRef> = BTreeSet::new();
    loop {
        // Per element: anomalous, probes, the anomalous records, per path class (a, n).
        type Count = (u32, u32, Vec<usize>, BTreeMap<usize, (u32, u32)>);
        let mut counts: BTreeMap<Element, Count> = BTreeMap::new();
        let mut class_ids: BTreeMap<&[Element], usize> = BTreeMap::new();
        for (i, elements) in crossed.iter().enumerate() {
            if explained[i] {
                continue;
            }
            let next = class_ids.len();
            let cid = *class_ids.entry(class[i].as_slice()).or_insert(next);
            for e in elements {
                let c = counts.entry(*e).or_default();
                c.1 += 1;
                let per = c.3.entry(cid).or_default();
                per.1 += 1;
                if bad[i] {
                    c.0 += 1;
                    c.2.push(i);
                    per.0 += 1;
                }
            }
        }
        let floor = (config.min_probes / 4).max(2);
        let ratio = |e: &Element, c: &Count| -> f64 {
            let overall = f64::from(c.0) / f64::from(c.1.max(1));
            match e {
                Element::RnicTx(_) | Element::RnicRx(_) => {
                    // An RNIC's own failure shows on every path it uses: when its probes
                    // took several, its anomalous ones must lie on more than one.
                    let paths = c.3.values().filter(|(_, n)| *n >= floor).count();
                    let failing = c.3.values().filter(|(a, _)| *a > 0).count();
                    if paths <= 1 || failing >= 2 {
                        overall
                    } else {
                        0.0
                    }
                }
                Element::Egress(_) => overall,
            }
        };
        // Votes weighed by how consistently the element fails (anomalous × ratio): a
        // link all of whose probes fail beats an RNIC that shares a few of them, and an
        // RNIC failing everything beats a link it merely crosses.
        let score = |r: f64, c: &Count| f64::from(c.0) * r;
        let on_blamed = |e: &Element| match e {
            Element::Egress(p) => blamed_links.contains(&inventory.link_of(*p)),
            Element::RnicTx(_) | Element::RnicRx(_) => false,
        };
        let candidates: Vec<(Element, f64, &Count)> = counts
            .iter()
            .filter(|(_, c)| c.1 >= config.min_probes && c.0 >= config.min_anomalous)
            .map(|(e, c)| (*e, ratio(e, c), c))
            .filter(|(_, r, _)| *r > share)
            .collect();
        let best = candidates.iter().max_by(|(ea, ra, ca), (eb, rb, cb)| {
            score(*ra, ca)
                .total_cmp(&score(*rb, cb))
                .then(ra.total_cmp(rb))
                .then_with(|| on_blamed(ea).cmp(&on_blamed(eb)))
                .then_with(|| ea.rnic().is_some().cmp(&eb.rnic().is_some()))
                .then_with(|| eb.cmp(ea))
        });
        let Some((best, _, best_count)) = best else {
            break;
        };
        let group: Vec<Element> = candidates
            .iter()
            .filter(|(_, _, c)| c.2 == best_count.2)
            .map(|(e, _, _)| *e)
            .collect();
        for e in &group {
            if let Element::Egress(p) = e {
                blamed_links.insert(inventory.link_of(*p));
            }
        }
        found.push(Finding {
            elements: group,
            anomalous: best_count.0,
            probes: best_count.1,
        });
        let best = *best;
        for (i, elements) in crossed.iter().enumerate() {
            if elements.contains(&best) {
                explained[i] = true;
            }
        }
    }
    found
}

/// The problems of one loop's findings: suspect RNICs, and links with their failing
/// directions (the findings on the same physical links merged).
fn problems(
    inventory: &Inventory,
    found: Vec<Finding>,
    rnic_kind: HostmeshProblemKind,
    link_kind: HostmeshProblemKind,
) -> Vec<HostmeshProblem> {
    let mut rnic_problems: BTreeMap<Vec<RnicId>, HostmeshProblem> = BTreeMap::new();
    let mut links: BTreeMap<Vec<PortRef>, HostmeshProblem> = BTreeMap::new();
    for finding in found {
        let mut rnics: Vec<RnicId> = finding.elements.iter().filter_map(|e| e.rnic()).collect();
        rnics.sort_unstable();
        rnics.dedup();
        let directions: Vec<PortRef> = finding
            .elements
            .iter()
            .filter_map(|e| match e {
                Element::Egress(p) => Some(*p),
                Element::RnicTx(_) | Element::RnicRx(_) => None,
            })
            .collect();
        if !rnics.is_empty() {
            // Its sending and its receiving side found apart are one problem.
            let problem = rnic_problems
                .entry(rnics.clone())
                .or_insert(HostmeshProblem {
                    kind: rnic_kind,
                    rnics,
                    directions: Vec::new(),
                    anomalous: 0,
                    probes: 0,
                });
            problem.anomalous += finding.anomalous;
            problem.probes += finding.probes;
            continue;
        }
        let mut key: Vec<PortRef> = directions.iter().map(|p| inventory.link_of(*p)).collect();
        key.sort();
        key.dedup();
        let problem = links.entry(key).or_insert(HostmeshProblem {
            kind: link_kind,
            rnics: Vec::new(),
            directions: Vec::new(),
            anomalous: 0,
            probes: 0,
        });
        problem.directions.extend(directions);
        problem.directions.sort();
        problem.directions.dedup();
        problem.anomalous += finding.anomalous;
        problem.probes += finding.probes;
    }
    let mut out: Vec<HostmeshProblem> = rnic_problems.into_values().collect();
    out.extend(links.into_values());
    out
}

/// Analyses the one-way probes of the period `[start_ns, end_ns)`.
pub fn analyse(
    inventory: &Inventory,
    records: &[OneWayRecord],
    (start_ns, end_ns): (u64, u64),
    config: &HostmeshConfig,
) -> HostmeshReport {
    let records: Vec<OneWayRecord> = records
        .iter()
        .filter(|r| (start_ns..end_ns).contains(&r.sent_ns))
        .cloned()
        .collect();
    let arrived = |f: fn(&OneWay) -> Option<u64>| -> Vec<u64> {
        records.iter().filter_map(|r| f(&r.outcome)).collect()
    };
    let latency = Percentiles::of(arrived(|o| match o {
        OneWay::Arrived { latency_ns, .. } => Some(*latency_ns),
        OneWay::Lost => None,
    }));
    let processing = Percentiles::of(arrived(|o| match o {
        OneWay::Arrived { processing_ns, .. } => Some(*processing_ns),
        OneWay::Lost => None,
    }));
    let lost = records.iter().filter(|r| r.outcome == OneWay::Lost).count() as u64;
    let drops = explain(
        inventory,
        &records,
        &|r| r.outcome == OneWay::Lost,
        config.loss_share,
        config,
    );
    let mut found = problems(
        inventory,
        drops,
        HostmeshProblemKind::RnicDrops,
        HostmeshProblemKind::LinkDrops,
    );
    // Latency: among the probes that arrived, those far above the period's median.
    let median = latency.p50;
    let arrived_records: Vec<OneWayRecord> = records
        .iter()
        .filter(|r| matches!(r.outcome, OneWay::Arrived { .. }))
        .cloned()
        .collect();
    let slow = |r: &OneWayRecord| match r.outcome {
        OneWay::Arrived { latency_ns, .. } => {
            latency_ns as f64 > config.slow_factor * median as f64
        }
        OneWay::Lost => false,
    };
    let dropped: BTreeSet<(Vec<RnicId>, Vec<PortRef>)> = found
        .iter()
        .map(|p| (p.rnics.clone(), p.directions.clone()))
        .collect();
    let latencies = problems(
        inventory,
        explain(
            inventory,
            &arrived_records,
            &slow,
            config.slow_share,
            config,
        ),
        HostmeshProblemKind::RnicLatency,
        HostmeshProblemKind::LinkLatency,
    );
    // A place already losing probes is reported once, as drops.
    found.extend(
        latencies
            .into_iter()
            .filter(|p| !dropped.contains(&(p.rnics.clone(), p.directions.clone()))),
    );
    found.sort_by_key(|p| (p.kind, p.rnics.clone(), p.directions.clone()));
    HostmeshReport {
        start_ns,
        end_ns,
        probes: records.len() as u64,
        lost,
        latency,
        processing,
        problems: found,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hawkmesh_wire::topology::{FabricTopology, LinkDesc, NodeDesc, NodeKind};

    const RAILS: u16 = 3;
    const SPINES: u16 = 2;
    const HOSTS: u16 = 2;
    /// Node ids: rails 0..3, spines 3..5, hosts 5..7.
    const SPINE0: NodeId = RAILS as NodeId;
    const HOST0: NodeId = (RAILS + SPINES) as NodeId;

    /// Two hosts with three NICs, NIC r on rail switch r; every rail under spine0 and
    /// spine1. Rail r ports 0–1 face the hosts, 2–3 the spines; spine s port r faces rail r.
    fn rails() -> FabricTopology {
        let mut nodes = Vec::new();
        for r in 0..RAILS {
            nodes.push((format!("rail{r}"), NodeKind::Switch, None));
        }
        for s in 0..SPINES {
            nodes.push((format!("spine{s}"), NodeKind::Switch, None));
        }
        for h in 0..HOSTS {
            nodes.push((format!("h{h}"), NodeKind::Host, Some([10, 0, h as u8, 1])));
        }
        let nodes = nodes
            .into_iter()
            .enumerate()
            .map(|(i, (name, kind, ipv4))| NodeDesc {
                id: i as NodeId,
                name,
                kind,
                tier: None,
                ipv4,
            })
            .collect();
        let link = |a: PortRef, b: PortRef| LinkDesc {
            a,
            b,
            gbps: 100.0,
            delay_ns: 1000,
        };
        let mut links = Vec::new();
        for h in 0..HOSTS {
            for r in 0..RAILS {
                links.push(link(
                    port(HOST0 + NodeId::from(h), r),
                    port(NodeId::from(r), h),
                ));
            }
        }
        for r in 0..RAILS {
            for s in 0..SPINES {
                links.push(link(
                    port(NodeId::from(r), HOSTS + s),
                    port(SPINE0 + NodeId::from(s), r),
                ));
            }
        }
        FabricTopology { nodes, links }
    }

    fn port(node: NodeId, port: u16) -> PortRef {
        PortRef { node, port }
    }

    fn rnic(inv: &Inventory, h: u16, nic: u16) -> RnicId {
        inv.rnics()
            .iter()
            .position(|r| r.host == HOST0 + NodeId::from(h) && r.nic == nic)
            .unwrap() as RnicId
    }

    /// A probe of host h from NIC `from` to NIC `to` over spine s.
    fn record(
        inv: &Inventory,
        h: u16,
        (from, to): (u16, u16),
        s: u16,
        outcome: OneWay,
    ) -> OneWayRecord {
        OneWayRecord {
            src: rnic(inv, h, from),
            dst: rnic(inv, h, to),
            sent_ns: 1,
            outcome,
            path: vec![
                port(HOST0 + NodeId::from(h), from),
                port(NodeId::from(from), HOSTS + s),
                port(SPINE0 + NodeId::from(s), to),
                port(NodeId::from(to), h),
            ],
        }
    }

    fn ok(latency_ns: u64) -> OneWay {
        OneWay::Arrived {
            latency_ns,
            processing_ns: 2_000,
        }
    }

    /// 10 rounds of every host's every pair over both spines; `outcome(h, pair, s, round)`.
    fn probes(
        inv: &Inventory,
        outcome: impl Fn(u16, (u16, u16), u16, usize) -> OneWay,
    ) -> Vec<OneWayRecord> {
        let mut out = Vec::new();
        for i in 0..10 {
            for h in 0..HOSTS {
                for from in 0..RAILS {
                    for to in (0..RAILS).filter(|t| *t != from) {
                        for s in 0..SPINES {
                            out.push(record(inv, h, (from, to), s, outcome(h, (from, to), s, i)));
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_host_probes_its_rnics_across_rails_with_changing_source_ports() {
        let inv = Inventory::from_topology(&rails()).unwrap();
        let plans = plan(&inv);
        assert_eq!(plans.len(), 2);
        for p in &plans {
            assert_eq!(
                p.pairs.len(),
                6,
                "both directions between each two of its rails"
            );
        }
        let ports: BTreeSet<u16> = (0..100).map(|n| source_port(1, (0, 1), n)).collect();
        assert!(ports.len() > 90, "the 5-tuple changes at every probe");
        assert!(ports.iter().all(|p| *p >= ROCE_SOURCE_PORT_MIN));
        assert_eq!(source_port(1, (0, 1), 7), source_port(1, (0, 1), 7));
    }

    #[test]
    fn a_link_losing_one_direction_is_located_with_its_direction() {
        let inv = Inventory::from_topology(&rails()).unwrap();
        // spine1 → rail1 loses a third of what it carries (from rail0 and from rail2).
        let records = probes(&inv, |_, (_, to), s, i| {
            if to == 1 && s == 1 && i % 3 == 0 {
                OneWay::Lost
            } else {
                ok(5_000)
            }
        });
        let report = analyse(&inv, &records, (0, 10), &HostmeshConfig::default());
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        let p = &report.problems[0];
        assert_eq!(p.kind, HostmeshProblemKind::LinkDrops);
        assert_eq!(
            p.directions,
            vec![port(SPINE0 + 1, 1)],
            "spine1's egress toward rail1 only, not rail1 → spine1"
        );
        assert_eq!(report.lost, 16);
    }

    #[test]
    fn an_rnic_losing_everything_is_the_rnics_and_not_its_links() {
        let inv = Inventory::from_topology(&rails()).unwrap();
        // h1's NIC 0 is down: every probe from or to it is lost, over both spines.
        let records = probes(&inv, |h, (from, to), _, _| {
            if h == 1 && (from == 0 || to == 0) {
                OneWay::Lost
            } else {
                ok(5_000)
            }
        });
        let report = analyse(&inv, &records, (0, 10), &HostmeshConfig::default());
        let found: Vec<_> = report
            .problems
            .iter()
            .map(|p| (p.kind, p.rnics.clone()))
            .collect();
        assert_eq!(
            found,
            vec![(HostmeshProblemKind::RnicDrops, vec![rnic(&inv, 1, 0)])]
        );
    }

    #[test]
    fn a_slow_link_is_latency_and_a_healthy_period_has_no_problem() {
        let inv = Inventory::from_topology(&rails()).unwrap();
        // Queueing on rail2 → spine0 (an uneven ECMP load there).
        let records = probes(&inv, |_, (from, _), s, _| {
            ok(if from == 2 && s == 0 { 80_000 } else { 5_000 })
        });
        let report = analyse(&inv, &records, (0, 10), &HostmeshConfig::default());
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert_eq!(report.problems[0].kind, HostmeshProblemKind::LinkLatency);
        assert_eq!(report.problems[0].directions, vec![port(2, HOSTS)]);
        let healthy = probes(&inv, |_, _, _, _| ok(5_000));
        let report = analyse(&inv, &healthy, (0, 10), &HostmeshConfig::default());
        assert!(report.problems.is_empty());
        assert_eq!((report.probes, report.lost), (240, 0));
        assert_eq!(report.latency.p50, 5_000);
    }
}
