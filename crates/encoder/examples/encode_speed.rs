//! Short-sentence encoder throughput, as `bertflow bench encode` measures it but
//! with the encoder alone (so two builds can be compared back to back): the
//! unique sentences of an STS-B file (tab-separated, sentences in columns 6 and
//! 7), batch 32 sorted by length, fp32, last-avg; sentences/s of each of REPEAT
//! runs at THREADS threads.
//!
//! ```sh
//! cargo run --release -p bertflow-encoder --example encode_speed -- \
//!     models/all-MiniLM-L6-v2 ../shared/data/sts/STSBenchmark/sts-test.csv 3 1
//! ```
use bertflow_encoder::{EncodeOptions, Encoder, Pooling};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, csv, repeat, threads] = &args[..] else {
        return Err("usage: encode_speed MODEL STS_CSV REPEAT THREADS".into());
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut texts = Vec::new();
    for line in std::fs::read_to_string(csv)?.lines() {
        for s in line.split('\t').skip(5).take(2) {
            if seen.insert(s.to_owned()) {
                texts.push(s.to_owned());
            }
        }
    }
    let encoder = Encoder::load(model, None)?;
    let source = encoder.source(&"last-avg".parse::<Pooling>()?)?;
    let opts = EncodeOptions {
        batch_size: 32,
        threads: threads.parse()?,
    };
    let mut rates = Vec::new();
    for _ in 0..repeat.parse::<usize>()? {
        let t = std::time::Instant::now();
        encoder.encode(&texts, std::slice::from_ref(&source), &opts, &|_| {})?;
        rates.push(texts.len() as f64 / t.elapsed().as_secs_f64());
    }
    let runs: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
    println!(
        "{} sentences, {threads} thread(s): {} sentences/s",
        texts.len(),
        runs.join(" ")
    );
    Ok(())
}
