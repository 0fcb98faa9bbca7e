//! The masked token mean every averaging pooling computes (the poolings of
//! [`crate::pooling`], a sentence-transformers pipeline's bertflow source in
//! [`crate::st`], the cross-encoder's mean input), below all of them.

/// Mean over the first `lens[b]` tokens of the element-wise mean of `layers`
/// (each [b, t, h], row-major). With `weights` (one vector of `lens[b]`
/// weights per sentence, not all zero) the mean is weighted:
/// `sum_t w_t x_t / sum_t w_t`; without, every token weighs 1.
pub fn masked_mean(
    layers: &[&[f32]],
    lens: &[usize],
    t: usize,
    h: usize,
    weights: Option<&[Vec<f32>]>,
) -> Vec<f32> {
    let mut out = vec![0f32; lens.len() * h];
    let nl = layers.len() as f32;
    let mut avg = vec![0f32; h];
    for (b, &len) in lens.iter().enumerate() {
        let acc = &mut out[b * h..(b + 1) * h];
        let w = weights.map(|w| &w[b]);
        for tok in 0..len {
            let base = (b * t + tok) * h;
            avg.copy_from_slice(&layers[0][base..base + h]);
            for l in &layers[1..] {
                for (a, x) in avg.iter_mut().zip(&l[base..base + h]) {
                    *a += x;
                }
            }
            match w {
                None => {
                    for (o, a) in acc.iter_mut().zip(&avg) {
                        *o += a / nl;
                    }
                }
                Some(w) => {
                    let f = w[tok] / nl;
                    if f != 0.0 {
                        for (o, a) in acc.iter_mut().zip(&avg) {
                            *o += a * f;
                        }
                    }
                }
            }
        }
        let total = match w {
            None => len.max(1) as f32,
            Some(w) => {
                let s: f32 = w[..len].iter().sum();
                if s > 0.0 {
                    s
                } else {
                    1.0
                }
            }
        };
        let inv = 1.0 / total;
        acc.iter_mut().for_each(|o| *o *= inv);
    }
    out
}
