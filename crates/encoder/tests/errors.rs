//! Bad models and bad poolings give clear errors, never panics.
#[path = "it/common/mod.rs"]
mod common;
use bertflow_encoder::{Encoder, EncoderError, Pooling};
use common::model_dir;

fn err(spec: &str) -> String {
    match Encoder::load(spec, None) {
        Ok(_) => panic!("loading {spec} should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_model_directory() {
    let e = err("/nonexistent/model-dir");
    assert!(
        e.contains("model not found") && e.contains("/nonexistent/model-dir"),
        "{e}"
    );
    let e = err("no-such-org/no-such-model");
    assert!(e.contains("Hugging Face cache"), "{e}");
}

#[test]
fn incomplete_model_directory_names_missing_files() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(
        model_dir().join("config.json"),
        tmp.path().join("config.json"),
    )
    .unwrap();
    let e = err(tmp.path().to_str().unwrap());
    assert!(
        e.contains("incomplete") && e.contains("model.safetensors") && e.contains("tokenizer.json"),
        "{e}"
    );
}

#[test]
fn corrupt_weights_and_config() {
    let src = model_dir();
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), tmp.path().join(f)).unwrap();
    }
    std::fs::write(
        tmp.path().join("model.safetensors"),
        b"not a safetensors file",
    )
    .unwrap();
    let e = err(tmp.path().to_str().unwrap());
    assert!(e.contains("model.safetensors"), "{e}");
    std::fs::write(tmp.path().join("config.json"), b"{\"hidden_size\": 3}").unwrap();
    let e = err(tmp.path().to_str().unwrap());
    assert!(e.contains("config.json"), "{e}");
}

#[test]
fn unknown_model_type_is_refused_with_the_supported_list() {
    let src = model_dir();
    let tmp = tempfile::tempdir().unwrap();
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(src.join(f), tmp.path().join(f)).unwrap();
    }
    let cfg = std::fs::read_to_string(src.join("config.json"))
        .unwrap()
        .replace("\"bert\"", "\"gpt2\"");
    std::fs::write(tmp.path().join("config.json"), cfg).unwrap();
    let e = err(tmp.path().to_str().unwrap());
    assert!(
        e.contains("model_type 'gpt2' is not supported")
            && e.contains(
                "supported: bert, roberta, xlm-roberta, camembert, distilbert, mpnet, modernbert"
            ),
        "{e}"
    );
}

#[test]
fn pooling_errors_on_a_real_model() {
    let enc = Encoder::load(model_dir().to_str().unwrap(), None).unwrap();
    assert_eq!(enc.num_layers(), 6);
    let p: Pooling = "layers:0,7".parse().unwrap();
    assert!(matches!(
        enc.source(&p),
        Err(EncoderError::LayerOutOfRange { layer: 7, max: 6 })
    ));
    assert!(enc.source(&"layers:0,6".parse().unwrap()).is_ok());
    assert!(matches!(
        Encoder::load(model_dir().to_str().unwrap(), Some(513)),
        Err(EncoderError::BadMaxLen(513, 512))
    ));
}

#[test]
fn hub_id_resolves_from_the_local_cache() {
    // A Hugging Face cache layout: hub/models--org--name/{refs/main, snapshots/<rev>/...}.
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("hub/models--acme--mini");
    let snap = repo.join("snapshots/abc123");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::os::unix::fs::symlink(model_dir().join(f), snap.join(f)).unwrap();
    }
    // This test binary runs this one test that touches HF_HUB_CACHE.
    std::env::set_var("HF_HUB_CACHE", tmp.path().join("hub"));
    let files = bertflow_encoder::ModelFiles::resolve("acme/mini").unwrap();
    assert_eq!(files.dir, snap);
    std::env::remove_var("HF_HUB_CACHE");
}
