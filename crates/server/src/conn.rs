//! The connection layer: the accept loop, a cap on open connections, the
//! header / idle / body timeouts, JSON for the HTTP parser's own errors, and
//! a shutdown that waits for requests in progress at most
//! `shutdown_timeout_ms`.
//!
//! * **Cap and eviction.** A semaphore holds one permit per open connection.
//!   A client that arrives at `max_connections`, or when accepting fails for
//!   want of file descriptors (`EMFILE`, `ENFILE`), makes the server close the
//!   oldest connection that has no request in progress (one that has not sent
//!   a full request head, or an idle kept-alive one), as nginx and Apache's
//!   reqtimeout do: half-sent heads cannot keep `/health` or a complete
//!   request out. Only when every connection has a request in progress does
//!   the newcomer wait for one to finish. Accept errors are logged and
//!   retried, never fatal.
//! * **Header timeout.** From the connection's start, and from the first byte
//!   after an answer, the client has `header_timeout_ms` to complete a request
//!   head; otherwise the connection is closed.
//! * **Idle timeout.** A kept-alive connection with no request in progress and
//!   no byte received is closed after `idle_timeout_ms`.
//! * **Body timeout**, `Expect: 100-continue` and the body limit: see
//!   [`body_guard`] (a middleware, so that its answers are in the API's shape).
//! * **Parser errors.** hyper answers a request it cannot parse (400, 414,
//!   431) itself, with an empty body; [`Guarded`] recognises such an answer
//!   (a response head written while no request is being handled) and writes
//!   the same status with a JSON error body instead.
//! * **Shutdown.** Stop accepting, ask every connection to finish
//!   (idle ones close at once, answers in progress are completed), and after
//!   `shutdown_timeout_ms` drop what is left (half-sent requests).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

use crate::config::Limits;
use crate::error::ApiError;

/// The timeouts and the cap, from [`Limits`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnLimits {
    pub max_connections: usize,
    pub header: Duration,
    pub idle: Duration,
    pub shutdown: Duration,
}

impl ConnLimits {
    pub(crate) fn from_limits(limits: &Limits) -> Self {
        ConnLimits {
            max_connections: limits.max_connections,
            header: Duration::from_millis(limits.header_timeout_ms),
            idle: Duration::from_millis(limits.idle_timeout_ms),
            shutdown: Duration::from_millis(limits.shutdown_timeout_ms),
        }
    }
}

/// Accept connections on `listener` and serve `router` on each until
/// `shutdown` completes; then stop accepting and return once every
/// connection has closed (after at most `limits.shutdown`).
pub(crate) async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let registry = Registry::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if !is_connection_error(&e) {
                        // EMFILE, ENFILE, ENOMEM...: free a descriptor held by
                        // a connection doing nothing, else wait for one.
                        let evicted = registry.evict_oldest();
                        tracing::warn!(target: "bertflow_server::conn", error = %e, evicted, "accept failed; retrying");
                        let pause = if evicted { 5 } else { 50 };
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                    }
                    continue;
                }
            },
        };
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // At the cap: make room by closing the oldest connection
                // without a request in progress, or wait for one to end.
                if registry.evict_oldest() {
                    tracing::debug!(target: "bertflow_server::conn", "at the connection cap: closed the oldest connection without a request");
                }
                let permit = tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    permit = Arc::clone(&permits).acquire_owned() => permit,
                };
                match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(
            stream,
            router.clone(),
            limits,
            stop_rx.clone(),
            permit,
            registry.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a permit until it ends; each ends within
    // `limits.shutdown` of the signal.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
}

/// The open connections, for eviction: each with what its timeouts look at
/// and a way to close it.
#[derive(Clone, Default)]
struct Registry(Arc<Mutex<RegistryState>>);

#[derive(Default)]
struct RegistryState {
    next: u64,
    open: std::collections::HashMap<u64, (Shared, Arc<Notify>)>,
}

impl Registry {
    fn add(&self, activity: &Shared) -> (u64, Arc<Notify>) {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        state.next += 1;
        let id = state.next;
        let evict = Arc::new(Notify::new());
        state
            .open
            .insert(id, (Arc::clone(activity), Arc::clone(&evict)));
        (id, evict)
    }

    fn remove(&self, id: u64) {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        state.open.remove(&id);
    }

    /// Close the connection without a request in progress that has waited
    /// longest (for its request head, or idle); false when every connection
    /// has a request in progress.
    fn evict_oldest(&self) -> bool {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = state
            .open
            .iter()
            .filter_map(|(&id, (activity, _))| {
                let a = lock(activity);
                (a.in_flight == 0).then(|| (a.reading_since.unwrap_or(a.idle_since), id))
            })
            .min();
        match oldest {
            Some((_, id)) => {
                if let Some((_, evict)) = state.open.remove(&id) {
                    evict.notify_one();
                }
                true
            }
            None => false,
        }
    }
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// What the timeouts look at, shared by the connection's I/O and its service.
#[derive(Debug)]
struct Activity {
    /// Requests handed to the router and not answered yet.
    in_flight: usize,
    /// Requests handed to the router whose response head is not written yet.
    heads_owed: usize,
    /// When the head of the next request began (the connection's start, or
    /// the first byte received after an answer); `None`: nothing received.
    reading_since: Option<Instant>,
    /// When the connection last became idle.
    idle_since: Instant,
}

impl Activity {
    fn new() -> Self {
        let now = Instant::now();
        Activity {
            in_flight: 0,
            heads_owed: 0,
            reading_since: Some(now),
            idle_since: now,
        }
    }

    /// Why the connection must close now, if it must.
    fn expired(&self, limits: &ConnLimits, now: Instant) -> Option<&'static str> {
        if self.in_flight > 0 {
            return None;
        }
        match self.reading_since {
            Some(t) if now.duration_since(t) >= limits.header => {
                Some("request head not complete within the header timeout")
            }
            Some(_) => None,
            None if now.duration_since(self.idle_since) >= limits.idle => {
                Some("idle past the keep-alive timeout")
            }
            None => None,
        }
    }
}

type Shared = Arc<Mutex<Activity>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Activity> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

async fn connection(
    stream: TcpStream,
    router: Router,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
    registry: Registry,
) {
    let activity: Shared = Arc::new(Mutex::new(Activity::new()));
    let (id, evict) = registry.add(&activity);
    // Leave the registry however the connection ends.
    struct Leave(Registry, u64);
    impl Drop for Leave {
        fn drop(&mut self) {
            self.0.remove(self.1);
        }
    }
    let _leave = Leave(registry, id);
    let io = TokioIo::new(Guarded {
        inner: stream,
        activity: Arc::clone(&activity),
        pending: Vec::new(),
    });
    let service_activity = Arc::clone(&activity);
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        {
            let mut a = lock(&service_activity);
            a.in_flight += 1;
            a.heads_owed += 1;
            a.reading_since = None;
        }
        let router = router.clone();
        let activity = Arc::clone(&service_activity);
        async move {
            let response = tower::ServiceExt::oneshot(router, req.map(Body::new)).await;
            let mut a = lock(&activity);
            a.in_flight -= 1;
            a.idle_since = Instant::now();
            response
        }
    });
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    tokio::pin!(conn);
    let tick = (limits.header.min(limits.idle) / 4)
        .clamp(Duration::from_millis(5), Duration::from_secs(1));
    let mut ticks = tokio::time::interval(tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut deadline: Option<Instant> = None;
    if *stop.borrow() {
        conn.as_mut().graceful_shutdown();
        deadline = Some(Instant::now() + limits.shutdown);
    }
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(target: "bertflow_server::conn", error = %e, "connection ended with an error");
                }
                return;
            }
            _ = ticks.tick() => {
                let now = Instant::now();
                if let Some(why) = lock(&activity).expired(&limits, now) {
                    tracing::debug!(target: "bertflow_server::conn", why, "closing connection");
                    return;
                }
                if deadline.is_some_and(|d| now >= d) {
                    tracing::warn!(target: "bertflow_server::conn", "shutdown timeout: dropping a connection with a request in progress");
                    return;
                }
            }
            () = evict.notified() => {
                // A request may have begun since it was chosen: then it stays.
                if lock(&activity).in_flight == 0 {
                    tracing::debug!(target: "bertflow_server::conn", "evicted: a new client needs the slot");
                    return;
                }
            }
            _ = stop.changed(), if deadline.is_none() => {
                conn.as_mut().graceful_shutdown();
                deadline = Some(Instant::now() + limits.shutdown);
            }
        }
    }
}

/// The socket, watched: reads mark the start of a request head; a response
/// head written while no request is being handled is hyper's own error answer
/// and is replaced by the same status with a JSON body.
struct Guarded {
    inner: TcpStream,
    activity: Shared,
    /// Bytes of a replacement answer not written yet.
    pending: Vec<u8>,
}

impl Guarded {
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            let n = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.pending.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

/// The JSON answer for the status hyper chose for a request it could not parse.
fn parser_error(status: &[u8]) -> ApiError {
    match status {
        b"414" => ApiError::UriTooLong,
        b"431" => ApiError::HeadersTooLarge,
        _ => ApiError::BadRequest("the request line or a header could not be parsed".into()),
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let mut a = lock(&this.activity);
            if a.in_flight == 0 && a.reading_since.is_none() {
                a.reading_since = Some(Instant::now());
            }
        }
        result
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_pending(cx))?;
        if buf.len() >= 12 && buf.starts_with(b"HTTP/1.1 ") && buf[9] != b'1' {
            let mut a = lock(&this.activity);
            if a.heads_owed > 0 {
                a.heads_owed -= 1;
            } else {
                drop(a);
                // hyper answers a request it could not parse; it closes the
                // connection after this write.
                this.pending = parser_error(&buf[9..12]).raw_http_close();
                let _ = this.poll_pending(cx)?;
                return Poll::Ready(Ok(buf.len()));
            }
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// Limits the body guard applies.
#[derive(Clone, Copy)]
pub(crate) struct BodyLimits {
    pub max_body_bytes: usize,
    /// `None` in-process ([`crate::App`]): no client to wait for, and the
    /// caller's runtime may have no timer.
    pub timeout_ms: Option<u64>,
}

/// Reads the whole request body before any handler runs: a declared
/// `Content-Length` over `max_body_bytes` is answered 413: before a byte of
/// body is asked for when the client sent `Expect: 100-continue` (so it gets
/// 413, not `100 Continue`) or declared more than four times the limit;
/// otherwise after reading and dropping the body, so that a client still
/// sending it can read the answer. A body that does not arrive within `body_timeout_ms` is
/// answered 408; a streamed body that grows past the limit, 413. The last two
/// close the connection (the rest of the body is not read).
pub(crate) async fn body_guard(
    State(limits): State<BodyLimits>,
    req: Request,
    next: Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let too_large = ApiError::BodyTooLarge {
        limit: limits.max_body_bytes,
    };
    if let Some(n) = declared.filter(|&n| n > limits.max_body_bytes as u64) {
        let expects_continue = req
            .headers()
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        // A client already sending a body slightly over the limit reads the
        // answer only once its body is taken: read and drop it (bounded by
        // four times the limit and the body timeout). One that waits for
        // `100 Continue`, or declares more, is answered at once.
        if expects_continue || n > (limits.max_body_bytes as u64).saturating_mul(4) {
            return closing(too_large);
        }
        let mut body = req.into_body();
        let drain = std::future::poll_fn(|cx| loop {
            match Pin::new(&mut body).poll_frame(cx) {
                Poll::Ready(Some(Ok(_))) => continue,
                Poll::Ready(_) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        });
        let drained = match limits.timeout_ms {
            Some(ms) => tokio::time::timeout(Duration::from_millis(ms), drain)
                .await
                .is_ok(),
            None => {
                drain.await;
                true
            }
        };
        return if drained {
            too_large.into_response()
        } else {
            closing(too_large)
        };
    }
    let (parts, body) = req.into_parts();
    let read = axum::body::to_bytes(body, limits.max_body_bytes);
    let read = match limits.timeout_ms {
        Some(ms) => tokio::time::timeout(Duration::from_millis(ms), read).await,
        None => Ok(read.await),
    };
    let bytes = match read {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => {
            // http-body-util's `LengthLimitError`, behind axum's error.
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.to_string().contains("length limit exceeded"));
            return closing(if too_large {
                ApiError::BodyTooLarge {
                    limit: limits.max_body_bytes,
                }
            } else {
                ApiError::BadRequest(format!("the request body could not be read: {e}"))
            });
        }
        Err(_) => {
            return closing(ApiError::RequestTimeout {
                ms: limits.timeout_ms.unwrap_or_default(),
            })
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn closing(error: ApiError) -> Response {
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
