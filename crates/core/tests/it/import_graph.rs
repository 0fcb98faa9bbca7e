//! Core's modules import each other without a circle (issues 34, 48): each
//! module may use the ones below it, never one that uses it back; and the
//! runtime never uses the experiments.
use bertflow_importgraph::assert_no_circle_in_groups;

#[test]
fn core_modules_import_each_other_without_a_circle() {
    let g = assert_no_circle_in_groups(env!("CARGO_MANIFEST_DIR"), 20, &["runtime", "experiments"]);
    assert!(
        g["runtime::pipeline"].contains("runtime::calibration"),
        "{:?}",
        g["runtime::pipeline"]
    );
    assert!(g["experiments::grid"].contains("runtime::embedder"));
    for (module, deps) in &g {
        if module.starts_with("runtime::") {
            let up: Vec<_> = deps
                .iter()
                .filter(|d| d.starts_with("experiments::"))
                .collect();
            assert!(up.is_empty(), "the runtime's {module} uses {up:?}");
        }
    }
}
