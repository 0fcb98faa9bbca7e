//! The AVX512-VNNI kernel: tiles of up to 6 rows x 64 channels in 24 zmm
//! accumulators, stored once to a tile in L1, then the output stage in one pass.
//!
//! Where a block has all its 64 channels (every block of a layer whose width is a
//! multiple of 64: all of BERT's), the output stage is written with AVX-512
//! intrinsics: per 16 values one load of the sums, `- z_x colsum`, the conversion,
//! `* (s_x s_w)`, `+ b`, `+ residual`, the activation and one store (the shared
//! output stage makes a pass per step). Each step is the scalar model's operation
//! ([`super::dequant`], [`crate::act::gelu_poly`]) on 16 lanes, so the output is
//! the same bit for bit. (Run on the accumulators in registers, the stage made LLVM
//! spill accumulators inside the product loop.) The narrow last block of other
//! widths goes through the shared output stage.
use super::{for_each_tile, Act, QuantInput, QuantLinear, RowLanes, Tile, MR, NB, NR};
use crate::act::{GELU_INV_L2, GELU_L, GELU_Q};
use std::arch::x86_64::*;

/// Bytes of one K step (4 consecutive k) of a packed block: 64 channels x 4.
const KSTEP: usize = NB * 4;

/// What the output stage of one full-width tile reads.
struct Stage<'a> {
    lin: &'a QuantLinear,
    inp: &'a QuantInput,
    residual: Option<&'a [f32]>,
    act: Act,
    /// First row and first channel of the tile.
    r0: usize,
    c0: usize,
}

/// The int8 product with the AVX512-VNNI micro-kernel; with `lanes`, the 16-lane
/// minimum and maximum of each output row gathered into them (reset by the caller).
///
/// # Safety
/// The CPU must support AVX512F, FMA, AVX512BW and AVX512-VNNI; `inp` and `out`
/// fit `lin` (checked by the caller); with `lanes`, `lin`'s width is a multiple
/// of 64 and `lanes` hold a row for each of `inp`'s.
#[target_feature(enable = "avx512f,fma,avx512bw,avx512vnni")]
pub(super) unsafe fn drive_vnni(
    lin: &QuantLinear,
    inp: &QuantInput,
    residual: Option<&[f32]>,
    act: Act,
    out: &mut [f32],
    mut lanes: Option<&mut RowLanes>,
) {
    let mut acc: Tile = [[0; NB]; MR];
    for_each_tile(lin, inp, |w, a, (r0, mr), (c0, cols)| {
        // SAFETY: the features are enabled in this function; `a` holds mr rows of
        // kp codes and `w` one block of kp * NB codes.
        unsafe {
            match mr {
                1 => micro::<1>(a, w, &mut acc),
                2 => micro::<2>(a, w, &mut acc),
                3 => micro::<3>(a, w, &mut acc),
                4 => micro::<4>(a, w, &mut acc),
                5 => micro::<5>(a, w, &mut acc),
                _ => micro::<6>(a, w, &mut acc),
            }
        }
        if cols == NB {
            debug_assert!(lanes.as_ref().is_none_or(|l| l.lo.len() >= r0 + mr));
            let st = Stage {
                lin,
                inp,
                residual,
                act,
                r0,
                c0,
            };
            // SAFETY: AVX512F and FMA are enabled here; the tile's 64 channels
            // exist and its rows are inside `out` (checked by the caller).
            unsafe { output(&st, &acc, mr, out, lanes.as_deref_mut()) };
        } else {
            lin.output_tile(&acc, (r0, mr), (c0, cols), inp, residual, act, out);
        }
    });
}

/// `R` rows x 64 channels in `4 R` zmm accumulators: per 4 k, load the block's
/// 4 x 16 channels x 4 weights once, broadcast each row's 4 activation codes and
/// `vpdpbusd` (u8 x s8 products summed in i32, no saturation) into the row's 4
/// accumulators; store them into `acc`.
///
/// # Safety
/// The CPU must support AVX512F/BW/VNNI; `a.len() == R * kp` with `kp` a positive
/// multiple of 4, `w.len() >= kp * NB`, `R <= MR`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn micro<const R: usize>(a: &[u8], w: &[i8], acc: &mut Tile) {
    let kp = a.len() / R;
    assert!(R <= MR && kp.is_multiple_of(4) && kp > 0 && w.len() >= kp * NB);
    let mut c = [[_mm512_setzero_si512(); 4]; R];
    let (ap, wp) = (a.as_ptr(), w.as_ptr());
    for k4 in 0..kp / 4 {
        // SAFETY: k4 * KSTEP + KSTEP <= kp * NB <= w.len() (asserted); unaligned loads.
        let (w0, w1, w2, w3) = unsafe {
            let p = wp.add(k4 * KSTEP);
            (
                _mm512_loadu_si512(p as *const _),
                _mm512_loadu_si512(p.add(64) as *const _),
                _mm512_loadu_si512(p.add(128) as *const _),
                _mm512_loadu_si512(p.add(192) as *const _),
            )
        };
        for (r, cr) in c.iter_mut().enumerate() {
            // SAFETY: r * kp + k4 * 4 + 4 <= R * kp = a.len(); unaligned read.
            let v = unsafe { (ap.add(r * kp + k4 * 4) as *const i32).read_unaligned() };
            let av = _mm512_set1_epi32(v);
            cr[0] = _mm512_dpbusd_epi32(cr[0], av, w0);
            cr[1] = _mm512_dpbusd_epi32(cr[1], av, w1);
            cr[2] = _mm512_dpbusd_epi32(cr[2], av, w2);
            cr[3] = _mm512_dpbusd_epi32(cr[3], av, w3);
        }
    }
    for (cr, dst) in c.iter().zip(acc.iter_mut()) {
        for (q, v) in cr.iter().enumerate() {
            // SAFETY: dst[16 q..16 q + 16] is 16 i32 (q < 4, NB = 64): one unaligned
            // 16-lane store fits exactly.
            unsafe { _mm512_storeu_si512(dst[q * NR..].as_mut_ptr() as *mut _, *v) };
        }
    }
}

/// The output stage of a full tile of `mr` rows, in one pass over it:
/// `act(cvt(acc - z_x colsum) * (s_x s_w) + b [+ residual])` into `out`, each step
/// the operation of [`QuantLinear::output_tile`] on 16 lanes; GELU-erf and ReLU
/// (not int8 activations in practice) after, by the shared code. With `lanes`,
/// each row's lanes take the minimum and maximum of its 64 outputs (lane `j` over
/// the values `16 c + j`, as [`super::input::row_lanes`]).
///
/// # Safety
/// The CPU must support AVX512F and FMA; `st` is a tile of `out`, `mr <= MR`.
#[target_feature(enable = "avx512f,fma")]
unsafe fn output(
    st: &Stage,
    acc: &Tile,
    mr: usize,
    out: &mut [f32],
    mut lanes: Option<&mut RowLanes>,
) {
    // SAFETY (all three): AVX512F and FMA are enabled here.
    match st.act {
        Act::GeluPoly => unsafe { output_with(st, acc, mr, out, |y| gelu_poly(y), lanes) },
        Act::None => unsafe { output_with(st, acc, mr, out, |y| y, lanes) },
        Act::GeluErf | Act::Relu => {
            unsafe { output_with(st, acc, mr, out, |y| y, None) };
            for row in st.r0..st.r0 + mr {
                let at = row * st.lin.n + st.c0;
                let o = &mut out[at..at + NB];
                st.act.apply(o);
                if let Some(l) = lanes.as_deref_mut() {
                    let (lo, hi) = (&mut l.lo[row], &mut l.hi[row]);
                    for c in o.chunks_exact(NR) {
                        for ((lo, hi), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(c) {
                            *lo = if v < *lo { v } else { *lo };
                            *hi = if v > *hi { v } else { *hi };
                        }
                    }
                }
            }
        }
    }
}

/// [`output`] with the activation `act` on 16 lanes (inlined: no call in the loop,
/// so its constants stay in registers).
///
/// # Safety
/// The caller must have AVX512F and FMA enabled; as [`output`].
#[inline(always)]
unsafe fn output_with(
    st: &Stage,
    acc: &Tile,
    mr: usize,
    out: &mut [f32],
    act: impl Fn(__m512) -> __m512,
    mut lanes: Option<&mut RowLanes>,
) {
    let (n, c0) = (st.lin.n, st.c0);
    let (sw, cs, b) = (
        &st.lin.scale[c0..c0 + NB],
        &st.lin.colsum[c0..c0 + NB],
        &st.lin.bias[c0..c0 + NB],
    );
    for (r, a) in acc.iter().enumerate().take(mr) {
        let row = st.r0 + r;
        let span = row * n + c0..row * n + c0 + NB;
        // Not `Option::map`: its closure was not inlined into this target-feature
        // code (a call per row).
        #[allow(clippy::manual_map)]
        let res = match st.residual {
            Some(res) => Some(&res[span.clone()]),
            None => None,
        };
        let o = &mut out[span];
        let sx = _mm512_set1_ps(st.inp.scale[row]);
        let z = _mm512_set1_epi32(st.inp.zero[row]);
        let mut range = lanes
            .as_deref_mut()
            .map(|l| (&mut l.lo[row], &mut l.hi[row]));
        // SAFETY: each lane array is 16 f32; unaligned loads.
        let (mut lo, mut hi) = match &range {
            Some((lo, hi)) => unsafe {
                (_mm512_loadu_ps(lo.as_ptr()), _mm512_loadu_ps(hi.as_ptr()))
            },
            None => (_mm512_setzero_ps(), _mm512_setzero_ps()),
        };
        for q in 0..NB / NR {
            let at = q * NR..(q + 1) * NR;
            // SAFETY: every slice below is 16 values (at is inside 0..NB and each
            // slice is NB long); unaligned loads and stores.
            unsafe {
                let v = _mm512_loadu_si512(a[at.clone()].as_ptr() as *const _);
                let c = _mm512_loadu_si512(cs[at.clone()].as_ptr() as *const _);
                let v = _mm512_cvtepi32_ps(_mm512_sub_epi32(v, _mm512_mullo_epi32(z, c)));
                let s = _mm512_mul_ps(sx, _mm512_loadu_ps(sw[at.clone()].as_ptr()));
                let bq = _mm512_loadu_ps(b[at.clone()].as_ptr());
                let mut y = _mm512_add_ps(_mm512_mul_ps(v, s), bq);
                if let Some(res) = res {
                    y = _mm512_add_ps(y, _mm512_loadu_ps(res[at.clone()].as_ptr()));
                }
                let y = act(y);
                _mm512_storeu_ps(o[at].as_mut_ptr(), y);
                if range.is_some() {
                    // lo = v < lo ? v : lo, hi = v > hi ? v : hi, as row_lanes.
                    lo = _mm512_min_ps(y, lo);
                    hi = _mm512_max_ps(y, hi);
                }
            }
        }
        if let Some((l, h)) = range.as_mut() {
            // SAFETY: each lane array is 16 f32; unaligned stores.
            unsafe {
                _mm512_storeu_ps(l.as_mut_ptr(), lo);
                _mm512_storeu_ps(h.as_mut_ptr(), hi);
            }
        }
    }
}

/// [`crate::act::gelu_poly`] on 16 lanes, the same operations in the same order:
/// the clamp (`max` then `min` with the constant first, so that a NaN passes
/// through as in `f32::clamp`), `t = c^2 / L^2`, Horner's fused multiply-adds,
/// `x (c q + 1/2)`.
///
/// # Safety
/// The caller must have AVX512F and FMA enabled (or the CPU support them).
#[inline(always)]
unsafe fn gelu_poly(x: __m512) -> __m512 {
    let c = _mm512_min_ps(
        _mm512_set1_ps(GELU_L),
        _mm512_max_ps(_mm512_set1_ps(-GELU_L), x),
    );
    let t = _mm512_mul_ps(_mm512_mul_ps(c, c), _mm512_set1_ps(GELU_INV_L2));
    let mut q = _mm512_set1_ps(GELU_Q[9]);
    for &k in GELU_Q[..9].iter().rev() {
        q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(k));
    }
    _mm512_mul_ps(x, _mm512_fmadd_ps(c, q, _mm512_set1_ps(0.5)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_poly_on_16_lanes_equals_the_scalar_form_bit_for_bit() {
        if !(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma")) {
            eprintln!("skipped: no AVX-512F/FMA here");
            return;
        }
        let mut xs: Vec<f32> = vec![
            0.0,
            -0.0,
            GELU_L,
            -GELU_L,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1e-30,
            f32::MAX,
            f32::MIN,
        ];
        xs.extend((-2000..=2000).map(|i| i as f32 * 0.00625));
        let mut s = 0x1234_5678_u32;
        xs.extend((0..4096).map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            f32::from_bits(s)
        }));
        xs.resize(xs.len().div_ceil(16) * 16, 1.0);
        for chunk in xs.chunks_exact(16) {
            let mut got = [0f32; 16];
            // SAFETY: AVX-512F and FMA were detected above; 16-lane unaligned
            // load and store of 16-value arrays.
            unsafe {
                let y = gelu_poly(_mm512_loadu_ps(chunk.as_ptr()));
                _mm512_storeu_ps(got.as_mut_ptr(), y);
            }
            for (&x, g) in chunk.iter().zip(got) {
                let want = crate::act::gelu_poly(x);
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "gelu_poly({x:e}) = {want:e} scalar, {g:e} in 16 lanes"
                );
            }
        }
    }
}
