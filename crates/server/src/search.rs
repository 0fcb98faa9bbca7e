//! `POST /search`: cosine search over the server's corpus or index.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use crate::access::Ctx;
use crate::error::ApiError;
use crate::index::Hit;
use crate::state::{check_count, check_text, embed_texts, ApiJson, AppResult, AppState};

/// Either `query` or `queries`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchRequest {
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    queries: Option<Vec<String>>,
    #[serde(default)]
    top_k: Option<usize>,
    /// A quantized index: candidates rescored exactly per result (the best
    /// `rescore x top_k` codes); default: the server's `--rescore`.
    #[serde(default)]
    rescore: Option<usize>,
    /// A quantized index of bit codes: candidates the scan keeps per
    /// candidate rescored, re-ranked by the query against the codes' signs
    /// first; default: the server's `--shortlist`.
    #[serde(default)]
    shortlist: Option<usize>,
}

/// A list of hits for `query`, a list of lists for `queries`.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum SearchResults {
    One(Vec<Hit>),
    Many(Vec<Vec<Hit>>),
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct SearchResponse {
    results: SearchResults,
}

const DEFAULT_TOP_K: usize = 10;

/// Cosine search over the server's corpus, best first.
#[utoipa::path(
    post,
    path = "/search",
    request_body = SearchRequest,
    responses(
        (status = 200, description = "The top_k hits of each query", body = SearchResponse),
        (status = 404, description = "No corpus on this server (no_corpus)", body = crate::error::ErrorBody),
        (status = "4XX", description = "Invalid request, missing API key or overloaded", body = crate::error::ErrorBody),
        (status = "5XX", description = "Backend failure", body = crate::error::ErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn search(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    ApiJson(request): ApiJson<SearchRequest>,
) -> AppResult<SearchResponse> {
    if state.index.is_none() {
        return Err(ApiError::NoCorpus);
    }
    let top_k = request.top_k.unwrap_or(DEFAULT_TOP_K);
    if top_k == 0 || top_k > state.config.limits.max_top_k {
        return Err(ApiError::invalid(
            Some("top_k"),
            format!(
                "top_k must be between 1 and {}, got {top_k}",
                state.config.limits.max_top_k
            ),
        ));
    }
    let max_chars = state.config.limits.max_chars_per_input;
    let (queries, single) = match (request.query, request.queries) {
        (Some(query), None) => {
            check_text(&query, "query", max_chars)?;
            (vec![query], true)
        }
        (None, Some(queries)) => {
            if queries.is_empty() {
                return Err(ApiError::empty("queries", "queries is an empty array"));
            }
            check_count(queries.len(), &state.config)?;
            for (i, q) in queries.iter().enumerate() {
                check_text(q, &format!("queries[{i}]"), max_chars)?;
            }
            (queries, false)
        }
        _ => {
            return Err(ApiError::invalid(
                None,
                "give either \"query\" or \"queries\"",
            ))
        }
    };
    if let (Some(rescore), Some(index)) = (request.rescore, &state.index) {
        index
            .check_rescore(rescore)
            .map_err(|m| ApiError::invalid(Some("rescore"), m))?;
    }
    if let (Some(shortlist), Some(index)) = (request.shortlist, &state.index) {
        index
            .check_shortlist(shortlist)
            .map_err(|m| ApiError::invalid(Some("shortlist"), m))?;
    }
    let depth = crate::index::ScanDepth {
        rescore: request.rescore,
        shortlist: request.shortlist,
    };
    ctx.record(&queries, state.config.log_inputs);
    if let Some(index) = &state.index {
        let index = Arc::clone(index);
        tokio::task::spawn_blocking(move || index.check())
            .await
            .map_err(|e| ApiError::Internal(format!("search failed: {e}")))?
            .map_err(ApiError::Unavailable)?;
    }
    let queries = crate::prompt::prompted(&state, queries, None)?;
    let embedded = embed_texts(&state, queries).await?;
    let searcher = Arc::clone(&state);
    let mut hits = tokio::task::spawn_blocking(move || -> Result<Vec<Vec<Hit>>, ApiError> {
        match &searcher.index {
            Some(index) => {
                // Checked again next to the reads (the embedding took a while).
                index.check().map_err(ApiError::Unavailable)?;
                embedded
                    .iter()
                    .map(|e| {
                        let timer = searcher.metrics.search.start_timer();
                        let hits = if depth == crate::index::ScanDepth::default() {
                            index.search(&e.vector, top_k)
                        } else {
                            index.search_rescored(&e.vector, top_k, depth)
                        };
                        timer.observe_duration();
                        hits.map_err(|m| ApiError::Internal(format!("search failed: {m}")))
                    })
                    .collect()
            }
            None => Ok(Vec::new()),
        }
    })
    .await
    .map_err(|e| ApiError::Internal(format!("search failed: {e}")))??;
    let results = if single {
        SearchResults::One(hits.pop().unwrap_or_default())
    } else {
        SearchResults::Many(hits)
    };
    Ok(Json(SearchResponse { results }))
}
