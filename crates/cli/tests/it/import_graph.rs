//! bertflow's modules import each other without a circle (issue 48): each
//! module may use the ones below it, never one that uses it back (the rule and
//! what counts as an import: bertflow-importgraph).

#[test]
fn modules_import_each_other_without_a_circle() {
    bertflow_importgraph::assert_no_circle(env!("CARGO_MANIFEST_DIR"), 10);
}
