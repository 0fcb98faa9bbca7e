//! AVX2 kernels of [`super`].

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
