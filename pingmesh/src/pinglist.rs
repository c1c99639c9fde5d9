//! The controller's pinglists (R-Pingmesh §4.2, "Cluster Monitoring"):
//!
//! - ToR-mesh: every RNIC probes every other RNIC under its ToR, cycling through them at
//!   [`PinglistConfig::tor_mesh_pps`] (10 probes/s per RNIC in the paper, §5) — enough to
//!   call an RNIC anomalous when > 10 % of the probes to it time out.
//! - Inter-ToR: each ToR gets k random 5-tuples, k from Eq. 1 over the parallel paths to the
//!   other ToRs at P = [`PinglistConfig::coverage_probability`] (0.99), grouped by source
//!   RNIC into that RNIC's inter-ToR pinglist. Each 5-tuple is probed at
//!   [`PinglistConfig::link_target_pps`], so a link above the ToRs that one of them covers
//!   gets at least that many probes per second and direction (10 in the paper); the RNIC's
//!   probe interval follows from how many 5-tuples it carries.
//! - Header diversity (beyond the paper): Eq. 1 covers the paths, not the headers on them.
//!   A fault that drops only some 5-tuples (an ACL matching a range of source ports, a bad
//!   hash bucket) is met by a path's few 5-tuples only by chance; the paper relies on the
//!   hourly rotation for it. With [`PinglistConfig::header_fault_share`] = f, each ToR gets
//!   at least m = ⌈ln(1−P)/ln(1−f)⌉ 5-tuples per parallel path, so that a fault hitting a
//!   share f of the source ports on a link meets one of the link's 5-tuples with probability
//!   P within a period. The probes per second stay those of Eq. 1's k: the 5-tuples share
//!   them (each probed at `link_target_pps` · k / k'), so every link still gets its target
//!   rate and the probing overhead does not grow.
//! - Rotation: [`Pinglists::rotate`] replaces a share of each ToR's 5-tuples (20 % every
//!   hour in the paper) so that problems only some 5-tuples trigger (an ACL that drops a few
//!   source ports) are met eventually.
//!
//! Every random choice comes from one seeded generator: the same inventory, configuration
//! and seed give the same pinglists, and rotations replay identically.

use std::collections::BTreeMap;

use hawkmesh_wire::topology::NodeId;
use thiserror::Error;

use crate::coverage::{five_tuples_for_coverage, CoverageError};
use crate::inventory::{Inventory, RnicId};
use crate::rng::SplitMix64;

/// Lowest RoCEv2 UDP source port ([`hawkmesh_wire::roce::UDP_SPORT_MIN`]: rdma-core maps a
/// flow label to `((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000`).
pub const ROCE_SOURCE_PORT_MIN: u16 = hawkmesh_wire::roce::UDP_SPORT_MIN;

/// The controller's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PinglistConfig {
    /// P of Eq. 1.
    pub coverage_probability: f64,
    /// ToR-mesh probes per second sent by each RNIC.
    pub tor_mesh_pps: f64,
    /// Inter-ToR probes per second on each 5-tuple (per direction of each covered link).
    pub link_target_pps: f64,
    /// Share of each ToR's inter-ToR 5-tuples replaced by [`Pinglists::rotate`].
    pub rotate_fraction: f64,
    /// The smallest share of the source ports on a link a header-dependent fault (an ACL)
    /// may drop and still be met within a period with probability P (0: Eq. 1 alone, as
    /// the paper).
    pub header_fault_share: f64,
    /// Seed of every random choice.
    pub seed: u64,
}

impl Default for PinglistConfig {
    fn default() -> Self {
        PinglistConfig {
            coverage_probability: 0.99,
            tor_mesh_pps: 10.0,
            link_target_pps: 10.0,
            rotate_fraction: 0.2,
            header_fault_share: 0.1,
            seed: 1,
        }
    }
}

/// Why no pinglists were built.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum PinglistError {
    /// Eq. 1 could not be evaluated.
    #[error("ToR {tor}: {source}")]
    Coverage {
        /// The ToR's name.
        tor: String,
        /// Why.
        source: CoverageError,
    },
    /// A rate or share out of range.
    #[error("pinglist configuration: {0}")]
    Config(String),
}

/// One inter-ToR 5-tuple from an RNIC: the destination RNIC and the UDP source port (the
/// rest of the 5-tuple is the two RNICs' addresses and UDP port 4791).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InterTorTarget {
    /// Where the probe goes.
    pub dst: RnicId,
    /// Its UDP source port (≥ [`ROCE_SOURCE_PORT_MIN`]).
    pub src_port: u16,
}

/// What one RNIC probes.
#[derive(Clone, Debug, PartialEq)]
pub struct RnicPinglist {
    /// The prober.
    pub rnic: RnicId,
    /// The other RNICs under its ToR.
    pub tor_mesh: Vec<RnicId>,
    /// Its inter-ToR 5-tuples.
    pub inter_tor: Vec<InterTorTarget>,
    /// Time between two ToR-mesh probes (`None` when alone under its ToR).
    pub tor_mesh_interval_ns: Option<u64>,
    /// Time between two inter-ToR probes (`None` without inter-ToR 5-tuples).
    pub inter_tor_interval_ns: Option<u64>,
}

impl RnicPinglist {
    /// Probes per second this RNIC sends.
    pub fn probes_per_second(&self) -> f64 {
        let rate = |interval: Option<u64>| interval.map_or(0.0, |ns| 1e9 / ns as f64);
        rate(self.tor_mesh_interval_ns) + rate(self.inter_tor_interval_ns)
    }
}

/// One ToR's inter-ToR 5-tuples.
#[derive(Clone, Debug)]
struct TorTuples {
    chosen: Vec<(RnicId, InterTorTarget)>,
    /// Probes per second on each.
    pps: f64,
}

/// m of the header-diversity rule: 5-tuples per path so that a fault dropping a share
/// `share` of the source ports meets one with probability `p` (0 when `share` is 0).
pub fn tuples_per_path_for_headers(p: f64, share: f64) -> u32 {
    if share <= 0.0 {
        return 0;
    }
    ((1.0 - p).ln() / (1.0 - share).ln()).ceil().max(1.0) as u32
}

/// Every RNIC's pinglist, and the state to rotate them.
#[derive(Clone, Debug)]
pub struct Pinglists {
    config: PinglistConfig,
    rng: SplitMix64,
    /// Per ToR: its 5-tuples as (source RNIC, target), and each 5-tuple's probes per second.
    tuples: BTreeMap<NodeId, TorTuples>,
    lists: Vec<RnicPinglist>,
    generation: u64,
}

impl Pinglists {
    /// The pinglists of every RNIC of `inventory`.
    pub fn build(inventory: &Inventory, config: PinglistConfig) -> Result<Self, PinglistError> {
        for (name, value) in [
            ("tor_mesh_pps", config.tor_mesh_pps),
            ("link_target_pps", config.link_target_pps),
        ] {
            if !(value.is_finite() && value > 0.0 && value <= 1e6) {
                return Err(PinglistError::Config(format!(
                    "{name} = {value}: must be above 0 and at most 1e6"
                )));
            }
        }
        if !(0.0..1.0).contains(&config.header_fault_share) {
            return Err(PinglistError::Config(format!(
                "header_fault_share = {}: must be in [0, 1)",
                config.header_fault_share
            )));
        }
        if !(0.0..=1.0).contains(&config.rotate_fraction) {
            return Err(PinglistError::Config(format!(
                "rotate_fraction = {}: must be in [0, 1]",
                config.rotate_fraction
            )));
        }
        let mut rng = SplitMix64::new(config.seed);
        let mut tuples = BTreeMap::new();
        for (tor, members) in inventory.by_tor() {
            let n = inventory.parallel_paths_from(*tor);
            if n == 0 {
                continue;
            }
            let paths_k =
                five_tuples_for_coverage(n, config.coverage_probability).map_err(|source| {
                    PinglistError::Coverage {
                        tor: inventory.name(*tor).to_owned(),
                        source,
                    }
                })?;
            let per_path =
                tuples_per_path_for_headers(config.coverage_probability, config.header_fault_share);
            let k = paths_k.max(n.saturating_mul(per_path));
            // Sources take turns (a shuffled round-robin) so that no RNIC carries much
            // more than k / |RNICs under the ToR| of them.
            let mut sources = members.clone();
            shuffle(&mut sources, &mut rng);
            let chosen = (0..k as usize)
                .map(|i| {
                    let src = sources[i % sources.len()];
                    (src, draw_target(inventory, *tor, &mut rng))
                })
                .collect();
            tuples.insert(
                *tor,
                TorTuples {
                    chosen,
                    pps: config.link_target_pps * f64::from(paths_k) / f64::from(k),
                },
            );
        }
        let mut lists = Pinglists {
            config,
            rng,
            tuples,
            lists: Vec::new(),
            generation: 0,
        };
        lists.assemble(inventory);
        Ok(lists)
    }

    /// Replaces ⌈fraction · k⌉ of each ToR's 5-tuples with fresh ones (same sources, new
    /// destinations and source ports); returns how many were replaced.
    pub fn rotate(&mut self, inventory: &Inventory) -> usize {
        let mut replaced = 0;
        let fraction = self.config.rotate_fraction;
        for (tor, TorTuples { chosen, .. }) in self.tuples.iter_mut() {
            let count = ((chosen.len() as f64 * fraction).ceil() as usize).min(chosen.len());
            let mut indices: Vec<usize> = (0..chosen.len()).collect();
            shuffle(&mut indices, &mut self.rng);
            for index in indices.into_iter().take(count) {
                chosen[index].1 = draw_target(inventory, *tor, &mut self.rng);
                replaced += 1;
            }
        }
        self.generation += 1;
        self.assemble(inventory);
        replaced
    }

    fn assemble(&mut self, inventory: &Inventory) {
        let mut inter: BTreeMap<RnicId, (Vec<InterTorTarget>, f64)> = BTreeMap::new();
        for tor in self.tuples.values() {
            for (src, target) in &tor.chosen {
                let entry = inter.entry(*src).or_default();
                entry.0.push(*target);
                entry.1 = tor.pps;
            }
        }
        let interval = |pps: f64| (1e9 / pps).round().max(1.0) as u64;
        self.lists = (0..inventory.rnics().len() as RnicId)
            .map(|rnic| {
                let tor = inventory.rnics()[rnic as usize].tor;
                let tor_mesh: Vec<RnicId> = inventory.by_tor()[&tor]
                    .iter()
                    .copied()
                    .filter(|other| *other != rnic)
                    .collect();
                let (inter_tor, pps) = inter.remove(&rnic).unwrap_or_default();
                RnicPinglist {
                    rnic,
                    tor_mesh_interval_ns: (!tor_mesh.is_empty())
                        .then(|| interval(self.config.tor_mesh_pps)),
                    inter_tor_interval_ns: (!inter_tor.is_empty())
                        .then(|| interval(pps * inter_tor.len() as f64)),
                    tor_mesh,
                    inter_tor,
                }
            })
            .collect();
    }

    /// Every RNIC's pinglist, indexed by [`RnicId`].
    pub fn lists(&self) -> &[RnicPinglist] {
        &self.lists
    }

    /// How many inter-ToR 5-tuples `tor` has: k of Eq. 1, or more for header diversity
    /// (`None` for a ToR without another ToR to reach).
    pub fn five_tuples_of(&self, tor: NodeId) -> Option<u32> {
        self.tuples.get(&tor).map(|t| t.chosen.len() as u32)
    }

    /// How many rotations have been applied.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// A destination RNIC under another ToR than `tor` (uniform over the other ToRs, then over
/// their RNICs) and a RoCEv2 source port.
fn draw_target(inventory: &Inventory, tor: NodeId, rng: &mut SplitMix64) -> InterTorTarget {
    let others: Vec<&Vec<RnicId>> = inventory
        .by_tor()
        .iter()
        .filter(|(other, _)| **other != tor)
        .map(|(_, members)| members)
        .collect();
    let members = rng.pick(&others).copied().map_or(&[][..], Vec::as_slice);
    let dst = rng.pick(members).copied().unwrap_or(0);
    let span = u64::from(u16::MAX - ROCE_SOURCE_PORT_MIN) + 1;
    InterTorTarget {
        dst,
        src_port: ROCE_SOURCE_PORT_MIN + rng.below(span) as u16,
    }
}

/// Fisher–Yates.
fn shuffle<T>(items: &mut [T], rng: &mut SplitMix64) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::tests::leaf_spine;
    use std::collections::BTreeSet;

    /// Eq. 1 alone (the paper's lists).
    fn build(seed: u64) -> (Inventory, Pinglists) {
        let inv = Inventory::from_topology(&leaf_spine(4, 3, 4)).unwrap();
        let lists = Pinglists::build(
            &inv,
            PinglistConfig {
                seed,
                header_fault_share: 0.0,
                ..PinglistConfig::default()
            },
        )
        .unwrap();
        (inv, lists)
    }

    #[test]
    fn header_diversity_adds_tuples_per_path_without_adding_probes() {
        // m = ⌈ln 0.01 / ln 0.9⌉ = ⌈43.7⌉ = 44 per path; ⌈ln 0.01 / ln 0.75⌉ = ⌈16.008⌉ = 17
        // (0.75^16 = 0.01002 is just above 1 − P).
        assert_eq!(tuples_per_path_for_headers(0.99, 0.1), 44);
        assert_eq!(tuples_per_path_for_headers(0.99, 0.25), 17);
        assert_eq!(tuples_per_path_for_headers(0.99, 0.0), 0);
        let inv = Inventory::from_topology(&leaf_spine(4, 3, 4)).unwrap();
        let (_, paper) = build(1);
        let diverse = Pinglists::build(&inv, PinglistConfig::default()).unwrap();
        for (tor, members) in inv.by_tor() {
            // Four spines: 4 × 44 = 176 5-tuples instead of Eq. 1's 21.
            assert_eq!(diverse.five_tuples_of(*tor), Some(176));
            let ports: BTreeSet<u16> = members
                .iter()
                .flat_map(|r| diverse.lists()[*r as usize].inter_tor.iter())
                .map(|t| t.src_port)
                .collect();
            assert!(ports.len() > 150, "{} distinct source ports", ports.len());
            // The ToR sends as many inter-ToR probes per second as with Eq. 1's k alone.
            let rate = |lists: &Pinglists| -> f64 {
                members
                    .iter()
                    .map(|r| {
                        let l = &lists.lists()[*r as usize];
                        l.inter_tor_interval_ns.map_or(0.0, |ns| 1e9 / ns as f64)
                    })
                    .sum()
            };
            assert!(
                (rate(&diverse) - rate(&paper)).abs() < 0.01,
                "{} vs {}",
                rate(&diverse),
                rate(&paper)
            );
            assert!((rate(&paper) - 210.0).abs() < 0.01);
        }
        let bad = PinglistConfig {
            header_fault_share: 1.0,
            ..PinglistConfig::default()
        };
        assert_eq!(
            Pinglists::build(&inv, bad).unwrap_err().to_string(),
            "pinglist configuration: header_fault_share = 1: must be in [0, 1)"
        );
    }

    #[test]
    fn tor_mesh_lists_hold_every_other_rnic_under_the_tor() {
        let (inv, lists) = build(1);
        for list in lists.lists() {
            let tor = inv.rnic(list.rnic).unwrap().tor;
            let expected: Vec<RnicId> = inv.by_tor()[&tor]
                .iter()
                .copied()
                .filter(|r| *r != list.rnic)
                .collect();
            assert_eq!(list.tor_mesh, expected);
            assert_eq!(list.tor_mesh_interval_ns, Some(100_000_000));
        }
    }

    #[test]
    fn each_tor_gets_k_cross_tor_tuples_spread_over_its_rnics() {
        let (inv, lists) = build(1);
        // Four spines: k = 21 (Eq. 1 at P = 0.99).
        for (tor, members) in inv.by_tor() {
            assert_eq!(lists.five_tuples_of(*tor), Some(21));
            let carried: Vec<usize> = members
                .iter()
                .map(|r| lists.lists()[*r as usize].inter_tor.len())
                .collect();
            assert_eq!(carried.iter().sum::<usize>(), 21);
            assert!(carried.iter().all(|c| *c == 7), "{carried:?}");
            for r in members {
                let list = &lists.lists()[*r as usize];
                for target in &list.inter_tor {
                    assert_ne!(inv.rnic(target.dst).unwrap().tor, *tor);
                    assert!(target.src_port >= ROCE_SOURCE_PORT_MIN);
                }
                // 7 tuples at 10 probes/s each: one probe every 1/70 s.
                assert_eq!(list.inter_tor_interval_ns, Some(14_285_714));
                assert!((list.probes_per_second() - 80.0).abs() < 1e-3);
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_lists_and_another_seed_others() {
        let (_, a) = build(5);
        let (_, b) = build(5);
        let (_, c) = build(6);
        assert_eq!(a.lists(), b.lists());
        assert_ne!(a.lists(), c.lists());
    }

    #[test]
    fn rotation_replaces_a_fifth_of_each_tors_tuples() {
        let (inv, mut lists) = build(2);
        let before: Vec<BTreeSet<InterTorTarget>> = lists
            .lists()
            .iter()
            .map(|l| l.inter_tor.iter().copied().collect())
            .collect();
        let replaced = lists.rotate(&inv);
        // ⌈0.2 × 21⌉ = 5 per ToR, 4 ToRs.
        assert_eq!(replaced, 20);
        assert_eq!(lists.generation(), 1);
        let changed: usize = lists
            .lists()
            .iter()
            .zip(&before)
            .map(|(l, old)| l.inter_tor.iter().filter(|t| !old.contains(t)).count())
            .sum();
        // A redrawn tuple could equal its old value only with probability ~1e-5 per draw.
        assert_eq!(changed, 20);
        // The sources keep their share.
        for (l, old) in lists.lists().iter().zip(&before) {
            assert_eq!(l.inter_tor.len(), old.len());
        }
    }

    #[test]
    fn one_tor_has_no_inter_tor_lists_and_bad_settings_are_refused() {
        let inv = Inventory::from_topology(&leaf_spine(1, 3, 2)).unwrap();
        let lists = Pinglists::build(&inv, PinglistConfig::default()).unwrap();
        assert_eq!(lists.five_tuples_of(inv.rnics()[0].tor), None);
        assert!(lists.lists().iter().all(|l| l.inter_tor.is_empty()));
        assert!(lists
            .lists()
            .iter()
            .all(|l| l.inter_tor_interval_ns.is_none()));
        let bad = PinglistConfig {
            tor_mesh_pps: 0.0,
            ..PinglistConfig::default()
        };
        assert_eq!(
            Pinglists::build(&inv, bad).unwrap_err().to_string(),
            "pinglist configuration: tor_mesh_pps = 0: must be above 0 and at most 1e6"
        );
        let inv = Inventory::from_topology(&leaf_spine(2, 1, 1)).unwrap();
        let bad = PinglistConfig {
            coverage_probability: 1.0,
            ..PinglistConfig::default()
        };
        assert!(Pinglists::build(&inv, bad)
            .unwrap_err()
            .to_string()
            .starts_with("ToR leaf0: coverage probability 1"));
    }
}
