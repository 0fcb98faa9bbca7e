//! The engine on small random models: bad batches are errors, int8 kernels agree
//! bit for bit, positions after the padding index. Equality with transformers is
//! tested on the tiny checkpoints (tests/tiny_models.rs).
use super::*;
use crate::arch::mpnet::relative_position_bucket;
use crate::checkpoint::HostTensor;
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

fn tiny_config(model_type: &str) -> ModelConfig {
    ModelConfig::parse(&format!(
        r#"{{"model_type": "{model_type}", "vocab_size": 50, "hidden_size": 12,
            "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 20,
            "max_position_embeddings": 16, "type_vocab_size": 1, "pad_token_id": 1}}"#
    ))
    .unwrap()
}

/// A random BERT-named model of `cfg`'s shape.
fn random_weights(cfg: &ModelConfig) -> Weights {
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
        ("embeddings.token_type_embeddings.weight".into(), vec![1, h]),
        ("embeddings.LayerNorm.weight".into(), vec![h]),
        ("embeddings.LayerNorm.bias".into(), vec![h]),
    ];
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
        for ln in ["attention.output.LayerNorm", "output.LayerNorm"] {
            shapes.push((format!("{p}.{ln}.weight"), vec![h]));
            shapes.push((format!("{p}.{ln}.bias"), vec![h]));
        }
    }
    let tensors: HashMap<String, HostTensor> = shapes
        .into_iter()
        .enumerate()
        .map(|(seed, (name, shape))| {
            let n = shape.iter().product();
            let mut v = values(n, seed as u64, 0.6);
            if name.ends_with("LayerNorm.weight") {
                v.iter_mut().for_each(|x| *x += 1.0);
            }
            (name, HostTensor::from_f32(shape, &v).unwrap())
        })
        .collect();
    Weights::from_tensors(tensors)
}

/// Batch of `lens.len()` rows of `t` ids (pad 1 after each length, no 1 inside).
fn batch(lens: &[usize], t: usize, seed: u64) -> Vec<u32> {
    let v = values(lens.len() * t, seed, 1.0);
    let mut ids: Vec<u32> = v.iter().map(|x| 2 + ((x + 1.0) * 23.9) as u32).collect();
    for (r, &len) in lens.iter().enumerate() {
        ids[r * t + len..(r + 1) * t].fill(1);
    }
    ids
}

fn run(model: &Model, ids: &[u32], lens: &[usize], t: usize) -> Vec<Vec<f32>> {
    let mut ws = Workspace::new();
    model
        .forward_into(ids, lens, t, model.num_layers(), &mut ws)
        .unwrap();
    ws.states().to_vec()
}

#[test]
fn bad_batches_are_errors() {
    let cfg = tiny_config("bert");
    let model = Model::load(&random_weights(&cfg), cfg, Precision::Fp32).unwrap();
    let mut ws = Workspace::new();
    let ids = vec![2u32; 6];
    for (ids, lens, t, upto) in [
        (&ids[..], &[3usize, 0][..], 3, 2),   // empty sentence
        (&ids[..], &[3, 4][..], 3, 2),        // longer than the batch
        (&ids[..5], &[3, 3][..], 3, 2),       // ids missing
        (&[1u32, 2, 50][..], &[3][..], 3, 2), // id outside the vocabulary
        (&[2u32; 17][..], &[17][..], 17, 2),  // past the position table
        (&ids[..], &[3, 3][..], 3, 3),        // no layer 3
    ] {
        assert!(model.forward_into(ids, lens, t, upto, &mut ws).is_err());
    }
    assert!(model.forward_into(&ids, &[3, 3], 3, 2, &mut ws).is_ok());
    assert_eq!(ws.states().len(), 3);
}

#[test]
fn roberta_positions_start_after_the_padding_index() {
    // RoBERTa's sentence equals BERT's with the position table shifted by
    // padding_idx + 1 = 2 rows, and has 2 tokens fewer room.
    let bert = tiny_config("bert");
    let roberta = tiny_config("roberta");
    assert_eq!((bert.max_tokens, roberta.max_tokens), (16, 14));
    let w = random_weights(&bert);
    let mut shifted = w.clone_tensors();
    let pos = shifted["embeddings.position_embeddings.weight"].clone();
    let rolled = HostTensor::concat_rows(&[
        pos.narrow_rows(2, 14).unwrap(),
        pos.narrow_rows(0, 2).unwrap(),
    ])
    .unwrap();
    shifted.insert("embeddings.position_embeddings.weight".into(), rolled);
    let b = Model::load(&Weights::from_tensors(shifted), bert, Precision::Fp32).unwrap();
    let r = Model::load(&w, roberta, Precision::Fp32).unwrap();
    let (lens, t) = ([5usize, 3], 5);
    let ids = batch(&lens, t, 3);
    let (sb, sr) = (run(&b, &ids, &lens, t), run(&r, &ids, &lens, t));
    for (x, y) in sb.iter().zip(&sr) {
        // Real tokens only (padding reads position padding_idx in RoBERTa).
        for (row, (a, c)) in x.chunks_exact(12).zip(y.chunks_exact(12)).enumerate() {
            if row % t < lens[row / t] {
                assert_eq!(a, c, "row {row}");
            }
        }
    }
    assert!(r
        .forward_into(&[2; 15], &[15], 15, 2, &mut Workspace::new())
        .is_err());
}

#[test]
fn int8_pass_is_the_same_bits_with_every_8_bit_kernel() {
    // VNNI and the portable kernel take the same 8-bit codes and compute exact
    // integer products with one output stage: the whole pass agrees bit for bit.
    let cfg = tiny_config("bert");
    let (lens, t) = (vec![9, 4, 7, 1, 9, 2, 8], 9);
    let ids = batch(&lens, t, 5);
    let with = |isa: Option<Isa>| {
        let mut m = Model::load(&random_weights(&cfg), cfg.clone(), Precision::Fp32).unwrap();
        if let Some(isa) = isa {
            m.quantize(isa).unwrap();
        }
        run(&m, &ids, &lens, t)
    };
    let want = with(Some(Isa::Scalar));
    assert_ne!(want[2], with(None)[2], "int8 equals fp32: not quantised?");
    for isa in Isa::available_all() {
        if isa.act_max() == Isa::Scalar.act_max() {
            assert_eq!(with(Some(isa)), want, "{isa:?}");
        }
    }
}

#[test]
fn mpnet_buckets_match_hand_computed_values() {
    // transformers' relative_position_bucket(j - i): 16 buckets per direction,
    // exact below 8, logarithmic up to 128, keys before the query in 16..32.
    let cases = [
        (0, 0),
        (-1, 1),
        (1, 17),
        (-7, 7),
        (7, 23),
        (-8, 8),
        (-12, 9),
        (-16, 10),
        (-127, 15),
        (-128, 15),
        (-1000, 15),
        (1000, 31),
    ];
    for (rel, want) in cases {
        assert_eq!(relative_position_bucket(rel), want, "{rel}");
    }
}
