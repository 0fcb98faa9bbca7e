//! The router: every route, its handler, the fallbacks and the middleware.

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::routing::{get, post};
use axum::Router;

use crate::error::ApiError;
use crate::state::AppState;
use crate::{access, api, embed_outputs, openapi, rerank, search, tei, tools};

pub(crate) fn router(state: Arc<AppState>) -> Router {
    let body_limit = state.config.limits.max_body_bytes;
    Router::new()
        .route("/v1/embeddings", post(api::embeddings))
        .route("/similarity", post(api::similarity))
        .route("/search", post(search::search))
        .route("/", get(tools::playground).post(tei::root))
        .route("/embed", post(tei::embed))
        .route("/embed_all", post(tei::embed_all))
        .route("/embed_sparse", post(embed_outputs::embed_sparse))
        .route("/embed_multi", post(embed_outputs::embed_multi))
        .route("/decode", post(tei::decode))
        .route("/rerank", post(rerank::rerank))
        .route("/predict", post(rerank::predict))
        .route("/v1/models", get(api::models))
        .route("/health", get(api::health))
        .route("/info", get(api::info))
        .route("/tokenize", post(tools::tokenize))
        .route("/metrics", get(tools::metrics))
        .route("/openapi.json", get(openapi::openapi_json))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            access::middleware,
        ))
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("{method} {}", uri.path()))
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
