//! The AVX-512 micro-kernel by pairs ([`super::Path::Avx512Pair`]): Winograd's
//! inner product (1968) on the packed weights.
//!
//! For a row `x` and a channel's (scaled) weights `w`, with `k = 2p (+ 1)`:
//! `x . w = sum_i (x[2i] + w[2i+1]) (x[2i+1] + w[2i]) - R(x) - C(w)`, where
//! `R(x) = sum_i x[2i] x[2i+1]` (per row, [`super::Tile::rt`]) and
//! `C(w) = sum_i w[2i] w[2i+1]` (per channel, computed at load); an odd `k`'s
//! last product is added classically. Per pair of products and output lane that
//! is one multiply-add and two additions where the classical kernel spends two
//! multiply-adds. On AMD Zen 4 a core runs one 512-bit FMA and one 512-bit add
//! per cycle on separate pipes; half of the additions are issued as `1 * a + b`
//! on the FMA pipe (the same rounding as an addition), so each pipe gets 1.5
//! operations per pair instead of the FMA pipe's 2: 4/3 of the classical
//! throughput at best (measured: 30.7 cycles against 40 for a 5 x 64 tile's
//! pair of k).
//!
//! The inner loop is assembly: the compiler does not fold the row broadcasts into
//! the additions (a separate `vbroadcastss` occupies the add pipe) and folds
//! `1 * a + b` back into an addition. Each output lane's operations are the same
//! in every tile height, so a row's result does not depend on its neighbours.
//!
//! The weights are scaled per channel by a power of two (`PackedLinear::new`)
//! so that `x[2i] + w[2i+1]` adds terms of like size; `C` and the output stage's
//! `1 / s` use the scaled weights. Numerically the sums then lose no more than
//! the classical ones (measured on all-MiniLM-L6-v2's layer inputs against f64:
//! at most 1.7e-6 relative, classical 1.9e-6:
//! `scripts/reference/pair_numerics.py`).
use super::x86::{check_tile, mask16};
use super::{drive, Act, PackedLinear, Tile, NB};
use std::arch::asm;
use std::arch::x86_64::*;

/// Rows per tile (20 accumulators; 12 registers hold the pair's weights, the
/// constant 1 and two temporaries).
const PR: usize = 5;

/// The fp32 product with the pair micro-kernel.
///
/// # Safety
/// The CPU must support AVX512F and FMA; `x`, `residual` and `out` fit `lin`
/// (checked by the caller).
#[target_feature(enable = "avx512f,fma")]
pub(super) unsafe fn drive_pair(
    lin: &PackedLinear,
    x: &[f32],
    m: usize,
    residual: Option<&[f32]>,
    act: Act,
    out: &mut [f32],
) {
    drive(lin, x, m, residual, act, out, PR, true, |t| {
        // SAFETY: the features are enabled in this function; drive's tiles hold
        // what the kernel's contract asks (checked again by its assert).
        unsafe {
            match t.mr {
                1 => micro_pair::<1>(t),
                2 => micro_pair::<2>(t),
                3 => micro_pair::<3>(t),
                4 => micro_pair::<4>(t),
                _ => micro_pair::<5>(t),
            }
        }
    })
}

/// One row's four steps: accumulators `zmm$a0..$a3` += `(x[2i] + w[2i+1]) (x[2i+1] + w[2i])`
/// for the 64 channels (`w[2i]` in zmm20-23, `w[2i+1]` in zmm24-27, 1.0 in zmm28),
/// the row's two inputs broadcast from memory at `[$row]`; channels 0-15 and
/// 32-47 add on the FMA pipe (`zmm31 = w + 1 * x`).
macro_rules! row4 {
    ($a0:literal, $a1:literal, $a2:literal, $a3:literal, $row:literal) => {
        concat!(
            "vmovaps zmm31, zmm24\n",
            "vfmadd231ps zmm31, zmm28, [",
            $row,
            "]{{1to16}}\n",
            "vaddps zmm30, zmm20, [",
            $row,
            "+4]{{1to16}}\n",
            "vfmadd231ps zmm",
            $a0,
            ", zmm31, zmm30\n",
            "vaddps zmm31, zmm25, [",
            $row,
            "]{{1to16}}\n",
            "vaddps zmm30, zmm21, [",
            $row,
            "+4]{{1to16}}\n",
            "vfmadd231ps zmm",
            $a1,
            ", zmm31, zmm30\n",
            "vmovaps zmm31, zmm26\n",
            "vfmadd231ps zmm31, zmm28, [",
            $row,
            "]{{1to16}}\n",
            "vaddps zmm30, zmm22, [",
            $row,
            "+4]{{1to16}}\n",
            "vfmadd231ps zmm",
            $a2,
            ", zmm31, zmm30\n",
            "vaddps zmm31, zmm27, [",
            $row,
            "]{{1to16}}\n",
            "vaddps zmm30, zmm23, [",
            $row,
            "+4]{{1to16}}\n",
            "vfmadd231ps zmm",
            $a3,
            ", zmm31, zmm30\n",
        )
    };
}

/// The loop over `pairs` pairs of k for rows `$rows` (row4! bodies): loads the
/// pair's two 64-channel weight rows, runs the rows, steps the pointers.
macro_rules! pair_loop {
    ($c:ident, $w:expr, $x0:expr, $x3:expr, $stride:expr, $pairs:expr; $($rows:expr),*) => {
        asm!(
            "2:",
            "vmovups zmm20, [{w}]",
            "vmovups zmm21, [{w}+64]",
            "vmovups zmm22, [{w}+128]",
            "vmovups zmm23, [{w}+192]",
            "vmovups zmm24, [{w}+256]",
            "vmovups zmm25, [{w}+320]",
            "vmovups zmm26, [{w}+384]",
            "vmovups zmm27, [{w}+448]",
            $($rows,)*
            "add {w}, 512",
            "add {x0}, 8",
            "add {x3}, 8",
            "/* row stride {s} */",
            "dec {n}",
            "jnz 2b",
            w = inout(reg) $w => _,
            x0 = inout(reg) $x0 => _,
            x3 = inout(reg) $x3 => _,
            s = in(reg) $stride,
            n = inout(reg) $pairs => _,
            inout("zmm0") $c[0], inout("zmm1") $c[1], inout("zmm2") $c[2], inout("zmm3") $c[3],
            inout("zmm4") $c[4], inout("zmm5") $c[5], inout("zmm6") $c[6], inout("zmm7") $c[7],
            inout("zmm8") $c[8], inout("zmm9") $c[9], inout("zmm10") $c[10], inout("zmm11") $c[11],
            inout("zmm12") $c[12], inout("zmm13") $c[13], inout("zmm14") $c[14],
            inout("zmm15") $c[15], inout("zmm16") $c[16], inout("zmm17") $c[17],
            inout("zmm18") $c[18], inout("zmm19") $c[19],
            in("zmm28") _mm512_set1_ps(1.0),
            out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _,
            out("zmm24") _, out("zmm25") _, out("zmm26") _, out("zmm27") _,
            out("zmm29") _, out("zmm30") _, out("zmm31") _,
            options(nostack),
        )
    };
}

/// Pair micro-kernel, `R` rows x 64 channels in `4 R` zmm accumulators: the pair
/// loop (assembly), an odd k's last product, then per lane
/// `((acc - R(x)) - C(w)) * (1 / s) + bias (+ residual)`, stored masked to the
/// block's `cols` channels.
///
/// # Safety
/// The CPU must support AVX512F and FMA.
#[target_feature(enable = "avx512f,fma")]
unsafe fn micro_pair<const R: usize>(t: &mut Tile) {
    check_tile::<R>(t);
    assert!(R <= PR);
    let (k, n, c0, cols) = (t.k, t.n, t.c0, t.cols);
    let mut c = [_mm512_setzero_ps(); 4 * PR];
    let (ap, wp) = (t.a.as_ptr(), t.w.as_ptr());
    let pairs = k / 2;
    if pairs > 0 {
        // Rows 3 and 4 are addressed from their own base (x86 scales an index by
        // 1, 2, 4 or 8 only); for fewer rows it is never dereferenced.
        let x3 = ap.wrapping_add(3 * k);
        let stride = k * 4;
        // SAFETY: the loop reads weights `w[0 .. 2 pairs * NB]` (<= k * NB <=
        // w.len(), checked) and inputs `a[r * k .. r * k + 2 pairs]` of rows
        // r < R (a.len() == R * k, checked); it writes only registers.
        unsafe {
            match R {
                1 => pair_loop!(c, wp, ap, x3, stride, pairs;
                    row4!("0", "1", "2", "3", "{x0}")),
                2 => pair_loop!(c, wp, ap, x3, stride, pairs;
                    row4!("0", "1", "2", "3", "{x0}"),
                    row4!("4", "5", "6", "7", "{x0}+{s}")),
                3 => pair_loop!(c, wp, ap, x3, stride, pairs;
                    row4!("0", "1", "2", "3", "{x0}"),
                    row4!("4", "5", "6", "7", "{x0}+{s}"),
                    row4!("8", "9", "10", "11", "{x0}+{s}*2")),
                4 => pair_loop!(c, wp, ap, x3, stride, pairs;
                    row4!("0", "1", "2", "3", "{x0}"),
                    row4!("4", "5", "6", "7", "{x0}+{s}"),
                    row4!("8", "9", "10", "11", "{x0}+{s}*2"),
                    row4!("12", "13", "14", "15", "{x3}")),
                _ => pair_loop!(c, wp, ap, x3, stride, pairs;
                    row4!("0", "1", "2", "3", "{x0}"),
                    row4!("4", "5", "6", "7", "{x0}+{s}"),
                    row4!("8", "9", "10", "11", "{x0}+{s}*2"),
                    row4!("12", "13", "14", "15", "{x3}"),
                    row4!("16", "17", "18", "19", "{x3}+{s}")),
            }
        }
    }
    if k % 2 == 1 {
        // SAFETY: (k - 1) * NB + 64 <= k * NB <= w.len(); r * k + k - 1 < a.len().
        unsafe {
            let p = wp.add((k - 1) * NB);
            for r in 0..R {
                let av = _mm512_set1_ps(*ap.add(r * k + k - 1));
                for q in 0..4 {
                    c[4 * r + q] =
                        _mm512_fmadd_ps(av, _mm512_loadu_ps(p.add(16 * q)), c[4 * r + q]);
                }
            }
        }
    }
    let (bp, sp, cp) = (t.bias.as_ptr(), t.inv_scale.as_ptr(), t.col_term.as_ptr());
    let op = t.out.as_mut_ptr();
    for r in 0..R {
        let rt = _mm512_set1_ps(t.rt[r]);
        for q in 0..4 {
            let lo = q * 16;
            if lo >= cols {
                break;
            }
            let mask = mask16(cols - lo);
            let at = r * n + c0 + lo;
            // SAFETY: lo + 16 <= NB <= bias, inv_scale and col_term lengths; `at`
            // is within row r of `out` and `res` (lo < cols, c0 + cols <= n) and
            // the mask keeps the lanes read and written to the row's channels.
            unsafe {
                let v = _mm512_sub_ps(c[4 * r + q], rt);
                let v = _mm512_sub_ps(v, _mm512_loadu_ps(cp.add(lo)));
                let (b, s) = (_mm512_loadu_ps(bp.add(lo)), _mm512_loadu_ps(sp.add(lo)));
                let mut v = _mm512_fmadd_ps(v, s, b);
                if let Some(res) = t.res {
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, res.as_ptr().add(at)));
                }
                _mm512_mask_storeu_ps(op.add(at), mask, v);
            }
        }
    }
}
