//! Applying knob values to devices. A setting (knob name → value, in the knobs' units) is
//! turned into checked [`Change`]s once; each [`KnobWriter`] applies the ones that live on
//! its device and skips the others, or, in dry-run mode, says exactly what it would write.
//! The writers themselves do I/O and live with the agents: the ConnectX sysfs files and
//! `mlxconfig` on hosts (`hawkmesh_host_agent::knob_writer`), SONiC's ECN profile on
//! switches (`hawkmesh_switch_agent::ecn_writer`).

use std::fmt;

use crate::{knob, Device, Knob, KnobError};

/// One knob's new value, checked against its range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Change {
    /// The knob.
    pub knob: &'static Knob,
    /// The value, in the knob's unit.
    pub value: f64,
}

/// Checks a setting: every name a knob, every value in its range, no knob twice.
pub fn changes(values: &[(&str, f64)]) -> Result<Vec<Change>, KnobError> {
    let mut out: Vec<Change> = Vec::with_capacity(values.len());
    for (name, value) in values {
        let k = knob(name)?;
        k.validate(*value)?;
        if let Some(other) = out.iter_mut().find(|c| c.knob.name == k.name) {
            other.value = *value;
        } else {
            out.push(Change {
                knob: k,
                value: *value,
            });
        }
    }
    Ok(out)
}

/// Parses `name=value` words (the command line's form).
pub fn parse_assignments(words: &[String]) -> Result<Vec<(String, f64)>, String> {
    words
        .iter()
        .map(|w| {
            let (name, value) = w
                .split_once('=')
                .ok_or_else(|| format!("`{w}`: expected knob=value"))?;
            let value: f64 = value.trim().parse().map_err(|e| format!("`{w}`: {e}"))?;
            Ok((name.trim().to_string(), value))
        })
        .collect()
}

/// What a writer did (or, in dry-run mode, would do) with one change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The knob.
    pub knob: &'static str,
    /// Where it went: a file path, a command, a configuration key.
    pub target: String,
    /// The text written there.
    pub value: String,
    /// Written (false: a dry run).
    pub written: bool,
}

impl fmt::Display for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.written { "wrote" } else { "would write" };
        write!(f, "{}: {verb} {} to {}", self.knob, self.value, self.target)
    }
}

/// Why a writer could not apply a change: the place and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyError {
    /// The file, command or key.
    pub target: String,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.target, self.reason)
    }
}

impl std::error::Error for ApplyError {}

/// Runs a device's configuration command (`mlxconfig`, SONiC's `config`); a failure to
/// start says `hint`, a failing exit carries its status and stderr.
pub fn run_command(
    program: &std::path::Path,
    args: &[String],
    hint: &str,
) -> Result<(), ApplyError> {
    let command = format!("{} {}", program.display(), args.join(" "));
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .map_err(|e| ApplyError {
            target: command.clone(),
            reason: format!("cannot run: {e} ({hint})"),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ApplyError {
            target: command,
            reason: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

/// A device's knob writer.
pub trait KnobWriter {
    /// The device it writes to, for logs.
    fn describe(&self) -> String;
    /// The device kind whose knobs it takes.
    fn device(&self) -> Device;
    /// Applies the changes of its device (skipping the others); stops at the first
    /// failure, saying where, after the writes before it.
    fn apply(&mut self, changes: &[Change]) -> Result<Vec<Applied>, ApplyError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_checked_once_and_the_last_value_of_a_knob_wins() {
        let c = changes(&[
            ("rpg_hai_rate", 150.0),
            ("kmax_kb", 6_400.0),
            ("rpg_hai_rate", 200.0),
        ])
        .unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].knob.name, c[0].value), ("rpg_hai_rate", 200.0));
        assert_eq!(
            changes(&[("rpg_gd", 12.0)]).unwrap_err().to_string(),
            "rpg_gd: must be within [10, 11], got 12"
        );
        assert!(changes(&[("rpg_colour", 1.0)]).is_err());
        let words = vec!["rpg_hai_rate=150".to_string(), "pmax = 0.2".to_string()];
        assert_eq!(
            parse_assignments(&words).unwrap(),
            vec![
                ("rpg_hai_rate".to_string(), 150.0),
                ("pmax ".trim().to_string(), 0.2)
            ]
        );
        assert!(parse_assignments(&["rpg_hai_rate".to_string()]).is_err());
        assert!(parse_assignments(&["rpg_hai_rate=fast".to_string()]).is_err());
    }
}
