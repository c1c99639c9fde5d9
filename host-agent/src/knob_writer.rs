//! Writing the RNIC's DCQCN knobs (PARALEON dispatches a setting to every RNIC).
//!
//! - [`ConnectxSysfs`]: the mlx5 driver's RoCE congestion parameters,
//!   `/sys/class/net/<if>/ecn/roce_rp/<knob>` (reaction point) and `roce_np/<knob>`
//!   (notification point), one integer per file in the units of [`hawkmesh_knobs`]; each
//!   write is read back. `root` prefixes every path, so tests use a fake tree.
//! - [`Mlxconfig`]: the same knobs as firmware configuration, `mlxconfig -d <dev> -y set
//!   <KNOB>_P<port>=<value>` (the knob's ConnectX name upper-cased; firmware defaults,
//!   applied at the next reset — for a baseline, not for per-interval tuning).
//!
//! Both take only RNIC knobs (switch knobs are skipped) and have a dry-run mode that says
//! exactly what they would write and writes nothing.

use std::path::{Path, PathBuf};

use hawkmesh_knobs::apply::{run_command, Applied, ApplyError, Change, KnobWriter};
use hawkmesh_knobs::Device;

/// The mlx5 sysfs files of some interfaces.
#[derive(Clone, Debug)]
pub struct ConnectxSysfs {
    root: PathBuf,
    interfaces: Vec<String>,
    dry_run: bool,
}

impl ConnectxSysfs {
    /// The files of `interfaces` under `root` (`/` on a host).
    pub fn new(root: &Path, interfaces: Vec<String>, dry_run: bool) -> Self {
        ConnectxSysfs {
            root: root.to_path_buf(),
            interfaces,
            dry_run,
        }
    }

    /// The file of `change`'s knob on `interface`, if it has one.
    pub fn path(&self, interface: &str, change: &Change) -> Option<PathBuf> {
        let relative = change.knob.sysfs_path(interface)?;
        Some(self.root.join(relative.trim_start_matches('/')))
    }
}

impl KnobWriter for ConnectxSysfs {
    fn describe(&self) -> String {
        format!(
            "ConnectX sysfs of {} under {}{}",
            self.interfaces.join(", "),
            self.root.display(),
            if self.dry_run { " (dry run)" } else { "" }
        )
    }

    fn device(&self) -> Device {
        Device::Rnic
    }

    fn apply(&mut self, changes: &[Change]) -> Result<Vec<Applied>, ApplyError> {
        let mut done = Vec::new();
        for interface in &self.interfaces {
            for change in changes.iter().filter(|c| c.knob.device() == Device::Rnic) {
                let Some(path) = self.path(interface, change) else {
                    continue; // a netsim-only knob (no ConnectX file)
                };
                let target = path.display().to_string();
                let raw = change
                    .knob
                    .to_device(change.value)
                    .map_err(|e| ApplyError {
                        target: target.clone(),
                        reason: e.to_string(),
                    })?;
                let dir = path.parent().unwrap_or(Path::new("/"));
                if !dir.is_dir() {
                    return Err(ApplyError {
                        target: dir.display().to_string(),
                        reason: format!(
                            "not found: {interface} is not an mlx5 interface, or its driver exposes no RoCE congestion parameters"
                        ),
                    });
                }
                if !self.dry_run {
                    std::fs::write(&path, format!("{raw}\n")).map_err(|e| ApplyError {
                        target: target.clone(),
                        reason: format!("write: {e}"),
                    })?;
                    let back = std::fs::read_to_string(&path).map_err(|e| ApplyError {
                        target: target.clone(),
                        reason: format!("read back: {e}"),
                    })?;
                    if back.trim() != raw.to_string() {
                        return Err(ApplyError {
                            target,
                            reason: format!(
                                "wrote {raw}, reads back {:?} (the driver refused or clamped it)",
                                back.trim()
                            ),
                        });
                    }
                }
                done.push(Applied {
                    knob: change.knob.name,
                    target,
                    value: raw.to_string(),
                    written: !self.dry_run,
                });
            }
        }
        Ok(done)
    }
}

/// `mlxconfig` firmware configuration of one device port.
#[derive(Clone, Debug)]
pub struct Mlxconfig {
    program: PathBuf,
    device: String,
    port: u8,
    dry_run: bool,
}

impl Mlxconfig {
    /// `mlxconfig` (found on PATH) for `device` (`/dev/mst/mt4125_pciconf0`, or a PCI
    /// address) and its `port` (1 or 2).
    pub fn new(device: &str, port: u8, dry_run: bool) -> Self {
        Mlxconfig {
            program: PathBuf::from("mlxconfig"),
            device: device.to_string(),
            port,
            dry_run,
        }
    }

    /// The same with another program (tests give a fake one).
    pub fn with_program(mut self, program: &Path) -> Self {
        self.program = program.to_path_buf();
        self
    }

    /// The arguments for `changes` (its RNIC knobs with a ConnectX name).
    pub fn arguments(&self, changes: &[Change]) -> Result<Vec<String>, ApplyError> {
        let mut args = vec![
            "-d".to_string(),
            self.device.clone(),
            "-y".to_string(),
            "set".to_string(),
        ];
        for change in changes.iter().filter(|c| c.knob.device() == Device::Rnic) {
            let Some(name) = change.knob.connectx else {
                continue;
            };
            let raw = change
                .knob
                .to_device(change.value)
                .map_err(|e| ApplyError {
                    target: format!("mlxconfig {}", self.device),
                    reason: e.to_string(),
                })?;
            args.push(format!("{}_P{}={raw}", name.to_uppercase(), self.port));
        }
        Ok(args)
    }
}

impl KnobWriter for Mlxconfig {
    fn describe(&self) -> String {
        format!("mlxconfig {} port {}", self.device, self.port)
    }

    fn device(&self) -> Device {
        Device::Rnic
    }

    fn apply(&mut self, changes: &[Change]) -> Result<Vec<Applied>, ApplyError> {
        let args = self.arguments(changes)?;
        if args.len() == 4 {
            return Ok(Vec::new());
        }
        let command = format!("{} {}", self.program.display(), args.join(" "));
        if !self.dry_run {
            run_command(
                &self.program,
                &args,
                "is mlxconfig, from mstflint or MFT, installed?",
            )?;
        }
        Ok(args[4..]
            .iter()
            .map(|a| {
                let (name, value) = a.split_once('=').unwrap_or((a, ""));
                Applied {
                    knob: changes
                        .iter()
                        .find(|c| {
                            c.knob
                                .connectx
                                .is_some_and(|n| name.starts_with(&n.to_uppercase()))
                        })
                        .map_or("", |c| c.knob.name),
                    target: format!("{} ({name})", command),
                    value: value.to_string(),
                    written: !self.dry_run,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hawkmesh_knobs::apply::changes;
    use std::os::unix::fs::PermissionsExt;

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hawkmesh-knobs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        dir
    }

    fn fake_mlx5(root: &Path, interface: &str) {
        for dir in ["roce_rp", "roce_np"] {
            let d = root.join(format!("sys/class/net/{interface}/ecn/{dir}"));
            std::fs::create_dir_all(&d).expect("the fake tree");
        }
        let rp = root.join(format!(
            "sys/class/net/{interface}/ecn/roce_rp/rpg_hai_rate"
        ));
        std::fs::write(rp, "50\n").expect("a file");
    }

    /// The RNIC knobs land in their files under the interface's roce_rp / roce_np, in
    /// device units, read back; switch knobs are skipped; a dry run writes nothing and says
    /// what it would have written; a missing interface is named.
    #[test]
    fn sysfs_writes_each_rnic_knob_to_its_file_and_a_dry_run_writes_nothing() {
        let root = temp("sysfs");
        fake_mlx5(&root, "eth2");
        let setting = changes(&[
            ("rpg_hai_rate", 150.0),
            ("min_time_between_cnps", 96.0),
            ("kmax_kb", 6_400.0),
        ])
        .unwrap();
        let file = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap_or_default();
        let mut dry = ConnectxSysfs::new(&root, vec!["eth2".into()], true);
        let said = dry.apply(&setting).unwrap();
        assert_eq!(said.len(), 2);
        assert!(said[0]
            .to_string()
            .starts_with("rpg_hai_rate: would write 150 to "));
        assert_eq!(file("sys/class/net/eth2/ecn/roce_rp/rpg_hai_rate"), "50\n");
        let mut real = ConnectxSysfs::new(&root, vec!["eth2".into()], false);
        let done = real.apply(&setting).unwrap();
        assert_eq!(done.len(), 2);
        assert!(done.iter().all(|d| d.written));
        assert_eq!(file("sys/class/net/eth2/ecn/roce_rp/rpg_hai_rate"), "150\n");
        assert_eq!(
            file("sys/class/net/eth2/ecn/roce_np/min_time_between_cnps"),
            "96\n"
        );
        let mut missing = ConnectxSysfs::new(&root, vec!["eth9".into()], false);
        let e = missing.apply(&setting).unwrap_err();
        assert!(e.target.ends_with("sys/class/net/eth9/ecn/roce_rp"), "{e}");
        assert!(e.reason.contains("not an mlx5 interface"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }

    /// mlxconfig gets the upper-cased ConnectX names with the port suffix; a failing run
    /// is reported with its stderr.
    #[test]
    fn mlxconfig_sets_the_firmware_names_of_the_port() {
        let dir = temp("mlxconfig");
        let log = dir.join("args");
        let fake = dir.join("mlxconfig");
        std::fs::write(
            &fake,
            format!("#!/bin/sh\necho \"$@\" > {}\n[ \"$2\" = bad ] && {{ echo 'no such device' >&2; exit 3; }}\nexit 0\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let setting = changes(&[
            ("rpg_ai_rate", 50.0),
            ("rate_reduce_monitor_period", 80.0),
            ("pmax", 0.2),
        ])
        .unwrap();
        let mut w = Mlxconfig::new("/dev/mst/mt4125_pciconf0", 1, false).with_program(&fake);
        let done = w.apply(&setting).unwrap();
        assert_eq!(done.len(), 2);
        assert_eq!(
            std::fs::read_to_string(&log).unwrap().trim(),
            "-d /dev/mst/mt4125_pciconf0 -y set RPG_AI_RATE_P1=50 RATE_REDUCE_MONITOR_PERIOD_P1=80"
        );
        assert_eq!(done[0].knob, "rpg_ai_rate");
        let mut bad = Mlxconfig::new("bad", 1, false).with_program(&fake);
        let e = bad.apply(&setting).unwrap_err();
        assert!(e.reason.contains("no such device"), "{e}");
        let mut dry = Mlxconfig::new("bad", 2, true).with_program(&fake);
        let said = dry.apply(&setting).unwrap();
        assert!(said.iter().all(|a| !a.written));
        assert!(said[1].target.contains("RATE_REDUCE_MONITOR_PERIOD_P2"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
