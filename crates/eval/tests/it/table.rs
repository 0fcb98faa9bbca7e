//! Snapshot of the plain-text table.

use bertflow_eval::render_table;

#[test]
fn small_table_snapshot() {
    let columns = vec!["STS12".to_string(), "STS-B".to_string()];
    let rows = vec![
        ("cls/none".to_string(), vec![Some(20.16), Some(5.0)]),
        (
            "mean/whitening".to_string(),
            vec![Some(63.626), Some(-100.0)],
        ),
        ("first-last/flow".to_string(), vec![None, Some(71.234)]),
    ];
    let expected = "\
Model            STS12    STS-B    Avg.
---------------------------------------
cls/none         20.16     5.00   12.58
mean/whitening   63.63  -100.00  -18.19
first-last/flow      -    71.23       -
";
    assert_eq!(render_table("Model", &columns, &rows, true), expected);

    let expected = "\
Model            STS12    STS-B
-------------------------------
cls/none         20.16     5.00
mean/whitening   63.63  -100.00
first-last/flow      -    71.23
";
    assert_eq!(render_table("Model", &columns, &rows, false), expected);
}

#[test]
fn short_rows_and_no_rows() {
    let columns = vec!["A".to_string(), "B".to_string()];
    let rows = vec![("r".to_string(), vec![Some(1.0)])];
    assert_eq!(
        render_table("x", &columns, &rows, true),
        "x     A  B  Avg.\n----------------\nr  1.00  -     -\n"
    );
    assert_eq!(
        render_table("Task", &columns, &[], false),
        "Task  A  B\n----------\n"
    );
}
