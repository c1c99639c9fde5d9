//! The daemon's side of the pingmesh controller (`hawkmesh.v1.PingmeshController`):
//! registration, pinglists, and the delivery of result batches.
//!
//! Batches wait in a byte-bounded [`Outbox`] until the analyzer acknowledges them, and are
//! sent oldest first. What an answer means (analyzer-server `pingmesh_service`'s status
//! codes):
//!
//! - OK: stored (or a duplicate of a stored batch): delivered, removed;
//! - `INVALID_ARGUMENT`: malformed, resending cannot help: dropped, counted, logged;
//! - `FAILED_PRECONDITION`: the analyzer does not know this incarnation (its data was
//!   lost, or it never saw the registration): register again, then resend;
//! - `OUT_OF_RANGE`: older than its deduplication window: dropped, counted;
//! - anything else (`UNAVAILABLE`, `RESOURCE_EXHAUSTED`, a connection that failed…): kept,
//!   sent again after a back-off doubling from 100 ms up to the configured maximum.
//!
//! A batch is numbered once (its `batch_seq`) and resent with that number, so the analyzer
//! stores it once however often it arrives; batches may arrive in any order. When the
//! analyzer stays away longer than the outbox holds, the oldest batches are dropped and
//! counted: memory stays bounded.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hawkmesh_proto::v1 as pb;
use hawkmesh_proto::v1::pingmesh_controller_client::PingmeshControllerClient;
use prost::Message;
use tokio::sync::Notify;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use super::config::{AnalyzerSection, DaemonError};
use super::metrics::Metrics;

/// A request that gets no answer within this is given up (and, for a batch, sent again).
pub const RPC_TIMEOUT: Duration = Duration::from_secs(30);
/// The gRPC path of `PingmeshController.UploadResults` (package `hawkmesh.v1`).
const UPLOAD_RESULTS: &str = "/hawkmesh.v1.PingmeshController/UploadResults";
/// The first back-off after a failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// A result batch encoded for the wire (`pb::ResultBatch`, protobuf): what the outbox keeps
/// and sends. Encoded once, when it is made: a batch waits and is resent as ~50 bytes a
/// result instead of ~200 decoded, and no copy is made per attempt (the upload sends these
/// bytes as they are).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EncodedBatch {
    /// Its `batch_seq`.
    pub seq: u64,
    /// Results in it.
    pub results: u64,
    /// The batch's other fields, encoded.
    header: Arc<Vec<u8>>,
    /// Its results, encoded (field 4 each), after the header on the wire.
    results_encoded: Arc<Vec<u8>>,
}

impl EncodedBatch {
    /// `header`'s fields (its `results` left empty) followed by `encoded_results`, each
    /// result already encoded as field 4 (`results`): protobuf parsers take fields in any
    /// order and append repeated ones (protobuf encoding guide, "Field Order"), so the
    /// results never need to be gathered decoded in one `Vec`, nor copied behind the
    /// header: the two parts go out one after the other.
    pub fn new(header: &pb::ResultBatch, results: u64, encoded_results: Vec<u8>) -> Self {
        EncodedBatch {
            seq: header.batch_seq,
            results: results + header.results.len() as u64,
            header: Arc::new(header.encode_to_vec()),
            results_encoded: Arc::new(encoded_results),
        }
    }

    /// A whole batch.
    pub fn encode(batch: &pb::ResultBatch) -> Self {
        Self::new(batch, 0, Vec::new())
    }

    /// Its encoded size.
    pub fn len(&self) -> usize {
        self.header.len() + self.results_encoded.len()
    }

    /// Whether it encodes nothing (an all-default batch).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch, decoded (what the analyzer reads).
    pub fn decode(&self) -> Result<pb::ResultBatch, prost::DecodeError> {
        let mut batch = pb::ResultBatch::decode(&self.header[..])?;
        batch.merge(&self.results_encoded[..])?;
        Ok(batch)
    }
}

/// The upload's request: the encoded bytes as they are. Only ever encoded (the answer is
/// decoded as `pb::UploadReply`).
impl prost::Message for EncodedBatch {
    fn encode_raw(&self, buf: &mut impl prost::bytes::BufMut) {
        buf.put_slice(&self.header);
        buf.put_slice(&self.results_encoded);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl prost::bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.len()
    }

    fn clear(&mut self) {
        *self = EncodedBatch::default();
    }
}

/// A batch waiting for the analyzer's acknowledgement.
#[derive(Debug)]
pub struct Queued {
    /// The batch.
    pub batch: EncodedBatch,
    /// Its encoded size.
    pub bytes: usize,
}

/// Batches waiting for the analyzer, bounded in bytes.
#[derive(Debug)]
pub struct Outbox {
    queue: VecDeque<Queued>,
    bytes: usize,
    limit: usize,
}

/// Batches and results an [`Outbox::push`] dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Batches.
    pub batches: u64,
    /// Their results.
    pub results: u64,
}

impl Outbox {
    /// An outbox of at most `limit` bytes (a batch larger than that is still kept, alone).
    pub fn new(limit: usize) -> Self {
        Outbox {
            queue: VecDeque::new(),
            bytes: 0,
            limit,
        }
    }

    /// Queues a batch; drops the oldest beyond the limit.
    pub fn push(&mut self, batch: EncodedBatch) -> Dropped {
        let bytes = batch.len();
        self.queue.push_back(Queued { batch, bytes });
        self.bytes += bytes;
        let mut dropped = Dropped::default();
        while self.bytes > self.limit && self.queue.len() > 1 {
            if let Some(old) = self.queue.pop_front() {
                self.bytes -= old.bytes;
                dropped.batches += 1;
                dropped.results += old.batch.results;
            }
        }
        dropped
    }

    /// The oldest batch (to send: shares its bytes).
    pub fn front(&self) -> Option<EncodedBatch> {
        self.queue.front().map(|q| q.batch.clone())
    }

    /// Removes the batch numbered `seq` (delivered, or refused for good), if still queued.
    pub fn remove(&mut self, seq: u64) -> Option<Queued> {
        let at = self.queue.iter().position(|q| q.batch.seq == seq)?;
        let queued = self.queue.remove(at)?;
        self.bytes -= queued.bytes;
        Some(queued)
    }

    /// Bytes queued.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Batches queued.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether none is queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Results in the queued batches.
    pub fn results(&self) -> u64 {
        self.queue.iter().map(|q| q.batch.results).sum()
    }
}

/// The channel to the analyzer (mutual TLS for `https`), connected lazily: the daemon
/// starts whether the analyzer is up or not.
pub fn channel(config: &AnalyzerSection) -> Result<Channel, DaemonError> {
    let bad = |e: String| DaemonError::Setup(format!("analyzer {}: {e}", config.endpoint));
    let mut endpoint = Endpoint::from_shared(config.endpoint.clone())
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_keepalive(Some(Duration::from_secs(30)))
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    if config.endpoint.starts_with("https://") {
        let (_, host) = hawkmesh_proto::tls::endpoint_host(&config.endpoint).map_err(bad)?;
        let name = config.name.clone().unwrap_or_else(|| host.to_string());
        let (Some(ca), Some(cert), Some(key)) = (&config.ca, &config.cert, &config.key) else {
            return Err(bad("mutual TLS needs ca, cert and key".into()));
        };
        let tls = hawkmesh_proto::tls::client_config(ca, cert, key, &name)
            .map_err(|e| bad(e.to_string()))?;
        endpoint = endpoint.tls_config(tls).map_err(|e| bad(e.to_string()))?;
    }
    Ok(endpoint.connect_lazy())
}

/// The controller client with what it needs to register again.
#[derive(Clone, Debug)]
pub struct Controller {
    client: PingmeshControllerClient<Channel>,
    /// The same channel for uploads, whose request is [`EncodedBatch`] (the generated
    /// client takes a decoded `pb::ResultBatch`).
    uploads: tonic::client::Grpc<Channel>,
    registration: Arc<pb::RegisterRequest>,
    metrics: Arc<Metrics>,
}

/// A failed request: the status, or no answer in time.
fn failed<T>(
    answer: Result<Result<tonic::Response<T>, tonic::Status>, tokio::time::error::Elapsed>,
) -> Result<T, tonic::Status> {
    match answer {
        Ok(Ok(reply)) => Ok(reply.into_inner()),
        Ok(Err(status)) => Err(status),
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "no answer within {} s",
            RPC_TIMEOUT.as_secs()
        ))),
    }
}

impl Controller {
    /// A client over `channel` registering as `registration`.
    pub fn new(channel: Channel, registration: pb::RegisterRequest, metrics: Arc<Metrics>) -> Self {
        Controller {
            uploads: tonic::client::Grpc::new(channel.clone()),
            client: PingmeshControllerClient::new(channel).max_decoding_message_size(64 << 20),
            registration: Arc::new(registration),
            metrics,
        }
    }

    /// The host's name.
    pub fn host(&self) -> &str {
        &self.registration.host
    }

    /// Registers once.
    pub async fn register(&mut self) -> Result<pb::RegisterReply, tonic::Status> {
        let request = (*self.registration).clone();
        let reply = failed(tokio::time::timeout(RPC_TIMEOUT, self.client.register(request)).await)?;
        self.metrics.registrations.fetch_add(1, Ordering::Relaxed);
        Ok(reply)
    }

    /// Registers, retrying with back-off while the controller is unreachable, until
    /// `stopping` says to give up (`Ok(None)`). A refusal for good (INVALID_ARGUMENT: a host,
    /// NIC or address the fabric does not have; PERMISSION_DENIED: a certificate of
    /// another host) is an error: a configuration mistake.
    pub async fn register_until(
        &mut self,
        max_backoff: Duration,
        stopping: impl Fn() -> bool,
    ) -> Result<Option<pb::RegisterReply>, DaemonError> {
        let mut backoff = FIRST_BACKOFF;
        let mut logged = false;
        loop {
            if stopping() {
                return Ok(None);
            }
            match self.register().await {
                Ok(reply) => {
                    tracing::info!(
                        host = self.host(),
                        incarnation = self.registration.incarnation,
                        "registered with the pingmesh controller"
                    );
                    return Ok(Some(reply));
                }
                Err(status)
                    if matches!(
                        status.code(),
                        Code::InvalidArgument | Code::PermissionDenied
                    ) =>
                {
                    return Err(DaemonError::Refused {
                        what: "the registration",
                        reason: format!("{}: {}", status.code(), status.message()),
                    })
                }
                Err(status) => {
                    if !logged {
                        tracing::warn!(
                            "registering with the pingmesh controller failed ({}: {}); retrying every {} s at most",
                            status.code(),
                            status.message(),
                            max_backoff.as_secs_f64()
                        );
                        logged = true;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(max_backoff);
                }
            }
        }
    }

    /// The host's pinglist; registers again first when the controller has forgotten the
    /// host.
    pub async fn pinglist(&mut self) -> Result<pb::PinglistReply, tonic::Status> {
        let request = pb::PinglistRequest {
            host: self.registration.host.clone(),
        };
        let answer = failed(
            tokio::time::timeout(RPC_TIMEOUT, self.client.get_pinglist(request.clone())).await,
        );
        let reply = match answer {
            Err(status) if status.code() == Code::FailedPrecondition => {
                self.register().await?;
                failed(tokio::time::timeout(RPC_TIMEOUT, self.client.get_pinglist(request)).await)
            }
            other => other,
        };
        match &reply {
            Ok(_) => self
                .metrics
                .pinglist_fetches
                .fetch_add(1, Ordering::Relaxed),
            Err(_) => self
                .metrics
                .pinglist_failures
                .fetch_add(1, Ordering::Relaxed),
        };
        reply
    }

    /// The comm info of the RNICs behind `ips` (service tracing's peers).
    pub async fn comm_info(
        &mut self,
        ips: Vec<String>,
    ) -> Result<pb::CommInfoReply, tonic::Status> {
        let request = pb::CommInfoRequest {
            host: self.registration.host.clone(),
            ips,
        };
        failed(tokio::time::timeout(RPC_TIMEOUT, self.client.get_comm_info(request)).await)
    }

    /// Uploads one batch.
    pub async fn upload(&mut self, batch: EncodedBatch) -> Result<pb::UploadReply, tonic::Status> {
        let uploads = &mut self.uploads;
        let call = async move {
            uploads.ready().await.map_err(|e| {
                tonic::Status::unavailable(format!("the channel to the analyzer: {e}"))
            })?;
            // hawkmesh.v1.PingmeshController.UploadResults (proto/proto/pingmesh.proto).
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(UPLOAD_RESULTS);
            let codec = tonic_prost::ProstCodec::<EncodedBatch, pb::UploadReply>::default();
            uploads.unary(tonic::Request::new(batch), path, codec).await
        };
        failed(tokio::time::timeout(RPC_TIMEOUT, call).await)
    }
}

/// What the delivery shares with the daemon.
#[derive(Debug)]
pub struct Delivery {
    /// The batches waiting.
    pub outbox: Mutex<Outbox>,
    /// Wakes the delivery when a batch is queued.
    pub wake: Notify,
}

impl Delivery {
    /// Queues a batch, counting what it pushed out.
    pub fn queue(&self, batch: EncodedBatch, metrics: &Metrics) {
        let Ok(mut outbox) = self.outbox.lock() else {
            return;
        };
        let dropped = outbox.push(batch);
        if dropped.batches > 0 {
            metrics
                .batches_dropped_full
                .fetch_add(dropped.batches, Ordering::Relaxed);
            metrics
                .results_dropped
                .fetch_add(dropped.results, Ordering::Relaxed);
            tracing::warn!(
                batches = dropped.batches,
                results = dropped.results,
                "the upload buffer is full (the analyzer has been away too long): the oldest batches were dropped"
            );
        }
        metrics
            .buffered_bytes
            .store(outbox.bytes() as u64, Ordering::Relaxed);
        metrics
            .buffered_batches
            .store(outbox.len() as u64, Ordering::Relaxed);
        drop(outbox);
        self.wake.notify_one();
    }

    fn remove(&self, seq: u64, metrics: &Metrics) -> Option<Queued> {
        let mut outbox = self.outbox.lock().ok()?;
        let removed = outbox.remove(seq);
        metrics
            .buffered_bytes
            .store(outbox.bytes() as u64, Ordering::Relaxed);
        metrics
            .buffered_batches
            .store(outbox.len() as u64, Ordering::Relaxed);
        removed
    }
}

/// Delivers the outbox, oldest batch first, for as long as the task runs (the daemon
/// aborts it when its stop's drain time is over).
pub async fn deliver(
    mut controller: Controller,
    delivery: Arc<Delivery>,
    metrics: Arc<Metrics>,
    max_backoff: Duration,
) {
    let mut backoff = FIRST_BACKOFF;
    let mut failing = false;
    // The last answer was FAILED_PRECONDITION and a registration followed it.
    let mut just_registered = false;
    loop {
        let next = delivery.outbox.lock().ok().and_then(|o| o.front());
        let Some(batch) = next else {
            // Woken by a new batch (or, at worst, a moment later).
            let _ =
                tokio::time::timeout(Duration::from_millis(500), delivery.wake.notified()).await;
            continue;
        };
        let (seq, results) = (batch.seq, batch.results);
        let answer = controller.upload(batch).await;
        if !matches!(&answer, Err(s) if s.code() == Code::FailedPrecondition) {
            just_registered = false;
        }
        match answer {
            Ok(reply) => {
                if delivery.remove(seq, &metrics).is_none() {
                    // Pushed out of a full buffer while in flight, yet delivered.
                    metrics.batches_dropped_full.fetch_sub(1, Ordering::Relaxed);
                    metrics
                        .results_dropped
                        .fetch_sub(results, Ordering::Relaxed);
                }
                metrics.uploads_ok.fetch_add(1, Ordering::Relaxed);
                metrics
                    .results_delivered
                    .fetch_add(results, Ordering::Relaxed);
                metrics
                    .results_late
                    .fetch_add(reply.late, Ordering::Relaxed);
                if reply.duplicate {
                    metrics.uploads_duplicate.fetch_add(1, Ordering::Relaxed);
                }
                if failing {
                    tracing::info!(
                        "the analyzer is reachable again; buffered batches are being delivered"
                    );
                }
                failing = false;
                backoff = FIRST_BACKOFF;
            }
            Err(status) => {
                metrics.uploads_failed.fetch_add(1, Ordering::Relaxed);
                match status.code() {
                    Code::InvalidArgument | Code::OutOfRange => {
                        delivery.remove(seq, &metrics);
                        let counter = if status.code() == Code::InvalidArgument {
                            &metrics.batches_dropped_invalid
                        } else {
                            &metrics.batches_dropped_too_old
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                        metrics
                            .results_dropped
                            .fetch_add(results, Ordering::Relaxed);
                        tracing::error!(
                            batch = seq,
                            results,
                            "the analyzer refused a batch for good ({}: {}); it is dropped",
                            status.code(),
                            status.message()
                        );
                    }
                    Code::FailedPrecondition => {
                        tracing::warn!(
                            batch = seq,
                            "the analyzer does not know this incarnation ({}); registering again",
                            status.message()
                        );
                        let registered = controller.register().await;
                        if let Err(again) = &registered {
                            tracing::warn!(
                                "registering again failed ({}: {})",
                                again.code(),
                                again.message()
                            );
                        }
                        // Resent at once after a registration; a batch the analyzer still
                        // does not take (or a failed registration) waits the back-off.
                        if registered.is_err() || just_registered {
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(max_backoff);
                        }
                        just_registered = registered.is_ok();
                        continue;
                    }
                    code => {
                        if !failing {
                            let level_error =
                                matches!(code, Code::PermissionDenied | Code::Unauthenticated);
                            if level_error {
                                tracing::error!("uploading to the analyzer is refused ({code}: {}); batches stay buffered and are sent again", status.message());
                            } else {
                                tracing::warn!("uploading to the analyzer failed ({code}: {}); batches stay buffered and are sent again", status.message());
                            }
                        }
                        failing = true;
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(max_backoff);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seq: u64, results: usize) -> EncodedBatch {
        EncodedBatch::encode(&pb::ResultBatch {
            host: "h0".into(),
            incarnation: 1,
            batch_seq: seq,
            results: vec![
                pb::ProbeResult {
                    target_host: "h1".into(),
                    sent_ns: 1,
                    ..pb::ProbeResult::default()
                };
                results
            ],
            paths: Vec::new(),
            ack_routes: Vec::new(),
        })
    }

    #[test]
    fn the_outbox_keeps_its_byte_bound_and_drops_the_oldest_batch_first() {
        let size = batch(0, 10).len();
        let mut outbox = Outbox::new(size * 2 + size / 2);
        let mut dropped = Dropped::default();
        for seq in 0..5 {
            let d = outbox.push(batch(seq, 10));
            dropped.batches += d.batches;
            dropped.results += d.results;
        }
        assert_eq!(outbox.len(), 2);
        assert_eq!(
            dropped,
            Dropped {
                batches: 3,
                results: 30
            }
        );
        assert!(outbox.bytes() <= size * 2 + size / 2);
        assert_eq!(outbox.front().map(|b| b.seq), Some(3));
        // A batch delivered while newer ones were queued is removed by its number.
        assert_eq!(outbox.remove(4).map(|q| q.batch.seq), Some(4));
        assert!(outbox.remove(4).is_none());
        assert_eq!(outbox.results(), 10);
        // A batch larger than the bound is kept, alone, rather than lost.
        outbox.push(batch(9, 100));
        assert_eq!(outbox.len(), 1);
        assert_eq!(outbox.front().map(|b| b.seq), Some(9));
    }
}
