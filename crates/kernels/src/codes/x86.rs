//! AVX2, popcnt and AVX-512 VPOPCNTDQ kernels of [`super`].

use std::arch::x86_64::*;

/// Popcount of `a ^ b`, 32 bytes at a time by nibble lookup.
///
/// # Safety
/// The CPU must support AVX2; `a` and `b` have the same length.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn hamming_avx2(a: &[u8], b: &[u8]) -> u32 {
    let n = a.len();
    let blocks = n / 32;
    let lut = _mm256_setr_epi8(
        0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3,
        3, 4,
    );
    let low = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_si256();
    for i in 0..blocks {
        // SAFETY: i * 32 + 32 <= n for both slices.
        let (x, y) = unsafe {
            (
                _mm256_loadu_si256(a.as_ptr().add(i * 32) as *const __m256i),
                _mm256_loadu_si256(b.as_ptr().add(i * 32) as *const __m256i),
            )
        };
        let v = _mm256_xor_si256(x, y);
        let lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, low));
        let hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
        let counts = _mm256_add_epi8(lo, hi);
        acc = _mm256_add_epi64(acc, _mm256_sad_epu8(counts, _mm256_setzero_si256()));
    }
    let mut lanes = [0u64; 4];
    // SAFETY: 32 bytes written into a 32-byte array.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, acc) };
    let head: u64 = lanes.iter().sum();
    head as u32 + super::hamming_scalar(&a[blocks * 32..], &b[blocks * 32..])
}

/// `sum a_j b_j`: 16 int8 pairs at a time widened to i16, multiplied and
/// summed in pairs into i32 lanes (`vpmaddwd`; exact), wrapping adds.
///
/// # Safety
/// The CPU must support AVX2; `a` and `b` have the same length.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot_i8_avx2(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len();
    let blocks = n / 16;
    let mut acc = _mm256_setzero_si256();
    for i in 0..blocks {
        // SAFETY: i * 16 + 16 <= n for both slices.
        let (x, y) = unsafe {
            (
                _mm_loadu_si128(a.as_ptr().add(i * 16) as *const __m128i),
                _mm_loadu_si128(b.as_ptr().add(i * 16) as *const __m128i),
            )
        };
        let p = _mm256_madd_epi16(_mm256_cvtepi8_epi16(x), _mm256_cvtepi8_epi16(y));
        acc = _mm256_add_epi32(acc, p);
    }
    let mut lanes = [0i32; 8];
    // SAFETY: 32 bytes written into a 32-byte array.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, acc) };
    let head = lanes.iter().fold(0i32, |s, &v| s.wrapping_add(v));
    head.wrapping_add(super::dot_i8_scalar(&a[blocks * 16..], &b[blocks * 16..]))
}

/// [`super::hamming_block_words`] compiled with `popcnt` and AVX2 (which
/// the compiler may use to vectorise the wider codes).
///
/// # Safety
/// The CPU must support popcnt and AVX2.
#[target_feature(enable = "popcnt,avx2")]
pub(super) unsafe fn hamming_block_popcnt(q: &[u8], codes: &[u8], out: &mut Vec<u32>) {
    super::hamming_block_words(q, codes, out)
}

/// Hamming distances of `q` to the `out.len()` codes of `codes`, into `out`:
/// each code read in 64-byte chunks (the last one masked, so any width
/// works), XORed with the query, `vpopcntq`; eight codes' word counts summed
/// together by a transposing add tree.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VPOPCNTDQ; `q` is not empty and
/// `codes.len() == out.len() * q.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vpopcntdq")]
pub(super) unsafe fn hamming_block_avx512(q: &[u8], codes: &[u8], out: &mut [u32]) {
    debug_assert_eq!(codes.len(), out.len() * q.len());
    // SAFETY: forwarded (the same contract).
    unsafe {
        match q.len().div_ceil(64) {
            1 => block_avx512::<1>(q, codes, out),
            2 => block_avx512::<2>(q, codes, out),
            _ => block_avx512::<0>(q, codes, out),
        }
    }
}

/// `C` chunks of 64 bytes per code (0: as many as the width needs).
///
/// # Safety
/// As [`hamming_block_avx512`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vpopcntdq")]
unsafe fn block_avx512<const C: usize>(q: &[u8], codes: &[u8], out: &mut [u32]) {
    let w = q.len();
    let chunks = if C == 0 { w.div_ceil(64) } else { C };
    let last: __mmask64 = match w % 64 {
        0 => !0,
        r => (1u64 << r) - 1,
    };
    let rows = out.len();
    let base = codes.as_ptr();
    let qp = q.as_ptr();
    let mut counts = [_mm512_setzero_si512(); 8];
    for g in 0..rows / 8 {
        for (r, c) in counts.iter_mut().enumerate() {
            // SAFETY: row g * 8 + r < rows: its `w` bytes are in `codes`.
            *c = unsafe { row_avx512(qp, base.add((g * 8 + r) * w), chunks, last) };
        }
        let sums = sum8(&counts);
        // SAFETY: rows g * 8 .. g * 8 + 8 are in `out`.
        unsafe {
            _mm256_storeu_si256(
                out.as_mut_ptr().add(g * 8) as *mut __m256i,
                _mm512_cvtepi64_epi32(sums),
            )
        };
    }
    for (r, o) in out.iter_mut().enumerate().skip(rows / 8 * 8) {
        // SAFETY: row r < rows: its `w` bytes are in `codes`.
        let c = unsafe { row_avx512(qp, base.add(r * w), chunks, last) };
        *o = _mm512_reduce_add_epi64(c) as u32;
    }
}

/// Per-word popcounts of `q ^ row` (`chunks` chunks of 64 bytes, the last
/// masked by `last`), added up chunk by chunk.
///
/// # Safety
/// `chunks * 64` bytes, less those `last` masks off the last chunk, are
/// readable at `q` and at `row` (masked-off bytes are not read).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vpopcntdq")]
unsafe fn row_avx512(q: *const u8, row: *const u8, chunks: usize, last: __mmask64) -> __m512i {
    let mut acc = _mm512_setzero_si512();
    for c in 0..chunks {
        let m = if c + 1 == chunks { last } else { !0 };
        // SAFETY: the bytes of chunk c that `m` keeps are readable (contract).
        let (x, y) = unsafe {
            (
                _mm512_maskz_loadu_epi8(m, row.add(c * 64) as *const i8),
                _mm512_maskz_loadu_epi8(m, q.add(c * 64) as *const i8),
            )
        };
        acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(_mm512_xor_si512(x, y)));
    }
    acc
}

/// The sums of the eight lanes of each of `v[0..8]`, in lane `r` for `v[r]`.
#[inline]
#[target_feature(enable = "avx512f")]
fn sum8(v: &[__m512i; 8]) -> __m512i {
    let s0123 = fold(pair(v[0], v[1]), pair(v[2], v[3]));
    let s4567 = fold(pair(v[4], v[5]), pair(v[6], v[7]));
    fold(s0123, s4567)
}

/// In each 128-bit lane `L`: `[a[2L] + a[2L+1], b[2L] + b[2L+1]]`.
#[inline]
#[target_feature(enable = "avx512f")]
fn pair(a: __m512i, b: __m512i) -> __m512i {
    _mm512_add_epi64(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b))
}

/// 128-bit lanes `[x.L0 + x.L1, x.L2 + x.L3, y.L0 + y.L1, y.L2 + y.L3]`.
#[inline]
#[target_feature(enable = "avx512f")]
fn fold(x: __m512i, y: __m512i) -> __m512i {
    _mm512_add_epi64(
        _mm512_shuffle_i64x2::<0b10_00_10_00>(x, y),
        _mm512_shuffle_i64x2::<0b11_01_11_01>(x, y),
    )
}
