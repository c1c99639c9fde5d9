//! The daemon's persistent state: its incarnation counter.
//!
//! Every start takes the next incarnation (R-Pingmesh §4.3.1: a restarted agent registers
//! anew, with new QPNs; the controller refuses a lower incarnation than the one it has,
//! and the analyzer tells probes to the old QPNs apart as QPN-reset noise). The counter is
//! written (to a temporary file, synced, renamed over the old one, the directory synced)
//! before the agent registers, so a crash at any point never reuses an incarnation.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::config::DaemonError;

/// The counter's file in the state directory.
pub const INCARNATION_FILE: &str = "incarnation";

fn state_error(path: &Path, reason: impl std::fmt::Display) -> DaemonError {
    DaemonError::State {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Takes the next incarnation from `dir` (created if missing): the stored one plus one, 1
/// on the first start. Returns it once it is durable.
pub fn next_incarnation(dir: &Path) -> Result<u64, DaemonError> {
    fs::create_dir_all(dir).map_err(|e| state_error(dir, e))?;
    let path = dir.join(INCARNATION_FILE);
    let previous = match fs::read_to_string(&path) {
        Ok(text) => text.trim().parse::<u64>().map_err(|_| {
            state_error(
                &path,
                format!(
                    "{:?} is not an incarnation number; remove the file to start again at 1",
                    text.trim()
                ),
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(state_error(&path, e)),
    };
    let next = previous
        .checked_add(1)
        .ok_or_else(|| state_error(&path, "the incarnation counter is exhausted"))?;
    let temporary: PathBuf = dir.join(format!("{INCARNATION_FILE}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut file = File::create(&temporary)?;
        writeln!(file, "{next}")?;
        file.sync_all()?;
        fs::rename(&temporary, &path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| state_error(&path, e))?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_start_takes_a_higher_incarnation_and_a_damaged_file_is_named() {
        let dir = std::env::temp_dir().join(format!("hawkmesh-state-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(next_incarnation(&dir).expect("first"), 1);
        assert_eq!(next_incarnation(&dir).expect("second"), 2);
        assert_eq!(
            fs::read_to_string(dir.join(INCARNATION_FILE)).expect("file"),
            "2\n"
        );
        fs::write(dir.join(INCARNATION_FILE), "two").expect("write");
        let e = next_incarnation(&dir).expect_err("damaged");
        assert!(
            e.to_string()
                .contains("incarnation: \"two\" is not an incarnation number"),
            "{e}"
        );
        fs::write(dir.join(INCARNATION_FILE), format!("{}", u64::MAX)).expect("write");
        assert!(next_incarnation(&dir)
            .expect_err("exhausted")
            .to_string()
            .contains("exhausted"));
        let _ = fs::remove_dir_all(&dir);
    }
}
