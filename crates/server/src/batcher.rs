//! Dynamic batching of embedding work.
//!
//! Requests are queued as jobs of one or more inputs. Worker threads (plain OS
//! threads, never the async executor) repeatedly take from the front of the
//! queue, input by input in FIFO order, until the next input would exceed the
//! token budget or the batch size; a job larger than that is split across
//! batches, possibly run by different workers. A worker does not wait for more
//! work to arrive: it takes what is queued. Each input's result is written to
//! its job's slot and the last one completes the job's oneshot channel, so a
//! request gets its vectors back in input order whatever the batching.
//!
//! Admission control: the queue holds at most `max_queue_inputs` inputs and
//! `max_queue_tokens` tokens (after truncation) not yet taken by a worker; a
//! job that does not fit is refused with 429 at once, so long inputs are
//! refused early rather than left to time out. A job larger than the whole
//! token budget is admitted when the queue is empty (it then runs alone). Jobs whose client went away are dropped when they reach the front.
//!
//! If a batch that mixes several requests fails, each request's part is
//! retried alone, so that one bad input does not fail its neighbours.

use std::collections::VecDeque;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::backend::{EmbedBackend, Embedded};
use crate::error::ApiError;
use crate::metrics::{Load, Metrics};

type Reply = oneshot::Sender<Result<Vec<Embedded>, ApiError>>;

/// Lock a mutex, ignoring poisoning: every critical section below leaves the
/// data consistent, and the backend (the only code that may panic) never runs
/// under a lock.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Batching limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchLimits {
    pub max_batch_tokens: usize,
    pub max_batch_size: usize,
    pub max_queue_inputs: usize,
    pub max_queue_tokens: usize,
}

struct Job {
    texts: Vec<String>,
    costs: Vec<usize>,
    progress: Mutex<Progress>,
}

struct Progress {
    results: Vec<Option<Embedded>>,
    remaining: usize,
    /// `None` once answered (success or failure).
    reply: Option<Reply>,
}

impl Job {
    fn is_abandoned(&self) -> bool {
        lock(&self.progress)
            .reply
            .as_ref()
            .is_none_or(|reply| reply.is_closed())
    }

    fn complete(&self, index: usize, embedded: Embedded) {
        let mut guard = lock(&self.progress);
        let progress = &mut *guard;
        if progress.reply.is_none() {
            return;
        }
        if let Some(slot) = progress.results.get_mut(index) {
            if slot.is_none() {
                progress.remaining -= 1;
            }
            *slot = Some(embedded);
        }
        if progress.remaining == 0 {
            let results: Option<Vec<Embedded>> =
                progress.results.iter_mut().map(Option::take).collect();
            let answer = results.ok_or_else(|| ApiError::Internal("lost an embedding".into()));
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

struct Pending {
    job: Arc<Job>,
    /// Index of the first input not yet taken by a worker.
    next: usize,
}

struct QueueState {
    jobs: VecDeque<Pending>,
    queued_inputs: usize,
    /// Sum of the token costs of the queued inputs.
    queued_tokens: usize,
    busy_workers: usize,
    batches: u64,
    closed: bool,
}

struct Shared {
    backend: Arc<dyn EmbedBackend>,
    dimension: usize,
    limits: BatchLimits,
    metrics: Arc<Metrics>,
    state: Mutex<QueueState>,
    work_available: Condvar,
}

/// The queue plus its worker threads. Dropping it closes the queue; workers
/// finish what is queued and exit.
pub(crate) struct Batcher {
    shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Batcher {
    pub(crate) fn start(
        backend: Arc<dyn EmbedBackend>,
        dimension: usize,
        limits: BatchLimits,
        workers: usize,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            backend,
            dimension,
            limits,
            metrics,
            state: Mutex::new(QueueState {
                jobs: VecDeque::new(),
                queued_inputs: 0,
                queued_tokens: 0,
                busy_workers: 0,
                batches: 0,
                closed: false,
            }),
            work_available: Condvar::new(),
        });
        let batcher = Batcher {
            shared: Arc::clone(&shared),
            workers: Mutex::new(Vec::new()),
        };
        for i in 0..workers {
            let shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(format!("bertflow-embed-{i}"))
                .spawn(move || worker_loop(&shared))?;
            lock(&batcher.workers).push(handle);
        }
        Ok(batcher)
    }

    /// Queue `texts` (with their token costs) and return the channel that
    /// will carry their embeddings, or refuse at once when the queue is full.
    pub(crate) fn submit(
        &self,
        texts: Vec<String>,
        costs: Vec<usize>,
    ) -> Result<oneshot::Receiver<Result<Vec<Embedded>, ApiError>>, ApiError> {
        let (tx, rx) = oneshot::channel();
        let n = texts.len();
        if n == 0 || costs.len() != n {
            let _ = tx.send(if n == 0 {
                Ok(Vec::new())
            } else {
                Err(ApiError::Internal("token costs do not match inputs".into()))
            });
            return Ok(rx);
        }
        let mut state = lock(&self.shared.state);
        if state.closed {
            return Err(ApiError::Internal(
                "the embedding workers have stopped".into(),
            ));
        }
        let limit = self.shared.limits.max_queue_inputs;
        if state.queued_inputs + n > limit {
            return Err(ApiError::Overloaded {
                queued: state.queued_inputs,
                limit,
                requested: n,
            });
        }
        let tokens = costs.iter().fold(0usize, |sum, &c| sum.saturating_add(c));
        let token_limit = self.shared.limits.max_queue_tokens;
        if state.queued_tokens > 0 && state.queued_tokens.saturating_add(tokens) > token_limit {
            return Err(ApiError::OverloadedTokens {
                queued: state.queued_tokens,
                limit: token_limit,
                requested: tokens,
            });
        }
        let job = Arc::new(Job {
            texts,
            costs,
            progress: Mutex::new(Progress {
                results: vec![None; n],
                remaining: n,
                reply: Some(tx),
            }),
        });
        state.jobs.push_back(Pending { job, next: 0 });
        state.queued_inputs += n;
        state.queued_tokens = state.queued_tokens.saturating_add(tokens);
        drop(state);
        self.shared.work_available.notify_one();
        Ok(rx)
    }

    /// Fail fast with 429 when `n` more inputs cannot fit in the queue now.
    pub(crate) fn check_room(&self, n: usize) -> Result<(), ApiError> {
        let state = lock(&self.shared.state);
        let limit = self.shared.limits.max_queue_inputs;
        if state.queued_inputs + n > limit {
            return Err(ApiError::Overloaded {
                queued: state.queued_inputs,
                limit,
                requested: n,
            });
        }
        Ok(())
    }

    pub(crate) fn load(&self) -> Load {
        let state = lock(&self.shared.state);
        Load {
            queued_inputs: state.queued_inputs,
            queued_requests: state.jobs.len(),
            busy_workers: state.busy_workers,
            batches: state.batches,
        }
    }

    fn close(&self) {
        lock(&self.shared.state).closed = true;
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

impl Drop for Batcher {
    fn drop(&mut self) {
        self.close();
    }
}

fn worker_loop(shared: &Shared) {
    while let Some(batch) = next_batch(shared) {
        let tokens = batch
            .iter()
            .fold(0usize, |sum, (job, i)| sum.saturating_add(job.costs[*i]));
        shared.metrics.observe_batch(batch.len(), tokens);
        run_batch(shared, &batch);
        let mut state = lock(&shared.state);
        state.busy_workers -= 1;
        state.batches += 1;
    }
}

/// Block until there is work, then take a batch; `None` once closed and empty.
fn next_batch(shared: &Shared) -> Option<Vec<(Arc<Job>, usize)>> {
    let limits = shared.limits;
    let mut guard = lock(&shared.state);
    loop {
        let state = &mut *guard;
        let mut batch: Vec<(Arc<Job>, usize)> = Vec::new();
        let mut tokens = 0usize;
        while let Some(front) = state.jobs.front_mut() {
            if front.job.is_abandoned() {
                state.queued_inputs -= front.job.texts.len() - front.next;
                let left = front.job.costs[front.next..].iter().sum::<usize>();
                state.queued_tokens = state.queued_tokens.saturating_sub(left);
                state.jobs.pop_front();
                continue;
            }
            let cost = front.job.costs[front.next];
            if !batch.is_empty()
                && (batch.len() >= limits.max_batch_size
                    || tokens.saturating_add(cost) > limits.max_batch_tokens)
            {
                break;
            }
            batch.push((Arc::clone(&front.job), front.next));
            tokens = tokens.saturating_add(cost);
            front.next += 1;
            state.queued_inputs -= 1;
            state.queued_tokens = state.queued_tokens.saturating_sub(cost);
            if front.next == front.job.texts.len() {
                state.jobs.pop_front();
            }
        }
        if !batch.is_empty() {
            state.busy_workers += 1;
            let more = !state.jobs.is_empty();
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

fn run_batch(shared: &Shared, batch: &[(Arc<Job>, usize)]) {
    let texts: Vec<String> = batch.iter().map(|(job, i)| job.texts[*i].clone()).collect();
    match embed_checked(shared.backend.as_ref(), &texts, shared.dimension) {
        Ok(embedded) => deliver(batch, embedded),
        Err(message) => {
            let groups = job_groups(batch);
            if groups.len() == 1 {
                batch[0].0.fail(ApiError::Backend(message));
                return;
            }
            // Isolate the failure: retry each request's part on its own.
            for range in groups {
                let part = &batch[range.clone()];
                let texts = &texts[range];
                match embed_checked(shared.backend.as_ref(), texts, shared.dimension) {
                    Ok(embedded) => deliver(part, embedded),
                    Err(message) => part[0].0.fail(ApiError::Backend(message)),
                }
            }
        }
    }
}

/// Contiguous runs of the same job (a job's inputs are contiguous in a batch).
fn job_groups(batch: &[(Arc<Job>, usize)]) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    for i in 1..=batch.len() {
        if i == batch.len() || !Arc::ptr_eq(&batch[i].0, &batch[start].0) {
            groups.push(start..i);
            start = i;
        }
    }
    groups
}

fn deliver(batch: &[(Arc<Job>, usize)], embedded: Vec<Embedded>) {
    for ((job, index), e) in batch.iter().zip(embedded) {
        job.complete(*index, e);
    }
}

/// Call the backend, turning panics and malformed answers into errors.
pub(crate) fn embed_checked(
    backend: &dyn EmbedBackend,
    texts: &[String],
    dimension: usize,
) -> Result<Vec<Embedded>, String> {
    let embedded = match catch_unwind(AssertUnwindSafe(|| backend.embed(texts))) {
        Ok(Ok(embedded)) => embedded,
        Ok(Err(error)) => return Err(error.message),
        Err(_) => return Err("the backend panicked".into()),
    };
    if embedded.len() != texts.len() {
        return Err(format!(
            "the backend returned {} embeddings for {} inputs",
            embedded.len(),
            texts.len()
        ));
    }
    if let Some(bad) = embedded.iter().find(|e| e.vector.len() != dimension) {
        return Err(format!(
            "the backend returned a vector of dimension {} instead of {dimension}",
            bad.vector.len()
        ));
    }
    Ok(embedded)
}

/// Split inputs with the given token costs into consecutive batches under the
/// limits (the same greedy rule the workers use). Used to index the corpus.
pub(crate) fn plan_batches(
    costs: &[usize],
    max_tokens: usize,
    max_size: usize,
) -> Vec<Range<usize>> {
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
        assert_eq!(plan_batches(&[], 10, 4), Vec::<Range<usize>>::new());
        assert_eq!(plan_batches(&[4, 4, 4, 4], 8, 10), vec![0..2, 2..4]);
        assert_eq!(
            plan_batches(&[1, 1, 1, 1, 1], 100, 2),
            vec![0..2, 2..4, 4..5]
        );
        // An input over the budget runs alone.
        assert_eq!(plan_batches(&[2, 50, 2], 10, 10), vec![0..1, 1..2, 2..3]);
    }
}
