//! Benchmarks for BENCHMARKS.md: open time, exact and HNSW query latency, recall@10.
//!
//! ```text
//! index_bench synth  --out X.idx --n 1000000 --dim 384 [--clusters 1000 --noise 0.35 --seed 1]
//!                    [--model NAME@FINGERPRINT --pooling P]
//! index_bench npy    --out X.idx --npy vectors.npy [--texts sentences.txt]
//! index_bench open   --index X.idx           (time to ready, as `serve --index` opens it)
//! index_bench ann    --index X.idx [--m 24 --ef-construction 200 --limit N]
//! index_bench query  --index X.idx [--queries 1000 --ef 16,32,64,128 --k 10 --exact-queries 200]
//!                    [--rescore 1,2,5,10,20 --shortlist 1 --threads 1,2]   (a quantized index)
//!                    [--query-npy Q.npy]   (real queries instead of synthetic ones)
//!                    [--truth T.txt]   (each query's true top k ids, one line each)
//!                    [--warm]   (each query set run once untimed first)
//!                    [--no-ann]   (the scan only, even if a graph is stored)
//!                    [--compact | --compact-only]   (then / only: the graph's links copied
//!                    into fixed-degree arrays, hnsw_rs's structure dropped: CompactAnn)
//!                    [--compact-build [--m 24 --ef-construction 200 --build-threads 1]]
//!                    (instead: a CompactAnn built here, timed, then searched; a graph over
//!                    codes stored by `ann` is a CompactAnn already)
//!                    [--ann [--ann-rescore 10,20]]   (the stored graph only, no scan; over
//!                    codes, each ef with each rescore depth; VmRSS after)
//! index_bench kernels [--rows 1000000 --width 48 --queries 50]
//!                    (the block Hamming kernel alone, each ISA, one thread: ms per scan)
//! ```
//!
//! Synthetic vectors: `clusters` centres drawn uniformly on the unit sphere, each
//! vector a centre plus Gaussian noise of standard deviation `noise / sqrt(dim)`
//! per component (so the noise has norm about `noise`), normalised by the
//! writer. Queries are drawn from the same distribution (new points, not rows).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bertflow_index::{Ann, AnnParams, Identity, Index, IndexWriter, SearchParams};

struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn gauss(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

struct Synth {
    centres: Vec<f32>,
    dim: usize,
    noise: f32,
}

impl Synth {
    fn new(clusters: usize, dim: usize, noise: f32, seed: u64) -> Self {
        let mut rng = Rng(seed);
        let mut centres = Vec::with_capacity(clusters * dim);
        for _ in 0..clusters {
            let c: Vec<f32> = (0..dim).map(|_| rng.gauss()).collect();
            let n = c.iter().map(|x| x * x).sum::<f32>().sqrt();
            centres.extend(c.iter().map(|x| x / n));
        }
        Self {
            centres,
            dim,
            noise,
        }
    }
    fn sample(&self, rng: &mut Rng, out: &mut Vec<f32>) {
        let k = (rng.next_u64() % (self.centres.len() / self.dim) as u64) as usize;
        let c = &self.centres[k * self.dim..(k + 1) * self.dim];
        let s = self.noise / (self.dim as f32).sqrt();
        out.extend(c.iter().map(|&x| x + s * rng.gauss()));
    }
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: Option<T>) -> T {
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("bad value for {name}")),
        None => default.unwrap_or_else(|| panic!("{name} is required")),
    }
}

/// `--model M --pooling P` make the synthetic index look like one of that model and
/// pooling, so that `bertflow serve --index` opens it (start-up measurement).
fn identity(args: &[String], dim: usize) -> Identity {
    Identity {
        model: arg(args, "--model", Some("synthetic@0".to_string())),
        pooling: arg(args, "--pooling", Some("none".to_string())),
        calibrator: None,
        dimension: dim,
        precision: "fp32".into(),
    }
}

/// A float32 or float64 C-order 2-D .npy file.
fn read_npy(path: &Path) -> (Vec<f32>, usize, usize) {
    let bytes = std::fs::read(path).expect("read npy");
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let (hlen, start) = if bytes[6] == 1 {
        (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10)
    } else {
        (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        )
    };
    let header = std::str::from_utf8(&bytes[start..start + hlen]).unwrap();
    assert!(header.contains("'fortran_order': False"));
    let shape = &header[header.find("'shape': (").unwrap() + 10..];
    let shape: Vec<usize> = shape[..shape.find(')').unwrap()]
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let data = &bytes[start + hlen..];
    let v: Vec<f32> = if header.contains("<f4") {
        data.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    } else if header.contains("<f8") {
        data.chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect()
    } else {
        panic!("unsupported dtype in {header}")
    };
    (v, shape[0], shape[1])
}

/// A graph search: (query, ef, rescore) to hits.
type Searcher<'a> = dyn Fn(&[f32], usize, usize) -> Vec<(usize, f32)> + 'a;

/// VmRSS and its file-backed part (RssFile) of this process.
fn rss() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .filter(|l| l.starts_with("VmRSS") || l.starts_with("RssFile") || l.starts_with("RssAnon"))
        .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(" / ")
        + " (VmRSS / RssAnon / RssFile)"
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cmd = args.first().cloned().unwrap_or_default();
    match cmd.as_str() {
        "synth" => {
            let out: PathBuf = arg(&args, "--out", None);
            let n: usize = arg(&args, "--n", Some(1_000_000));
            let dim: usize = arg(&args, "--dim", Some(384));
            let synth = Synth::new(
                arg(&args, "--clusters", Some(1000)),
                dim,
                arg(&args, "--noise", Some(0.35)),
                arg(&args, "--seed", Some(1)),
            );
            let started = Instant::now();
            let mut rng = Rng(arg::<u64>(&args, "--seed", Some(1)) + 1000);
            let mut w = IndexWriter::create(&out, identity(&args, dim)).unwrap();
            let chunk = 65_536;
            let mut done = 0;
            while done < n {
                let m = chunk.min(n - done);
                let mut v = Vec::with_capacity(m * dim);
                for _ in 0..m {
                    synth.sample(&mut rng, &mut v);
                }
                let texts: Vec<String> = (done..done + m)
                    .map(|i| format!("synthetic sentence {i}"))
                    .collect();
                w.add(&v, &texts).unwrap();
                done += m;
            }
            w.finish().unwrap();
            println!(
                "wrote {n} x {dim} to {} in {:.1} s",
                out.display(),
                started.elapsed().as_secs_f64()
            );
        }
        "npy" => {
            let out: PathBuf = arg(&args, "--out", None);
            let (v, n, dim) = read_npy(&arg::<PathBuf>(&args, "--npy", None));
            let texts: Vec<String> = match args.iter().position(|a| a == "--texts") {
                Some(i) => std::fs::read_to_string(&args[i + 1])
                    .unwrap()
                    .lines()
                    .map(str::to_owned)
                    .collect(),
                None => (0..n).map(|i| format!("row {i}")).collect(),
            };
            assert_eq!(texts.len(), n, "one text per row");
            let mut w = IndexWriter::create(&out, identity(&args, dim)).unwrap();
            w.add(&v, &texts).unwrap();
            w.finish().unwrap();
            println!("wrote {n} x {dim} to {}", out.display());
        }
        "open" => {
            let path: PathBuf = arg(&args, "--index", None);
            let started = Instant::now();
            let index = Index::open(&path, false).unwrap();
            let opened = started.elapsed();
            let started = Instant::now();
            index.verify().unwrap();
            let verified = started.elapsed();
            println!(
                "{} rows: open (footer, layout, text offsets) {:.1} ms; full verify {:.0} ms",
                index.len(),
                opened.as_secs_f64() * 1e3,
                verified.as_secs_f64() * 1e3
            );
        }
        "ann" => {
            let path: PathBuf = arg(&args, "--index", None);
            let params = AnnParams {
                m: arg(&args, "--m", Some(AnnParams::default().m)),
                ef_construction: arg(
                    &args,
                    "--ef-construction",
                    Some(AnnParams::default().ef_construction),
                ),
            };
            let index = Arc::new(Index::open(&path, false).unwrap());
            let started = Instant::now();
            let last = std::sync::atomic::AtomicUsize::new(0);
            let ann = Ann::build(Arc::clone(&index), params, &|i| {
                if i - last.load(std::sync::atomic::Ordering::Relaxed) >= 100_000 {
                    last.store(i, std::sync::atomic::Ordering::Relaxed);
                    eprintln!("{i} inserted, {:.0} s", started.elapsed().as_secs_f64());
                }
            })
            .unwrap();
            let built = started.elapsed();
            ann.save(&path).unwrap();
            let started = Instant::now();
            let loaded = Ann::load(Arc::clone(&index), &path).unwrap().unwrap();
            println!(
                "HNSW m={} ef_construction={} ({} distance) over {} rows: build {:.1} s, load {:.2} s; VmRSS {}",
                params.m,
                params.ef_construction,
                loaded.metric().name(),
                loaded.len(),
                built.as_secs_f64(),
                started.elapsed().as_secs_f64(),
                rss()
            );
        }
        "query" => {
            let path: PathBuf = arg(&args, "--index", None);
            let k: usize = arg(&args, "--k", Some(10));
            let index = Arc::new(Index::open(&path, false).unwrap());
            let dim = index.identity().dimension;
            let queries: Vec<Vec<f32>> = match args.iter().position(|a| a == "--query-npy") {
                Some(i) => {
                    let (v, _, d) = read_npy(Path::new(&args[i + 1]));
                    assert_eq!(d, dim);
                    v.chunks_exact(d).map(<[f32]>::to_vec).collect()
                }
                None => {
                    let synth = Synth::new(
                        arg(&args, "--clusters", Some(1000)),
                        dim,
                        arg(&args, "--noise", Some(0.35)),
                        arg(&args, "--seed", Some(1)),
                    );
                    let mut rng = Rng(987_654);
                    (0..arg::<usize>(&args, "--queries", Some(1000)))
                        .map(|_| {
                            let mut q = Vec::new();
                            synth.sample(&mut rng, &mut q);
                            q
                        })
                        .collect()
                }
            };
            let exact_n: usize = arg(&args, "--exact-queries", Some(queries.len()));
            let exact_n = exact_n.min(queries.len());
            let warm = args.iter().any(|a| a == "--warm");
            let ann_only = args.iter().any(|a| a == "--ann");
            // Quantized runs first, so that the resident memory they report is
            // not that of the exact scans (which read every vector).
            let mut quantized_runs = Vec::new();
            if index.quantizer().is_some() && !ann_only {
                let rescores: String = arg(&args, "--rescore", Some("1,2,5,10,20".to_string()));
                let threads: String = arg(&args, "--threads", Some("1,2".to_string()));
                let shortlists: String = arg(
                    &args,
                    "--shortlist",
                    Some(bertflow_index::DEFAULT_SHORTLIST.to_string()),
                );
                let list =
                    |s: &str| -> Vec<usize> { s.split(',').map(|e| e.parse().unwrap()).collect() };
                for t in list(&threads) {
                    for (s, r) in list(&shortlists)
                        .into_iter()
                        .flat_map(|s| list(&rescores).into_iter().map(move |r| (s, r)))
                    {
                        let params = SearchParams {
                            rescore: r,
                            shortlist: s,
                            threads: t,
                        };
                        let mut ms = Vec::new();
                        let mut got = Vec::new();
                        if warm {
                            for q in &queries {
                                index.search_with(q, k, &params).unwrap();
                            }
                        }
                        for q in &queries {
                            let t0 = Instant::now();
                            let hits = index.search_with(q, k, &params).unwrap();
                            ms.push(t0.elapsed().as_secs_f64() * 1e3);
                            got.push(hits.iter().map(|x| x.0).collect::<Vec<_>>());
                        }
                        ms.sort_by(f64::total_cmp);
                        quantized_runs.push((
                            t,
                            s,
                            r,
                            percentile(&ms, 0.5),
                            percentile(&ms, 0.99),
                            got,
                        ));
                    }
                }
                println!(
                    "resident memory after the quantized searches: {} ({} MiB of codes read)",
                    rss(),
                    index.resident_code_bytes() >> 20
                );
            }
            // The true top k: from --truth (one line of ids per query, made
            // elsewhere, e.g. NumPy in one pass) or by exact scans here.
            let truth: Vec<Vec<usize>> = match args.iter().position(|a| a == "--truth") {
                Some(i) => {
                    let t: Vec<Vec<usize>> = std::fs::read_to_string(&args[i + 1])
                        .expect("read --truth")
                        .lines()
                        .take(exact_n)
                        .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
                        .collect();
                    println!("exact: {} queries' top {k} read from --truth", t.len());
                    t
                }
                None => {
                    let mut exact_ms = Vec::new();
                    let truth = queries[..exact_n]
                        .iter()
                        .map(|q| {
                            let t = Instant::now();
                            let r = index.search_exact(q, k).unwrap();
                            exact_ms.push(t.elapsed().as_secs_f64() * 1e3);
                            r.iter().map(|x| x.0).collect()
                        })
                        .collect();
                    exact_ms.sort_by(f64::total_cmp);
                    println!(
                        "exact: {} queries, p50 {:.2} ms, p99 {:.2} ms",
                        exact_n,
                        percentile(&exact_ms, 0.5),
                        percentile(&exact_ms, 0.99)
                    );
                    truth
                }
            };
            let exact_n = truth.len();
            for (t, s, r, p50, p99, got) in quantized_runs {
                let found: usize = truth
                    .iter()
                    .zip(&got)
                    .map(|(want, got)| got.iter().filter(|i| want.contains(i)).count())
                    .sum();
                println!(
                    "codes {} threads={t} shortlist={s} rescore={r}: recall@{k} {:.4} (over {} queries), p50 {:.3} ms, p99 {:.3} ms (over {} queries)",
                    index.quantizer().map_or("", |q| q.spec.as_str()),
                    found as f64 / (exact_n * k) as f64,
                    exact_n,
                    p50,
                    p99,
                    queries.len()
                );
            }
            if args.iter().any(|a| a == "--no-ann") {
                return;
            }
            let built = args.iter().any(|a| a == "--compact-build");
            let started = Instant::now();
            let ann = if built {
                None
            } else {
                let Some(ann) = Ann::load(Arc::clone(&index), &path).unwrap() else {
                    return;
                };
                println!(
                    "HNSW ({} distance) load {:.2} s; VmRSS {}",
                    ann.metric().name(),
                    started.elapsed().as_secs_f64(),
                    rss()
                );
                Some(ann)
            };
            let metric = bertflow_index::AnnMetric::of(&index);
            let metric = ann.as_ref().map_or(metric, Ann::metric);
            let efs: String = arg(&args, "--ef", Some("16,32,64,128".to_string()));
            let depths: String = arg(
                &args,
                "--ann-rescore",
                Some(bertflow_index::DEFAULT_ANN_RESCORE.to_string()),
            );
            let depths: Vec<usize> = if metric.on_codes() {
                depths.split(',').map(|e| e.parse().unwrap()).collect()
            } else {
                vec![1]
            };
            let metric = metric.name();
            let efs: Vec<usize> = efs.split(',').map(|e| e.parse().unwrap()).collect();
            // Each ef with each depth: recall@k against the truth, p50 and p99.
            let run = |name: &str, search: &Searcher| {
                for &ef in &efs {
                    for &r in &depths {
                        if warm {
                            for q in &queries {
                                search(q, ef, r);
                            }
                        }
                        let mut ms = Vec::new();
                        let mut found = 0usize;
                        for (i, q) in queries.iter().enumerate() {
                            let t = Instant::now();
                            let got = search(q, ef, r);
                            ms.push(t.elapsed().as_secs_f64() * 1e3);
                            if let Some(want) = truth.get(i) {
                                found += got.iter().filter(|x| want.contains(&x.0)).count();
                            }
                        }
                        ms.sort_by(f64::total_cmp);
                        println!(
                            "{name} ({metric}) ef={ef} rescore={r}: recall@{k} {:.4} (over {} queries), p50 {:.3} ms, p99 {:.3} ms (over {} queries)",
                            found as f64 / (exact_n * k) as f64,
                            exact_n,
                            percentile(&ms, 0.5),
                            percentile(&ms, 0.99),
                            queries.len()
                        );
                    }
                }
                println!(
                    "resident memory after the {name} searches: {} ({} MiB of codes read)",
                    rss(),
                    index.resident_code_bytes() >> 20
                );
            };
            let Some(ann) = ann else {
                // --compact-build: a CompactAnn built here, on --build-threads threads.
                let params = AnnParams {
                    m: arg(&args, "--m", Some(AnnParams::default().m)),
                    ef_construction: arg(
                        &args,
                        "--ef-construction",
                        Some(AnnParams::default().ef_construction),
                    ),
                };
                let threads: usize = arg(&args, "--build-threads", Some(1));
                let compact =
                    bertflow_index::CompactAnn::build(Arc::clone(&index), params, threads, &|i| {
                        if i % 131_072 == 0 {
                            eprintln!("{i} inserted, {:.0} s", started.elapsed().as_secs_f64());
                        }
                    })
                    .unwrap();
                println!(
                    "compact graph M={} ef_construction={} built on {threads} thread(s) in {:.1} s, links {} MiB; VmRSS {}",
                    params.m,
                    params.ef_construction,
                    started.elapsed().as_secs_f64(),
                    compact.link_bytes() >> 20,
                    rss()
                );
                run("compact-built", &|q, ef, r| {
                    compact.search_rescored(q, k, ef, r).unwrap()
                });
                return;
            };
            if !args.iter().any(|a| a == "--compact-only") {
                run("hnsw", &|q, ef, r| {
                    ann.search_rescored(q, k, ef, r).unwrap()
                });
            }
            if args
                .iter()
                .any(|a| a == "--compact" || a == "--compact-only")
            {
                let started = Instant::now();
                let compact = bertflow_index::CompactAnn::from_ann(ann).unwrap();
                // The hnsw_rs structure's many small allocations, freed: given
                // back to the system, so that VmRSS counts what is left.
                #[cfg(target_os = "linux")]
                {
                    extern "C" {
                        fn malloc_trim(pad: usize) -> i32;
                    }
                    // SAFETY: glibc's malloc_trim takes no pointer.
                    unsafe { malloc_trim(0) };
                }
                println!(
                    "compact graph: made in {:.1} s, links {} MiB; VmRSS {}",
                    started.elapsed().as_secs_f64(),
                    compact.link_bytes() >> 20,
                    rss()
                );
                run("compact", &|q, ef, r| {
                    compact.search_rescored(q, k, ef, r).unwrap()
                });
            }
        }
        "kernels" => {
            use bertflow_kernels::codes::{hamming_block_with, CodeIsa};
            let rows: usize = arg(&args, "--rows", Some(1_000_000));
            let width: usize = arg(&args, "--width", Some(48));
            let queries: usize = arg(&args, "--queries", Some(50));
            let mut rng = Rng(5);
            let codes: Vec<u8> = (0..rows * width).map(|_| rng.next_u64() as u8).collect();
            let q: Vec<u8> = (0..width).map(|_| rng.next_u64() as u8).collect();
            let mut out = Vec::new();
            for isa in CodeIsa::all_available() {
                let mut ms = Vec::new();
                let mut check = 0u64;
                for _ in 0..queries {
                    let t = Instant::now();
                    for block in codes.chunks(4096 * width) {
                        hamming_block_with(isa, &q, block, &mut out);
                        check += u64::from(out[0]);
                    }
                    ms.push(t.elapsed().as_secs_f64() * 1e3);
                }
                ms.sort_by(f64::total_cmp);
                println!(
                    "hamming block kernel {}: {rows} codes of {width} bytes, p50 {:.3} ms per scan, min {:.3} ms ({check})",
                    isa.name(),
                    percentile(&ms, 0.5),
                    ms[0]
                );
            }
        }
        _ => eprintln!("usage: index_bench synth|npy|open|ann|query|kernels ... (see the source)"),
    }
}
