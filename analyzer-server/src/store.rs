//! The embedded store: an append-only log in the data directory, one framed record per
//! line.
//!
//! # Record format (store format 2)
//!
//! ```text
//! <crc32, 8 lowercase hex> <stored at, unix ms> <record JSON>\n
//! ```
//!
//! The CRC-32 (IEEE 802.3 polynomial, as zlib) covers everything after the first space up
//! to the newline. Lines of store format 1 (the record JSON alone, written before this
//! format) are still read; their time is the log file's modification time.
//!
//! # Durability
//!
//! Every accepted report chunk is appended (hex-encoded) and synced to disk
//! (`fdatasync`) before the chunk is acknowledged, so nothing acknowledged is lost when the
//! analyzer or the machine stops; incident state changes (a timeout) are appended the same
//! way. A write that fails part way (a full disk) is cut off again, so the log never holds
//! half a record followed by a whole one; when cutting off is impossible, or when syncing
//! fails (after a failed fsync the kernel may have dropped the written pages, so whether
//! the record is on disk is unknown), the store refuses every further append
//! ([`StoreError::Broken`]) until the service is restarted and replays what the disk really
//! holds.
//!
//! # Recovery
//!
//! Opening replays the log and never refuses to start over damage: a last line without its
//! newline (the process stopped while writing it, never acknowledged) is cut off; a line
//! whose checksum or JSON is wrong is skipped. Whatever was repaired is reported
//! ([`Replay`]): when any line was damaged, the original log is kept beside the new one as
//! `incidents.log.damaged-<unix ms>` for inspection and the log is rewritten with the good
//! records.
//!
//! # Compaction
//!
//! [`Store::rewrite`] replaces the log with a given set of records atomically (a temporary
//! file, synced, renamed over the log, the directory synced): retention by age and size
//! (see `incidents`) drops old incidents this way.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

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

/// A record and when it was stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored<R = Record> {
    /// Wall-clock time of the append, ms since the Unix epoch.
    pub at_ms: u64,
    /// The record.
    pub record: R,
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

/// A damaged line found on replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// 1-based line number in the log as found.
    pub line: usize,
    /// Byte offset of the line.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
}

/// What replaying the log found, and what was repaired.
#[derive(Debug)]
pub struct Replay<R = Record> {
    /// The good records, in order.
    pub records: Vec<Stored<R>>,
    /// A torn last line was cut off (the process stopped while writing it; it was never
    /// acknowledged).
    pub torn_tail: bool,
    /// Damaged lines skipped.
    pub damaged: Vec<Damage>,
    /// Where the original log was kept when damaged lines were dropped from it.
    pub quarantined: Option<PathBuf>,
}

impl<R> Default for Replay<R> {
    fn default() -> Self {
        Replay {
            records: Vec::new(),
            torn_tail: false,
            damaged: Vec::new(),
            quarantined: None,
        }
    }
}

impl<R> Replay<R> {
    /// One line for the operator, when anything was repaired.
    pub fn repair_summary(&self) -> Option<String> {
        if !self.torn_tail && self.damaged.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if self.torn_tail {
            parts.push("a last record cut short by a stop while writing it (never acknowledged) was cut off".to_string());
        }
        if !self.damaged.is_empty() {
            let lines: Vec<String> = self
                .damaged
                .iter()
                .take(5)
                .map(|d| format!("line {} ({})", d.line, d.reason))
                .collect();
            parts.push(format!(
                "{} damaged record(s) skipped: {}{}; the original log is kept as {}",
                self.damaged.len(),
                lines.join(", "),
                if self.damaged.len() > 5 { ", …" } else { "" },
                self.quarantined
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "-".into())
            ));
        }
        Some(parts.join("; "))
    }
}

/// The append-only log of records `R` (the incident log by default; the pingmesh
/// controller keeps its own log of its own records beside it).
#[derive(Debug)]
pub struct Store<R = Record> {
    dir: PathBuf,
    /// The log's file name in `dir`.
    name: String,
    path: PathBuf,
    file: File,
    /// Length of the log up to its last complete, synced record.
    len: u64,
    /// Why appends are refused, after a failure that leaves the end of the log uncertain.
    broken: Option<String>,
    /// Tests pause appends here, after the write and before the sync.
    #[cfg(test)]
    pub(crate) gate: Option<crate::gate::Gate>,
    records: PhantomData<fn(R) -> R>,
}

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One framed line (newline included).
fn frame<R: Serialize>(at_ms: u64, record: &R) -> Result<String, serde_json::Error> {
    // Built in one buffer (records can be megabytes): a checksum placeholder, the body,
    // then the checksum written over the placeholder.
    let mut line: Vec<u8> = Vec::with_capacity(256);
    line.extend_from_slice(b"00000000 ");
    line.extend_from_slice(at_ms.to_string().as_bytes());
    line.push(b' ');
    serde_json::to_writer(&mut line, record)?;
    let crc = format!("{:08x}", crc32fast::hash(&line[9..]));
    line[..8].copy_from_slice(crc.as_bytes());
    line.push(b'\n');
    // serde_json writes UTF-8 and the rest is ASCII.
    String::from_utf8(line).map_err(|e| {
        <serde_json::Error as serde::ser::Error>::custom(format!("a record is not UTF-8: {e}"))
    })
}

/// Parses one line (without its newline); `legacy_ms` is the time of format-1 lines.
fn parse_line<R: DeserializeOwned>(line: &[u8], legacy_ms: u64) -> Result<Stored<R>, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8: {e}"))?;
    if text.starts_with('{') {
        // Store format 1: the record alone.
        let record = serde_json::from_str(text).map_err(|e| format!("bad record: {e}"))?;
        return Ok(Stored {
            at_ms: legacy_ms,
            record,
        });
    }
    let (crc, body) = text
        .split_once(' ')
        .ok_or_else(|| "no checksum field".to_string())?;
    let expected =
        u32::from_str_radix(crc, 16).map_err(|_| format!("bad checksum field {crc:?}"))?;
    if crc.len() != 8 {
        return Err(format!("bad checksum field {crc:?}"));
    }
    let computed = crc32fast::hash(body.as_bytes());
    if computed != expected {
        return Err(format!(
            "checksum {expected:08x} does not match the record ({computed:08x})"
        ));
    }
    let (at, json) = body
        .split_once(' ')
        .ok_or_else(|| "no time field".to_string())?;
    let at_ms = at.parse().map_err(|_| format!("bad time field {at:?}"))?;
    let record = serde_json::from_str(json).map_err(|e| format!("bad record: {e}"))?;
    Ok(Stored { at_ms, record })
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `parts` (lines, or a whole file's bytes) to `dir/name.tmp`, syncs it, renames it
/// to `dir/name` and syncs the directory: the file is replaced whole or not at all.
pub(crate) fn replace_atomically<B: AsRef<[u8]>>(
    dir: &Path,
    name: &str,
    parts: &[B],
) -> Result<(), StoreError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let target = dir.join(name);
    {
        let mut file = File::create(&tmp).map_err(io(&tmp))?;
        for part in parts {
            if let Err(error) = file.write_all(part.as_ref()) {
                drop(file);
                let _ = std::fs::remove_file(&tmp);
                return Err(io(&tmp)(error));
            }
        }
        file.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, &target).map_err(io(&target))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
}

impl Store<Record> {
    /// Opens (creating if needed) the incident log `dir/incidents.log` and replays it,
    /// repairing what it must (see the module documentation).
    pub fn open(dir: &Path) -> Result<(Store, Replay), StoreError> {
        Store::open_named(dir, "incidents.log")
    }
}

impl<R: Serialize + DeserializeOwned> Store<R> {
    /// Opens (creating if needed) the log `dir/name` and replays it, repairing what it must
    /// (see the module documentation).
    pub fn open_named(dir: &Path, name: &str) -> Result<(Store<R>, Replay<R>), StoreError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let path = dir.join(name);
        let mut replay = Replay::default();
        let mut good_len = 0u64;
        if path.exists() {
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            let legacy_ms = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or_else(now_ms, |d| d.as_millis() as u64);
            let mut offset = 0usize;
            let mut number = 0usize;
            while offset < bytes.len() {
                number += 1;
                let Some(end) = bytes[offset..]
                    .iter()
                    .position(|b| *b == b'\n')
                    .map(|p| offset + p)
                else {
                    // The last line, without its newline: written only in part when the
                    // process stopped. Nothing in it was acknowledged; cut it off.
                    replay.torn_tail = true;
                    break;
                };
                match parse_line(&bytes[offset..end], legacy_ms) {
                    Ok(stored) => replay.records.push(stored),
                    Err(reason) => replay.damaged.push(Damage {
                        line: number,
                        offset: offset as u64,
                        reason,
                    }),
                }
                offset = end + 1;
                good_len = offset as u64;
            }
            if !replay.damaged.is_empty() {
                let kept = dir.join(format!("{name}.damaged-{}", now_ms()));
                std::fs::copy(&path, &kept).map_err(io(&kept))?;
                let lines = replay
                    .records
                    .iter()
                    .map(|s| frame(s.at_ms, &s.record))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| io(&path)(std::io::Error::other(e)))?;
                replace_atomically(dir, name, &lines)?;
                good_len = lines.iter().map(|l| l.len() as u64).sum();
                replay.quarantined = Some(kept);
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        if replay.torn_tail {
            file.set_len(good_len).map_err(io(&path))?;
            file.sync_all().map_err(io(&path))?;
        }
        let store = Store {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            path,
            file,
            len: good_len,
            broken: None,
            #[cfg(test)]
            gate: None,
            records: PhantomData,
        };
        Ok((store, replay))
    }

    /// Bytes in the log.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The length of `record`'s line as [`Store::append`] would write it.
    pub fn framed_len(at_ms: u64, record: &R) -> u64 {
        frame(at_ms, record).map_or(0, |line| line.len() as u64)
    }

    /// Appends a record stamped now and syncs it to disk; returns the stamp. On error the
    /// record must be taken as not stored (it may still be on disk after a failed sync;
    /// replay then finds it).
    pub fn append(&mut self, record: &R) -> Result<u64, StoreError> {
        let at_ms = now_ms();
        let path = || self.path.display().to_string();
        if let Some(reason) = &self.broken {
            return Err(StoreError::Broken {
                path: path(),
                reason: reason.clone(),
            });
        }
        let line = frame(at_ms, record).map_err(|e| StoreError::Io {
            path: path(),
            source: std::io::Error::other(e),
        })?;
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
        Ok(at_ms)
    }

    /// Replaces the whole log with `records` atomically (compaction). On failure the old log
    /// stays as it was and appends go on to it.
    pub fn rewrite<'a>(
        &mut self,
        records: impl IntoIterator<Item = (u64, &'a R)>,
    ) -> Result<(), StoreError>
    where
        R: 'a,
    {
        let lines = records
            .into_iter()
            .map(|(at_ms, record)| frame(at_ms, record))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| io(&self.path)(std::io::Error::other(e)))?;
        replace_atomically(&self.dir, &self.name, &lines)?;
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(io(&self.path))?;
        self.len = lines.iter().map(|l| l.len() as u64).sum();
        // A fresh file: an earlier uncertain end is gone with the old one.
        self.broken = None;
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

    fn records(replay: &Replay) -> Vec<Record> {
        replay.records.iter().map(|s| s.record.clone()).collect()
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("hawkmesh-store-{name}-{}", std::process::id()));
        remove(&dir);
        dir
    }

    #[test]
    fn records_survive_reopen_and_a_torn_tail_is_cut_off() {
        let dir = scratch("torn");
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
        text.push_str("1234abcd 17 {\"kind\":\"chu");
        std::fs::write(&log, text).unwrap();
        let (mut store, replay) = Store::open(&dir).unwrap();
        assert!(replay.torn_tail);
        assert!(replay.repair_summary().unwrap().contains("cut off"));
        assert_eq!(
            records(&replay),
            vec![
                Record::Chunk {
                    hex: "0102ff".into()
                },
                Record::TimedOut { event_id: 9 }
            ]
        );
        store.append(&Record::TimedOut { event_id: 10 }).unwrap();
        let (_, replay) = Store::open(&dir).unwrap();
        assert_eq!(replay.records.len(), 3, "later records are kept");
        assert!(replay.repair_summary().is_none(), "nothing left to repair");
        assert_eq!(from_hex("0aFf"), Ok(vec![10, 255]));
        assert!(from_hex("0g").is_err() && from_hex("abc").is_err());
        remove(&dir);
    }

    #[test]
    fn a_stop_at_any_byte_of_an_append_loses_only_that_record() {
        let dir = scratch("every-byte");
        let (mut store, _) = Store::open(&dir).unwrap();
        for event_id in 0..3 {
            store.append(&Record::TimedOut { event_id }).unwrap();
        }
        drop(store);
        let log = dir.join("incidents.log");
        let whole = std::fs::read(&log).unwrap();
        let last_start = whole[..whole.len() - 1]
            .iter()
            .rposition(|b| *b == b'\n')
            .unwrap()
            + 1;
        // The process killed after any prefix of the last line reached the disk.
        for cut in last_start..whole.len() {
            std::fs::write(&log, &whole[..cut]).unwrap();
            let (mut store, replay) = Store::open(&dir).unwrap();
            assert_eq!(
                records(&replay),
                (0..2)
                    .map(|event_id| Record::TimedOut { event_id })
                    .collect::<Vec<_>>(),
                "cut at byte {cut}"
            );
            assert_eq!(replay.torn_tail, cut > last_start, "cut at byte {cut}");
            assert!(replay.damaged.is_empty(), "cut at byte {cut}");
            // And the log takes appends again.
            store.append(&Record::TimedOut { event_id: 7 }).unwrap();
            let (_, replay) = Store::open(&dir).unwrap();
            assert_eq!(replay.records.len(), 3, "cut at byte {cut}");
        }
        remove(&dir);
    }

    #[test]
    fn damage_in_the_middle_is_skipped_reported_and_kept_for_inspection() {
        let dir = scratch("damage");
        let (mut store, _) = Store::open(&dir).unwrap();
        for event_id in 0..4 {
            store.append(&Record::TimedOut { event_id }).unwrap();
        }
        drop(store);
        let log = dir.join("incidents.log");
        // One flipped digit in the second record: its checksum no longer matches.
        let text = std::fs::read_to_string(&log).unwrap();
        let damaged = text.replacen("\"event_id\":1", "\"event_id\":5", 1);
        assert_ne!(damaged, text);
        std::fs::write(&log, &damaged).unwrap();
        let (mut store, replay) = Store::open(&dir).unwrap();
        assert_eq!(
            records(&replay),
            [0, 2, 3]
                .into_iter()
                .map(|event_id| Record::TimedOut { event_id })
                .collect::<Vec<_>>()
        );
        assert_eq!(replay.damaged.len(), 1);
        assert_eq!(replay.damaged[0].line, 2);
        assert!(
            replay.damaged[0].reason.contains("checksum"),
            "{:?}",
            replay.damaged
        );
        let kept = replay.quarantined.clone().expect("the original is kept");
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), damaged);
        assert!(replay.repair_summary().unwrap().contains("line 2"));
        // The rewritten log is clean, and takes appends.
        store.append(&Record::TimedOut { event_id: 4 }).unwrap();
        let (_, replay) = Store::open(&dir).unwrap();
        assert!(replay.damaged.is_empty() && !replay.torn_tail);
        assert_eq!(replay.records.len(), 4);
        // A store-format-1 log (JSON lines without checksums) is still read.
        std::fs::write(
            &log,
            "{\"kind\":\"timed_out\",\"event_id\":8}\n{\"kind\":\"chunk\",\"hex\":\"00ff\"}\n",
        )
        .unwrap();
        let (_, replay) = Store::open(&dir).unwrap();
        assert_eq!(
            records(&replay),
            vec![
                Record::TimedOut { event_id: 8 },
                Record::Chunk { hex: "00ff".into() }
            ]
        );
        remove(&dir);
    }

    #[test]
    fn a_rewrite_replaces_the_log_whole() {
        let dir = scratch("rewrite");
        let (mut store, _) = Store::open(&dir).unwrap();
        for event_id in 0..5 {
            store.append(&Record::TimedOut { event_id }).unwrap();
        }
        let keep = [Record::TimedOut { event_id: 3 }];
        store.rewrite(keep.iter().map(|r| (42, r))).unwrap();
        assert_eq!(store.len(), Store::framed_len(42, &keep[0]));
        store.append(&Record::TimedOut { event_id: 9 }).unwrap();
        let (_, replay) = Store::open(&dir).unwrap();
        assert_eq!(
            records(&replay),
            vec![
                Record::TimedOut { event_id: 3 },
                Record::TimedOut { event_id: 9 }
            ]
        );
        assert_eq!(replay.records[0].at_ms, 42);
        assert!(!dir.join("incidents.log.tmp").exists());
        remove(&dir);
    }

    #[test]
    fn a_failed_append_is_an_error_and_leaves_the_log_replayable() {
        let dir = scratch("broken");
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
        assert_eq!(records(&replay), vec![Record::TimedOut { event_id: 1 }]);
        assert!(!replay.torn_tail);
        store.append(&Record::TimedOut { event_id: 4 }).unwrap();
        let (_, replay) = Store::open(&dir).unwrap();
        assert_eq!(replay.records.len(), 2);
        remove(&dir);
    }
}
