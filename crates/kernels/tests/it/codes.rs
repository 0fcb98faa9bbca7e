//! Code scoring: every kernel this CPU runs against the scalar reference,
//! bit for bit, at widths around the block sizes.

use bertflow_kernels::codes::{
    dot_i8, dot_i8_scalar, dot_i8_with, hamming, hamming_block, hamming_block_with, hamming_scalar,
    hamming_with, CodeIsa,
};

/// SplitMix64 bytes.
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

#[test]
fn reference_values() {
    assert_eq!(
        hamming_scalar(&[0b1010_0000, 0xff], &[0b0010_0001, 0x0f]),
        2 + 4
    );
    assert_eq!(
        dot_i8_scalar(&[1, -2, 127, -128], &[3, 4, 127, -128]),
        3 - 8 + 16129 + 16384
    );
    assert_eq!(hamming(&[], &[]), 0);
    assert_eq!(dot_i8(&[], &[]), 0);
}

#[test]
fn every_kernel_matches_the_scalar_reference() {
    let isas = CodeIsa::all_available();
    assert!(isas.contains(&CodeIsa::Portable));
    for n in [
        0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 128, 384, 1000, 4099,
    ] {
        let (a, b) = (bytes(n, 1 + n as u64), bytes(n, 1000 + n as u64));
        let (sa, sb): (Vec<i8>, Vec<i8>) = (
            a.iter().map(|&v| v as i8).collect(),
            b.iter().map(|&v| v as i8).collect(),
        );
        let h = hamming_scalar(&a, &b);
        let d = dot_i8_scalar(&sa, &sb);
        for &isa in &isas {
            assert_eq!(hamming_with(isa, &a, &b), h, "{} hamming n={n}", isa.name());
            assert_eq!(dot_i8_with(isa, &sa, &sb), d, "{} dot n={n}", isa.name());
        }
        assert_eq!((hamming(&a, &b), dot_i8(&sa, &sb)), (h, d));
    }
    // Extremes: every product -128 * -128.
    let m = vec![-128i8; 4096];
    for &isa in &isas {
        assert_eq!(dot_i8_with(isa, &m, &m), 16384 * 4096);
        assert_eq!(hamming_with(isa, &[0xff; 100], &[0; 100]), 800);
    }
}

#[test]
fn block_kernels_match_the_scalar_reference_at_every_width() {
    let isas = CodeIsa::all_available();
    // 37 codes: four groups of eight and a remainder of five.
    for width in 1..=130usize {
        let q = bytes(width, 7 + width as u64);
        // A trailing partial code, which is not scored.
        let mut codes = bytes(width * 37, 9000 + width as u64);
        codes.extend(bytes(width / 2, 1));
        let want: Vec<u32> = codes
            .chunks_exact(width)
            .map(|c| hamming_scalar(&q, c))
            .collect();
        assert_eq!(want.len(), 37);
        for &isa in &isas {
            let mut out = vec![1234];
            hamming_block_with(isa, &q, &codes, &mut out);
            assert_eq!(out, want, "{} width {width}", isa.name());
        }
        let mut out = Vec::new();
        hamming_block(&q, &codes, &mut out);
        assert_eq!(out, want, "best, width {width}");
        // Extremes: every bit differs, none does.
        let ones = vec![0xffu8; width * 9];
        for &isa in &isas {
            hamming_block_with(isa, &vec![0; width], &ones, &mut out);
            assert_eq!(
                out,
                vec![8 * width as u32; 9],
                "{} width {width}",
                isa.name()
            );
            hamming_block_with(isa, &vec![0xff; width], &ones, &mut out);
            assert_eq!(out, vec![0; 9], "{} width {width}", isa.name());
        }
    }
    // No codes, an empty query: no distances.
    let mut out = vec![1];
    hamming_block(&[1, 2], &[], &mut out);
    assert!(out.is_empty());
    hamming_block(&[], &[1, 2, 3], &mut out);
    assert!(out.is_empty());
}

#[test]
fn this_cpu_runs_the_kernels_it_advertises() {
    // Where /proc/cpuinfo names VPOPCNTDQ (and BW), the AVX-512 family is used.
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    if has("avx512_vpopcntdq") && has("avx512bw") && has("avx2") {
        assert_eq!(CodeIsa::best(), CodeIsa::Avx512);
    }
    assert!(CodeIsa::all_available().contains(&CodeIsa::best()));
}
