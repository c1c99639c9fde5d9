//! Streaming reports to the analyzer (`hawkmesh.v1.Collector/StreamReports`).

use hawkmesh_proto::v1::collector_client::CollectorClient;
use hawkmesh_proto::v1::{ReportChunk, StreamSummary};

/// Why a stream failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Could not connect.
    #[error("connecting to the analyzer at {endpoint}: {source}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// The error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The call failed.
    #[error("streaming reports: {0}")]
    Call(#[from] tonic::Status),
}

/// Sends chunks to the analyzer at `endpoint` (e.g. `http://127.0.0.1:50051`) in one
/// stream. Safe to repeat: the analyzer stores each chunk once.
pub async fn send_chunks(
    endpoint: &str,
    chunks: Vec<Vec<u8>>,
) -> Result<StreamSummary, TransportError> {
    let mut client = CollectorClient::connect(endpoint.to_string())
        .await
        .map_err(|source| TransportError::Connect {
            endpoint: endpoint.to_string(),
            source,
        })?;
    let stream = tokio_stream::iter(chunks.into_iter().map(|chunk| ReportChunk { chunk }));
    Ok(client.stream_reports(stream).await?.into_inner())
}
