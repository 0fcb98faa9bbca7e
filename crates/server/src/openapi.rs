//! `GET /openapi.json`: the OpenAPI 3.1 description of every route,
//! generated at compile time from the handlers' annotations and the request
//! and response types (`utoipa`), never written by hand.

use std::sync::OnceLock;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::OpenApi;

use crate::{api, embed_outputs, rerank, search, tei, tools};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "bertflow-server",
        description = "Calibrated BERT sentence embeddings: OpenAI-compatible /v1/embeddings, \
similarity, search, tokenisation and metrics, and text-embeddings-inference's API (/embed, \
/embed_all, /embed_sparse, /rerank, /predict, /decode, POST /; /embed_multi gives per-token (ColBERT) vectors, and /rerank scores by \
MaxSim when the model is served with per-token outputs; /similarity and /tokenize given `inputs` take \
TEI's shapes {\"inputs\": {\"source_sentence\", \"sentences\"}} and {\"inputs\", \"add_special_tokens\"}). When the server is started with API keys, every \
route but /health and the playground page / requires 'Authorization: Bearer KEY'."
    ),
    paths(
        api::embeddings,
        api::similarity,
        search::search,
        tools::tokenize,
        tools::playground,
        api::health,
        api::info,
        tools::metrics,
        openapi_json,
        api::models,
        tei::embed,
        tei::embed_all,
        embed_outputs::embed_sparse,
        embed_outputs::embed_multi,
        tei::decode,
        tei::root,
        rerank::rerank,
        rerank::predict,
    ),
    modifiers(&BearerKey)
)]
pub(crate) struct ApiDoc;

/// Declares the `api_key` bearer scheme the paths refer to.
struct BearerKey;

impl utoipa::Modify for BearerKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The OpenAPI description of this server, as JSON.
pub fn openapi_document() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| {
        ApiDoc::openapi().to_pretty_json().unwrap_or_else(|e| {
            format!("{{\"error\": \"cannot render the OpenAPI document: {e}\"}}")
        })
    })
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    responses((status = 200, description = "The OpenAPI 3.1 description of every route", content_type = "application/json")),
    security((), ("api_key" = []))
)]
pub(crate) async fn openapi_json() -> Response {
    let mut response = openapi_document().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
