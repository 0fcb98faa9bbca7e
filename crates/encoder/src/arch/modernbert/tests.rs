//! ModernBERT's config: both layouts of the layer kinds and rotary bases, and
//! the errors. Equality with transformers: tests/tiny_modernbert.rs.
use super::*;
use serde_json::json;

fn sizes() -> Value {
    json!({"model_type": "modernbert", "vocab_size": 50, "hidden_size": 16,
           "num_hidden_layers": 4, "num_attention_heads": 2, "intermediate_size": 24,
           "pad_token_id": 3})
}

fn with(extra: Value) -> Value {
    let mut v = sizes();
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[test]
fn original_fields_give_the_layout_and_transformers_defaults() {
    let lay = Layout::read(&sizes(), 4).unwrap();
    assert_eq!(
        lay,
        Layout {
            global: vec![true, false, false, true],
            global_theta: 160_000.0,
            local_theta: 10_000.0,
            window: 128,
            norm_bias: false,
            attention_bias: false,
            mlp_bias: false,
        }
    );
    let raw = with(
        json!({"global_attn_every_n_layers": 2, "global_rope_theta": 8e4,
                          "local_rope_theta": 5e3, "local_attention": 6, "norm_bias": true,
                          "mlp_bias": true, "attention_bias": null}),
    );
    let lay = Layout::read(&raw, 4).unwrap();
    assert_eq!(lay.global, vec![true, false, true, false]);
    assert_eq!(
        (lay.global_theta, lay.local_theta, lay.window),
        (8e4, 5e3, 6)
    );
    assert!(lay.norm_bias && lay.mlp_bias && !lay.attention_bias);
}

#[test]
fn layer_types_and_rope_parameters_win_over_the_original_fields() {
    let raw = with(json!({
        "global_attn_every_n_layers": 3, "global_rope_theta": 1.0, "local_rope_theta": 2.0,
        "layer_types": ["sliding_attention", "full_attention", "full_attention", "sliding_attention"],
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 160000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}
        }
    }));
    let lay = Layout::read(&raw, 4).unwrap();
    assert_eq!(lay.global, vec![false, true, true, false]);
    assert_eq!((lay.global_theta, lay.local_theta), (160_000.0, 10_000.0));
}

#[test]
fn config_reads_modernbert_names() {
    let cfg = ModelConfig::parse(
        &with(json!({"norm_eps": 1e-6, "max_position_embeddings": 512})).to_string(),
    )
    .unwrap();
    assert_eq!(cfg.architecture, Architecture::ModernBert);
    assert_eq!(
        (
            cfg.hidden_size,
            cfg.num_hidden_layers,
            cfg.intermediate_size
        ),
        (16, 4, 24)
    );
    assert_eq!(
        (cfg.max_tokens, cfg.type_vocab_size, cfg.layer_norm_eps),
        (512, 0, 1e-6)
    );
    assert_eq!(cfg.hidden_act, HiddenAct::Gelu);
    assert_eq!(cfg.pad_token_id, 3);
    // transformers' default pad id (50283) is outside this vocabulary: an error
    assert!(ModelConfig::parse(&with(json!({"pad_token_id": null})).to_string()).is_err());
}

#[test]
fn unsupported_layouts_are_errors() {
    let bad = [
        json!({"layer_types": ["full_attention"]}),
        json!({"layer_types": ["full_attention", "chunked", "full_attention", "full_attention"]}),
        json!({"layer_types": "full_attention"}),
        json!({"global_attn_every_n_layers": 0}),
        json!({"global_attn_every_n_layers": -1}),
        json!({"global_rope_theta": 0.0}),
        json!({"local_rope_theta": "big"}),
        json!({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
        json!({"rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1e4}}}),
        json!({"norm_bias": "no"}),
        json!({"local_attention": 1.5}),
    ];
    for extra in bad {
        let raw = with(extra.clone());
        let err = Layout::read(&raw, 4).unwrap_err();
        assert!(!err.is_empty());
        assert!(ModelConfig::parse(&raw.to_string()).is_err(), "{extra}");
    }
    let tanh = with(json!({"hidden_activation": "gelu_pytorch_tanh"}));
    assert!(ModelConfig::parse(&tanh.to_string())
        .unwrap_err()
        .contains("hidden_activation"));
}
