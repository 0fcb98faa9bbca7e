//! bertflow-analysis (work in progress)
