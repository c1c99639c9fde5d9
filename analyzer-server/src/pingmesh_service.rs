//! The pingmesh controller as a service: the `hawkmesh.v1.PingmeshController` gRPC service,
//! the analysis of due periods, and the HTTP routes.
//!
//! gRPC status codes:
//! - `INVALID_ARGUMENT`: a malformed registration or batch (the message names the result
//!   and field); nothing of it was stored. Resending it unchanged will fail again.
//! - `FAILED_PRECONDITION`: the host has not registered, or the batch's incarnation is not
//!   one the host registered. Register, then resend.
//! - `RESOURCE_EXHAUSTED`: over a limit for now (results waiting for analysis) or for good
//!   (results per batch, message size): keep the batch and retry later, or split it.
//! - `OUT_OF_RANGE`: a batch number older than the deduplication window.
//! - `UNAVAILABLE`: the store could not take it; nothing was acknowledged, resend.
//! - `PERMISSION_DENIED`: with mutual TLS, a host may only speak for itself (its
//!   certificate's name).
//! - `INTERNAL`: the service failed (a panic poisoned the controller).
//!
//! HTTP (see [`router`]):
//! - `GET /api/pingmesh` — the controller's status and the latest period
//! - `GET /api/pingmesh/periods[?after=INDEX][&limit=N]` — period reports, oldest first
//! - `GET /api/pingmesh/periods/{index}` — one period's report
//! - `GET /pingmesh` — HTML: SLA time series, the problems, the located ones on the topology
//!
//! Every lock of the controller is taken on tokio's blocking pool (it may wait for an
//! fsync; a period's analysis runs without it).

use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hawkmesh_proto::v1 as pb;
use hawkmesh_proto::v1::pingmesh_controller_server::{
    PingmeshController, PingmeshControllerServer,
};
use hawkmesh_wire::topology::FabricTopology;
use prost::bytes::Buf;
use prost::Message;
use tonic::codec::DecodeBuf;
use tonic::codegen::{http, Body, BoxFuture, Context, Poll, Service, StdError};
use tonic::{Request, Status};

use std::collections::BTreeMap;

use crate::framelog::GroupSync;
use crate::pingmesh::{Clock, Controller, PeriodAnalyzer, RequestError};

/// The controller and its analysis, shared by gRPC, HTTP and the period task.
#[derive(Clone, Debug)]
pub struct PingmeshShared {
    controller: Arc<Mutex<Controller>>,
    analyzer: Arc<Mutex<PeriodAnalyzer>>,
    topology: Arc<FabricTopology>,
    clock: Clock,
    /// When each HAWKEYE incident's first report chunk came, on the controller's clock
    /// (the last [`EVENT_TIMES`]; not kept across restarts).
    events: Arc<Mutex<BTreeMap<u64, u64>>>,
    /// The batch log's syncing, waited on outside the controller's lock.
    batch_sync: Arc<GroupSync>,
}

/// Incident start times kept for the joint view.
pub const EVENT_TIMES: usize = 65_536;

/// A failure of the service itself.
#[derive(Debug, thiserror::Error)]
pub enum PingmeshInternal {
    /// A panic poisoned the controller.
    #[error("the pingmesh controller is poisoned by an earlier panic")]
    Poisoned,
    /// A blocking task failed.
    #[error("a blocking task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl PingmeshShared {
    /// Shares `controller` (the fabric's `topology` for drawing).
    pub fn new(controller: Controller, topology: FabricTopology) -> Self {
        let analyzer = PeriodAnalyzer::for_controller(&controller);
        PingmeshShared {
            clock: controller.config().clock.clone(),
            batch_sync: controller.group_sync(),
            controller: Arc::new(Mutex::new(controller)),
            analyzer: Arc::new(Mutex::new(analyzer)),
            topology: Arc::new(topology),
            events: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }

    /// Notes that a report chunk of HAWKEYE event `event_id` arrived now (the first one
    /// dates the incident).
    pub fn note_event(&self, event_id: u64) {
        let now = self.clock.now_ns();
        let Ok(mut events) = self.events.lock() else {
            return;
        };
        events.entry(event_id).or_insert(now);
        while events.len() > EVENT_TIMES {
            // The oldest by id: event ids grow per host.
            events.pop_first();
        }
    }

    /// When event `event_id` began, if known.
    pub fn event_time(&self, event_id: u64) -> Option<u64> {
        self.events.lock().ok()?.get(&event_id).copied()
    }

    /// Probing's view of incident `event_id` of `victim`, when its start is known.
    pub async fn joint(
        &self,
        event_id: u64,
        victim: hawkmesh_wire::telemetry::FiveTuple,
    ) -> Result<Option<crate::pingmesh::PingmeshJoint>, PingmeshInternal> {
        let Some(at) = self.event_time(event_id) else {
            return Ok(None);
        };
        self.with(move |c| Some(c.joint(&victim, at))).await
    }

    /// Locks the controller. Blocks: only from blocking code.
    pub fn lock(&self) -> Result<MutexGuard<'_, Controller>, PingmeshInternal> {
        self.controller
            .lock()
            .map_err(|_| PingmeshInternal::Poisoned)
    }

    /// Runs `work` with the controller locked, on the blocking pool.
    pub async fn with<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Controller) -> T + Send + 'static,
    ) -> Result<T, PingmeshInternal> {
        let shared = self.clone();
        tokio::task::spawn_blocking(move || Ok(work(&mut *shared.lock()?))).await?
    }

    /// Analyses every period due at the controller's clock, stores the reports; returns the
    /// indices analysed by this call (the period task may have done some already: their
    /// reports are installed when this returns). Blocks: call from blocking code (see [`PingmeshShared::analyse_due`]).
    pub fn analyse_due_blocking(&self) -> Result<Vec<u64>, PingmeshInternal> {
        // The analysis is one at a time, from taking the due periods to installing their
        // reports: whoever returns second finds them installed (the period task and a
        // caller never race).
        let mut analyzer = self
            .analyzer
            .lock()
            .map_err(|_| PingmeshInternal::Poisoned)?;
        let due = {
            let mut controller = self.lock()?;
            let now = controller.config().clock.now_ns();
            controller.take_due(now)
        };
        let mut done = Vec::with_capacity(due.len());
        for period in due {
            let index = period.index;
            // The analysis runs without the controller's lock: uploads go on meanwhile.
            let view = analyzer.analyse(period);
            let problems = view.problems.len();
            if let Err(error) = self.lock()?.install(view) {
                tracing::error!(%error, index, "a pingmesh period report could not be stored");
            }
            tracing::info!(index, problems, "pingmesh period analysed");
            done.push(index);
        }
        Ok(done)
    }

    /// [`PingmeshShared::analyse_due_blocking`] on the blocking pool.
    pub async fn analyse_due(&self) -> Result<Vec<u64>, PingmeshInternal> {
        let shared = self.clone();
        tokio::task::spawn_blocking(move || shared.analyse_due_blocking()).await?
    }
}

/// The gRPC service.
#[derive(Clone, Debug)]
pub struct PingmeshService {
    shared: PingmeshShared,
    identified: bool,
}

impl PingmeshService {
    /// The service; `identified` when clients present certificates (mutual TLS).
    pub fn new(shared: PingmeshShared, identified: bool) -> Self {
        PingmeshService { shared, identified }
    }

    /// With mutual TLS, `host` must be the certificate's name.
    fn check_identity<T>(&self, request: &Request<T>, host: &str) -> Result<(), Status> {
        crate::tls::check_identity(request, self.identified, host)
    }
}

fn status(error: RequestError) -> Status {
    match error {
        RequestError::Invalid(m) => Status::invalid_argument(m),
        RequestError::Precondition(m) => Status::failed_precondition(m),
        RequestError::Exhausted(m) => Status::resource_exhausted(m),
        RequestError::OutOfRange(m) => Status::out_of_range(m),
        RequestError::Store(m) => Status::unavailable(m),
    }
}

fn internal(error: PingmeshInternal) -> Status {
    tracing::error!(%error, "pingmesh controller failure");
    Status::internal(error.to_string())
}

fn refused(error: RequestError, what: &str) -> Status {
    tracing::warn!(%error, what, "pingmesh request refused");
    status(error)
}

#[tonic::async_trait]
impl PingmeshController for PingmeshService {
    async fn register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<tonic::Response<pb::RegisterReply>, Status> {
        self.check_identity(&request, &request.get_ref().host)?;
        let request = request.into_inner();
        let reply = self
            .shared
            .with(move |c| c.register(&request))
            .await
            .map_err(internal)?
            .map_err(|e| refused(e, "register"))?;
        Ok(tonic::Response::new(reply))
    }

    async fn get_pinglist(
        &self,
        request: Request<pb::PinglistRequest>,
    ) -> Result<tonic::Response<pb::PinglistReply>, Status> {
        self.check_identity(&request, &request.get_ref().host)?;
        let host = request.into_inner().host;
        let reply = self
            .shared
            .with(move |c| c.pinglist(&host))
            .await
            .map_err(internal)?
            .map_err(|e| refused(e, "pinglist"))?;
        Ok(tonic::Response::new(reply))
    }

    async fn get_comm_info(
        &self,
        request: Request<pb::CommInfoRequest>,
    ) -> Result<tonic::Response<pb::CommInfoReply>, Status> {
        self.check_identity(&request, &request.get_ref().host)?;
        let request = request.into_inner();
        let reply = self
            .shared
            .with(move |c| c.comm_info(&request))
            .await
            .map_err(internal)?
            .map_err(|e| refused(e, "comm info"))?;
        Ok(tonic::Response::new(reply))
    }

    /// Served by [`PingmeshGrpc`], which takes this method's requests before tonic decodes
    /// them; here for a server built on [`PingmeshControllerServer`] alone (same answers, one
    /// encoding more).
    async fn upload_results(
        &self,
        request: Request<pb::ResultBatch>,
    ) -> Result<tonic::Response<pb::UploadReply>, Status> {
        self.check_identity(&request, &request.get_ref().host)?;
        let bytes = request.into_inner().encode_to_vec();
        self.upload_bytes(bytes.into()).await
    }
}

impl PingmeshService {
    /// An upload's bytes, as received: decoded, checked and written to the batch log under
    /// the controller's lock, then made durable outside it (group commit,
    /// [`crate::framelog::GroupSync`]) before the answer.
    async fn upload_bytes(
        &self,
        bytes: prost::bytes::Bytes,
    ) -> Result<tonic::Response<pb::UploadReply>, Status> {
        // Counted in flight before queueing for the lock: syncs wait for this upload's frame.
        let writer = self.shared.batch_sync.enter();
        let (uploaded, ticket) = self
            .shared
            .with(move |c| {
                let now = c.config().clock.now_ns();
                c.upload_deferred(&bytes, now)
            })
            .await
            .map_err(internal)?
            .map_err(|e| refused(e, "upload"))?;
        tokio::task::spawn_blocking(move || writer.wait(ticket))
            .await
            .map_err(|e| internal(e.into()))?
            .map_err(|e| {
                refused(
                    RequestError::Store(format!("the batch is not stored: {e}")),
                    "upload",
                )
            })?;
        Ok(tonic::Response::new(pb::UploadReply {
            accepted: uploaded.accepted,
            duplicate: uploaded.duplicate,
            late: uploaded.late,
        }))
    }
}

/// The gRPC path of `UploadResults`.
const UPLOAD_PATH: &str = "/hawkmesh.v1.PingmeshController/UploadResults";

/// The controller's gRPC service as served: `UploadResults` requests keep the batch's bytes
/// as received (decoded once, written to the batch log as they are: no second encoding,
/// [`RawBatchCodec`]); every other method goes to tonic's generated server.
#[derive(Clone, Debug)]
pub struct PingmeshGrpc {
    generated: PingmeshControllerServer<PingmeshService>,
    service: PingmeshService,
}

impl PingmeshGrpc {
    /// The service over `shared`; `identified` when clients present certificates.
    pub fn new(shared: PingmeshShared, identified: bool) -> Self {
        let service = PingmeshService::new(shared, identified);
        PingmeshGrpc {
            generated: PingmeshControllerServer::new(service.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
            service,
        }
    }
}

impl tonic::server::NamedService for PingmeshGrpc {
    const NAME: &'static str =
        <PingmeshControllerServer<PingmeshService> as tonic::server::NamedService>::NAME;
}

impl<B> Service<http::Request<B>> for PingmeshGrpc
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != UPLOAD_PATH {
            return self.generated.call(request);
        }
        let service = self.service.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(RawBatchCodec)
                .apply_max_message_size_config(Some(MAX_MESSAGE_BYTES), None);
            Ok(grpc.unary(UploadRaw(service), request).await)
        })
    }
}

/// A received batch: its bytes, undecoded.
#[derive(Debug)]
pub struct RawBatch(prost::bytes::Bytes);

/// `UploadResults`' codec: the request's bytes as they are (the controller decodes them),
/// the reply by prost.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawBatchCodec;

/// [`RawBatchCodec`]'s decoder.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawBatchDecoder;

impl tonic::codec::Decoder for RawBatchDecoder {
    type Item = RawBatch;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<RawBatch>, Status> {
        // The message's bytes leave tonic's buffer without a copy.
        Ok(Some(RawBatch(buf.copy_to_bytes(buf.remaining()))))
    }
}

impl tonic::codec::Codec for RawBatchCodec {
    type Encode = pb::UploadReply;
    type Decode = RawBatch;
    type Encoder = tonic_prost::ProstEncoder<pb::UploadReply>;
    type Decoder = RawBatchDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawBatchDecoder
    }
}

struct UploadRaw(PingmeshService);

impl tonic::server::UnaryService<RawBatch> for UploadRaw {
    type Response = pb::UploadReply;
    type Future = BoxFuture<tonic::Response<pb::UploadReply>, Status>;

    fn call(&mut self, request: Request<RawBatch>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move {
            if service.identified {
                // The host named inside the batch, for the identity check (the batch is
                // decoded whole under the lock; its host field alone is cheap to read here).
                let host = batch_host(&request.get_ref().0)?;
                service.check_identity(&request, &host)?;
            }
            service.upload_bytes(request.into_inner().0).await
        })
    }
}

/// The `host` field (1) of an encoded `ResultBatch`, read without decoding the results.
fn batch_host(bytes: &[u8]) -> Result<String, Status> {
    /// Only the host; the other fields are skipped unread.
    #[derive(Clone, PartialEq, prost::Message)]
    struct HostOnly {
        #[prost(string, tag = "1")]
        host: String,
    }
    HostOnly::decode(bytes)
        .map(|h| h.host)
        .map_err(|e| Status::invalid_argument(format!("the result batch does not decode: {e}")))
}

/// Largest gRPC message the controller decodes (a batch of
/// [`crate::pingmesh::PingmeshLimits::max_batch_results`] results with traced paths fits).
pub const MAX_MESSAGE_BYTES: usize = 32 << 20;

/// Periods per page unless `limit` says otherwise.
pub const PAGE_DEFAULT: usize = 100;
/// The largest page.
pub const PAGE_MAX: usize = 1000;

#[derive(Debug, serde::Deserialize)]
struct PageQuery {
    after: Option<u64>,
    limit: Option<usize>,
}

fn text(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message + "\n",
    )
        .into_response()
}

fn json<T: serde::Serialize>(value: &T) -> Response {
    match serde_json::to_string_pretty(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn failed(error: PingmeshInternal) -> Response {
    tracing::error!(%error, "pingmesh HTTP request failed");
    text(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
}

/// The HTTP routes over `shared`.
pub fn router(shared: PingmeshShared) -> Router {
    Router::new()
        .route("/api/pingmesh", get(status_json))
        .route("/api/pingmesh/periods", get(periods_json))
        .route("/api/pingmesh/periods/{index}", get(period_json))
        .route("/pingmesh", get(page))
        .with_state(shared)
}

async fn status_json(State(shared): State<PingmeshShared>) -> Response {
    match shared.with(|c| (c.status(), c.latest(1).pop())).await {
        Ok((status, latest)) => json(&serde_json::json!({ "status": status, "latest": latest })),
        Err(e) => failed(e),
    }
}

async fn periods_json(
    State(shared): State<PingmeshShared>,
    Query(query): Query<PageQuery>,
) -> Response {
    let limit = query.limit.unwrap_or(PAGE_DEFAULT);
    if !(1..=PAGE_MAX).contains(&limit) {
        return text(
            StatusCode::BAD_REQUEST,
            format!("limit {limit} is outside 1..={PAGE_MAX}"),
        );
    }
    let after = query.after;
    match shared.with(move |c| c.periods(after, limit)).await {
        Ok((list, total)) => {
            let next = match list.last() {
                Some(last) if list.len() == limit => Some(format!(
                    "/api/pingmesh/periods?after={}&limit={limit}",
                    last.index
                )),
                _ => None,
            };
            json(&serde_json::json!({ "periods": list, "total": total, "next": next }))
        }
        Err(e) => failed(e),
    }
}

async fn period_json(State(shared): State<PingmeshShared>, Path(index): Path<String>) -> Response {
    let Ok(index) = index.parse::<u64>() else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("period {index:?} is not a number"),
        );
    };
    match shared.with(move |c| c.period(index)).await {
        Ok(Some(view)) => json(&view),
        Ok(None) => text(
            StatusCode::NOT_FOUND,
            format!("no report of period {index} (not analysed yet, or no longer kept)"),
        ),
        Err(e) => failed(e),
    }
}

/// Periods drawn on the page.
const PAGE_PERIODS: usize = 360;

async fn page(State(shared): State<PingmeshShared>) -> Response {
    let topology = shared.topology.clone();
    let data = shared
        .with(|c| (c.status(), c.latest(PAGE_PERIODS), c.config().period_ns))
        .await;
    match data {
        Ok((status, periods, period_ns)) => {
            let html = crate::pingmesh_html::page(&status, &periods, period_ns, &topology);
            ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
        }
        Err(e) => failed(e),
    }
}
