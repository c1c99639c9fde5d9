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

/// Lowest RoCEv2 UDP source port: rdma-core maps a flow label to
/// `((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000` (FACTS, "RoCEv2 details").
pub const ROCE_SOURCE_PORT_MIN: u16 = 0xC000;

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

/// Every RNIC's pinglist, and the state to rotate them.
#[derive(Clone, Debug)]
pub struct Pinglists {
    config: PinglistConfig,
    rng: SplitMix64,
    /// Per ToR: k and its 5-tuples as (source RNIC, target).
    tuples: BTreeMap<NodeId, (u32, Vec<(RnicId, InterTorTarget)>)>,
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
            let k = five_tuples_for_coverage(n, config.coverage_probability).map_err(|source| {
                PinglistError::Coverage {
                    tor: inventory.name(*tor).to_owned(),
                    source,
                }
            })?;
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
            tuples.insert(*tor, (k, chosen));
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
        for (tor, (k, chosen)) in self.tuples.iter_mut() {
            let count = ((f64::from(*k) * fraction).ceil() as usize).min(chosen.len());
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
        let mut inter: BTreeMap<RnicId, Vec<InterTorTarget>> = BTreeMap::new();
        for (_, chosen) in self.tuples.values() {
            for (src, target) in chosen {
                inter.entry(*src).or_default().push(*target);
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
                let inter_tor = inter.remove(&rnic).unwrap_or_default();
                RnicPinglist {
                    rnic,
                    tor_mesh_interval_ns: (!tor_mesh.is_empty())
                        .then(|| interval(self.config.tor_mesh_pps)),
                    inter_tor_interval_ns: (!inter_tor.is_empty())
                        .then(|| interval(self.config.link_target_pps * inter_tor.len() as f64)),
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

    /// k of Eq. 1 for `tor` (`None` for a ToR without another ToR to reach).
    pub fn five_tuples_of(&self, tor: NodeId) -> Option<u32> {
        self.tuples.get(&tor).map(|(k, _)| *k)
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

    fn build(seed: u64) -> (Inventory, Pinglists) {
        let inv = Inventory::from_topology(&leaf_spine(4, 3, 4)).unwrap();
        let lists = Pinglists::build(
            &inv,
            PinglistConfig {
                seed,
                ..PinglistConfig::default()
            },
        )
        .unwrap();
        (inv, lists)
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
