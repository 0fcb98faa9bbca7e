//! Writes every target's seed inputs as cargo-fuzz corpora:
//! `fuzz-seeds DIR` makes `DIR/<target>/seed-NN` (used by `fuzz/seeds.sh`).

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: fuzz-seeds DIR");
        std::process::exit(2);
    };
    let dir = std::path::PathBuf::from(dir);
    for target in bertflow_fuzzkit::targets::ALL {
        let out = dir.join(target.name);
        std::fs::create_dir_all(&out).expect("creating the corpus directory");
        let seeds = (target.seeds)();
        let bytes: usize = seeds.iter().map(Vec::len).sum();
        for (k, seed) in seeds.iter().enumerate() {
            std::fs::write(out.join(format!("seed-{k:02}")), seed).expect("writing a seed");
        }
        println!("{}: {} seeds, {bytes} bytes", target.name, seeds.len());
    }
}
