//! Writing the ECN knobs (Kmin, Kmax, Pmax: PARALEON's switch-side knobs) into the switch
//! program's own marking table, `ecn_profile`, through any [`SwitchBackend`] (the in-process
//! model, BF Runtime on a Tofino or the model-backed BF Runtime server).
//!
//! The program marks with DCQCN's RED profile per egress port (`dataplane/src/hawkeye/ecn.rs`);
//! a port's profile is `2^ECN_RANDOM_BITS` entries, one per random draw, built by
//! [`hawkmesh_wire::control::ecn_profile_entries`], which also turns the knobs' bytes into
//! the program's queue-depth unit ([`QdepthUnit`]: Tofino cells, BMv2 packets) — the one
//! place that conversion happens. Every entry holds all three knobs, so the writer keeps
//! the profile it last wrote ([`ProgramEcn::profile`]) and a setting that changes one knob
//! rewrites every entry of its ports with the other two as they were. Entries are added as
//! insert-or-modify (the model's `table_add`, BF Runtime's INSERT then MODIFY), so a
//! rewrite replaces the old profile entry by entry.
//!
//! ```text
//!  ecn_profile (egress port, draw r)      ecn_red(kmax, mark_above)
//!  (2, 0)                                 (Kmax, Kmin + U_0)
//!  (2, 1)                                 (Kmax, Kmin + U_1)
//!   ...                                    ...            U_r: quantile r of U[0, (Kmax-Kmin)/Pmax)
//!  (2, 255)                               (Kmax, Kmin + U_255)
//!  (3, 0) ...                             the same for every port of the writer
//! ```
//!
//! Dry-run mode writes nothing and reports what it would write; [`ProgramEcn::plan`] gives
//! every entry. RNIC knobs are skipped.

use hawkmesh_knobs::apply::{Applied, ApplyError, Change, KnobWriter};
use hawkmesh_knobs::Device;
use hawkmesh_wire::control::{ecn_profile_entries, EcnProfile, QdepthUnit, TableEntry};
use hawkmesh_wire::dataplane::Table;

use crate::SwitchBackend;

/// The knobs this writer takes, by name (`hawkmesh_knobs::table`).
const KMIN: &str = hawkmesh_knobs::KMIN.name;
const KMAX: &str = hawkmesh_knobs::KMAX.name;
const PMAX: &str = hawkmesh_knobs::PMAX.name;

/// The program's ECN profile on a set of egress ports (e.g. the ports of one speed, whose
/// Kmin/Kmax scale with it), written through a [`SwitchBackend`].
#[derive(Debug)]
pub struct ProgramEcn<B: SwitchBackend> {
    backend: B,
    ports: Vec<u16>,
    unit: QdepthUnit,
    profile: EcnProfile,
    dry_run: bool,
}

impl<B: SwitchBackend> ProgramEcn<B> {
    /// A writer for `ports` of a switch whose queue depth is in `unit`, whose table holds
    /// (or is to hold) `profile`: a setting that gives only some of the three knobs keeps
    /// the others from it.
    pub fn new(
        backend: B,
        ports: Vec<u16>,
        unit: QdepthUnit,
        profile: EcnProfile,
        dry_run: bool,
    ) -> Self {
        ProgramEcn {
            backend,
            ports,
            unit,
            profile,
            dry_run,
        }
    }

    /// The profile of the last successful write (or the one given at creation).
    pub fn profile(&self) -> EcnProfile {
        self.profile
    }

    /// The backend.
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// The profile after `changes` (its switch knobs; others ignored), or `None` when
    /// `changes` has none of Kmin, Kmax, Pmax.
    fn updated(&self, changes: &[Change]) -> Option<EcnProfile> {
        let mut profile = self.profile;
        let mut any = false;
        for c in changes.iter().filter(|c| c.knob.device() == Device::Switch) {
            // `to_si`: kilobytes of 1,000 bytes to bytes; a probability stays itself.
            let si = c.knob.to_si(c.value);
            match c.knob.name {
                KMIN => profile.kmin_bytes = si.round() as u64,
                KMAX => profile.kmax_bytes = si.round() as u64,
                PMAX => profile.pmax = si,
                _ => continue,
            }
            any = true;
        }
        any.then_some(profile)
    }

    /// What applying `changes` writes: the new profile and every `ecn_profile` entry, port
    /// by port. An empty plan when `changes` has no ECN knob; a profile the program cannot
    /// hold (Kmin above Kmax, a threshold beyond 32 bits) is refused naming the table.
    pub fn plan(
        &self,
        changes: &[Change],
    ) -> Result<Option<(EcnProfile, Vec<TableEntry>)>, ApplyError> {
        let Some(profile) = self.updated(changes) else {
            return Ok(None);
        };
        let mut entries = Vec::new();
        for &port in &self.ports {
            entries.extend(ecn_profile_entries(port, &profile, self.unit).map_err(|e| {
                ApplyError {
                    target: format!("{} port {port}", Table::ECN_PROFILE.name()),
                    reason: e.to_string(),
                }
            })?);
        }
        Ok(Some((profile, entries)))
    }

    fn unit_name(&self) -> String {
        match self.unit {
            QdepthUnit::TofinoCells => format!("cells of {} B", self.unit.unit_bytes()),
            QdepthUnit::Bmv2Packets { packet_bytes } => format!("packets of {packet_bytes} B"),
        }
    }
}

impl<B: SwitchBackend> KnobWriter for ProgramEcn<B> {
    fn describe(&self) -> String {
        format!(
            "switch program table {} on ports {:?} ({}){}",
            Table::ECN_PROFILE.name(),
            self.ports,
            self.unit_name(),
            if self.dry_run { " (dry run)" } else { "" }
        )
    }

    fn device(&self) -> Device {
        Device::Switch
    }

    fn apply(&mut self, changes: &[Change]) -> Result<Vec<Applied>, ApplyError> {
        let Some((profile, entries)) = self.plan(changes)? else {
            return Ok(Vec::new());
        };
        if !self.dry_run {
            for entry in &entries {
                let (port, draw) = (entry.key[0], entry.key[1]);
                self.backend
                    .add_table_entry(Table::ECN_PROFILE, entry.clone())
                    .map_err(|e| ApplyError {
                        target: format!("{}[port {port}, draw {draw}]", Table::ECN_PROFILE.name()),
                        reason: e.to_string(),
                    })?;
            }
            self.profile = profile;
        }
        // One line per knob and port: the value in the knob's unit and in the program's,
        // and the entries that carry it.
        let unit = self.unit_name();
        let draws = entries.len() / self.ports.len().max(1);
        let mut applied = Vec::new();
        for (i, &port) in self.ports.iter().enumerate() {
            let port_entries = &entries[i * draws..(i + 1) * draws];
            let kmax = port_entries.first().map_or(0, |e| e.params[0]);
            let lowest = port_entries.iter().map(|e| e.params[1]).min().unwrap_or(0);
            let highest = port_entries.iter().map(|e| e.params[1]).max().unwrap_or(0);
            let target = format!(
                "{}[port {port}, draws 0..{draws}] as ecn_red(kmax = {kmax}, mark_above = {lowest}..={highest}) in {unit}",
                Table::ECN_PROFILE.name()
            );
            let kmin_units = self.unit.from_bytes(profile.kmin_bytes);
            for (knob, value) in [
                (
                    KMIN,
                    format!("{} B = {kmin_units} {unit}", profile.kmin_bytes),
                ),
                (KMAX, format!("{} B = {kmax} {unit}", profile.kmax_bytes)),
                (PMAX, format!("{}", profile.pmax)),
            ] {
                applied.push(Applied {
                    knob,
                    target: target.clone(),
                    value,
                    written: !self.dry_run,
                });
            }
        }
        Ok(applied)
    }
}

#[cfg(all(test, feature = "model"))]
mod tests {
    use super::*;
    use crate::ModelBackend;
    use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
    use hawkmesh_dataplane::model::{Model, Routing};
    use hawkmesh_knobs::apply::changes;
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;

    fn model() -> Rc<RefCell<Model>> {
        let p = Arc::new(program(&HawkeyeParams::default()).expect("program"));
        Rc::new(RefCell::new(
            Model::new(p, Routing::FromTable, 192).expect("model"),
        ))
    }

    const START: EcnProfile = EcnProfile {
        kmin_bytes: 400_000,
        kmax_bytes: 1_600_000,
        pmax: 0.2,
    };

    #[test]
    fn a_setting_rewrites_every_entry_of_its_ports_keeping_the_other_knobs() {
        let m = model();
        let mut w = ProgramEcn::new(
            ModelBackend::new(m.clone()),
            vec![2, 5],
            QdepthUnit::TofinoCells,
            START,
            false,
        );
        let done = w
            .apply(&changes(&[("kmax_kb", 6_400.0), ("rpg_hai_rate", 150.0)]).unwrap())
            .unwrap();
        assert_eq!(done.len(), 6, "three knobs on two ports");
        assert_eq!(done[1].knob, "kmax_kb");
        assert_eq!(done[1].value, "6400000 B = 80000 cells of 80 B");
        // Kmin 5,000 cells, R = (80,000 − 5,000)/0.2 = 375,000 cells: U_0 = 732,
        // U_255 = floor(255.5 × 375,000 / 256) = 374,267.
        assert_eq!(
            done[0].target,
            "ecn_profile[port 2, draws 0..256] as ecn_red(kmax = 80000, mark_above = 5732..=379267) in cells of 80 B"
        );
        assert!(done.iter().all(|a| a.written));
        assert_eq!(m.borrow().table_len("ecn_profile").unwrap(), 512);
        assert_eq!(w.profile().kmax_bytes, 6_400_000);
        assert_eq!(w.profile().kmin_bytes, 400_000, "Kmin kept");
        // The entries are exactly the plan of the profile written.
        let (_, planned) = w
            .plan(&changes(&[("pmax", 0.2)]).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(planned.len(), 512);
        // Writing again replaces entries instead of adding more.
        w.apply(&changes(&[("pmax", 0.5)]).unwrap()).unwrap();
        assert_eq!(m.borrow().table_len("ecn_profile").unwrap(), 512);
        assert!(w
            .apply(&changes(&[("rpg_hai_rate", 150.0)]).unwrap())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_dry_run_writes_nothing_and_a_bad_profile_is_refused_naming_the_table() {
        let m = model();
        let mut dry = ProgramEcn::new(
            ModelBackend::new(m.clone()),
            vec![1],
            QdepthUnit::TofinoCells,
            START,
            true,
        );
        let done = dry.apply(&changes(&[("pmax", 0.5)]).unwrap()).unwrap();
        assert_eq!(done.len(), 3);
        assert!(done.iter().all(|a| !a.written));
        assert_eq!(
            done[2].to_string(),
            format!("pmax: would write 0.5 to {}", done[2].target)
        );
        assert_eq!(m.borrow().table_len("ecn_profile").unwrap(), 0);
        assert_eq!(dry.profile(), START, "a dry run changes nothing");
        let e = dry
            .apply(&changes(&[("kmin_kb", 2_000.0)]).unwrap())
            .unwrap_err();
        assert_eq!(e.target, "ecn_profile port 1");
        assert!(e.reason.contains("above kmax"), "{e}");
    }
}
