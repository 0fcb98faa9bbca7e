//! Inputs found by fuzzing (crates/fuzzkit, target `calib`), kept as regression tests.

use bertflow_calib::{CalibError, Fitted};

/// An `sn` calibrator file whose token weighting has a negative weight
/// (-9.6e-35, one flipped sign bit) loaded, but could not be saved again
/// ("the token weighting needs finite, non-negative weights"): loading now
/// refuses what saving refuses.
#[test]
fn negative_token_weight_is_refused_on_load() {
    let bytes = include_bytes!("../fixtures/fuzz/negative-token-weight.safetensors");
    match Fitted::from_bytes(bytes) {
        Err(CalibError::Format { reason, .. }) => {
            assert!(reason.contains("non-negative"), "{reason}")
        }
        other => panic!("expected a format error, got {other:?}"),
    }
    // The same file with the sign bit cleared loads and saves.
    let mut fixed = bytes.to_vec();
    let at = fixed.len() - 12;
    fixed[at + 3] &= 0x7f;
    let (fitted, meta) = Fitted::from_bytes(&fixed).unwrap();
    let saved = fitted.to_bytes(&meta).unwrap();
    Fitted::from_bytes(&saved).unwrap();
}
