//! The embedded store: an append-only log of JSON lines in the data directory.
//!
//! Every accepted report chunk is appended (hex-encoded) and synced to disk before the chunk
//! is acknowledged, so nothing acknowledged is lost when the analyzer stops; incident state
//! changes (a timeout) are appended the same way. On start the log is replayed. A last line
//! cut short by a crash (no newline yet) is cut off and reported; any other damage is an
//! error naming the line.
//!
//! A failed append never leaves the log damaged for the next start: a write that fails part
//! way is cut off again; when that is impossible, or when syncing fails (after a failed
//! fsync the kernel may have dropped the written pages, so whether the record is on disk is
//! unknown), the store refuses every further append ([`StoreError::Broken`]) until the
//! service is restarted and replays what the disk really holds.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// One log record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A report chunk as received.
    Chunk {
        /// The chunk bytes, hex.
        hex: String,
    },
    /// The incident of `event_id` stopped waiting for missing switches.
    TimedOut {
        /// Polling event id.
        event_id: u64,
    },
}

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// I/O on the log.
    #[error("{path}: {source}")]
    Io {
        /// The log file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A damaged line that is not the last one.
    #[error("{path}:{line}: damaged store record: {reason}")]
    Corrupt {
        /// The log file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// An earlier append failed in a way that leaves the end of the log uncertain; nothing
    /// more is appended until the store is opened again.
    #[error("{path}: store refuses writes after an earlier failure ({reason})")]
    Broken {
        /// The log file.
        path: String,
        /// The earlier failure.
        reason: String,
    },
}

/// The append-only log.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    file: File,
    /// Length of the log up to its last complete, synced record.
    len: u64,
    /// Why appends are refused, after a failure that leaves the end of the log uncertain.
    broken: Option<String>,
    /// Tests pause appends here, after the write and before the sync.
    #[cfg(test)]
    pub(crate) gate: Option<crate::gate::Gate>,
}

/// What replaying the log found.
#[derive(Debug, Default)]
pub struct Replay {
    /// The records, in order.
    pub records: Vec<Record>,
    /// A torn last line was skipped (the process stopped while writing it).
    pub torn_tail: bool,
}

impl Store {
    /// Opens (creating if needed) `dir/incidents.log` and replays it.
    pub fn open(dir: &Path) -> Result<(Store, Replay), StoreError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| StoreError::Io {
                path: path.clone(),
                source,
            }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let path = dir.join("incidents.log");
        let mut replay = Replay::default();
        let mut good_len = 0u64;
        if path.exists() {
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            let mut offset = 0usize;
            let mut number = 0usize;
            while offset < bytes.len() {
                number += 1;
                let end = bytes[offset..]
                    .iter()
                    .position(|b| *b == b'\n')
                    .map(|p| offset + p);
                let line = &bytes[offset..end.unwrap_or(bytes.len())];
                let parsed = std::str::from_utf8(line)
                    .map_err(|e| e.to_string())
                    .and_then(|text| {
                        serde_json::from_str::<Record>(text).map_err(|e| e.to_string())
                    });
                match (parsed, end) {
                    (Ok(record), Some(end)) => {
                        replay.records.push(record);
                        offset = end + 1;
                        good_len = offset as u64;
                    }
                    // The last line, without its newline: written only in part when the
                    // process stopped. Nothing in it was acknowledged; cut it off.
                    (_, None) => {
                        replay.torn_tail = true;
                        break;
                    }
                    (Err(reason), Some(_)) => {
                        return Err(StoreError::Corrupt {
                            path: path.display().to_string(),
                            line: number,
                            reason,
                        })
                    }
                }
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        if replay.torn_tail {
            file.set_len(good_len).map_err(io(&path))?;
        }
        let store = Store {
            path,
            file,
            len: good_len,
            broken: None,
            #[cfg(test)]
            gate: None,
        };
        Ok((store, replay))
    }

    /// Appends a record and syncs it to disk. On error the record must be taken as not
    /// stored (it may still be on disk after a failed sync; replay then finds it).
    pub fn append(&mut self, record: &Record) -> Result<(), StoreError> {
        let path = || self.path.display().to_string();
        if let Some(reason) = &self.broken {
            return Err(StoreError::Broken {
                path: path(),
                reason: reason.clone(),
            });
        }
        let mut line = serde_json::to_string(record).map_err(|e| StoreError::Io {
            path: path(),
            source: std::io::Error::other(e),
        })?;
        line.push('\n');
        if let Err(source) = self.file.write_all(line.as_bytes()) {
            // Part of the line may be in the file: cut it off, or the next record would be
            // appended to it and the log would have a damaged line in the middle.
            if let Err(cut) = self.file.set_len(self.len) {
                self.broken = Some(format!(
                    "a failed write ({source}) could not be cut off: {cut}"
                ));
            }
            return Err(StoreError::Io {
                path: path(),
                source,
            });
        }
        #[cfg(test)]
        if let Some(gate) = &self.gate {
            gate.pass();
        }
        if let Err(source) = self.file.sync_data() {
            self.broken = Some(format!("syncing failed: {source}"));
            return Err(StoreError::Io {
                path: path(),
                source,
            });
        }
        self.len += line.len() as u64;
        Ok(())
    }

    /// Makes every later write fail with a real I/O error: the log is reopened read-only.
    #[cfg(test)]
    pub(crate) fn break_for_test(&mut self) {
        self.file = File::open(&self.path).expect("reopening the log read-only");
    }
}

/// Lower-case hex of bytes.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[(byte >> 4) as usize] as char);
        out.push(DIGITS[(byte & 15) as usize] as char);
    }
    out
}

/// Bytes of a hex string.
pub fn from_hex(text: &str) -> Result<Vec<u8>, String> {
    if text.len() % 2 != 0 {
        return Err(format!("odd hex length {}", text.len()));
    }
    let digit = |c: u8, at: usize| -> Result<u8, String> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!("bad hex digit {:?} at {at}", c as char)),
        }
    };
    let bytes = text.as_bytes();
    (0..bytes.len() / 2)
        .map(|i| Ok(digit(bytes[2 * i], 2 * i)? << 4 | digit(bytes[2 * i + 1], 2 * i + 1)?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removes a test directory; one that does not exist is fine.
    fn remove(dir: &Path) {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                panic!("removing {}: {e}", dir.display())
            }
            _ => {}
        }
    }

    #[test]
    fn records_survive_reopen_and_a_torn_tail_is_skipped() {
        let dir = std::env::temp_dir().join(format!("hawkmesh-store-{}", std::process::id()));
        remove(&dir);
        {
            let (mut store, replay) = Store::open(&dir).unwrap();
            assert!(replay.records.is_empty());
            store
                .append(&Record::Chunk {
                    hex: to_hex(&[1, 2, 255]),
                })
                .unwrap();
            store.append(&Record::TimedOut { event_id: 9 }).unwrap();
        }
        // A crash in the middle of a write leaves half a line.
        let log = dir.join("incidents.log");
        let mut text = std::fs::read_to_string(&log).unwrap();
        text.push_str("{\"kind\":\"chu");
        std::fs::write(&log, text).unwrap();
        let (mut store, replay) = Store::open(&dir).unwrap();
        assert!(replay.torn_tail);
        assert_eq!(replay.records.len(), 2);
        assert_eq!(
            replay.records[0],
            Record::Chunk {
                hex: "0102ff".into()
            }
        );
        store.append(&Record::TimedOut { event_id: 10 }).unwrap();
        let (_, replay) = Store::open(&dir).unwrap();
        assert_eq!(
            replay.records.len(),
            3,
            "the torn line stays skipped, later ones are kept"
        );
        // Damage in the middle is an error with the line.
        let text = std::fs::read_to_string(&log)
            .unwrap()
            .replacen("timed_out", "timed-out", 1);
        std::fs::write(&log, text).unwrap();
        let error = Store::open(&dir).unwrap_err();
        assert!(error.to_string().contains("incidents.log:2:"), "{error}");
        assert_eq!(from_hex("0aFf"), Ok(vec![10, 255]));
        assert!(from_hex("0g").is_err() && from_hex("abc").is_err());
        remove(&dir);
    }

    #[test]
    fn a_failed_append_is_an_error_and_leaves_the_log_replayable() {
        let dir =
            std::env::temp_dir().join(format!("hawkmesh-store-broken-{}", std::process::id()));
        remove(&dir);
        let (mut store, _) = Store::open(&dir).unwrap();
        store.append(&Record::TimedOut { event_id: 1 }).unwrap();
        store.break_for_test();
        let error = store.append(&Record::TimedOut { event_id: 2 }).unwrap_err();
        assert!(matches!(error, StoreError::Io { .. }), "{error}");
        // The failed write could not be cut off (the handle is read-only): the store
        // refuses everything after it instead of guessing.
        let error = store.append(&Record::TimedOut { event_id: 3 }).unwrap_err();
        assert!(matches!(error, StoreError::Broken { .. }), "{error}");
        drop(store);
        let (mut store, replay) = Store::open(&dir).unwrap();
        assert_eq!(replay.records, vec![Record::TimedOut { event_id: 1 }]);
        assert!(!replay.torn_tail);
        store.append(&Record::TimedOut { event_id: 4 }).unwrap();
        let (_, replay) = Store::open(&dir).unwrap();
        assert_eq!(replay.records.len(), 2);
        remove(&dir);
    }
}
