//! Runs a target on saved inputs and says how each ends:
//! `fuzz-replay TARGET FILE...` (a crash found by either driver).

fn main() {
    let mut args = std::env::args();
    let (Some(name), files) = (args.nth(1), args.collect::<Vec<_>>()) else {
        eprintln!("usage: fuzz-replay TARGET FILE...");
        std::process::exit(2);
    };
    let Some(target) = bertflow_fuzzkit::targets::by_name(&name) else {
        eprintln!("no target {name:?}");
        std::process::exit(2);
    };
    let mut failed = false;
    for file in files {
        let input = std::fs::read(&file).expect("reading the input");
        match bertflow_fuzzkit::run_one(&target.run, &input) {
            Ok(()) => println!("{file}: ok"),
            Err(message) => {
                failed = true;
                println!("{file}: {message}");
            }
        }
    }
    std::process::exit(i32::from(failed));
}
