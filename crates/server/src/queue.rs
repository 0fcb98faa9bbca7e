//! The one queue every request kind enters (embed, embed_all, predict and
//! rerank pairs, token-id inputs), as token ids, and the worker threads that
//! run its batches.
//!
//! * **Items.** A request is a job of one or more inputs, each an
//!   [`Encoding`] whose length is its cost. Its inputs are queued as items at
//!   the back, one after the other; items leave only by being taken into a
//!   batch or by the job's cancellation, so a job's items stay contiguous.
//! * **Admission** ([`Queue::reserve`], [`Queue::submit`]): at most
//!   `max_queue_inputs` inputs (queued, or being tokenized) and
//!   `max_queue_tokens` tokens not yet taken by a worker; a job that does not
//!   fit is refused with 429 at once; a job larger than the whole token budget
//!   could never fit and is refused with 413 (admitted alone into an empty
//!   queue, it held every worker for longer than clients wait). Once shutdown
//!   begins, nothing more is admitted (503).
//! * **Batches** ([`next_batch`]): a worker takes the oldest item (so none
//!   waits forever) and fills the batch with the queued items of the same task
//!   whose lengths are closest to it, under `max_batch_tokens` (the sum of the
//!   lengths) and `max_batch_size`: inputs of similar length batch together,
//!   and the padding a padded forward pass would add (the longest length times
//!   the inputs, less their sum) is counted in `/metrics`.
//! * **Cancellation.** A [`Ticket`] dropped before its answer (the client went
//!   away and its handler was dropped) removes the job's items still queued.
//! * **Failures.** If a batch that mixes several requests fails, each
//!   request's part is retried alone, so that one bad input does not fail its
//!   neighbours. A panicking backend is caught and answered 500.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::backend::{EmbedBackend, Embedded, Encoding, SparseEmbedded};
use crate::error::ApiError;
use crate::metrics::{Load, Metrics};

/// What a job asks of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Task {
    /// One vector per input ([`EmbedBackend::embed`]).
    Embed,
    /// Every token's vector ([`EmbedBackend::embed_all`]).
    EmbedAll,
    /// Classifier logits ([`EmbedBackend::predict`]).
    Predict,
    /// A sparse vector per input ([`EmbedBackend::embed_sparse`]).
    EmbedSparse,
    /// Per-token vectors per input ([`EmbedBackend::embed_multi`]).
    EmbedMulti,
}

/// One input's answer.
#[derive(Debug, Clone)]
pub(crate) enum Output {
    Vector(Embedded),
    States(Vec<Vec<f32>>),
    Logits(Vec<f32>),
    Sparse(SparseEmbedded),
    Multi(Vec<Vec<f32>>),
}

type Answer = Result<Vec<Output>, ApiError>;
type Reply = oneshot::Sender<Answer>;

/// Lock a mutex, ignoring poisoning: every critical section below leaves the
/// data consistent, and the backend (the only code that may panic) never runs
/// under a lock.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The queue's limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueLimits {
    pub max_batch_tokens: usize,
    pub max_batch_size: usize,
    pub max_queue_inputs: usize,
    pub max_queue_tokens: usize,
}

struct Job {
    id: u64,
    task: Task,
    encodings: Vec<Encoding>,
    progress: Mutex<Progress>,
}

struct Progress {
    results: Vec<Option<Output>>,
    remaining: usize,
    /// `None` once answered (success or failure).
    reply: Option<Reply>,
}

impl Job {
    fn complete(&self, index: usize, output: Output) {
        let mut guard = lock(&self.progress);
        let progress = &mut *guard;
        if progress.reply.is_none() {
            return;
        }
        if let Some(slot) = progress.results.get_mut(index) {
            if slot.is_none() {
                progress.remaining -= 1;
            }
            *slot = Some(output);
        }
        if progress.remaining == 0 {
            let results: Option<Vec<Output>> =
                progress.results.iter_mut().map(Option::take).collect();
            let answer = results.ok_or_else(|| ApiError::Internal("lost an answer".into()));
            if let Some(reply) = progress.reply.take() {
                // The client may have gone away; nothing to do then.
                let _ = reply.send(answer);
            }
        }
    }

    fn fail(&self, error: ApiError) {
        if let Some(reply) = lock(&self.progress).reply.take() {
            let _ = reply.send(Err(error));
        }
    }
}

/// One queued input.
struct Item {
    job: Arc<Job>,
    index: usize,
}

impl Item {
    fn len(&self) -> usize {
        self.job.encodings[self.index].len()
    }
}

struct QueueState {
    items: VecDeque<Item>,
    /// Sum of the lengths of the queued items.
    queued_tokens: usize,
    /// Inputs of requests being tokenized (reserved, not queued yet).
    reserved: usize,
    busy_workers: usize,
    batches: u64,
    next_id: u64,
    /// False once shutdown began: nothing more is admitted.
    admitting: bool,
    /// True once the workers are to exit when the queue is empty.
    closed: bool,
}

struct Shared {
    backend: Arc<dyn EmbedBackend>,
    dimension: usize,
    labels: usize,
    limits: QueueLimits,
    metrics: Arc<Metrics>,
    state: Mutex<QueueState>,
    work_available: Condvar,
}

/// The queue plus its worker threads. Dropping it closes the queue; workers
/// finish what is queued and exit.
pub(crate) struct Queue {
    shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// Room held for a request's inputs while they are tokenized; given back
/// when dropped (or used by [`Queue::submit`]).
pub(crate) struct Reservation {
    shared: Arc<Shared>,
    inputs: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut state = lock(&self.shared.state);
        state.reserved = state.reserved.saturating_sub(self.inputs);
    }
}

/// A queued job's answer to come. Dropped before the answer, it takes the
/// job's items still queued out of the queue.
pub(crate) struct Ticket {
    shared: Arc<Shared>,
    id: u64,
    receiver: oneshot::Receiver<Answer>,
    answered: bool,
}

impl Ticket {
    /// Wait for every input's answer, in input order.
    pub(crate) async fn wait(mut self) -> Answer {
        let answer = (&mut self.receiver).await;
        self.answered = true;
        answer.map_err(|_| ApiError::Internal("the worker dropped the request".into()))?
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.answered {
            cancel(&self.shared, self.id);
        }
    }
}

/// Take job `id`'s queued items out of the queue (its client is gone).
fn cancel(shared: &Shared, id: u64) {
    let mut state = lock(&shared.state);
    let before = state.items.len();
    let mut freed = 0usize;
    state.items.retain(|item| {
        let keep = item.job.id != id;
        if !keep {
            freed += item.len();
        }
        keep
    });
    state.queued_tokens = state.queued_tokens.saturating_sub(freed);
    if state.items.len() < before {
        shared.metrics.cancelled.inc();
    }
}

impl Queue {
    pub(crate) fn start(
        backend: Arc<dyn EmbedBackend>,
        dimension: usize,
        labels: usize,
        limits: QueueLimits,
        workers: usize,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            backend,
            dimension,
            labels,
            limits,
            metrics,
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                queued_tokens: 0,
                reserved: 0,
                busy_workers: 0,
                batches: 0,
                next_id: 0,
                admitting: true,
                closed: false,
            }),
            work_available: Condvar::new(),
        });
        let queue = Queue {
            shared: Arc::clone(&shared),
            workers: Mutex::new(Vec::new()),
        };
        for i in 0..workers {
            let shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(format!("bertflow-infer-{i}"))
                .spawn(move || worker_loop(&shared))?;
            lock(&queue.workers).push(handle);
        }
        Ok(queue)
    }

    /// Hold room for `inputs` inputs of at least `min_tokens` tokens while
    /// they are tokenized, or refuse at once (429; 503 once shutting down)
    /// when they cannot fit now.
    pub(crate) fn reserve(
        &self,
        inputs: usize,
        min_tokens: usize,
    ) -> Result<Reservation, ApiError> {
        let mut state = lock(&self.shared.state);
        if !state.admitting {
            return Err(ApiError::ShuttingDown);
        }
        let limits = self.shared.limits;
        if min_tokens > limits.max_queue_tokens {
            return Err(ApiError::RequestOverBudget {
                requested: min_tokens,
                limit: limits.max_queue_tokens,
            });
        }
        let waiting = state.items.len() + state.reserved;
        if waiting + inputs > limits.max_queue_inputs {
            return Err(ApiError::Overloaded {
                queued: waiting,
                limit: limits.max_queue_inputs,
                requested: inputs,
            });
        }
        if state.queued_tokens > 0
            && state.queued_tokens.saturating_add(min_tokens) > limits.max_queue_tokens
        {
            return Err(ApiError::OverloadedTokens {
                queued: state.queued_tokens,
                limit: limits.max_queue_tokens,
                requested: min_tokens,
            });
        }
        state.reserved += inputs;
        Ok(Reservation {
            shared: Arc::clone(&self.shared),
            inputs,
        })
    }

    /// Queue `encodings` (tokenized under `reservation`) for `task`, or
    /// refuse at once when their tokens do not fit now.
    pub(crate) fn submit(
        &self,
        reservation: Reservation,
        task: Task,
        encodings: Vec<Encoding>,
    ) -> Result<Ticket, ApiError> {
        let (tx, rx) = oneshot::channel();
        let n = encodings.len();
        let tokens = encodings
            .iter()
            .fold(0usize, |sum, e| sum.saturating_add(e.len()));
        // The reservation is given back under the lock below; emptied and
        // dropped first, since its Drop takes the same lock (dropped while
        // the lock was held, on a refusal's early return, it deadlocked).
        let mut reservation = reservation;
        let reserved = std::mem::take(&mut reservation.inputs);
        drop(reservation);
        let mut state = lock(&self.shared.state);
        state.reserved = state.reserved.saturating_sub(reserved);
        if !state.admitting {
            return Err(ApiError::ShuttingDown);
        }
        let limit = self.shared.limits.max_queue_tokens;
        if tokens > limit {
            return Err(ApiError::RequestOverBudget {
                requested: tokens,
                limit,
            });
        }
        if state.queued_tokens > 0 && state.queued_tokens.saturating_add(tokens) > limit {
            return Err(ApiError::OverloadedTokens {
                queued: state.queued_tokens,
                limit,
                requested: tokens,
            });
        }
        state.next_id += 1;
        let id = state.next_id;
        let job = Arc::new(Job {
            id,
            task,
            encodings,
            progress: Mutex::new(Progress {
                results: vec![None; n],
                remaining: n,
                reply: Some(tx),
            }),
        });
        if n == 0 {
            job.fail(ApiError::Internal("a request without inputs".into()));
        }
        for index in 0..n {
            state.items.push_back(Item {
                job: Arc::clone(&job),
                index,
            });
        }
        state.queued_tokens = state.queued_tokens.saturating_add(tokens);
        drop(state);
        self.shared.work_available.notify_one();
        Ok(Ticket {
            shared: Arc::clone(&self.shared),
            id,
            receiver: rx,
            answered: false,
        })
    }

    pub(crate) fn load(&self) -> Load {
        let state = lock(&self.shared.state);
        // A job's items are contiguous: count the runs.
        let mut requests = 0;
        let mut last = None;
        for item in &state.items {
            if last != Some(item.job.id) {
                requests += 1;
                last = Some(item.job.id);
            }
        }
        Load {
            queued_inputs: state.items.len(),
            queued_tokens: state.queued_tokens,
            queued_requests: requests,
            tokenizing_inputs: state.reserved,
            busy_workers: state.busy_workers,
            batches: state.batches,
        }
    }

    /// Admit nothing more (503 `shutting_down`); what is queued still runs.
    pub(crate) fn stop_admitting(&self) {
        lock(&self.shared.state).admitting = false;
    }

    fn close(&self) {
        let mut state = lock(&self.shared.state);
        state.admitting = false;
        state.closed = true;
        drop(state);
        self.shared.work_available.notify_all();
    }

    /// Close the queue, let the workers drain it, and wait for them to exit.
    pub(crate) fn shutdown(&self) {
        self.close();
        let handles = std::mem::take(&mut *lock(&self.workers));
        for handle in handles {
            // A worker never panics (the backend runs under catch_unwind);
            // if one did, there is nothing left to clean up.
            let _ = handle.join();
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.close();
    }
}

fn worker_loop(shared: &Shared) {
    while let Some(batch) = next_batch(shared) {
        let tokens: usize = batch.iter().map(Item::len).sum();
        let longest = batch.iter().map(Item::len).max().unwrap_or(0);
        let padding = (longest * batch.len()).saturating_sub(tokens);
        shared.metrics.observe_batch(batch.len(), tokens, padding);
        run_batch(shared, &batch);
        drop(batch);
        let mut state = lock(&shared.state);
        state.busy_workers -= 1;
        state.batches += 1;
    }
}

/// Block until there is work, then take a batch; `None` once closed and empty.
fn next_batch(shared: &Shared) -> Option<Vec<Item>> {
    let limits = shared.limits;
    let mut guard = lock(&shared.state);
    loop {
        let state = &mut *guard;
        if let Some(front) = state.items.front() {
            let (task, anchor) = (front.job.task, front.len());
            // The oldest item first, then the same task's items closest to
            // its length (ties: oldest first).
            let mut candidates: Vec<(usize, usize)> = state
                .items
                .iter()
                .enumerate()
                .filter(|(_, item)| item.job.task == task)
                .map(|(at, item)| (item.len().abs_diff(anchor), at))
                .collect();
            candidates.sort_unstable();
            let mut chosen = vec![false; state.items.len()];
            let (mut count, mut tokens) = (0usize, 0usize);
            for (_, at) in candidates {
                if count >= limits.max_batch_size {
                    break;
                }
                let len = state.items[at].len();
                if count > 0 && tokens.saturating_add(len) > limits.max_batch_tokens {
                    continue;
                }
                chosen[at] = true;
                count += 1;
                tokens = tokens.saturating_add(len);
            }
            let mut batch = Vec::with_capacity(count);
            let mut rest = VecDeque::with_capacity(state.items.len() - count);
            for (item, take) in state.items.drain(..).zip(chosen) {
                if take {
                    batch.push(item);
                } else {
                    rest.push_back(item);
                }
            }
            state.items = rest;
            state.queued_tokens = state.queued_tokens.saturating_sub(tokens);
            state.busy_workers += 1;
            let more = !state.items.is_empty();
            drop(guard);
            if more {
                shared.work_available.notify_one();
            }
            return Some(batch);
        }
        if state.closed {
            return None;
        }
        guard = shared
            .work_available
            .wait(guard)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
    }
}

fn run_batch(shared: &Shared, batch: &[Item]) {
    let task = batch[0].job.task;
    let encodings: Vec<Encoding> = batch
        .iter()
        .map(|item| item.job.encodings[item.index].clone())
        .collect();
    match call(shared, task, &encodings) {
        Ok(outputs) => deliver(batch, outputs),
        Err(error) => {
            let groups = job_groups(batch);
            if groups.len() == 1 || !matches!(error, ApiError::Backend(_)) {
                for range in groups {
                    batch[range.start].job.fail(error.clone());
                }
                return;
            }
            // Isolate the failure: retry each request's part on its own.
            for range in groups {
                let part = &batch[range.clone()];
                match call(shared, task, &encodings[range]) {
                    Ok(outputs) => deliver(part, outputs),
                    Err(error) => part[0].job.fail(error),
                }
            }
        }
    }
}

/// Contiguous runs of the same job (a batch keeps queue order, and a job's
/// items are contiguous in the queue).
fn job_groups(batch: &[Item]) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    for i in 1..=batch.len() {
        if i == batch.len() || batch[i].job.id != batch[start].job.id {
            groups.push(start..i);
            start = i;
        }
    }
    groups
}

fn deliver(batch: &[Item], outputs: Vec<Output>) {
    for (item, output) in batch.iter().zip(outputs) {
        item.job.complete(item.index, output);
    }
}

/// Run `task` on a token batch, turning panics and malformed answers into errors.
fn call(shared: &Shared, task: Task, batch: &[Encoding]) -> Result<Vec<Output>, ApiError> {
    let backend = shared.backend.as_ref();
    let n = batch.len();
    let caught = |f: &dyn Fn() -> Option<Result<Vec<Output>, String>>| match catch_unwind(
        AssertUnwindSafe(f),
    ) {
        Ok(Some(Ok(out))) if out.len() == n => Ok(out),
        Ok(Some(Ok(out))) => Err(ApiError::Backend(format!(
            "the backend returned {} answers for {n} inputs",
            out.len()
        ))),
        Ok(Some(Err(message))) => Err(ApiError::Backend(message)),
        Ok(None) => Err(ApiError::NotSupported(match task {
            Task::EmbedAll => "this backend cannot return per-token vectors".into(),
            Task::EmbedSparse => "model has no sparse head: /embed_sparse needs a SPLADE \
                                  model (`serve --pooling splade`) or BGE-M3's sparse_linear.pt"
                .into(),
            Task::EmbedMulti => "model gives no per-token vectors: serve it with \
                                 `--outputs multi` (ColBERT, BGE-M3)"
                .into(),
            _ => "this backend has no classifier head".into(),
        })),
        Err(_) => Err(ApiError::Backend("the backend panicked".into())),
    };
    match task {
        Task::Embed => caught(&|| {
            Some(
                embed_checked(backend, batch, shared.dimension)
                    .map(|v| v.into_iter().map(Output::Vector).collect()),
            )
        }),
        Task::EmbedAll => caught(&|| {
            backend.embed_all(batch).map(|r| {
                r.map_err(|e| e.message)
                    .map(|m| m.into_iter().map(Output::States).collect())
            })
        }),
        Task::EmbedSparse => caught(&|| {
            backend.embed_sparse(batch).map(|r| {
                let rows = r.map_err(|e| e.message)?;
                if let Some(bad) = rows.iter().find(|v| !sparse_ok(v)) {
                    return Err(format!(
                        "the backend returned a sparse vector of {} ids and {} weights, not \
                         ascending or not finite",
                        bad.indices.len(),
                        bad.values.len()
                    ));
                }
                Ok(rows.into_iter().map(Output::Sparse).collect())
            })
        }),
        Task::EmbedMulti => caught(&|| {
            backend.embed_multi(batch).map(|r| {
                let rows = r.map_err(|e| e.message)?;
                if rows.iter().flatten().flatten().any(|x| !x.is_finite()) {
                    return Err("the backend returned a token vector that is not finite".into());
                }
                Ok(rows.into_iter().map(Output::Multi).collect())
            })
        }),
        Task::Predict => caught(&|| {
            backend.predict(batch).map(|r| {
                let rows = r.map_err(|e| e.message)?;
                if rows.iter().any(|row| row.len() != shared.labels) {
                    return Err(format!(
                        "the classifier returned rows that are not {} long",
                        shared.labels
                    ));
                }
                if rows.iter().flatten().any(|x| !x.is_finite()) {
                    return Err("the classifier returned a score that is not finite".into());
                }
                Ok(rows.into_iter().map(Output::Logits).collect())
            })
        }),
    }
}

/// Ids ascending without repeats, one finite weight each.
fn sparse_ok(v: &SparseEmbedded) -> bool {
    v.indices.len() == v.values.len()
        && v.indices.windows(2).all(|w| w[0] < w[1])
        && v.values.iter().all(|x| x.is_finite())
}

/// Embed a token batch, checking the answer's count and dimension; each
/// vector carries its encoding's length and truncation.
pub(crate) fn embed_checked(
    backend: &dyn EmbedBackend,
    batch: &[Encoding],
    dimension: usize,
) -> Result<Vec<Embedded>, String> {
    let embedded = match catch_unwind(AssertUnwindSafe(|| backend.embed(batch))) {
        Ok(Ok(embedded)) => embedded,
        Ok(Err(error)) => return Err(error.message),
        Err(_) => return Err("the backend panicked".into()),
    };
    if embedded.len() != batch.len() {
        return Err(format!(
            "the backend returned {} embeddings for {} inputs",
            embedded.len(),
            batch.len()
        ));
    }
    if let Some(bad) = embedded.iter().find(|e| e.vector.len() != dimension) {
        return Err(format!(
            "the backend returned a vector of dimension {} instead of {dimension}",
            bad.vector.len()
        ));
    }
    Ok(embedded
        .into_iter()
        .zip(batch)
        .map(|(e, encoding)| Embedded {
            vector: e.vector,
            tokens: encoding.len(),
            truncated: encoding.truncated,
        })
        .collect())
}

/// Split inputs with the given token costs into consecutive batches under the
/// limits (greedy, in order). Used to index the corpus at start-up.
pub(crate) fn plan_batches(
    costs: &[usize],
    max_tokens: usize,
    max_size: usize,
) -> Vec<std::ops::Range<usize>> {
    let mut batches = Vec::new();
    let mut start = 0;
    let mut tokens = 0usize;
    for (i, &cost) in costs.iter().enumerate() {
        if i > start && (i - start >= max_size || tokens.saturating_add(cost) > max_tokens) {
            batches.push(start..i);
            start = i;
            tokens = 0;
        }
        tokens = tokens.saturating_add(cost);
    }
    if start < costs.len() {
        batches.push(start..costs.len());
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_respects_token_budget_and_size() {
        assert!(plan_batches(&[], 10, 4).is_empty());
        assert_eq!(plan_batches(&[4, 4, 4, 4], 8, 10), vec![0..2, 2..4]);
        assert_eq!(
            plan_batches(&[1, 1, 1, 1, 1], 100, 2),
            vec![0..2, 2..4, 4..5]
        );
        // An input over the budget runs alone.
        assert_eq!(plan_batches(&[2, 50, 2], 10, 10), vec![0..1, 1..2, 2..3]);
    }
}
