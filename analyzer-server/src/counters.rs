//! Counters of what the service did and of every failure it logged, so that a failure that
//! is handled (a rejected chunk, a store write that failed, a diagnosis that could not be
//! rendered) is still visible after the fact: `GET /api/counters` serves a snapshot.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// One counter of [`Counters`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Chunks stored for the first time.
    ChunksAccepted,
    /// Chunks that were already stored.
    ChunksDuplicate,
    /// Chunks refused (malformed, too large, from a node that is not a switch).
    ChunksRejected,
    /// Chunks refused for now by an intake limit (rate, incidents collecting); the agent
    /// resends them.
    ChunksThrottled,
    /// Incidents diagnosed (complete or timed out), not counting those rebuilt on start.
    IncidentsConcluded,
    /// Store appends that failed (nothing was acknowledged for them).
    StoreFailures,
    /// Diagnoses whose JSON or HTML rendering failed, or whose analysis panicked.
    DiagnosisFailures,
    /// Store records that could not be replayed on start.
    ReplaySkipped,
    /// Incidents dropped by the retention policy (age or store size).
    IncidentsDropped,
    /// Connections closed on accept because a connection cap was reached.
    ConnectionsRefused,
    /// Internal failures: a poisoned incident set, a panicked task, a server that stopped
    /// with an error.
    InternalErrors,
}

/// Counters shared by the incident set, the gRPC service and the HTTP API.
#[derive(Debug, Default)]
pub struct Counters {
    chunks_accepted: AtomicU64,
    chunks_duplicate: AtomicU64,
    chunks_rejected: AtomicU64,
    chunks_throttled: AtomicU64,
    incidents_concluded: AtomicU64,
    store_failures: AtomicU64,
    diagnosis_failures: AtomicU64,
    replay_skipped: AtomicU64,
    incidents_dropped: AtomicU64,
    connections_refused: AtomicU64,
    internal_errors: AtomicU64,
}

/// The counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CounterSnapshot {
    /// See [`Counter::ChunksAccepted`].
    pub chunks_accepted: u64,
    /// See [`Counter::ChunksDuplicate`].
    pub chunks_duplicate: u64,
    /// See [`Counter::ChunksRejected`].
    pub chunks_rejected: u64,
    /// See [`Counter::ChunksThrottled`].
    pub chunks_throttled: u64,
    /// See [`Counter::IncidentsConcluded`].
    pub incidents_concluded: u64,
    /// See [`Counter::StoreFailures`].
    pub store_failures: u64,
    /// See [`Counter::DiagnosisFailures`].
    pub diagnosis_failures: u64,
    /// See [`Counter::ReplaySkipped`].
    pub replay_skipped: u64,
    /// See [`Counter::IncidentsDropped`].
    pub incidents_dropped: u64,
    /// See [`Counter::ConnectionsRefused`].
    pub connections_refused: u64,
    /// See [`Counter::InternalErrors`].
    pub internal_errors: u64,
}

impl Counters {
    fn cell(&self, counter: Counter) -> &AtomicU64 {
        match counter {
            Counter::ChunksAccepted => &self.chunks_accepted,
            Counter::ChunksDuplicate => &self.chunks_duplicate,
            Counter::ChunksRejected => &self.chunks_rejected,
            Counter::ChunksThrottled => &self.chunks_throttled,
            Counter::IncidentsConcluded => &self.incidents_concluded,
            Counter::StoreFailures => &self.store_failures,
            Counter::DiagnosisFailures => &self.diagnosis_failures,
            Counter::ReplaySkipped => &self.replay_skipped,
            Counter::IncidentsDropped => &self.incidents_dropped,
            Counter::ConnectionsRefused => &self.connections_refused,
            Counter::InternalErrors => &self.internal_errors,
        }
    }

    /// Adds one to `counter`.
    pub fn bump(&self, counter: Counter) {
        self.cell(counter).fetch_add(1, Ordering::Relaxed);
    }

    /// The current value of `counter`.
    pub fn get(&self, counter: Counter) -> u64 {
        self.cell(counter).load(Ordering::Relaxed)
    }

    /// Every counter (each read on its own; the set is not one atomic snapshot).
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            chunks_accepted: self.get(Counter::ChunksAccepted),
            chunks_duplicate: self.get(Counter::ChunksDuplicate),
            chunks_rejected: self.get(Counter::ChunksRejected),
            chunks_throttled: self.get(Counter::ChunksThrottled),
            incidents_concluded: self.get(Counter::IncidentsConcluded),
            store_failures: self.get(Counter::StoreFailures),
            diagnosis_failures: self.get(Counter::DiagnosisFailures),
            replay_skipped: self.get(Counter::ReplaySkipped),
            incidents_dropped: self.get(Counter::IncidentsDropped),
            connections_refused: self.get(Counter::ConnectionsRefused),
            internal_errors: self.get(Counter::InternalErrors),
        }
    }
}
