//! The middleware every request goes through: request id, API-key check,
//! metrics, and one structured log line per request (`tracing`, target
//! `bertflow_server::access`).
//!
//! The log line has the fields `request_id`, `method`, `route` (the route
//! pattern, or `unmatched`), `status`, `latency_ms` and `inputs` (texts in the
//! request; 0 when it was refused before they were read). The input texts are
//! logged (field `texts`) only when [`crate::ServerConfig::log_inputs`] is set.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::{self, AuthFailure};
use crate::error::ApiError;
use crate::state::AppState;

/// Route label of requests that match no route (bounded label cardinality).
const UNMATCHED: &str = "unmatched";

/// The routes served without an API key: liveness, and the playground page
/// (static HTML holding no data; its own requests carry the key typed into it).
const OPEN_ROUTES: [&str; 2] = ["/health", "/"];

/// Per-request context the handlers fill in (input count, texts to log).
#[derive(Default)]
pub(crate) struct RequestCtx {
    inputs: AtomicUsize,
    texts: Mutex<Option<Vec<String>>>,
}

/// Handle to the request's context, available to handlers as
/// `Extension<Ctx>`.
#[derive(Clone, Default)]
pub(crate) struct Ctx(pub Arc<RequestCtx>);

impl Ctx {
    /// Record the request's input texts (their number always; the texts
    /// themselves only when `keep` is set, for `--log-inputs`).
    pub(crate) fn record<S: AsRef<str>>(&self, texts: &[S], keep: bool) {
        self.0.inputs.store(texts.len(), Ordering::Relaxed);
        if keep {
            let owned = texts.iter().map(|t| t.as_ref().to_owned()).collect();
            *self.0.texts.lock().unwrap_or_else(|e| e.into_inner()) = Some(owned);
        }
    }
}

/// A client-supplied `x-request-id` is kept when it is short and plain.
fn client_request_id(req: &Request) -> Option<String> {
    let value = req.headers().get("x-request-id")?.to_str().ok()?;
    let plain = !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    plain.then(|| value.to_owned())
}

fn unauthorized(failure: AuthFailure) -> ApiError {
    ApiError::Unauthorized(
        match failure {
            AuthFailure::Missing => "missing API key: send the header 'Authorization: Bearer KEY'",
            AuthFailure::Malformed => {
                "malformed Authorization header: expected 'Authorization: Bearer KEY'"
            }
            AuthFailure::Wrong => "invalid API key",
        }
        .to_owned(),
    )
}

pub(crate) async fn middleware(
    State(state): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let start = Instant::now();
    let id = client_request_id(&req).unwrap_or_else(|| state.request_ids.next());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |p| p.as_str().to_owned());
    let method = req.method().clone();
    let ctx = Ctx::default();
    req.extensions_mut().insert(ctx.clone());

    let authorized = if OPEN_ROUTES.contains(&req.uri().path()) {
        Ok(())
    } else {
        let header = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        auth::check(&state.config.api_keys, header)
    };
    let mut response = match authorized {
        Ok(()) => next.run(req).await,
        Err(failure) => unauthorized(failure).into_response(),
    };
    let status = response.status().as_u16();
    let elapsed = start.elapsed();
    let inputs = ctx.0.inputs.load(Ordering::Relaxed);

    let metrics = &state.metrics;
    metrics
        .requests
        .with_label_values(&[route.as_str(), &status.to_string()])
        .inc();
    metrics
        .latency
        .with_label_values(&[route.as_str()])
        .observe(elapsed.as_secs_f64());
    if inputs > 0 {
        metrics
            .inputs
            .with_label_values(&[route.as_str()])
            .inc_by(inputs as u64);
    }

    let latency_ms = elapsed.as_secs_f64() * 1e3;
    let texts = ctx.0.texts.lock().unwrap_or_else(|e| e.into_inner()).take();
    match texts {
        Some(texts) => tracing::info!(
            target: "bertflow_server::access",
            request_id = %id,
            method = %method,
            route = %route,
            status,
            latency_ms,
            inputs,
            texts = ?texts,
            "request"
        ),
        None => tracing::info!(
            target: "bertflow_server::access",
            request_id = %id,
            method = %method,
            route = %route,
            status,
            latency_ms,
            inputs,
            "request"
        ),
    }
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}
