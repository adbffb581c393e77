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

/// Polls a future so that a synchronous block inside it (a blocking call where an await was
/// expected) does not hold a runtime worker: on a multi-thread runtime each poll runs under
/// [`tokio::task::block_in_place`], which hands the worker's other tasks to another thread for
/// the duration of the poll. On a current-thread runtime (where that is impossible) the
/// future is polled as it is.
///
/// Shutdown hooks run under this, so a hook that blocks its thread cannot stop the shutdown's
/// deadline timer and kill path from running.
pub(crate) struct OffWorker<F> {
    inner: Pin<Box<F>>,
    hand_off: bool,
}

impl<F: Future> OffWorker<F> {
    pub(crate) fn new(future: F) -> Self {
        let hand_off = tokio::runtime::Handle::try_current().is_ok_and(|h| {
            matches!(
                h.runtime_flavor(),
                tokio::runtime::RuntimeFlavor::MultiThread
            )
        });
        OffWorker {
            inner: Box::pin(future),
            hand_off,
        }
    }
}

impl<F: Future> Future for OffWorker<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.hand_off {
            let inner = self.inner.as_mut();
            tokio::task::block_in_place(|| inner.poll(cx))
        } else {
            self.inner.as_mut().poll(cx)
        }
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
