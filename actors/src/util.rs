//! Small future utilities shared by the runtime.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A boxed, sendable future: what [`Model`](crate::Model) and [`Tool`](crate::Tool)
/// implementations return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Polls a future, turning a panic inside it into an `Err` with the panic's message.
///
/// User code (models, tools, hooks) runs under this, so a panic there is a failure of one
/// agent, never of the runtime.
pub(crate) struct CatchUnwind<F> {
    inner: Pin<Box<F>>,
}

impl<F: Future> CatchUnwind<F> {
    pub(crate) fn new(future: F) -> Self {
        CatchUnwind {
            inner: Box::pin(future),
        }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.inner.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(panic_message(payload.as_ref()))),
        }
    }
}

/// Where a tree's shutdown hooks run: on a multi-thread runtime, a small runtime of their own
/// (two threads named `agent-tree-hooks`, built on the first shutdown that has hooks), so a
/// hook that blocks its thread (a blocking call where an await was expected) holds one of
/// those threads, never a worker the shutdown's deadline timer and kill path need. On a
/// current-thread runtime (tests under paused time), where a second runtime's clock would
/// not be the test's, a hook runs as a task of the caller's runtime.
///
/// Spawning a hook there costs what spawning a task costs. (It used to poll each hook under
/// `block_in_place`, a thread hand-off per poll: 100,000 agents' hooks kept both cores busy
/// for the whole grace.)
#[derive(Default)]
pub(crate) struct HookRuntime {
    runtime: std::sync::OnceLock<Option<tokio::runtime::Runtime>>,
}

impl std::fmt::Debug for HookRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookRuntime")
            .field("started", &self.runtime.get().is_some_and(Option::is_some))
            .finish()
    }
}

impl HookRuntime {
    /// Runs `future` where hooks run; the returned future resolves with its output (`Err`
    /// with a message if it panicked) and cancels it when dropped.
    pub(crate) fn run<F>(&self, future: F) -> HookRun<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let multi_thread = tokio::runtime::Handle::try_current().is_ok_and(|h| {
            matches!(
                h.runtime_flavor(),
                tokio::runtime::RuntimeFlavor::MultiThread
            )
        });
        let runtime = multi_thread
            .then(|| {
                self.runtime.get_or_init(|| {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .thread_name("agent-tree-hooks")
                        .enable_all()
                        .build()
                        .inspect_err(|error| {
                            tracing::warn!(%error, "no hook runtime; shutdown hooks run on the tree's");
                        })
                        .ok()
                })
            })
            .and_then(Option::as_ref);
        let handle = match runtime {
            Some(runtime) => runtime.spawn(future),
            None => tokio::spawn(future),
        };
        HookRun { handle }
    }
}

impl Drop for HookRuntime {
    fn drop(&mut self) {
        // A runtime may not be dropped where blocking is not allowed (the last handle of a tree
        // can go inside a task); its threads are let go instead, and a hook still blocking one
        // ends with it.
        if let Some(Some(runtime)) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A hook run started by [`HookRuntime::run`]; dropping it cancels the run.
#[derive(Debug)]
pub(crate) struct HookRun<T> {
    handle: tokio::task::JoinHandle<T>,
}

impl<T> Future for HookRun<T> {
    type Output = Result<T, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.handle).poll(cx).map(|joined| {
            joined.map_err(|error| match error.try_into_panic() {
                Ok(payload) => panic_message(payload.as_ref()),
                Err(error) => error.to_string(),
            })
        })
    }
}

impl<T> Drop for HookRun<T> {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}
