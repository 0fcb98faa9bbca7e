//! `POST /search`: cosine search over the server's corpus or index.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use bertflow_core::indexing::SearchMode;
use bertflow_core::SparseVector;

use crate::access::Ctx;
use crate::error::ApiError;
use crate::index::{Hit, ModeQuery, ScanDepth};
use crate::infer::Input;
use crate::queue::{Output, Task};
use crate::state::{check_count, check_text, embed_texts, ApiJson, AppResult, AppState};
use crate::truncation::Truncation;

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
    /// `dense` (cosine, the default), `sparse` (dot product of the sparse
    /// vectors) or `hybrid` (both, fused); sparse and hybrid need an index
    /// with sparse vectors and a model with a sparse head.
    #[serde(default)]
    mode: Option<String>,
    /// Hybrid: `rrf` (the default) or `weighted`.
    #[serde(default)]
    fusion: Option<String>,
    /// Hybrid, rrf: the rank constant (default 60).
    #[serde(default)]
    rrf_k: Option<f64>,
    /// Hybrid, weighted: the dense cosine's weight in [0, 1] (default 0.5).
    #[serde(default)]
    alpha: Option<f32>,
    /// Hybrid: candidates from each list before fusion (default max(10 x top_k, 100)).
    #[serde(default)]
    depth: Option<usize>,
}

impl SearchRequest {
    /// The mode and hybrid's fusion asked for, checked by core's ranges.
    fn mode_query(&self) -> Result<ModeQuery, ApiError> {
        let setting = |e: bertflow_core::CoreError| match e.setting_parts() {
            Some((field, message)) => ApiError::invalid(Some(&field.replace('-', "_")), message),
            None => ApiError::invalid(None, e.to_string()),
        };
        let mut query = ModeQuery::default();
        if let Some(mode) = &self.mode {
            query.mode = mode.parse().map_err(setting)?;
        }
        if let Some(fusion) = &self.fusion {
            query.fusion.fusion = fusion.parse().map_err(setting)?;
        }
        if let Some(k) = self.rrf_k {
            query.fusion.rrf_k = k;
        }
        if let Some(alpha) = self.alpha {
            query.fusion.alpha = alpha;
        }
        query.fusion.depth = self.depth;
        query.fusion.check().map_err(setting)?;
        Ok(query)
    }
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

/// The sparse vectors of (prompted) queries, through the queue; a model
/// without a sparse head is the request's fault here (422 on `mode`).
async fn sparse_queries(
    state: &Arc<AppState>,
    queries: &[String],
) -> Result<Vec<SparseVector>, ApiError> {
    let pieces = queries.iter().cloned().map(Input::Text).collect();
    let outputs = match state
        .infer
        .run(Task::EmbedSparse, "query", pieces, Truncation::ALWAYS)
        .await
    {
        Err(ApiError::NotSupported(why)) => {
            return Err(ApiError::invalid(
                Some("mode"),
                format!(
                    "sparse and hybrid search need the model's sparse head to encode the \
                     query, and this server has none ({why}): start it with a model whose \
                     sparse head built the index's sparse vectors, or use mode dense"
                ),
            ))
        }
        other => other?,
    };
    outputs
        .into_iter()
        .map(|output| match output {
            Output::Sparse(v) => Ok(SparseVector {
                indices: v.indices,
                values: v.values,
            }),
            _ => Err(ApiError::Internal("the queue answered another task".into())),
        })
        .collect()
}

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
    let mode = request.mode_query()?;
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
    let depth = ScanDepth {
        rescore: request.rescore,
        shortlist: request.shortlist,
    };
    if let (true, Some(index)) = (mode.mode.needs_sparse(), &state.index) {
        if !index.has_sparse() {
            return Err(ApiError::invalid(
                Some("mode"),
                format!(
                    "mode {} needs an index with sparse vectors (bertflow index build \
                     --with-sparse); this server's index has none: use mode dense",
                    mode.mode
                ),
            ));
        }
    }
    ctx.record(&queries, state.config.log_inputs);
    if let Some(index) = &state.index {
        let index = Arc::clone(index);
        tokio::task::spawn_blocking(move || index.check())
            .await
            .map_err(|e| ApiError::Internal(format!("search failed: {e}")))?
            .map_err(ApiError::Unavailable)?;
    }
    let queries = crate::prompt::prompted(&state, queries, None)?;
    let n = queries.len();
    let sparse = if mode.mode.needs_sparse() {
        Some(sparse_queries(&state, &queries).await?)
    } else {
        None
    };
    let embedded = if mode.mode.needs_dense() {
        Some(embed_texts(&state, queries).await?)
    } else {
        None
    };
    // Each query's vectors, moved (not copied) into its ModeQuery.
    let mut dense = embedded.into_iter().flatten().map(|e| e.vector);
    let mut sparse = sparse.into_iter().flatten();
    let per_query: Vec<ModeQuery> = (0..n)
        .map(|_| ModeQuery {
            dense: dense.next(),
            sparse: sparse.next(),
            ..mode.clone()
        })
        .collect();
    let searcher = Arc::clone(&state);
    let mut hits = tokio::task::spawn_blocking(move || -> Result<Vec<Vec<Hit>>, ApiError> {
        match &searcher.index {
            Some(index) => {
                // Checked again next to the reads (the embedding took a while).
                index.check().map_err(ApiError::Unavailable)?;
                per_query
                    .iter()
                    .map(|q| {
                        let timer = searcher.metrics.search.start_timer();
                        let hits = match (&q.dense, q.mode) {
                            (Some(v), SearchMode::Dense) if depth == ScanDepth::default() => {
                                index.search(v, top_k)
                            }
                            (Some(v), SearchMode::Dense) => index.search_rescored(v, top_k, depth),
                            _ => index.search_mode(q, top_k, depth),
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
