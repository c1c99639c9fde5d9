//! The `hawkmesh.v1.Collector` gRPC service.

use crate::incidents::{Accepted, IncidentError, IncidentSet};
use hawkmesh_proto::v1::collector_server::Collector;
use hawkmesh_proto::v1::{IncidentReply, IncidentRequest, ReportChunk, StreamSummary};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

/// Chunks larger than this are refused (a chunk is at most an MTU; 64 KiB leaves room for
/// jumbo frames and agents that batch).
pub const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// The service, sharing the incident set with the HTTP API.
#[derive(Debug, Clone)]
pub struct CollectorService {
    incidents: Arc<Mutex<IncidentSet>>,
}

impl CollectorService {
    /// A service over `incidents`.
    pub fn new(incidents: Arc<Mutex<IncidentSet>>) -> Self {
        CollectorService { incidents }
    }
}

fn lock(set: &Mutex<IncidentSet>) -> Result<std::sync::MutexGuard<'_, IncidentSet>, Status> {
    set.lock()
        .map_err(|_| Status::internal("incident set poisoned by an earlier panic"))
}

#[tonic::async_trait]
impl Collector for CollectorService {
    async fn stream_reports(
        &self,
        request: Request<Streaming<ReportChunk>>,
    ) -> Result<Response<StreamSummary>, Status> {
        let mut stream = request.into_inner();
        let mut summary = StreamSummary::default();
        // Chunks are stored as they arrive: a stream cut half-way keeps what was sent.
        while let Some(message) = stream.next().await {
            let chunk = match message {
                Ok(chunk) => chunk.chunk,
                Err(status) => {
                    return Err(Status::aborted(format!(
                        "stream broken after {} chunks ({} new): {}",
                        summary.accepted + summary.duplicates,
                        summary.accepted,
                        status.message()
                    )))
                }
            };
            if chunk.len() > MAX_CHUNK_BYTES {
                summary.rejected.push(format!(
                    "chunk of {} bytes exceeds the {MAX_CHUNK_BYTES}-byte limit",
                    chunk.len()
                ));
                continue;
            }
            let outcome = lock(&self.incidents)?.accept(chunk, Instant::now());
            match outcome {
                Ok(Accepted::New) => summary.accepted += 1,
                Ok(Accepted::Duplicate) => summary.duplicates += 1,
                Err(IncidentError::BadChunk(reason)) => summary.rejected.push(reason),
                Err(error @ IncidentError::Store(_)) => {
                    return Err(Status::unavailable(format!(
                        "could not store the chunk durably: {error}"
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
        let set = lock(&self.incidents)?;
        let reply = match set.summary(event_id) {
            Some(summary) => IncidentReply {
                event_id,
                state: summary.state.as_str().into(),
                reported_switches: summary.reported_switches,
                missing_switches: summary.missing_switches,
                diagnosis_json: set.diagnosis_json(event_id).unwrap_or_default().into(),
            },
            None => IncidentReply {
                event_id,
                state: "unknown".into(),
                ..IncidentReply::default()
            },
        };
        Ok(Response::new(reply))
    }
}
