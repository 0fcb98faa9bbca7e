//! Scoring compact codes: the Hamming distance of packed bit codes
//! (popcount of the XOR) and the dot product of int8 codes, each with a
//! scalar reference and an AVX2 kernel chosen at run time ([`CodeIsa`]);
//! every kernel is bit-exact against the reference (integer arithmetic).
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
    /// int8 products widened to i16 and summed in pairs (`vpmaddwd`).
    Avx2,
}

impl CodeIsa {
    /// The best family this CPU runs.
    pub fn best() -> CodeIsa {
        if CodeIsa::Avx2.available() {
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
            #[cfg(not(target_arch = "x86_64"))]
            CodeIsa::Avx2 => false,
        }
    }

    /// Every family this CPU runs.
    pub fn all_available() -> Vec<CodeIsa> {
        [CodeIsa::Portable, CodeIsa::Avx2]
            .into_iter()
            .filter(|i| i.available())
            .collect()
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            CodeIsa::Portable => "portable",
            CodeIsa::Avx2 => "avx2",
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
        CodeIsa::Avx2 if isa.available() => {
            // SAFETY: AVX2 is present (checked just above).
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
        CodeIsa::Avx2 if isa.available() => {
            // SAFETY: AVX2 is present (checked just above).
            unsafe { x86::dot_i8_avx2(a, b) }
        }
        _ => dot_i8_scalar(a, b),
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
