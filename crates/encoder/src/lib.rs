//! bertflow-encoder
