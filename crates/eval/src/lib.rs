//! bertflow-eval (work in progress)
