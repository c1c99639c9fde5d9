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
//! failed sync the log refuses appends until it is reopened or rewritten.
//!
//! **Group commit.** [`FrameLog::append_deferred`] writes a frame without syncing it and
//! returns a [`Ticket`]; [`GroupSync::wait`] returns once a sync covers that ticket. Waiters
//! queue on one lock: the first syncs everything written so far, and those behind it whose
//! frames that sync covered return without one. Concurrent writers (the uploads of many
//! hosts) so share one `fdatasync` per round instead of one each, and the caller holding the
//! writer's lock (the pingmesh controller's) does not hold it through the disk's latency. Opening replays the frames: a
//! last frame cut short (the process stopped while writing it, never acknowledged) is cut
//! off; a frame whose checksum does not match, or whose length runs past the end, ends the
//! replay there (the frames after a corrupted length cannot be found again): the original
//! file is kept as `<name>.damaged-<unix ms>` and the log is rewritten with the good frames
//! before it. [`FrameLog::rewrite`] replaces the log atomically (compaction).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    sync: Arc<GroupSync>,
}

/// A written frame's place in the order of writes: durable once a sync reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

/// The log's syncing, shared with the threads that wait for their frames to be durable.
#[derive(Debug)]
pub struct GroupSync {
    path: PathBuf,
    /// Writers between [`GroupSync::enter`] and the end of their wait.
    in_flight: AtomicUsize,
    /// How long a sync waits for other writers' frames when some are in flight, µs.
    delay_us: AtomicU64,
    /// Frames written so far (the last ticket handed out).
    written: AtomicU64,
    /// Set when a sync failed: no write is durable any more until the log is rewritten.
    broken: AtomicBool,
    state: Mutex<SyncState>,
}

#[derive(Debug)]
struct SyncState {
    /// A handle on the log's current file (replaced when the log is rewritten).
    file: File,
    /// Frames known durable.
    synced: u64,
    /// Why the last sync failed.
    broken: Option<String>,
    /// Syncs done (each covered one or more frames).
    syncs: u64,
}

/// A writer in flight ([`GroupSync::enter`]): counted until dropped.
#[derive(Debug)]
pub struct Writer {
    sync: Arc<GroupSync>,
}

impl Writer {
    /// [`GroupSync::wait`], first waiting the commit delay for the frames of the other
    /// writers in flight, if there are any (as PostgreSQL's `commit_delay` with
    /// `commit_siblings`): under load one sync then covers many uploads.
    pub fn wait(&self, ticket: Ticket) -> Result<(), StoreError> {
        let delay = if self.sync.in_flight.load(Ordering::Acquire) > 1 {
            Duration::from_micros(self.sync.delay_us.load(Ordering::Relaxed))
        } else {
            Duration::ZERO
        };
        self.sync.wait_after(ticket, delay)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.sync.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl GroupSync {
    /// Counts a writer in flight until the returned guard is dropped: take it before
    /// waiting for the writer's lock, so that the syncs of the others know it is coming.
    pub fn enter(self: &Arc<Self>) -> Writer {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Writer {
            sync: Arc::clone(self),
        }
    }

    /// Sets how long a sync waits for the frames of other writers in flight (0: never).
    pub fn set_commit_delay(&self, delay: Duration) {
        self.delay_us.store(
            u64::try_from(delay.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Returns once the frame of `ticket` is durable: syncs the log unless a sync since it
    /// was written covered it already. An error means it is not (and will not become)
    /// durable: the log failed a sync, and refuses writes until it is rewritten.
    pub fn wait(&self, ticket: Ticket) -> Result<(), StoreError> {
        self.wait_after(ticket, Duration::ZERO)
    }

    fn wait_after(&self, ticket: Ticket, delay: Duration) -> Result<(), StoreError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(reason) = &state.broken {
            return Err(StoreError::Broken {
                path: self.path.display().to_string(),
                reason: reason.clone(),
            });
        }
        if state.synced >= ticket.0 {
            return Ok(());
        }
        if !delay.is_zero() {
            // Holding the lock: the waiters behind find their frames covered by this sync.
            std::thread::sleep(delay);
        }
        // Every frame counted in `written` was written before the count was raised, so this
        // sync covers them all.
        let target = self.written.load(Ordering::Acquire);
        if let Err(source) = state.file.sync_data() {
            state.broken = Some(format!("syncing failed: {source}"));
            self.broken.store(true, Ordering::Release);
            return Err(StoreError::Io {
                path: self.path.display().to_string(),
                source,
            });
        }
        state.synced = target;
        state.syncs += 1;
        Ok(())
    }

    /// The ticket of the last frame written: waiting for it makes everything written so far
    /// durable (a duplicate upload's answer waits for its original's frame this way).
    pub fn latest(&self) -> Ticket {
        Ticket(self.written.load(Ordering::Acquire))
    }

    /// Syncs done so far.
    pub fn syncs(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).syncs
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// One frame's bytes.
pub fn frame(tag: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = header(tag, payload).to_vec();
    out.extend_from_slice(payload);
    out
}

/// A frame's header: length, CRC-32 of tag and payload, tag.
fn header(tag: u64, payload: &[u8]) -> [u8; HEADER_BYTES] {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&tag.to_le_bytes());
    crc.update(payload);
    let mut out = [0u8; HEADER_BYTES];
    out[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    out[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
    out[8..].copy_from_slice(&tag.to_le_bytes());
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
        let handle = file.try_clone().map_err(io(&path))?;
        Ok((
            FrameLog {
                dir: dir.to_path_buf(),
                name: name.to_string(),
                sync: Arc::new(GroupSync {
                    path: path.clone(),
                    in_flight: AtomicUsize::new(0),
                    delay_us: AtomicU64::new(0),
                    written: AtomicU64::new(0),
                    broken: AtomicBool::new(false),
                    state: Mutex::new(SyncState {
                        file: handle,
                        synced: 0,
                        broken: None,
                        syncs: 0,
                    }),
                }),
                path,
                file,
                len: good as u64,
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

    /// Appends a frame and syncs it; returns the bytes it took.
    pub fn append(&mut self, tag: u64, payload: &[u8]) -> Result<u64, StoreError> {
        let (bytes, ticket) = self.append_deferred(tag, payload)?;
        self.sync.wait(ticket)?;
        Ok(bytes)
    }

    /// Appends a frame without syncing it; returns the bytes it took and the ticket to
    /// [`GroupSync::wait`] for before telling anyone it is stored.
    pub fn append_deferred(
        &mut self,
        tag: u64,
        payload: &[u8],
    ) -> Result<(u64, Ticket), StoreError> {
        let path = || self.path.display().to_string();
        if self.sync.broken.load(Ordering::Acquire) {
            let reason = self
                .sync
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .broken
                .clone()
                .unwrap_or_default();
            return Err(StoreError::Broken {
                path: path(),
                reason,
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
        // Header and payload as two writes: the payload (up to megabytes) is not copied. A
        // crash between them leaves a torn tail, which the replay cuts off.
        let header = header(tag, payload);
        let written = self
            .file
            .write_all(&header)
            .and_then(|()| self.file.write_all(payload));
        if let Err(source) = written {
            if let Err(cut) = self.file.set_len(self.len) {
                let mut state = self.sync.state.lock().unwrap_or_else(|p| p.into_inner());
                state.broken = Some(format!(
                    "a failed write ({source}) could not be cut off: {cut}"
                ));
                self.sync.broken.store(true, Ordering::Release);
            }
            return Err(StoreError::Io {
                path: path(),
                source,
            });
        }
        let bytes = (HEADER_BYTES + payload.len()) as u64;
        self.len += bytes;
        let ticket = self.sync.written.fetch_add(1, Ordering::AcqRel) + 1;
        Ok((bytes, Ticket(ticket)))
    }

    /// The log's syncing, for waiting outside the writer's lock.
    pub fn group_sync(&self) -> Arc<GroupSync> {
        Arc::clone(&self.sync)
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
        // Held across the swap: no sync runs on the old file meanwhile, and every frame
        // written so far is durable in the new one (or was dropped by the caller as no
        // longer needed) once it is in place.
        let mut state = self.sync.state.lock().unwrap_or_else(|p| p.into_inner());
        replace_atomically(&self.dir, &self.name, &[&bytes])?;
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(io(&self.path))?;
        state.file = self.file.try_clone().map_err(io(&self.path))?;
        state.synced = self.sync.written.load(Ordering::Acquire);
        state.broken = None;
        self.sync.broken.store(false, Ordering::Release);
        self.len = bytes.len() as u64;
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
    fn one_sync_covers_every_frame_written_before_it() {
        let d = dir("group");
        let (mut log, _) = FrameLog::open(&d, "f.log").unwrap();
        let sync = log.group_sync();
        let (_, first) = log.append_deferred(1, b"one").unwrap();
        let (_, second) = log.append_deferred(2, b"two").unwrap();
        assert!(first < second);
        assert_eq!(sync.syncs(), 0);
        // The later ticket's wait syncs both; the earlier one's finds itself covered.
        sync.wait(second).unwrap();
        sync.wait(first).unwrap();
        assert_eq!(sync.syncs(), 1);
        let (_, third) = log.append_deferred(3, b"three").unwrap();
        assert_eq!(sync.latest(), third);
        sync.wait(third).unwrap();
        assert_eq!(sync.syncs(), 2);
        // A rewrite leaves everything written durable in the new file: no further sync.
        let (_, fourth) = log.append_deferred(4, b"four").unwrap();
        log.rewrite([(4u64, &b"four"[..])]).unwrap();
        sync.wait(fourth).unwrap();
        assert_eq!(sync.syncs(), 2);
        // Appends after the rewrite go to the new file and are synced there.
        let (_, fifth) = log.append_deferred(5, b"five").unwrap();
        sync.wait(fifth).unwrap();
        assert_eq!(sync.syncs(), 3);
        drop(log);
        let (_, replay) = FrameLog::open(&d, "f.log").unwrap();
        let tags: Vec<u64> = replay.frames.iter().map(|f| f.0).collect();
        assert_eq!(tags, [4, 5]);
    }

    #[test]
    fn a_lone_writer_is_not_delayed_and_writers_in_flight_share_a_sync() {
        let d = dir("writers");
        let (mut log, _) = FrameLog::open(&d, "f.log").unwrap();
        let sync = log.group_sync();
        // A long commit delay: a lone writer must not wait it.
        sync.set_commit_delay(Duration::from_secs(10));
        let lone = sync.enter();
        let (_, ticket) = log.append_deferred(1, b"alone").unwrap();
        let start = std::time::Instant::now();
        lone.wait(ticket).unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "a lone writer waited"
        );
        drop(lone);
        assert_eq!(sync.syncs(), 1);
        // Two in flight: the first to wait holds the sync for the delay, and the second's
        // frame, written meanwhile, is covered by that one sync.
        sync.set_commit_delay(Duration::from_secs(1));
        let (a, b) = (sync.enter(), sync.enter());
        let (_, ta) = log.append_deferred(2, b"a").unwrap();
        let waiting = std::thread::spawn(move || a.wait(ta));
        std::thread::sleep(Duration::from_millis(20));
        let (_, tb) = log.append_deferred(3, b"b").unwrap();
        waiting.join().unwrap().unwrap();
        b.wait(tb).unwrap();
        assert_eq!(sync.syncs(), 2);
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
