//! The embedded store: an append-only log of JSON lines in the data directory.
//!
//! Every accepted report chunk is appended (hex-encoded) and synced to disk before the chunk
//! is acknowledged, so nothing acknowledged is lost when the analyzer stops; incident state
//! changes (a timeout) are appended the same way. On start the log is replayed. A last line
//! cut short by a crash (no newline yet) is cut off and reported; any other damage is an
//! error naming the line.

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
}

/// The append-only log.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    file: File,
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
        Ok((Store { path, file }, replay))
    }

    /// Appends a record and syncs it to disk.
    pub fn append(&mut self, record: &Record) -> Result<(), StoreError> {
        let io = |source| StoreError::Io {
            path: self.path.display().to_string(),
            source,
        };
        let mut line = serde_json::to_string(record).map_err(|e| StoreError::Io {
            path: self.path.display().to_string(),
            source: std::io::Error::other(e),
        })?;
        line.push('\n');
        self.file.write_all(line.as_bytes()).map_err(io)?;
        self.file.sync_data().map_err(io)
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

    #[test]
    fn records_survive_reopen_and_a_torn_tail_is_skipped() {
        let dir = std::env::temp_dir().join(format!("hawkmesh-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
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
        let _ = std::fs::remove_dir_all(&dir);
    }
}
