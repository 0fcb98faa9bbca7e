//! The STS tasks: loading, the sentence lists to embed and fit on, scoring.
//! The loop over tasks is core's (`bertflow_core::grid::score_targets`, the
//! one `bertflow eval` runs); `python/bertflow/sts.py` gives it the user's
//! embedding function and calibrator.

use std::borrow::Cow;
use std::cell::RefCell;
use std::path::PathBuf;

use bertflow_core::grid::{score_targets, Target};

use bertflow_core::eval::{
    average, check_data_dir, dedup_preserving_order, evaluate, fit_sentences, load_task,
    unique_sentences, Aggregate, EvalSet, FitCorpus, Task, TaskResult,
};
use numpy::{PyArray2, PyArrayMethods, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors;

/// One STS task's scored test pairs.
#[pyclass(module = "bertflow._bertflow", name = "StsTask", frozen)]
pub struct PyStsTask {
    task: Task,
    target: Target,
    sentences: Vec<String>,
    data_dir: PathBuf,
}

/// Scores of one task, x100.
#[pyclass(module = "bertflow._bertflow", name = "TaskResult", frozen)]
pub struct PyTaskResult {
    result: TaskResult,
}

fn parse_aggregate(s: &str) -> PyResult<Aggregate> {
    s.parse()
        .map_err(|e: bertflow_core::eval::ParseAggregateError| PyValueError::new_err(e.to_string()))
}

/// The data folder (core's one rule, as `bertflow eval --data`: `data`, else
/// `$BERTFLOW_DATA`, else `../shared/data/sts` from the working directory or
/// above the installed package) and the named tasks (all seven when None), in
/// the canonical order.
#[pyfunction]
#[pyo3(signature = (data=None, tasks=None))]
fn load_tasks(
    py: Python<'_>,
    data: Option<PathBuf>,
    tasks: Option<Vec<String>>,
) -> PyResult<(PathBuf, Vec<PyStsTask>)> {
    let dir = bertflow_core::defaults::data_dir(data.as_deref());
    let wanted: Vec<Task> = match tasks {
        None => Task::ALL.to_vec(),
        Some(names) => {
            if names.is_empty() {
                return Err(PyValueError::new_err(
                    "tasks is empty: name at least one of STS12, STS13, STS14, STS15, STS16, STS-B, SICK-R (or pass None for all)",
                ));
            }
            names
                .iter()
                .map(|n| n.parse::<Task>())
                .collect::<Result<_, _>>()
                .map_err(|e| PyValueError::new_err(e.to_string()))?
        }
    };
    let ordered: Vec<Task> = Task::ALL
        .iter()
        .copied()
        .filter(|t| wanted.contains(t))
        .collect();
    let out = py.detach(
        || -> Result<Vec<PyStsTask>, bertflow_core::eval::DataError> {
            check_data_dir(&dir, &ordered)?;
            ordered
                .iter()
                .map(|&t| {
                    let set: EvalSet = load_task(&dir, t)?;
                    let sentences = unique_sentences(&set);
                    Ok(PyStsTask {
                        task: t,
                        target: Target {
                            name: t.name().to_string(),
                            task: Some(t),
                            set,
                        },
                        sentences,
                        data_dir: dir.clone(),
                    })
                })
                .collect()
        },
    );
    Ok((dir.clone(), out.map_err(errors::data)?))
}

/// The mean of the tasks' Spearman and Pearson: (spearman, pearson, tasks),
/// or None for no results.
#[pyfunction]
fn average_results(results: Vec<PyRef<'_, PyTaskResult>>) -> Option<(f64, f64, usize)> {
    let rs: Vec<TaskResult> = results.iter().map(|r| r.result.clone()).collect();
    average(&rs).map(|a| (a.spearman, a.pearson, a.tasks))
}

/// Scores `tasks` in order with core's per-task loop (the one `bertflow
/// eval` runs): `vectors(i)` returns the float32 embeddings of
/// `tasks[i].sentences()` (calibrated as the caller wants), one row each.
/// An exception raised by `vectors` propagates as it is.
#[pyfunction]
fn score_tasks(
    tasks: Vec<PyRef<'_, PyStsTask>>,
    aggregate: &str,
    vectors: Bound<'_, PyAny>,
) -> PyResult<Vec<PyTaskResult>> {
    let agg = parse_aggregate(aggregate)?;
    let targets: Vec<Target> = tasks.iter().map(|t| t.target.clone()).collect();
    let sentences: Vec<Vec<String>> = tasks.iter().map(|t| t.sentences.clone()).collect();
    let raised: RefCell<Option<PyErr>> = RefCell::new(None);
    let results = score_targets(&targets, &sentences, agg, "", |i| {
        let rows = vectors
            .call1((i,))
            .and_then(|v| v.cast_into::<PyArray2<f32>>().map_err(PyErr::from))
            .map(|a| a.readonly().as_array().to_owned());
        rows.map(Cow::Owned).map_err(|e| {
            let msg = e.to_string();
            *raised.borrow_mut() = Some(e);
            bertflow_core::CoreError::Input(msg)
        })
    });
    match (results, raised.into_inner()) {
        (Ok(rs), _) => Ok(rs
            .into_iter()
            .map(|result| PyTaskResult { result })
            .collect()),
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(errors::core(e)),
    }
}

#[pymethods]
impl PyStsTask {
    /// Canonical name (STS12 ... SICK-R).
    #[getter]
    fn name(&self) -> &'static str {
        self.task.name()
    }

    /// Number of scored pairs.
    #[getter]
    fn num_pairs(&self) -> usize {
        self.target.set.num_pairs()
    }

    /// The distinct sentences to embed, in the order `evaluate` expects rows.
    fn sentences(&self) -> Vec<String> {
        self.sentences.clone()
    }

    /// The sentences a per-task calibrator is fitted on (the CLI's
    /// `--on target`: every scored sentence of the task, all splits of STS-B
    /// and SICK-R, labels unused), deduplicated in order.
    fn fit_sentences(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        py.detach(|| fit_sentences(&self.data_dir, self.task, FitCorpus::TargetScored))
            .map(dedup_preserving_order)
            .map_err(errors::data)
    }

    /// Spearman and Pearson x100 from the embeddings of `sentences()` (one
    /// row each, in order), aggregated over subsets by `aggregate`.
    fn evaluate(
        &self,
        py: Python<'_>,
        embeddings: PyReadonlyArray2<'_, f32>,
        aggregate: &str,
    ) -> PyResult<PyTaskResult> {
        let agg = parse_aggregate(aggregate)?;
        let x = embeddings.as_array();
        let result = py
            .detach(|| evaluate(&self.target.set, &self.sentences, x, agg))
            .map_err(errors::eval)?;
        Ok(PyTaskResult { result })
    }

    fn __repr__(&self) -> String {
        format!(
            "<StsTask {} ({} pairs, {} sentences)>",
            self.task.name(),
            self.target.set.num_pairs(),
            self.sentences.len()
        )
    }
}

#[pymethods]
impl PyTaskResult {
    /// Spearman x100 (aggregated).
    #[getter]
    fn spearman(&self) -> f64 {
        self.result.spearman
    }

    /// Pearson x100 (aggregated).
    #[getter]
    fn pearson(&self) -> f64 {
        self.result.pearson
    }

    /// Number of scored pairs.
    #[getter]
    fn pairs(&self) -> usize {
        self.result.pairs
    }

    /// Per subset: name -> {"spearman", "pearson", "pairs"}.
    fn subsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for s in &self.result.subsets {
            let d = PyDict::new(py);
            d.set_item("spearman", s.spearman)?;
            d.set_item("pearson", s.pearson)?;
            d.set_item("pairs", s.pairs)?;
            out.set_item(&s.name, d)?;
        }
        Ok(out)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyStsTask>()?;
    m.add_class::<PyTaskResult>()?;
    m.add_function(wrap_pyfunction!(load_tasks, m)?)?;
    m.add_function(wrap_pyfunction!(average_results, m)?)?;
    m.add_function(wrap_pyfunction!(score_tasks, m)?)?;
    Ok(())
}
