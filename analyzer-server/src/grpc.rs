//! The `hawkmesh.v1.Collector` gRPC service.
//!
//! Status codes:
//! - `StreamReports` answers `OK` with a [`StreamSummary`] once every chunk of the stream is
//!   on disk. A malformed chunk does not fail the stream: it is listed in
//!   `StreamSummary.rejected` with the reason and the stream goes on (the proto's
//!   contract; failing the call would make an agent that resends the same stream fail
//!   forever on one bad chunk).
//! - A chunk that could not be stored durably ends the stream with `UNAVAILABLE`: that chunk
//!   and everything after it are not acknowledged (chunks before it were stored). The
//!   condition may pass (a full disk freed), and resending the whole stream is safe because
//!   stored chunks come back as duplicates; after a failed sync the store refuses writes
//!   until the service restarts (see [`crate::store`]).
//! - A chunk refused for now by an intake limit (a switch opening incidents faster than its
//!   rate, too many incidents collecting) ends the stream with `RESOURCE_EXHAUSTED`: that
//!   chunk and the rest are not acknowledged, the agent resends later.
//! - `GetIncident` for an event id the analyzer has no chunk of answers `NOT_FOUND`.
//! - A failure of the service itself (a panic poisoned the incident set) is `INTERNAL`.
//! - A stream that breaks while being read (the agent went away) ends with `ABORTED`.

use crate::counters::Counter;
use crate::incidents::{Accepted, IncidentError, IncidentSet};
use crate::shared::{InternalError, Shared};
use hawkmesh_proto::v1::collector_server::Collector;
use hawkmesh_proto::v1::{IncidentReply, IncidentRequest, ReportChunk, StreamSummary};
use std::sync::{Arc, Mutex};
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

/// Chunks larger than this are refused (a chunk is at most an MTU; 64 KiB leaves room for
/// jumbo frames and agents that batch).
pub const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// The service, sharing the incident set with the HTTP API.
#[derive(Debug, Clone)]
pub struct CollectorService {
    shared: Shared,
    /// Clients are identified by their TLS certificate (mutual TLS); without TLS
    /// (loopback plaintext) nobody is.
    identified: bool,
    /// The pingmesh controller, told when each incident began (its joint view).
    pingmesh: Option<crate::pingmesh_service::PingmeshShared>,
}

impl CollectorService {
    /// A service over `incidents`; `identified` when the listener is mutual TLS.
    pub fn new(incidents: Arc<Mutex<IncidentSet>>, identified: bool) -> Self {
        CollectorService {
            shared: Shared::new(incidents),
            identified,
            pingmesh: None,
        }
    }

    /// Tells `pingmesh` when each incident begins.
    pub fn with_pingmesh(mut self, pingmesh: crate::pingmesh_service::PingmeshShared) -> Self {
        self.pingmesh = Some(pingmesh);
        self
    }

    /// The node name the client's certificate gives, when clients are identified.
    fn identity<T>(&self, request: &Request<T>) -> Result<Option<String>, Status> {
        if !self.identified {
            return Ok(None);
        }
        let certs = request
            .peer_certs()
            .ok_or_else(|| Status::unauthenticated("no client certificate"))?;
        let first = certs
            .first()
            .ok_or_else(|| Status::unauthenticated("no client certificate"))?;
        crate::tls::peer_identity(first)
            .map(Some)
            .map_err(|e| Status::unauthenticated(e.to_string()))
    }
}

fn internal(error: InternalError) -> Status {
    Status::internal(error.to_string())
}

#[tonic::async_trait]
impl Collector for CollectorService {
    async fn stream_reports(
        &self,
        request: Request<Streaming<ReportChunk>>,
    ) -> Result<Response<StreamSummary>, Status> {
        let identity = self.identity(&request)?;
        let mut stream = request.into_inner();
        let mut summary = StreamSummary::default();
        // Chunks are stored as they arrive: a stream cut half-way keeps what was sent.
        while let Some(message) = stream.next().await {
            let chunk = match message {
                Ok(chunk) => chunk.chunk,
                Err(status) => {
                    tracing::warn!(
                        accepted = summary.accepted,
                        duplicates = summary.duplicates,
                        error = status.message(),
                        "report stream broken"
                    );
                    return Err(Status::aborted(format!(
                        "stream broken after {} chunks ({} new): {}",
                        summary.accepted + summary.duplicates,
                        summary.accepted,
                        status.message()
                    )));
                }
            };
            if chunk.len() > MAX_CHUNK_BYTES {
                let reason = format!(
                    "chunk of {} bytes exceeds the {MAX_CHUNK_BYTES}-byte limit",
                    chunk.len()
                );
                self.shared.counters.bump(Counter::ChunksRejected);
                tracing::warn!(%reason, "chunk rejected");
                summary.rejected.push(reason);
                continue;
            }
            let event = hawkmesh_wire::telemetry::check_chunk(&chunk)
                .ok()
                .map(|h| h.event_id);
            // Counted and logged by the incident set.
            let filed = self
                .shared
                .accept(chunk, identity.clone())
                .await
                .map_err(internal)?;
            if let (Ok(Accepted::New), Some(pingmesh), Some(event)) =
                (&filed, &self.pingmesh, event)
            {
                pingmesh.note_event(event);
            }
            match filed {
                Ok(Accepted::New) => summary.accepted += 1,
                Ok(Accepted::Duplicate) => summary.duplicates += 1,
                Err(IncidentError::BadChunk(reason)) => summary.rejected.push(reason),
                Err(IncidentError::Busy(reason)) => {
                    return Err(Status::resource_exhausted(format!(
                        "{reason} (this chunk and the rest of the stream are not acknowledged; \
                         the {} chunks before it were stored or already known, resending them \
                         is safe)",
                        summary.accepted + summary.duplicates
                    )))
                }
                Err(error @ IncidentError::Store(_)) => {
                    return Err(Status::unavailable(format!(
                        "could not store a chunk durably: {error} (that chunk and the rest \
                         of the stream are not acknowledged; the {} chunks before it were \
                         stored or already known, resending them is safe)",
                        summary.accepted + summary.duplicates
                    )))
                }
            }
        }
        Ok(Response::new(summary))
    }

    async fn get_incident(
        &self,
        request: Request<IncidentRequest>,
    ) -> Result<Response<IncidentReply>, Status> {
        let event_id = request.into_inner().event_id;
        let found = self
            .shared
            .read(move |set| {
                set.summary(event_id).map(|summary| {
                    let json = set.diagnosis_json(event_id).unwrap_or_default().to_string();
                    (summary, json)
                })
            })
            .await
            .map_err(internal)?;
        let Some((summary, diagnosis_json)) = found else {
            tracing::debug!(event_id, "GetIncident for an unknown incident");
            return Err(Status::not_found(format!(
                "no incident with event id {event_id}"
            )));
        };
        Ok(Response::new(IncidentReply {
            event_id,
            state: summary.state.as_str().into(),
            reported_switches: summary.reported_switches,
            missing_switches: summary.missing_switches,
            diagnosis_json,
        }))
    }
}
