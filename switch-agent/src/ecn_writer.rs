//! Writing a switch's ECN profile (Kmin, Kmax, Pmax: PARALEON's switch-side knobs).
//!
//! On SONiC the profile is `WRED_PROFILE|<name>` in CONFIG_DB (fields
//! `green_min_threshold` and `green_max_threshold` in bytes, `green_drop_probability` in
//! percent; [`hawkmesh_knobs`] has the names and units). [`SonicEcn`] sets it with SONiC's
//! own command, `config ecn -profile <name> -gmin <bytes> -gmax <bytes> -gdrop <percent>`,
//! and gives the same as a CONFIG_DB fragment for `config load` ([`SonicEcn::config_db`]).
//! Dry-run mode says what it would run and runs nothing. RNIC knobs are skipped.

use std::path::{Path, PathBuf};

use hawkmesh_knobs::apply::{run_command, Applied, ApplyError, Change, KnobWriter};
use hawkmesh_knobs::Device;

/// SONiC's ECN profile of a switch.
#[derive(Clone, Debug)]
pub struct SonicEcn {
    program: PathBuf,
    profile: String,
    dry_run: bool,
}

/// `config ecn`'s flag for a SONiC field.
fn flag(sonic_field: &str) -> Option<&'static str> {
    match sonic_field {
        "green_min_threshold" => Some("-gmin"),
        "green_max_threshold" => Some("-gmax"),
        "green_drop_probability" => Some("-gdrop"),
        _ => None,
    }
}

impl SonicEcn {
    /// The profile `profile` (SONiC's lossless one is `AZURE_LOSSLESS`), set with `config`
    /// from PATH.
    pub fn new(profile: &str, dry_run: bool) -> Self {
        SonicEcn {
            program: PathBuf::from("config"),
            profile: profile.to_string(),
            dry_run,
        }
    }

    /// The same with another program (tests give a fake one).
    pub fn with_program(mut self, program: &Path) -> Self {
        self.program = program.to_path_buf();
        self
    }

    /// The switch changes among `changes`, as (SONiC field, device value), checked:
    /// Kmin ≤ Kmax when both are given.
    fn fields(
        &self,
        changes: &[Change],
    ) -> Result<Vec<(&'static str, &'static str, u64)>, ApplyError> {
        let target = || format!("WRED_PROFILE|{}", self.profile);
        let mut out = Vec::new();
        for c in changes.iter().filter(|c| c.knob.device() == Device::Switch) {
            let Some(field) = c.knob.sonic else {
                continue;
            };
            let raw = c.knob.to_device(c.value).map_err(|e| ApplyError {
                target: target(),
                reason: e.to_string(),
            })?;
            out.push((c.knob.name, field, raw));
        }
        let get = |f: &str| {
            out.iter()
                .find(|(_, name, _)| *name == f)
                .map(|(_, _, v)| *v)
        };
        if let (Some(lo), Some(hi)) = (get("green_min_threshold"), get("green_max_threshold")) {
            if lo > hi {
                return Err(ApplyError {
                    target: target(),
                    reason: format!("green_min_threshold {lo} above green_max_threshold {hi}"),
                });
            }
        }
        Ok(out)
    }

    /// The CONFIG_DB fragment of the changes (for `config load`).
    pub fn config_db(&self, changes: &[Change]) -> Result<serde_json::Value, ApplyError> {
        let mut profile = serde_json::Map::new();
        for (_, field, raw) in self.fields(changes)? {
            profile.insert(
                field.to_string(),
                serde_json::Value::String(raw.to_string()),
            );
        }
        let mut table = serde_json::Map::new();
        table.insert(self.profile.clone(), serde_json::Value::Object(profile));
        let mut db = serde_json::Map::new();
        db.insert("WRED_PROFILE".into(), serde_json::Value::Object(table));
        Ok(serde_json::Value::Object(db))
    }

    /// `config ecn`'s arguments for the changes.
    pub fn arguments(&self, changes: &[Change]) -> Result<Vec<String>, ApplyError> {
        let mut args = vec![
            "ecn".to_string(),
            "-profile".to_string(),
            self.profile.clone(),
        ];
        for (_, field, raw) in self.fields(changes)? {
            if let Some(f) = flag(field) {
                args.push(f.to_string());
                args.push(raw.to_string());
            }
        }
        Ok(args)
    }
}

impl KnobWriter for SonicEcn {
    fn describe(&self) -> String {
        format!(
            "SONiC WRED_PROFILE|{}{}",
            self.profile,
            if self.dry_run { " (dry run)" } else { "" }
        )
    }

    fn device(&self) -> Device {
        Device::Switch
    }

    fn apply(&mut self, changes: &[Change]) -> Result<Vec<Applied>, ApplyError> {
        let fields = self.fields(changes)?;
        if fields.is_empty() {
            return Ok(Vec::new());
        }
        let args = self.arguments(changes)?;
        let command = format!("{} {}", self.program.display(), args.join(" "));
        if !self.dry_run {
            run_command(&self.program, &args, "is this a SONiC switch?")?;
        }
        Ok(fields
            .into_iter()
            .map(|(knob, field, raw)| Applied {
                knob,
                target: format!("WRED_PROFILE|{}.{field} ({command})", self.profile),
                value: raw.to_string(),
                written: !self.dry_run,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hawkmesh_knobs::apply::changes;
    use std::os::unix::fs::PermissionsExt;

    /// Kmin/Kmax in bytes and Pmax in percent go to `config ecn`'s green flags and to the
    /// CONFIG_DB fragment; RNIC knobs are skipped; Kmin above Kmax is refused; a dry run
    /// runs nothing.
    #[test]
    fn the_ecn_profile_goes_to_config_ecn_in_device_units() {
        let dir = std::env::temp_dir().join(format!("hawkmesh-sonic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("args");
        let fake = dir.join("config");
        std::fs::write(
            &fake,
            format!("#!/bin/sh\necho \"$@\" > {}\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let setting = changes(&[
            ("kmin_kb", 1_600.0),
            ("kmax_kb", 6_400.0),
            ("pmax", 0.2),
            ("rpg_hai_rate", 150.0),
        ])
        .unwrap();
        let mut w = SonicEcn::new("AZURE_LOSSLESS", false).with_program(&fake);
        let done = w.apply(&setting).unwrap();
        assert_eq!(done.len(), 3);
        assert_eq!(
            std::fs::read_to_string(&log).unwrap().trim(),
            "ecn -profile AZURE_LOSSLESS -gmin 1600000 -gmax 6400000 -gdrop 20"
        );
        let db = w.config_db(&setting).unwrap();
        assert_eq!(
            db["WRED_PROFILE"]["AZURE_LOSSLESS"]["green_drop_probability"],
            serde_json::json!("20")
        );
        std::fs::remove_file(&log).unwrap();
        let mut dry = SonicEcn::new("AZURE_LOSSLESS", true).with_program(&fake);
        assert!(dry.apply(&setting).unwrap().iter().all(|a| !a.written));
        assert!(!log.exists());
        let inverted = changes(&[("kmin_kb", 7_000.0), ("kmax_kb", 6_400.0)]).unwrap();
        let e = w.apply(&inverted).unwrap_err();
        assert!(e.reason.contains("above green_max_threshold"), "{e}");
        assert!(w
            .apply(&changes(&[("rpg_hai_rate", 150.0)]).unwrap())
            .unwrap()
            .is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
