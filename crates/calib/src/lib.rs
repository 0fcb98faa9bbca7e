//! bertflow-calib (work in progress)
