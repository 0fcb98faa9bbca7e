//! The default pooling of the decoder-style families: `last-token` for a causal
//! decoder (Qwen3), the plain mean for a bidirectional one (Gemma 3), and `st`
//! for a sentence-transformers directory with a last-token Pooling (tiny
//! checkpoints of crates/encoder/tests/fixtures, scripts/reference/make_tiny_decoders.py).
use bertflow_core::progress::silent;
use bertflow_core::{EmbedderConfig, PipelineConfig};

fn default_pooling(fixture: &str) -> String {
    let cfg = PipelineConfig {
        model: EmbedderConfig {
            model: format!(
                "{}/../encoder/tests/fixtures/{fixture}",
                env!("CARGO_MANIFEST_DIR")
            ),
            runtime: bertflow_core::RuntimeConfig {
                threads: Some(1),
                ..Default::default()
            },
            no_cache: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let p = cfg
        .open(silent())
        .unwrap_or_else(|e| panic!("{}", e.chain()));
    p.info().pooling
}

#[test]
fn a_causal_decoder_pools_its_last_token_by_default() {
    assert_eq!(default_pooling("tiny-qwen3"), "last-token");
    assert_eq!(default_pooling("tiny-qwen2"), "last-token");
    assert_eq!(default_pooling("tiny-gemma3"), "last-avg");
    assert_eq!(default_pooling("tiny-eurobert"), "last-avg");
    assert_eq!(default_pooling("tiny-st-decoders/qwen-lasttoken"), "st");
    assert_eq!(default_pooling("tiny-st-decoders/gemma-dense"), "st");
}
