//! The HTTP API: incidents as JSON and the self-contained HTML report.
//!
//! - `GET /api/incidents` — every incident (event id, state, switches, verdict)
//! - `GET /api/incidents/{event_id}` — one incident with its diagnosis JSON
//! - `GET /incidents/{event_id}` — the HTML report (provenance graph drawn)
//! - `GET /` — an HTML index of the incidents with links to their reports
//! - `GET /healthz` — liveness

use crate::incidents::IncidentSet;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::{Arc, Mutex};

/// The router over the shared incident set.
pub fn router(incidents: Arc<Mutex<IncidentSet>>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/api/incidents", get(list))
        .route("/api/incidents/{event_id}", get(one))
        .route("/incidents/{event_id}", get(html))
        .with_state(incidents)
}

fn error(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message + "\n",
    )
        .into_response()
}

fn json(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn parse_id(text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("event id {text:?} is not a number"))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn index(State(set): State<Arc<Mutex<IncidentSet>>>) -> Response {
    let Ok(set) = set.lock() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "incident set poisoned".into(),
        );
    };
    let mut rows = String::new();
    for incident in set.list() {
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
         <table><tr><th>event</th><th>state</th><th>reported</th><th>missing</th><th>verdict</th></tr>\n{rows}</table>\
         <p>JSON: <a href=\"/api/incidents\">/api/incidents</a></p></body></html>\n"
    );
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response()
}

async fn list(State(set): State<Arc<Mutex<IncidentSet>>>) -> Response {
    let Ok(set) = set.lock() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "incident set poisoned".into(),
        );
    };
    match serde_json::to_string_pretty(&set.list()) {
        Ok(body) => json(body),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn one(State(set): State<Arc<Mutex<IncidentSet>>>, Path(id): Path<String>) -> Response {
    let event_id = match parse_id(&id) {
        Ok(id) => id,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let Ok(set) = set.lock() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "incident set poisoned".into(),
        );
    };
    let Some(summary) = set.summary(event_id) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("no incident with event id {event_id}"),
        );
    };
    let diagnosis: serde_json::Value = set
        .diagnosis_json(event_id)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or(serde_json::Value::Null);
    let body = serde_json::json!({ "incident": summary, "diagnosis": diagnosis });
    json(body.to_string())
}

async fn html(State(set): State<Arc<Mutex<IncidentSet>>>, Path(id): Path<String>) -> Response {
    let event_id = match parse_id(&id) {
        Ok(id) => id,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let Ok(set) = set.lock() else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "incident set poisoned".into(),
        );
    };
    match set.diagnosis_html(event_id) {
        Some(page) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            page.to_string(),
        )
            .into_response(),
        None if set.summary(event_id).is_some() => error(
            StatusCode::ACCEPTED,
            format!("incident {event_id} is still collecting reports"),
        ),
        None => error(
            StatusCode::NOT_FOUND,
            format!("no incident with event id {event_id}"),
        ),
    }
}
