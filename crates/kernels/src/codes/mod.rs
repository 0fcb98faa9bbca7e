//! Scoring compact codes: the Hamming distance of packed bit codes
//! (popcount of the XOR) and the dot product of int8 codes, each with a
//! scalar reference and an AVX2 kernel chosen at run time ([`CodeIsa`]);
//! every kernel is bit-exact against the reference (integer arithmetic).
//! [`hamming_block`] scores one query code against a block of codes in one
//! call (what a scan of an index uses): specialised for the common widths,
//! and with AVX-512 VPOPCNTDQ eight codes at a time where the CPU has it.
//!
//! Dot products accumulate in `i32` with wrapping adds in every kernel, so
//! they agree bit for bit always and are exact for vectors of up to 131,072
//! dimensions (`128 * 128 * 131072 = 2^31`).

#[cfg(target_arch = "x86_64")]
mod x86;

/// A code-scoring kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeIsa {
    /// Plain Rust: `u64` popcounts, scalar multiply-adds.
    Portable,
    /// AVX2: nibble-table popcount of 32-byte blocks (`vpshufb`, `vpsadbw`);
    /// int8 products widened to i16 and summed in pairs (`vpmaddwd`); blocks
    /// of codes by `popcnt`, 8 bytes per instruction.
    Avx2,
    /// AVX-512 with VPOPCNTDQ and BW: blocks of codes by `vpopcntq` on masked
    /// 64-byte loads (any width), eight codes summed at once; single pairs and
    /// int8 dot products as [`CodeIsa::Avx2`].
    Avx512,
}

impl CodeIsa {
    /// The best family this CPU runs.
    pub fn best() -> CodeIsa {
        if CodeIsa::Avx512.available() {
            CodeIsa::Avx512
        } else if CodeIsa::Avx2.available() {
            CodeIsa::Avx2
        } else {
            CodeIsa::Portable
        }
    }

    /// Whether this CPU runs it.
    pub fn available(self) -> bool {
        match self {
            CodeIsa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            CodeIsa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            CodeIsa::Avx512 => {
                use std::arch::is_x86_feature_detected as has;
                has!("avx2") && has!("avx512f") && has!("avx512bw") && has!("avx512vpopcntdq")
            }
            #[cfg(not(target_arch = "x86_64"))]
            CodeIsa::Avx2 | CodeIsa::Avx512 => false,
        }
    }

    /// Every family this CPU runs.
    pub fn all_available() -> Vec<CodeIsa> {
        [CodeIsa::Portable, CodeIsa::Avx2, CodeIsa::Avx512]
            .into_iter()
            .filter(|i| i.available())
            .collect()
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            CodeIsa::Portable => "portable",
            CodeIsa::Avx2 => "avx2",
            CodeIsa::Avx512 => "avx512-vpopcntdq",
        }
    }
}

/// Number of differing bits of `a` and `b`, byte by byte: the reference.
/// Panics if the lengths differ (callers check widths first).
pub fn hamming_scalar(a: &[u8], b: &[u8]) -> u32 {
    assert_eq!(a.len(), b.len(), "codes of different widths");
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

/// `sum_j a_j b_j` in wrapping `i32`: the reference.
pub fn dot_i8_scalar(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len(), "codes of different widths");
    a.iter().zip(b).fold(0i32, |s, (&x, &y)| {
        s.wrapping_add(i32::from(x) * i32::from(y))
    })
}

fn hamming_portable(a: &[u8], b: &[u8]) -> u32 {
    let mut n = 0;
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail = hamming_scalar(ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        let x = u64::from_le_bytes(x.try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(y.try_into().expect("8 bytes"));
        n += (x ^ y).count_ones();
    }
    n + tail
}

/// Hamming distance with the family `isa` (the portable kernel if this CPU
/// does not run it). Panics if the lengths differ.
pub fn hamming_with(isa: CodeIsa, a: &[u8], b: &[u8]) -> u32 {
    assert_eq!(a.len(), b.len(), "codes of different widths");
    match isa {
        #[cfg(target_arch = "x86_64")]
        CodeIsa::Avx2 | CodeIsa::Avx512 if isa.available() => {
            // SAFETY: AVX2 is present (checked just above; Avx512 implies it).
            unsafe { x86::hamming_avx2(a, b) }
        }
        _ => hamming_portable(a, b),
    }
}

/// int8 dot product with the family `isa`. Panics if the lengths differ.
pub fn dot_i8_with(isa: CodeIsa, a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len(), "codes of different widths");
    match isa {
        #[cfg(target_arch = "x86_64")]
        CodeIsa::Avx2 | CodeIsa::Avx512 if isa.available() => {
            // SAFETY: AVX2 is present (checked just above; Avx512 implies it).
            unsafe { x86::dot_i8_avx2(a, b) }
        }
        _ => dot_i8_scalar(a, b),
    }
}

/// Hamming distances of the query code `q` to each `q.len()`-byte code of
/// `codes` (a trailing partial code is ignored), into `out` (cleared first;
/// one per code), with the family `isa` (the portable kernel if this CPU does
/// not run it): equal to [`hamming_scalar`] code by code.
pub fn hamming_block_with(isa: CodeIsa, q: &[u8], codes: &[u8], out: &mut Vec<u32>) {
    out.clear();
    if q.is_empty() {
        return;
    }
    let rows = codes.len() / q.len();
    let codes = &codes[..rows * q.len()];
    match isa {
        #[cfg(target_arch = "x86_64")]
        CodeIsa::Avx512 if isa.available() => {
            out.resize(rows, 0);
            // SAFETY: AVX-512 F, BW and VPOPCNTDQ are present (checked just
            // above); `codes` holds exactly `out.len()` codes of `q.len()` bytes.
            unsafe { x86::hamming_block_avx512(q, codes, out) }
        }
        #[cfg(target_arch = "x86_64")]
        CodeIsa::Avx2 if isa.available() => {
            // SAFETY: AVX2 is present (checked just above), and with it popcnt.
            unsafe { x86::hamming_block_popcnt(q, codes, out) }
        }
        _ => hamming_block_words(q, codes, out),
    }
}

/// [`hamming_block_with`] with the best kernel.
pub fn hamming_block(q: &[u8], codes: &[u8], out: &mut Vec<u32>) {
    hamming_block_with(best(), q, codes, out)
}

/// The block kernel on `u64` words, unrolled for the common widths (16, 32,
/// 48, 64 and 96 bytes: 128 to 768 bits).
#[inline(always)]
fn hamming_block_words(q: &[u8], codes: &[u8], out: &mut Vec<u32>) {
    match q.len() {
        16 => block_fixed::<2>(q, codes, out),
        32 => block_fixed::<4>(q, codes, out),
        48 => block_fixed::<6>(q, codes, out),
        64 => block_fixed::<8>(q, codes, out),
        96 => block_fixed::<12>(q, codes, out),
        w => {
            for c in codes.chunks_exact(w) {
                out.push(hamming_portable(q, c));
            }
        }
    }
}

#[inline(always)]
fn word(b: &[u8], k: usize) -> u64 {
    u64::from_le_bytes(b[k * 8..k * 8 + 8].try_into().expect("8 bytes"))
}

/// Codes of exactly `W` words. (Plain loops: an iterator's `fold` may be
/// compiled out of line, without the caller's target features.)
#[inline(always)]
fn block_fixed<const W: usize>(q: &[u8], codes: &[u8], out: &mut Vec<u32>) {
    let mut qw = [0u64; W];
    for (k, w) in qw.iter_mut().enumerate() {
        *w = word(q, k);
    }
    let start = out.len();
    out.resize(start + codes.len() / (W * 8), 0);
    for (o, c) in out[start..].iter_mut().zip(codes.chunks_exact(W * 8)) {
        let mut n = 0;
        for (k, w) in qw.iter().enumerate() {
            n += (w ^ word(c, k)).count_ones();
        }
        *o = n;
    }
}

/// Hamming distance of two packed bit codes with the best kernel.
pub fn hamming(a: &[u8], b: &[u8]) -> u32 {
    hamming_with(best(), a, b)
}

/// Dot product of two int8 codes with the best kernel.
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    dot_i8_with(best(), a, b)
}

fn best() -> CodeIsa {
    static BEST: std::sync::OnceLock<CodeIsa> = std::sync::OnceLock::new();
    *BEST.get_or_init(CodeIsa::best)
}
