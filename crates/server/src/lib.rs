//! bertflow-server (work in progress)
