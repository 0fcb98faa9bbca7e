//! Throughput of the int8 linear layer on encoder shapes, per available kernel:
//! `cargo run --release -p bertflow-kernels --example int8_speed`.
//!
//! `layer` is the whole call (quantise the input, product, output stage); `product`
//! starts from an input already quantised (as the fused Q/K/V product shares one).
//! G int8 ops/s counts 2 m k n operations; times are the best of the repetitions.
//! Where the CPU has AVX512-VNNI and AVX512VL, `avx512vnni-ymm` also times the
//! AVX-VNNI kernel's tile (6 rows x one 16-channel panel, 256-bit registers) with
//! the EVEX encoding of `vpdpbusd`, so its structure can be timed on CPUs without
//! AVX-VNNI (its output stage is compiled with AVX-512 there).
use bertflow_kernels::{Act, Isa, KernelError, QuantInput, QuantLinear};
use std::time::Instant;

/// Best of `reps` calls (the machine may be shared: the minimum is the least
/// disturbed).
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let m = 448;
    for (k, n) in [(384, 1152), (384, 384), (384, 1536), (1536, 384)] {
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919) % 255) as f32 / 255.0 - 0.5)
            .collect();
        let b = vec![0.1f32; n];
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 104_729) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let lin = QuantLinear::new(&w, &b, n, k).unwrap();
        let mut out = vec![0f32; m * n];
        let ops = 2.0 * (m * k * n) as f64;
        // (label, kernel whose codes it takes, the product from quantised input).
        type Product =
            fn(&QuantLinear, Isa, &QuantInput, Act, &mut [f32]) -> Result<(), KernelError>;
        let mut kernels: Vec<(&str, Isa, Product)> = Isa::available_all()
            .into_iter()
            .map(|isa| {
                let f: Product =
                    |lin, isa, inp, act, out| lin.forward_quantized(isa, inp, None, act, out);
                (isa.name(), isa, f)
            })
            .collect();
        if QuantLinear::avxvnni_evex_available() {
            let f: Product =
                |lin, _, inp, act, out| lin.forward_quantized_avxvnni_evex(inp, None, act, out);
            kernels.push(("avx512vnni-ymm (AVX-VNNI tile, EVEX)", Isa::AvxVnni, f));
        }
        for (label, isa, product_fn) in kernels {
            let reps = if isa == Isa::Scalar { 2 } else { 30 };
            // As `QuantLinear::forward`: a fresh quantised input per call.
            let layer = time(reps, || {
                let mut inp = QuantInput::new();
                inp.quantize(isa, &x, m, k).unwrap();
                product_fn(&lin, isa, &inp, Act::None, &mut out).unwrap()
            });
            let mut inp = QuantInput::new();
            let quant = time(reps, || inp.quantize(isa, &x, m, k).unwrap());
            let product = time(reps, || {
                product_fn(&lin, isa, &inp, Act::None, &mut out).unwrap()
            });
            // The feed-forward's first product ends in GELU (in the output stage).
            let gelu = time(reps, || {
                product_fn(&lin, isa, &inp, Act::GeluErf, &mut out).unwrap()
            });
            // The polynomial GELU the encoder's int8 layers use.
            let poly = time(reps, || {
                product_fn(&lin, isa, &inp, Act::GeluPoly, &mut out).unwrap()
            });
            println!(
                "m={m} k={k} n={n} {:<10} layer {:7.3} ms {:6.1} G int8 ops/s | \
                 quantise {:6.3} ms | product {:7.3} ms {:6.1} G int8 ops/s | \
                 product+GELU {:7.3} ms (erf), {:7.3} ms (poly)",
                label,
                layer * 1e3,
                ops / layer / 1e9,
                quant * 1e3,
                product * 1e3,
                ops / product / 1e9,
                gelu * 1e3,
                poly * 1e3
            );
        }
    }
}
