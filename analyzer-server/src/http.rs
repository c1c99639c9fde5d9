//! The HTTP API: incidents as JSON and the self-contained HTML report.
//!
//! - `GET /api/incidents[?after=ID][&limit=N]` — incidents (event id, state, switches,
//!   verdict) in event-id order, a page at a time: `{"incidents": [...], "total": n,
//!   "next": "/api/incidents?after=…&limit=…" or null}`; `limit` defaults to
//!   [`PAGE_DEFAULT`] and is at most [`PAGE_MAX`]
//! - `GET /api/incidents/{event_id}` — one incident with its diagnosis JSON
//! - `GET /incidents/{event_id}` — the HTML report (provenance graph drawn)
//! - `GET /api/counters` — counters of chunks, incidents and failures
//!   ([`crate::counters::CounterSnapshot`])
//! - `GET /[?after=ID]` — an HTML index of the incidents (a page at a time) with links to
//!   their reports
//! - `GET /healthz` — liveness
//!
//! An event id that is not a decimal `u64` is `400 Bad Request`; one the analyzer has no
//! chunk of is `404 Not Found`; the HTML report of an incident still collecting reports is
//! `202 Accepted` with a plain-text note, that of a concluded incident without one (its
//! telemetry could not be diagnosed) `404` with the verdict; a failure of the service
//! itself is `500`.
//! Handlers read the incident set on tokio's blocking pool (see `shared`).

use crate::incidents::{IncidentSet, IncidentState};
use crate::shared::{InternalError, Shared};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::{Arc, Mutex};

/// Incidents per page unless `limit` says otherwise.
pub const PAGE_DEFAULT: usize = 100;
/// The largest page served.
pub const PAGE_MAX: usize = 1000;

/// `?after=ID&limit=N` of the listings.
#[derive(Debug, serde::Deserialize)]
struct PageQuery {
    after: Option<u64>,
    limit: Option<usize>,
}

impl PageQuery {
    /// The page size, or why the request is refused (answered `400`).
    fn limit(&self) -> Result<usize, String> {
        match self.limit {
            None => Ok(PAGE_DEFAULT),
            Some(n) if (1..=PAGE_MAX).contains(&n) => Ok(n),
            Some(n) => Err(format!("limit {n} is outside 1..={PAGE_MAX}")),
        }
    }
}

/// One page of incidents as `query` asks: the incidents, how many there are, and the page
/// size; or the answer to a malformed query or a failure.
async fn page_of(
    shared: &Shared,
    query: &PageQuery,
) -> Result<(Vec<crate::incidents::IncidentSummary>, usize, usize), Response> {
    let limit = query
        .limit()
        .map_err(|message| error(StatusCode::BAD_REQUEST, message))?;
    let after = query.after;
    let (list, total) = shared
        .read(move |set| set.page(after, limit))
        .await
        .map_err(internal)?;
    Ok((list, total, limit))
}

/// The router over the shared incident set.
pub fn router(
    incidents: Arc<Mutex<IncidentSet>>,
    pingmesh: Option<crate::pingmesh_service::PingmeshShared>,
) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/api/incidents", get(list))
        .route("/api/incidents/{event_id}", get(one))
        .route("/api/counters", get(counters))
        .route("/incidents/{event_id}", get(html))
        .with_state(Shared::new(incidents).with_pingmesh(pingmesh))
}

/// The victim 5-tuple of a diagnosis JSON.
fn victim_of(diagnosis: &str) -> Option<hawkmesh_wire::telemetry::FiveTuple> {
    let value: serde_json::Value = serde_json::from_str(diagnosis).ok()?;
    value.get("victim")?.as_str()?.parse().ok()
}

/// Probing's view of the incident, when the pingmesh controller runs and knows when it
/// began (a failure of the controller is logged and leaves it out).
async fn joint_of(
    shared: &Shared,
    event_id: u64,
    diagnosis: Option<&str>,
) -> Option<crate::pingmesh::PingmeshJoint> {
    let pingmesh = shared.pingmesh.as_ref()?;
    let victim = victim_of(diagnosis?)?;
    match pingmesh.joint(event_id, victim).await {
        Ok(joint) => joint,
        Err(error) => {
            tracing::error!(%error, event_id, "the pingmesh view of an incident failed");
            None
        }
    }
}

/// The joint view as an HTML section (what the incident page shows below HAWKEYE's
/// diagnosis).
pub fn joint_html(joint: &crate::pingmesh::PingmeshJoint) -> String {
    let mut rows = String::new();
    for p in &joint.problems {
        let links: Vec<String> = p
            .links
            .iter()
            .map(|l| format!("{}–{} ({} votes)", l.a, l.b, l.votes))
            .collect();
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&p.priority),
            escape(&p.kind),
            escape(p.rnic.as_deref().or(p.host.as_deref()).unwrap_or("")),
            escape(&links.join(", ")),
            p.probes
        ));
    }
    let table = if rows.is_empty() {
        String::new()
    } else {
        format!(
            "<table><tr><th>priority</th><th>kind</th><th>RNIC / host</th><th>links</th><th>probes</th></tr>{rows}</table>"
        )
    };
    format!(
        "<section id=\"pingmesh\"><h2>Where: the pingmesh view</h2><p>{}</p><p>Victim RNICs: {} → {}; period {} (<a href=\"/api/pingmesh/periods/{}\">report</a>, <a href=\"/pingmesh\">pingmesh</a>).</p>{table}</section>",
        escape(&joint.verdict),
        escape(joint.source.as_deref().unwrap_or("?")),
        escape(joint.destination.as_deref().unwrap_or("?")),
        joint.period,
        joint.period,
    )
}

fn error(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message + "\n",
    )
        .into_response()
}

/// A failure of the service (already logged and counted where it happened).
fn internal(error: InternalError) -> Response {
    self::error(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
}

fn json(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn not_found(event_id: u64) -> Response {
    tracing::debug!(event_id, "HTTP request for an unknown incident");
    error(
        StatusCode::NOT_FOUND,
        format!("no incident with event id {event_id}"),
    )
}

fn parse_id(text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("event id {text:?} is not a number"))
}

/// The `400` answer to a malformed event id.
fn bad_id(message: String) -> Response {
    tracing::warn!(%message, "HTTP request with a malformed event id");
    error(StatusCode::BAD_REQUEST, message)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn index(State(shared): State<Shared>, Query(query): Query<PageQuery>) -> Response {
    let (list, total, limit) = match page_of(&shared, &query).await {
        Ok(page) => page,
        Err(response) => return response,
    };
    let more = match list.last() {
        Some(last) if list.len() == limit => format!(
            "<p><a href=\"/?after={}&amp;limit={limit}\">next {limit}</a></p>",
            last.event_id
        ),
        _ => String::new(),
    };
    let mut rows = String::new();
    for incident in list {
        rows.push_str(&format!(
            "<tr><td><a href=\"/incidents/{id}\">{id}</a></td><td>{state}</td><td>{switches}</td><td>{missing}</td><td>{verdict}</td></tr>\n",
            id = incident.event_id,
            state = incident.state.as_str(),
            switches = incident.reported_switches.len(),
            missing = incident.missing_switches.len(),
            verdict = escape(incident.verdict.as_deref().unwrap_or("collecting reports")),
        ));
    }
    let page = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>hawkmesh incidents</title>\
         <style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:4px 10px;text-align:left}}\
         tr:nth-child(even){{background:#f4f4f4}}</style></head><body><h1>hawkmesh incidents</h1>\
         <p>{total} incident(s)</p>\
         <table><tr><th>event</th><th>state</th><th>reported</th><th>missing</th><th>verdict</th></tr>\n{rows}</table>\
         {more}<p>JSON: <a href=\"/api/incidents\">/api/incidents</a></p></body></html>\n"
    );
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response()
}

async fn list(State(shared): State<Shared>, Query(query): Query<PageQuery>) -> Response {
    let (list, total, limit) = match page_of(&shared, &query).await {
        Ok(page) => page,
        Err(response) => return response,
    };
    let next = match list.last() {
        Some(last) if list.len() == limit => Some(format!(
            "/api/incidents?after={}&limit={limit}",
            last.event_id
        )),
        _ => None,
    };
    // Serialised outside the lock, still off the async workers.
    match shared
        .compute(move || {
            serde_json::to_string_pretty(
                &serde_json::json!({ "incidents": list, "total": total, "next": next }),
            )
        })
        .await
    {
        Ok(Ok(body)) => json(body),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "serialising the incident list failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
        Err(e) => internal(e),
    }
}

async fn one(State(shared): State<Shared>, Path(id): Path<String>) -> Response {
    let event_id = match parse_id(&id) {
        Ok(id) => id,
        Err(message) => return bad_id(message),
    };
    let found = shared
        .read(move |set| {
            set.summary(event_id)
                .map(|summary| (summary, set.diagnosis_json(event_id).map(str::to_string)))
        })
        .await;
    let (summary, diagnosis) = match found {
        Ok(Some(found)) => found,
        Ok(None) => return not_found(event_id),
        Err(e) => return internal(e),
    };
    let joint = joint_of(&shared, event_id, diagnosis.as_deref()).await;
    let body = shared
        .compute(move || {
            let diagnosis = match diagnosis {
                Some(text) => serde_json::from_str(&text)?,
                None => serde_json::Value::Null,
            };
            let mut body = serde_json::json!({ "incident": summary, "diagnosis": diagnosis });
            if let Some(joint) = joint {
                body["pingmesh"] = serde_json::to_value(joint)?;
            }
            Ok::<_, serde_json::Error>(body.to_string())
        })
        .await;
    match body {
        Ok(Ok(body)) => json(body),
        Ok(Err(e)) => {
            tracing::error!(event_id, error = %e, "the stored diagnosis JSON does not parse");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the diagnosis of incident {event_id} is damaged: {e}"),
            )
        }
        Err(e) => internal(e),
    }
}

async fn html(State(shared): State<Shared>, Path(id): Path<String>) -> Response {
    let event_id = match parse_id(&id) {
        Ok(id) => id,
        Err(message) => return bad_id(message),
    };
    let found = shared
        .read(move |set| {
            let summary = set.summary(event_id)?;
            Some((
                summary,
                set.diagnosis_html(event_id).map(str::to_string),
                set.diagnosis_json(event_id).map(str::to_string),
            ))
        })
        .await;
    match found {
        Ok(Some((_, Some(mut page), diagnosis))) => {
            // The why (HAWKEYE) and the where (pingmesh) in one report.
            if let Some(joint) = joint_of(&shared, event_id, diagnosis.as_deref()).await {
                let section = joint_html(&joint);
                match page.rfind("</body>") {
                    Some(at) => page.insert_str(at, &section),
                    None => page.push_str(&section),
                }
            }
            ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response()
        }
        Ok(Some((summary, None, _))) if summary.state == IncidentState::Collecting => error(
            StatusCode::ACCEPTED,
            format!("incident {event_id} is still collecting reports"),
        ),
        Ok(Some((summary, None, _))) => error(
            StatusCode::NOT_FOUND,
            format!(
                "incident {event_id} ({}) has no HTML report: {}",
                summary.state.as_str(),
                summary.verdict.as_deref().unwrap_or("no diagnosis")
            ),
        ),
        Ok(None) => not_found(event_id),
        Err(e) => internal(e),
    }
}

async fn counters(State(shared): State<Shared>) -> Response {
    match serde_json::to_string_pretty(&shared.counters.snapshot()) {
        Ok(body) => json(body),
        Err(e) => {
            tracing::error!(error = %e, "serialising the counters failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    }
}
