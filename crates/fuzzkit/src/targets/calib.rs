//! Calibrator files: `Fitted::from_bytes` (safetensors header, tensors and
//! the JSON metadata), then the loaded calibrator is used: described,
//! applied to a small input, and saved again.

use bertflow_calib::{fit, CalibSpec, Calibrator, CalibratorMeta, FitOptions, Fitted};

/// Largest input dimension a loaded calibrator is applied at (a valid file
/// may announce any dimension; transforming costs dim x dim).
const MAX_APPLY_DIM: usize = 512;

/// Specs fitted for the seeds: every kind, flows in both couplings and permutations.
const SPECS: [&str; 11] = [
    "none",
    "sn",
    "whiten",
    "whiten:k=3",
    "natsv:k=1",
    "sn+natsv:k=2",
    "softwhiten",
    "softwhiten:alpha=0.3,shrink=0.1,drop=1,blend=0.2",
    "flow:levels=2,steps=1,width=4,epochs=1,batch=8,seed=1",
    "flow:levels=1,steps=2,width=3,epochs=1,batch=8,seed=2,coupling=affine,permutation=lu",
    "auto",
];

/// One calibrator file per spec, fitted on a small matrix (6 dimensions),
/// one with a token weighting.
pub fn seeds() -> Vec<Vec<u8>> {
    let x = super::matrix(64, 6, 7);
    let mut out = Vec::new();
    for (k, spec) in SPECS.iter().enumerate() {
        let spec: CalibSpec = spec.parse().expect("a valid spec");
        let fitted = fit(&spec, x.view(), &mut FitOptions::new()).expect("fitting a seed");
        let mut meta = CalibratorMeta::new("fuzz-model", "mean", 6, 64).with_seed(k as u64);
        if k == 1 {
            meta.weighting = Some(bertflow_calib::WeightingMeta {
                spec: "usif".into(),
                counts_from: "fit corpus".into(),
                key: "k".into(),
                unseen: 1.0,
                usif_a: Some(0.001),
                weights: vec![0.5, 1.0, 0.25],
            });
        }
        out.push(fitted.to_bytes(&meta).expect("serialising a seed"));
    }
    out
}

/// Loads a calibrator from `data`; if it loads, uses it.
pub fn run(data: &[u8]) {
    let Ok((fitted, meta)) = Fitted::from_bytes(data) else {
        return;
    };
    let _ = (fitted.describe(), fitted.kind(), fitted.spec().to_string());
    let (d, out) = (fitted.input_dim(), fitted.output_dim());
    if d > 0 && d <= MAX_APPLY_DIM {
        let x = super::probe(3, d);
        if let Ok(y) = fitted.transform(x.view()) {
            assert_eq!(y.dim(), (3, out), "transform's output shape");
        }
    }
    // What loads must save again (bytes may differ: the JSON is rewritten).
    let bytes = fitted.to_bytes(&meta).expect("a loaded calibrator saves");
    Fitted::from_bytes(&bytes).expect("a saved calibrator loads");
}
