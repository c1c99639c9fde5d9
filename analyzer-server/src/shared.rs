//! How the gRPC service, the HTTP API and the timeout sweeper reach the incident set.
//!
//! The set sits behind a `std::sync::Mutex` (code outside the service, like the lab, locks it
//! synchronously through [`crate::RunningServer::incidents`]). Locking it may wait for a
//! store append and its fsync, and concluding an incident runs the diagnosis, so none of
//! that happens on an async worker thread: every lock is taken inside
//! `tokio::task::spawn_blocking`, and no guard is ever held across an `.await`.

use crate::counters::{Counter, Counters};
use crate::incidents::{Accepted, Filed, IncidentError, IncidentSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// A failure of the service itself (not of the input, not of the store).
#[derive(Debug, thiserror::Error)]
pub(crate) enum InternalError {
    /// Something panicked while holding the incident set.
    #[error("the incident set is poisoned by an earlier panic")]
    Poisoned,
    /// A blocking task panicked or was cancelled.
    #[error("a blocking task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// The incident set and the counters, as the handlers hold them.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    incidents: Arc<Mutex<IncidentSet>>,
    pub(crate) counters: Arc<Counters>,
    /// The pingmesh controller, for the incidents' joint view (HTTP only).
    pub(crate) pingmesh: Option<crate::pingmesh_service::PingmeshShared>,
}

impl Shared {
    /// Wraps `incidents` (the counters are the set's).
    pub(crate) fn new(incidents: Arc<Mutex<IncidentSet>>) -> Self {
        // Reading the counters' handle is safe even from a poisoned set.
        let counters = incidents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .counters()
            .clone();
        Shared {
            incidents,
            counters,
            pingmesh: None,
        }
    }

    /// With the pingmesh controller (for the joint view).
    pub(crate) fn with_pingmesh(
        mut self,
        pingmesh: Option<crate::pingmesh_service::PingmeshShared>,
    ) -> Self {
        self.pingmesh = pingmesh;
        self
    }

    /// Locks the set. Blocks: call it only from blocking code.
    fn lock(&self) -> Result<MutexGuard<'_, IncidentSet>, InternalError> {
        self.incidents.lock().map_err(|_| InternalError::Poisoned)
    }

    /// Runs `work` on tokio's blocking pool; an internal failure is logged and counted.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Shared) -> Result<T, InternalError> + Send + 'static,
    ) -> Result<T, InternalError> {
        let shared = self.clone();
        let outcome = match tokio::task::spawn_blocking(move || work(&shared)).await {
            Ok(outcome) => outcome,
            Err(join) => Err(join.into()),
        };
        if let Err(error) = &outcome {
            self.counters.bump(Counter::InternalErrors);
            tracing::error!(%error, "internal failure");
        }
        outcome
    }

    /// Runs `read` on the blocking pool with the set locked.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&IncidentSet) -> T + Send + 'static,
    ) -> Result<T, InternalError> {
        self.blocking(move |shared| Ok(read(&*shared.lock()?)))
            .await
    }

    /// Runs `work` on the blocking pool with nothing locked (CPU work on data already
    /// copied out of the set, such as serialising a large listing).
    pub(crate) async fn compute<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, InternalError> {
        self.blocking(move |_| Ok(work())).await
    }

    /// Files one chunk on the blocking pool: validation and the durable append under the
    /// lock; if the chunk completes its switch's report, the decoding after releasing it,
    /// the report under the lock again; if that completes the incident, the diagnosis
    /// without the lock, then its result under the lock. Returns once all of that is done, so a chunk is
    /// acknowledged only after it is on disk (and its incident, if complete, diagnosed).
    pub(crate) async fn accept(
        &self,
        chunk: Vec<u8>,
        from: Option<String>,
    ) -> Result<Result<Accepted, IncidentError>, InternalError> {
        self.blocking(move |shared| {
            let filed = shared
                .lock()?
                .accept_deferred(chunk, Instant::now(), from.as_deref());
            let Filed { accepted, decode } = match filed {
                Ok(filed) => filed,
                Err(error) => return Ok(Err(error)),
            };
            if let Some(decode) = decode {
                // Decoding (linear in the report) without the lock.
                let decoded = decode.run();
                let pending = shared.lock()?.deliver(decoded);
                if let Some(pending) = pending {
                    let concluded = pending.run();
                    shared.lock()?.conclude(concluded);
                }
            }
            Ok(Ok(accepted))
        })
        .await
    }

    /// Applies the retention policy now, on the blocking pool.
    pub(crate) async fn retain(&self) -> Result<Result<Vec<u64>, IncidentError>, InternalError> {
        self.blocking(|shared| Ok(shared.lock()?.retain(crate::store::now_ms())))
            .await
    }

    /// Concludes the incidents whose timeout passed, on the blocking pool. Their diagnoses
    /// run under the lock (as [`IncidentSet::expire`] does for every caller), so whoever
    /// locks the set next sees them concluded.
    pub(crate) async fn expire(&self) -> Result<Result<Vec<u64>, IncidentError>, InternalError> {
        self.blocking(|shared| Ok(shared.lock()?.expire(Instant::now())))
            .await
    }
}
