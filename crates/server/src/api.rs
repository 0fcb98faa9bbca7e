//! The embedding endpoints: `/v1/embeddings`, `/similarity`, `/health`,
//! `/info` (request and response shapes, handlers).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Ctx;
use crate::codes::{CodeEncoding, CodeValue, EncodingFormat};
use crate::config::Limits;
use crate::error::ApiError;
use crate::index::cosine;
use crate::inputs::{finish_vector, keep_dimensions, parse_pieces, piece_text};
use crate::metrics::Load;
use crate::state::{
    check_count, check_text, embed_inputs, embed_texts, from_object, ApiJson, AppResult, AppState,
    Input, JsonObject,
};
use crate::truncation::Truncation;

// ---------------------------------------------------------------------------
// POST /v1/embeddings

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmbeddingsRequest {
    /// A string or an array of strings.
    #[schema(value_type = Input)]
    input: Value,
    /// Accepted and ignored: the answer names the served model.
    #[serde(default)]
    #[allow(dead_code)]
    model: Option<String>,
    /// `float` (default), `base64` (little-endian f32), or the codes of the
    /// calibrator's quantizer stage: `int8`, `uint8`, `binary`, `ubinary`.
    #[serde(default)]
    encoding_format: Option<EncodingFormat>,
    /// bertflow extension, with a code format: `array` (default, integers)
    /// or `base64` (of the code bytes).
    #[serde(default)]
    code_encoding: Option<CodeEncoding>,
    #[serde(default)]
    dimensions: Option<usize>,
    /// bertflow extension: scale each vector (after the `dimensions` cut) to
    /// unit length. Default false: the calibrated vectors as they are.
    #[serde(default)]
    normalize: bool,
    /// Accepted for OpenAI compatibility and ignored.
    #[serde(default)]
    #[allow(dead_code)]
    user: Option<String>,
    /// bertflow extension, as on TEI's routes: prepend the model's prompt
    /// of this name (default: the server's default prompt, if any).
    #[serde(default)]
    prompt_name: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct EmbeddingsResponse {
    object: &'static str,
    data: Vec<EmbeddingData>,
    model: String,
    usage: Usage,
    /// bertflow extension: indices of the inputs cut at the model's max_len.
    truncated: Vec<usize>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct EmbeddingData {
    object: &'static str,
    index: usize,
    embedding: EmbeddingValue,
}

/// The vector: floats, base64 of the little-endian f32 bytes, or codes.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum EmbeddingValue {
    Float(Vec<f32>),
    Base64(String),
    Codes(CodeValue),
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// OpenAI-compatible embeddings of one or more texts.
#[utoipa::path(
    post,
    path = "/v1/embeddings",
    request_body = EmbeddingsRequest,
    responses(
        (status = 200, description = "One vector per input, in input order", body = EmbeddingsResponse),
        (status = "4XX", description = "Invalid request, missing API key or overloaded", body = crate::error::ErrorBody),
        (status = "5XX", description = "Backend failure", body = crate::error::ErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn embeddings(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    ApiJson(request): ApiJson<EmbeddingsRequest>,
) -> AppResult<EmbeddingsResponse> {
    if state.info.kind != crate::backend::ModelKind::Embedding {
        return Err(ApiError::NotSupported(
            "this server serves a reranker, not an embedding model; use /rerank or /predict".into(),
        ));
    }
    let keep = keep_dimensions(request.dimensions, state.info.dimension)?;
    let pieces = parse_pieces(request.input, "input", &state)?;
    let texts: Vec<&str> = pieces.iter().map(piece_text).collect();
    ctx.record(&texts, state.config.log_inputs);
    let pieces = crate::prompt::prompted_pieces(&state, pieces, request.prompt_name.as_deref())?;
    let format = request.encoding_format.unwrap_or_default();
    let stage = state.backend.quantizer();
    crate::codes::check(
        stage,
        format,
        request.code_encoding,
        keep,
        request.normalize,
    )?;
    let embedded = embed_inputs(&state, "input", pieces, Truncation::ALWAYS).await?;

    let prompt_tokens = embedded.iter().map(|e| e.tokens).sum();
    let truncated = embedded
        .iter()
        .enumerate()
        .filter(|(_, e)| e.truncated)
        .map(|(i, _)| i)
        .collect();
    let vectors: Vec<Vec<f32>> = embedded
        .into_iter()
        .map(|e| finish_vector(e.vector, keep, request.normalize))
        .collect();
    let values: Vec<EmbeddingValue> = match (format.code(), stage) {
        (Some(kind), Some(q)) => {
            let encoding = request.code_encoding.unwrap_or_default();
            crate::codes::encode(q, &vectors, kind, encoding)?
                .into_iter()
                .map(EmbeddingValue::Codes)
                .collect()
        }
        (Some(_), None) => {
            return Err(ApiError::Internal("the quantizer stage disappeared".into()))
        }
        (None, _) => vectors
            .into_iter()
            .map(|vector| match format {
                EncodingFormat::Base64 => {
                    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                    EmbeddingValue::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
                _ => EmbeddingValue::Float(vector),
            })
            .collect(),
    };
    let data = values
        .into_iter()
        .enumerate()
        .map(|(index, embedding)| EmbeddingData {
            object: "embedding",
            index,
            embedding,
        })
        .collect();
    Ok(Json(EmbeddingsResponse {
        object: "list",
        data,
        // The served model, whatever the request named.
        model: state.served_model_name().to_owned(),
        usage: Usage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
        truncated,
    }))
}

// ---------------------------------------------------------------------------
// POST /similarity

/// Either `pairs`, or `source` with `targets`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SimilarityRequest {
    /// Pairs of texts `[a, b]`.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Vec<String>>>)]
    pairs: Option<Vec<(String, String)>>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    targets: Option<Vec<String>>,
}

/// Texts to embed (each with the field it came from) and, per score, the
/// indices of its two texts.
type ScoringPlan = (Vec<(String, String)>, Vec<(usize, usize)>);

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct SimilarityResponse {
    scores: Vec<f64>,
}

/// Cosine similarity of text pairs in the calibrated space.
#[utoipa::path(
    post,
    path = "/similarity",
    request_body = SimilarityRequest,
    responses(
        (status = 200, description = "One cosine per pair", body = SimilarityResponse),
        (status = "4XX", description = "Invalid request, missing API key or overloaded", body = crate::error::ErrorBody),
        (status = "5XX", description = "Backend failure", body = crate::error::ErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn similarity(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    JsonObject(body): JsonObject,
) -> Response {
    // TEI's shape names its field `inputs`; bertflow's has `pairs` or `source`.
    if body.get("inputs").is_some() {
        return crate::tei::similarity(&state, &ctx, body)
            .await
            .into_response();
    }
    match from_object(body) {
        Ok(request) => similarity_pairs(&state, &ctx, request)
            .await
            .into_response(),
        Err(e) => e.into_response(),
    }
}

async fn similarity_pairs(
    state: &Arc<AppState>,
    ctx: &Ctx,
    request: SimilarityRequest,
) -> AppResult<SimilarityResponse> {
    // Flatten to a list of texts plus, for each score, the two text indices.
    let (texts, pairs): ScoringPlan = match (request.pairs, request.source, request.targets) {
        (Some(pairs), None, None) => {
            if pairs.is_empty() {
                return Err(ApiError::empty("pairs", "pairs is an empty array"));
            }
            check_count(pairs.len().saturating_mul(2), &state.config)?;
            let n = pairs.len();
            let texts = pairs
                .into_iter()
                .enumerate()
                .flat_map(|(k, (a, b))| {
                    [(a, format!("pairs[{k}][0]")), (b, format!("pairs[{k}][1]"))]
                })
                .collect();
            (texts, (0..n).map(|i| (2 * i, 2 * i + 1)).collect())
        }
        (None, Some(source), Some(targets)) => {
            if targets.is_empty() {
                return Err(ApiError::empty("targets", "targets is an empty array"));
            }
            check_count(targets.len().saturating_add(1), &state.config)?;
            let n = targets.len();
            let texts = std::iter::once((source, "source".to_owned()))
                .chain(
                    targets
                        .into_iter()
                        .enumerate()
                        .map(|(k, t)| (t, format!("targets[{k}]"))),
                )
                .collect();
            (texts, (1..=n).map(|i| (0, i)).collect())
        }
        _ => {
            return Err(ApiError::invalid(
                None,
                "give either \"pairs\" or both \"source\" and \"targets\"",
            ))
        }
    };
    let all: Vec<&str> = texts.iter().map(|(t, _)| t.as_str()).collect();
    ctx.record(&all, state.config.log_inputs);
    drop(all);
    // Validate, and embed each distinct text once.
    let mut unique: Vec<String> = Vec::new();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut slot = Vec::with_capacity(texts.len());
    for (text, param) in texts {
        check_text(&text, &param, state.config.limits.max_chars_per_input)?;
        let next = unique.len();
        let at = *seen.entry(text.clone()).or_insert(next);
        if at == next {
            unique.push(text);
        }
        slot.push(at);
    }
    let unique = crate::prompt::prompted(state, unique, None)?;
    let embedded = embed_texts(state, unique).await?;
    let scores = pairs
        .into_iter()
        .map(|(a, b)| cosine(&embedded[slot[a]].vector, &embedded[slot[b]].vector))
        .collect();
    Ok(Json(SimilarityResponse { scores }))
}

// ---------------------------------------------------------------------------
// GET /health, GET /info, fallbacks

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct HealthResponse {
    /// Always `ok`.
    status: &'static str,
}

/// Liveness; the one route that needs no API key.
#[utoipa::path(
    get,
    path = "/health",
    responses((status = 200, description = "The server accepts requests", body = HealthResponse))
)]
pub(crate) async fn health() -> Json<HealthResponse> {
    Json(HealthResponse { status: "ok" })
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct InfoResponse {
    model: String,
    pooling: String,
    calibrator: Option<String>,
    dimension: usize,
    max_len: usize,
    /// Always false: vectors are returned as the calibrator produces them.
    normalized: bool,
    limits: Limits,
    corpus_size: Option<usize>,
    /// How /search searches (`exact`, the codes scanned and the rescore
    /// depth, or the approximate method), null without a corpus.
    search_method: Option<String>,
    /// The quantizer stage the calibrator file ends in (its spec, width and
    /// bytes), null without one.
    quantizer: Option<String>,
    /// The `encoding_format` values /v1/embeddings answers here.
    encoding_formats: Vec<&'static str>,
    load: Load,
    /// The fp32 and int8 kernels of this process, each with where it came from
    /// (env, cache, measured, rule), e.g. `fp32 avx512pair (cache), int8
    /// avx512vnni (cache)`; null before a model is loaded.
    kernels: Option<String>,
    /// text-embeddings-inference's fields, beside bertflow's.
    #[serde(flatten)]
    tei: TeiInfo,
}

/// The fields of TEI's `Info` (its OpenAPI document), as this server fills them.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct TeiInfo {
    /// The served model (the same as `model`).
    model_id: String,
    /// The name the model is served under (`serve --served-model-name`,
    /// by default the model id): the `model` of OpenAI's answers.
    served_model_name: String,
    /// Always null: bertflow does not track a Hub revision.
    model_sha: Option<String>,
    /// `float32`: the encoder computes in f32 (int8 kernels keep f32 outputs).
    model_dtype: &'static str,
    /// `{"embedding": {"pooling": ...}}` or `{"reranker": {"id2label", "label2id"}}`.
    #[schema(value_type = Object)]
    model_type: Value,
    /// `max_connections`.
    max_concurrent_requests: usize,
    /// `max_len`: the most tokens of one input, special tokens included.
    max_input_length: usize,
    max_batch_tokens: usize,
    /// `max_batch_size`.
    max_batch_requests: Option<usize>,
    /// `max_inputs_per_request`.
    max_client_batch_size: usize,
    /// Whether TEI's routes cut long inputs when a request does not say.
    auto_truncate: bool,
    /// Requests tokenized at once (`tokenization_workers`, or the batch workers).
    tokenization_workers: usize,
    /// bertflow's version.
    version: &'static str,
    sha: Option<&'static str>,
    docker_label: Option<&'static str>,
}

fn tei_info(state: &AppState) -> TeiInfo {
    let info = &state.info;
    let limits = &state.config.limits;
    let model_type = match info.kind {
        crate::backend::ModelKind::Embedding => {
            serde_json::json!({"embedding": {"pooling": info.pooling}})
        }
        crate::backend::ModelKind::Reranker => {
            let id2label: serde_json::Map<String, Value> = info
                .labels
                .iter()
                .enumerate()
                .map(|(i, l)| (i.to_string(), Value::from(l.clone())))
                .collect();
            let label2id: serde_json::Map<String, Value> = info
                .labels
                .iter()
                .enumerate()
                .map(|(i, l)| (l.clone(), Value::from(i)))
                .collect();
            let classifier = serde_json::json!({"id2label": id2label, "label2id": label2id});
            if info.labels.len() == 1 {
                serde_json::json!({ "reranker": classifier })
            } else {
                serde_json::json!({ "classifier": classifier })
            }
        }
    };
    TeiInfo {
        model_id: info.model_id.clone(),
        served_model_name: state.served_model_name().to_owned(),
        model_sha: None,
        model_dtype: "float32",
        model_type,
        max_concurrent_requests: limits.max_connections,
        max_input_length: info.max_len,
        max_batch_tokens: limits.max_batch_tokens,
        max_batch_requests: Some(limits.max_batch_size),
        max_client_batch_size: limits.max_inputs_per_request,
        auto_truncate: state.config.auto_truncate,
        tokenization_workers: state.infer.tokenization_workers(),
        version: env!("CARGO_PKG_VERSION"),
        sha: None,
        docker_label: None,
    }
}

// ---------------------------------------------------------------------------
// GET /v1/models

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ModelsResponse {
    /// Always `list`.
    object: &'static str,
    data: Vec<ModelEntry>,
}

/// OpenAI's `Model` object.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ModelEntry {
    /// The served model's id.
    id: String,
    /// Always `model`.
    object: &'static str,
    /// Unix time the server started.
    created: u64,
    /// Always `bertflow`.
    owned_by: &'static str,
}

/// The served model, in OpenAI's list shape (for `client.models.list()`).
#[utoipa::path(
    get,
    path = "/v1/models",
    responses(
        (status = 200, description = "The one model this server serves", body = ModelsResponse),
        (status = 401, description = "Missing or wrong API key", body = crate::error::ErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn models(State(state): State<Arc<AppState>>) -> Json<ModelsResponse> {
    Json(ModelsResponse {
        object: "list",
        data: vec![ModelEntry {
            id: state.served_model_name().to_owned(),
            object: "model",
            created: state.started_unix,
            owned_by: "bertflow",
        }],
    })
}

/// Model, limits, corpus size and current load.
#[utoipa::path(
    get,
    path = "/info",
    responses(
        (status = 200, description = "Server description", body = InfoResponse),
        (status = 401, description = "Missing or wrong API key", body = crate::error::ErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn info(State(state): State<Arc<AppState>>) -> Json<InfoResponse> {
    let info = &state.info;
    Json(InfoResponse {
        model: info.model_id.clone(),
        pooling: info.pooling.clone(),
        calibrator: info.calibrator.clone(),
        dimension: info.dimension,
        max_len: info.max_len,
        normalized: false,
        limits: state.config.limits.clone(),
        corpus_size: state.index.as_ref().map(|i| i.len()),
        search_method: state.index.as_ref().map(|i| i.method()),
        quantizer: state.backend.quantizer().map(|q| q.describe()),
        encoding_formats: crate::codes::formats(state.backend.quantizer()),
        load: state.infer.load(),
        kernels: bertflow_core::encoder::tuning::current().map(|k| k.describe()),
        tei: tei_info(&state),
    })
}
