//! The host forward pass against the candle forward pass.
use super::*;
use crate::config::BertConfig;
use crate::files::ModelFiles;
use crate::precision::Precision;
use crate::weights::Weights;
use bertflow_kernels::Isa;
use candle_core::Device;
use std::collections::HashMap;

fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn tiny_config(act: &str) -> BertConfig {
    serde_json::from_str(&format!(
        r#"{{"vocab_size": 50, "hidden_size": 12, "num_hidden_layers": 2,
            "num_attention_heads": 3, "intermediate_size": 20, "hidden_act": "{act}",
            "max_position_embeddings": 16, "layer_norm_eps": 1e-12}}"#
    ))
    .unwrap()
}

/// A random BERT of `cfg`'s shape.
fn random_weights(cfg: &BertConfig) -> Weights {
    let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        (
            "embeddings.word_embeddings.weight".into(),
            vec![cfg.vocab_size, h],
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            vec![cfg.max_position_embeddings, h],
        ),
        ("embeddings.token_type_embeddings.weight".into(), vec![2, h]),
    ];
    let mut ln = vec!["embeddings.LayerNorm".to_string()];
    for l in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{l}");
        for (name, out, inp) in [
            ("attention.self.query", h, h),
            ("attention.self.key", h, h),
            ("attention.self.value", h, h),
            ("attention.output.dense", h, h),
            ("intermediate.dense", i, h),
            ("output.dense", h, i),
        ] {
            shapes.push((format!("{p}.{name}.weight"), vec![out, inp]));
            shapes.push((format!("{p}.{name}.bias"), vec![out]));
        }
        ln.push(format!("{p}.attention.output.LayerNorm"));
        ln.push(format!("{p}.output.LayerNorm"));
    }
    let dev = Device::Cpu;
    let mut tensors = HashMap::new();
    for (seed, (name, shape)) in shapes.into_iter().enumerate() {
        let n = shape.iter().product();
        let v = values(n, seed as u64, 0.6);
        tensors.insert(name, Tensor::from_vec(v, shape, &dev).unwrap());
    }
    for (seed, name) in ln.into_iter().enumerate() {
        let w: Vec<f32> = values(h, 1000 + seed as u64, 0.3)
            .iter()
            .map(|v| 1.0 + v)
            .collect();
        let b = values(h, 2000 + seed as u64, 0.3);
        tensors.insert(
            format!("{name}.weight"),
            Tensor::from_vec(w, h, &dev).unwrap(),
        );
        tensors.insert(
            format!("{name}.bias"),
            Tensor::from_vec(b, h, &dev).unwrap(),
        );
    }
    Weights::from_tensors(tensors)
}

/// Max abs difference, over every hidden state and every token row (padding
/// included), between the host pass (through `ws`) and the candle pass.
fn host_vs_candle(
    model: &BertModel,
    ids: &[u32],
    lens: &[usize],
    t: usize,
    ws: &mut Workspace,
) -> f32 {
    let upto = model.num_layers();
    let want = model.forward(ids, lens, t, upto).unwrap();
    model.forward_into(ids, lens, t, upto, ws).unwrap();
    assert_eq!(ws.states().len(), upto + 1);
    let mut diff = 0f32;
    for (got, want) in ws.states().iter().zip(&want) {
        let want = want.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(&want) {
            assert!(a.is_finite(), "non-finite output");
            diff = diff.max((a - b).abs());
        }
    }
    diff
}

/// Batch of `lens.len()` rows of `t` ids (pad 0 after each length).
fn batch(lens: &[usize], t: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let v = values(lens.len() * t, seed, 1.0);
    let mut ids: Vec<u32> = v
        .iter()
        .map(|x| ((x + 1.0) / 2.0 * (vocab - 1) as f32) as u32)
        .collect();
    for (r, &len) in lens.iter().enumerate() {
        ids[r * t + len..(r + 1) * t].fill(0);
    }
    ids
}

#[test]
fn host_pass_equals_candle_pass_on_a_random_model_with_padding() {
    for act in ["gelu", "gelu_new", "relu"] {
        let cfg = tiny_config(act);
        let model = BertModel::load(&random_weights(&cfg), cfg, &Device::Cpu).unwrap();
        let mut ws = Workspace::new();
        for (lens, t) in [(vec![7, 4, 1], 7), (vec![5], 5), (vec![2, 9, 9, 3], 9)] {
            let ids = batch(&lens, t, 50, t as u64);
            let d = host_vs_candle(&model, &ids, &lens, t, &mut ws);
            assert!(d < 1e-5, "{act}, lens {lens:?}: max abs diff {d}");
        }
    }
}

#[test]
fn host_pass_equals_candle_pass_on_minilm() {
    let dir = std::env::var("BERTFLOW_TEST_MODEL").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/all-MiniLM-L6-v2").into()
    });
    let files = ModelFiles::resolve(&dir).unwrap();
    let cfg: BertConfig =
        serde_json::from_str(&std::fs::read_to_string(&files.config).unwrap()).unwrap();
    let vocab = cfg.vocab_size;
    let w = Weights::load(&files.weights, &Device::Cpu).unwrap();
    let model = BertModel::load(&w, cfg, &Device::Cpu).unwrap();
    let mut ws = Workspace::new();
    // A bigger batch first: the workspace then shrinks for the next one.
    for (lens, t, bound) in [(vec![30, 30], 30, 5e-5), (vec![7, 5, 2], 7, 5e-5)] {
        let mut ids = batch(&lens, t, vocab, 11);
        for (r, &len) in lens.iter().enumerate() {
            ids[r * t] = 101; // [CLS]
            ids[r * t + len - 1] = 102; // [SEP]
        }
        let d = host_vs_candle(&model, &ids, &lens, t, &mut ws);
        eprintln!("MiniLM, lens {lens:?}: host vs candle max abs diff {d:e}");
        assert!(d < bound, "lens {lens:?}: max abs diff {d}");
    }
}

#[test]
fn bad_batches_are_errors_on_both_passes() {
    let cfg = tiny_config("gelu");
    let model = BertModel::load(&random_weights(&cfg), cfg, &Device::Cpu).unwrap();
    let mut ws = Workspace::new();
    let ids = vec![1u32; 6];
    for (ids, lens, t, upto) in [
        (&ids[..], &[3usize, 0][..], 3, 2),   // empty sentence
        (&ids[..], &[3, 4][..], 3, 2),        // longer than the batch
        (&ids[..5], &[3, 3][..], 3, 2),       // ids missing
        (&[1u32, 2, 50][..], &[3][..], 3, 2), // id outside the vocabulary
        (&[1u32; 17][..], &[17][..], 17, 2),  // past the position table
        (&ids[..], &[3, 3][..], 3, 3),        // no layer 3
    ] {
        assert!(model.forward(ids, lens, t, upto).is_err());
        assert!(model.forward_into(ids, lens, t, upto, &mut ws).is_err());
    }
    assert!(model.forward_into(&ids, &[3, 3], 3, 2, &mut ws).is_ok());
}

/// A random model of `cfg`'s shape with int8 layers run by `isa`.
fn int8_model(cfg: &BertConfig, isa: Isa) -> BertModel {
    let w = random_weights(cfg);
    let mut model =
        BertModel::load_with_precision(&w, cfg.clone(), &Device::Cpu, Precision::Int8).unwrap();
    for l in &mut model.layers {
        l.quantize(isa).unwrap();
    }
    model
}

#[test]
fn int8_host_pass_is_close_to_the_candle_int8_pass() {
    // The same int8 products (same kernel, same codes); attention and LayerNorm
    // differ by float rounding, which could move an activation code by one.
    for act in ["gelu", "gelu_new", "relu"] {
        let cfg = tiny_config(act);
        for isa in Isa::available_all() {
            let model = int8_model(&cfg, isa);
            let mut ws = Workspace::new();
            for (lens, t) in [(vec![7, 4, 1], 7), (vec![2, 9, 9, 3], 9)] {
                let ids = batch(&lens, t, 50, t as u64);
                let d = host_vs_candle(&model, &ids, &lens, t, &mut ws);
                eprintln!("{act} {isa:?}, lens {lens:?}: int8 host vs candle {d:e}");
                assert!(d < 1e-3, "{act} {isa:?}, lens {lens:?}: max abs diff {d}");
            }
        }
    }
}

#[test]
fn int8_host_pass_is_the_same_bits_with_every_8_bit_kernel() {
    // VNNI and the portable kernel take the same 8-bit codes and compute exact
    // integer products with one output stage: the whole pass agrees bit for bit.
    let cfg = tiny_config("gelu");
    let (lens, t) = (vec![9, 4, 7, 1, 9, 2, 8], 9);
    let ids = batch(&lens, t, 50, 5);
    let run = |isa: Isa| {
        let model = int8_model(&cfg, isa);
        let mut ws = Workspace::new();
        model.forward_into(&ids, &lens, t, 2, &mut ws).unwrap();
        ws.states().to_vec()
    };
    let want = run(Isa::Scalar);
    let fp32 = BertModel::load(&random_weights(&cfg), cfg.clone(), &Device::Cpu).unwrap();
    let mut ws = Workspace::new();
    fp32.forward_into(&ids, &lens, t, 2, &mut ws).unwrap();
    assert_ne!(want[2], ws.states()[2], "int8 equals fp32: not quantised?");
    for isa in Isa::available_all() {
        if isa.act_max() == Isa::Scalar.act_max() {
            assert_eq!(run(isa), want, "{isa:?}");
        }
    }
}
