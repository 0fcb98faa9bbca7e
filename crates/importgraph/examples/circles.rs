//! Print each crate's import circle, if any:
//! `cargo run --release -p bertflow-importgraph --example circles -- crates/*`
//! (`-v` first also prints every module's imports; `--groups a,b` sets the group folders).
fn main() {
    let mut verbose = false;
    let mut groups: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-v" => verbose = true,
            "--groups" => {
                groups = args
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(String::from)
                    .collect()
            }
            dir => {
                let src = std::path::Path::new(dir).join("src");
                let gs: Vec<&str> = groups.iter().map(String::as_str).collect();
                match bertflow_importgraph::graph(&src, &gs) {
                    Ok(g) => {
                        let c = bertflow_importgraph::find_circle(&g);
                        println!(
                            "{dir}: {} modules, circle: {}",
                            g.len(),
                            c.map_or("none".into(), |c| c.join(" -> "))
                        );
                        if verbose {
                            for (m, d) in &g {
                                println!("  {m} -> {d:?}");
                            }
                        }
                    }
                    Err(e) => println!("{dir}: {e}"),
                }
            }
        }
    }
}
