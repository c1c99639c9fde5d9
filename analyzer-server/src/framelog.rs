//! A binary append-only log of frames, for records too large and too many for the JSON-line
//! store (the pingmesh controller's result batches: megabytes a second on a large cluster,
//! where hex or base64 in JSON would cost more CPU than everything else the intake does).
//!
//! # Frame format
//!
//! ```text
//! u32 LE  length of the payload
//! u32 LE  CRC-32 (IEEE 802.3 polynomial, as zlib) of the tag and the payload
//! u64 LE  tag (the caller's: the pingmesh controller keeps the arrival time in it)
//! payload
//! ```
//!
//! Durability and recovery follow [`crate::store`]: a frame is synced (`fdatasync`) before
//! [`FrameLog::append`] returns; a write that fails part way is cut off again, and after a
//! failed sync the log refuses appends until it is reopened. Opening replays the frames: a
//! last frame cut short (the process stopped while writing it, never acknowledged) is cut
//! off; a frame whose checksum does not match, or whose length runs past the end, ends the
//! replay there (the frames after a corrupted length cannot be found again): the original
//! file is kept as `<name>.damaged-<unix ms>` and the log is rewritten with the good frames
//! before it. [`FrameLog::rewrite`] replaces the log atomically (compaction).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::store::{now_ms, replace_atomically, StoreError};

/// Bytes of a frame's header.
pub const HEADER_BYTES: usize = 16;
/// The largest payload (a frame claiming more is damage).
pub const MAX_PAYLOAD: usize = 1 << 30;

/// What replaying the log found.
#[derive(Debug, Default)]
pub struct FrameReplay {
    /// The good frames, in order: (tag, payload).
    pub frames: Vec<(u64, Vec<u8>)>,
    /// A torn last frame was cut off.
    pub torn_tail: bool,
    /// Where the replay stopped at damage, and why.
    pub damaged: Option<String>,
    /// Where the original was kept when damage was cut off.
    pub quarantined: Option<PathBuf>,
}

/// The log.
#[derive(Debug)]
pub struct FrameLog {
    dir: PathBuf,
    name: String,
    path: PathBuf,
    file: File,
    len: u64,
    broken: Option<String>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// One frame's bytes.
pub fn frame(tag: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&tag.to_le_bytes());
    crc.update(payload);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

impl FrameLog {
    /// Opens (creating if needed) `dir/name` and replays it, repairing what it must.
    pub fn open(dir: &Path, name: &str) -> Result<(FrameLog, FrameReplay), StoreError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let path = dir.join(name);
        let mut replay = FrameReplay::default();
        let mut good = 0usize;
        if path.exists() {
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            let mut at = 0usize;
            while at < bytes.len() {
                let rest = &bytes[at..];
                if rest.len() < HEADER_BYTES {
                    replay.torn_tail = true;
                    break;
                }
                let word =
                    |i: usize| u32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
                let len = word(0) as usize;
                let crc = word(4);
                if len > MAX_PAYLOAD {
                    replay.damaged = Some(format!("frame at byte {at} claims {len} bytes"));
                    break;
                }
                if rest.len() < HEADER_BYTES + len {
                    replay.torn_tail = true;
                    break;
                }
                let mut tag_bytes = [0u8; 8];
                tag_bytes.copy_from_slice(&rest[8..16]);
                let payload = &rest[HEADER_BYTES..HEADER_BYTES + len];
                let mut hasher = crc32fast::Hasher::new();
                hasher.update(&tag_bytes);
                hasher.update(payload);
                if hasher.finalize() != crc {
                    replay.damaged = Some(format!("frame at byte {at}: checksum mismatch"));
                    break;
                }
                replay
                    .frames
                    .push((u64::from_le_bytes(tag_bytes), payload.to_vec()));
                at += HEADER_BYTES + len;
                good = at;
            }
            if replay.damaged.is_some() {
                let kept = dir.join(format!("{name}.damaged-{}", now_ms()));
                std::fs::copy(&path, &kept).map_err(io(&kept))?;
                replace_atomically(dir, name, &[&bytes[..good]])?;
                replay.quarantined = Some(kept);
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        if replay.torn_tail {
            file.set_len(good as u64).map_err(io(&path))?;
            file.sync_all().map_err(io(&path))?;
        }
        Ok((
            FrameLog {
                dir: dir.to_path_buf(),
                name: name.to_string(),
                path,
                file,
                len: good as u64,
                broken: None,
            },
            replay,
        ))
    }

    /// Bytes in the log.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a frame and syncs it; returns its length in the log. On error the frame must
    /// be taken as not stored.
    pub fn append(&mut self, tag: u64, payload: &[u8]) -> Result<u64, StoreError> {
        let path = || self.path.display().to_string();
        if let Some(reason) = &self.broken {
            return Err(StoreError::Broken {
                path: path(),
                reason: reason.clone(),
            });
        }
        if payload.len() > MAX_PAYLOAD {
            return Err(StoreError::Io {
                path: path(),
                source: std::io::Error::other(format!(
                    "a frame of {} bytes is over the {MAX_PAYLOAD}-byte limit",
                    payload.len()
                )),
            });
        }
        let bytes = frame(tag, payload);
        if let Err(source) = self.file.write_all(&bytes) {
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
        if let Err(source) = self.file.sync_data() {
            self.broken = Some(format!("syncing failed: {source}"));
            return Err(StoreError::Io {
                path: path(),
                source,
            });
        }
        self.len += bytes.len() as u64;
        Ok(bytes.len() as u64)
    }

    /// Replaces the log with `frames` atomically.
    pub fn rewrite<'a>(
        &mut self,
        frames: impl IntoIterator<Item = (u64, &'a [u8])>,
    ) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        for (tag, payload) in frames {
            bytes.extend_from_slice(&frame(tag, payload));
        }
        replace_atomically(&self.dir, &self.name, &[&bytes])?;
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(io(&self.path))?;
        self.len = bytes.len() as u64;
        self.broken = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("hawkmesh-framelog-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn frames_survive_a_reopen_and_a_torn_tail_is_cut_off() {
        let d = dir("torn");
        let (mut log, replay) = FrameLog::open(&d, "f.log").unwrap();
        assert!(replay.frames.is_empty());
        log.append(7, b"first").unwrap();
        log.append(8, &[0u8; 1000]).unwrap();
        drop(log);
        // A third frame written only in part.
        let partial = frame(9, b"third, never acknowledged");
        let mut file = OpenOptions::new()
            .append(true)
            .open(d.join("f.log"))
            .unwrap();
        file.write_all(&partial[..20]).unwrap();
        drop(file);
        let (mut log, replay) = FrameLog::open(&d, "f.log").unwrap();
        assert!(replay.torn_tail);
        assert_eq!(replay.frames.len(), 2);
        assert_eq!(replay.frames[0], (7, b"first".to_vec()));
        assert_eq!(replay.frames[1].1.len(), 1000);
        log.append(10, b"after").unwrap();
        drop(log);
        let (_, replay) = FrameLog::open(&d, "f.log").unwrap();
        assert!(!replay.torn_tail);
        let tags: Vec<u64> = replay.frames.iter().map(|f| f.0).collect();
        assert_eq!(tags, [7, 8, 10]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_corrupted_frame_ends_the_replay_and_the_original_is_kept() {
        let d = dir("corrupt");
        let (mut log, _) = FrameLog::open(&d, "f.log").unwrap();
        for tag in 0..3 {
            log.append(tag, format!("frame {tag}").as_bytes()).unwrap();
        }
        drop(log);
        let path = d.join("f.log");
        let mut bytes = std::fs::read(&path).unwrap();
        let second = HEADER_BYTES + b"frame 0".len();
        bytes[second + HEADER_BYTES] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (log, replay) = FrameLog::open(&d, "f.log").unwrap();
        assert_eq!(replay.frames.len(), 1);
        assert!(
            replay
                .damaged
                .as_deref()
                .is_some_and(|d| d.contains(&format!("byte {second}: checksum"))),
            "{:?}",
            replay.damaged
        );
        let kept = replay.quarantined.unwrap();
        assert_eq!(std::fs::read(kept).unwrap(), bytes);
        assert_eq!(log.len(), second as u64);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn rewrite_replaces_the_log() {
        let d = dir("rewrite");
        let (mut log, _) = FrameLog::open(&d, "f.log").unwrap();
        log.append(1, b"old").unwrap();
        log.rewrite([(2u64, &b"new"[..]), (3, &b"newer"[..])])
            .unwrap();
        log.append(4, b"appended").unwrap();
        drop(log);
        let (_, replay) = FrameLog::open(&d, "f.log").unwrap();
        let tags: Vec<u64> = replay.frames.iter().map(|f| f.0).collect();
        assert_eq!(tags, [2, 3, 4]);
        let _ = std::fs::remove_dir_all(&d);
    }
}
