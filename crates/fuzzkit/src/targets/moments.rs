//! Moment statistics: `MomentStats::from_bytes`, then what a loaded set is
//! used for (merging, fitting every moment-based calibrator, applying it).
//!
//! Mode byte (the first): bit 0 set recomputes the trailing CRC-32 over the
//! rest, so that mutations of the header and values get past the checksum.

use bertflow_calib::{fit_from_moments, CalibSpec, Calibrator, MomentStats};

/// Largest dimension fitted on (a fit costs dim^3).
const MAX_FIT_DIM: usize = 48;

const SPECS: [&str; 6] = [
    "sn",
    "whiten",
    "whiten:k=2",
    "natsv:k=1",
    "sn+natsv:k=1",
    "softwhiten:alpha=0.5,drop=1",
];

/// Statistics of small matrices (dimensions 1, 3 and 6; one empty), each with
/// and without the CRC fix-up mode.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (dim, rows) in [(3, 10), (6, 40), (1, 2)] {
        let stats = MomentStats::from_data(super::matrix(rows, dim, dim as u64).view())
            .expect("statistics of a seed");
        for mode in [0u8, 1] {
            let mut bytes = vec![mode];
            bytes.extend(stats.to_bytes());
            out.push(bytes);
        }
    }
    let mut empty = vec![1u8];
    empty.extend(MomentStats::new(4).to_bytes());
    out.push(empty);
    out
}

/// Decodes `data` (after the mode byte) and, if it decodes, uses it.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut buf = rest.to_vec();
    if mode & 1 == 1 && buf.len() >= 4 {
        let body = buf.len() - 4;
        let crc = crc32fast::hash(&buf[..body]);
        buf[body..].copy_from_slice(&crc.to_le_bytes());
    }
    let Ok(stats) = MomentStats::from_bytes(&buf) else {
        return;
    };
    // The format is canonical: what decodes encodes to the same bytes.
    assert_eq!(
        stats.to_bytes(),
        buf,
        "decode then encode changes the bytes"
    );
    let d = stats.dim();
    if d == 0 || d > MAX_FIT_DIM {
        return;
    }
    let _ = (stats.covariance(), stats.variance());
    let mut merged = stats.clone();
    let _ = merged.merge(&stats);
    for spec in SPECS {
        let spec: CalibSpec = spec.parse().expect("a valid spec");
        if let Ok(fitted) = fit_from_moments(&spec, &stats) {
            let _ = fitted.transform(super::probe(2, d).view());
        }
    }
}
