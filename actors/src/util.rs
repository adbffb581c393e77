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

/// A span kept only when it is enabled: a disabled span (no subscriber wants it, the
/// common case in production without tracing) costs a pointer instead of a `Span`.
#[derive(Clone, Debug, Default)]
pub(crate) struct SpanSlot(Option<Box<tracing::Span>>);

impl SpanSlot {
    /// Keeps `span` if it is enabled.
    pub(crate) fn new(span: tracing::Span) -> Self {
        if span.is_disabled() {
            SpanSlot(None)
        } else {
            SpanSlot(Some(Box::new(span)))
        }
    }

    /// The span (a disabled one when none is kept).
    pub(crate) fn span(&self) -> tracing::Span {
        self.0
            .as_deref()
            .cloned()
            .unwrap_or_else(tracing::Span::none)
    }

    /// The span's id, as the parent of a child span.
    pub(crate) fn id(&self) -> Option<tracing::Id> {
        self.0.as_deref().and_then(tracing::Span::id)
    }
}

/// The hasher of the runtime's maps keyed by its own ids (agent ids, ractor actor ids,
/// request ids, the places of cached offers): FxHash's rotate-xor-multiply, a few instructions a word where the
/// standard SipHash takes ~100 per key. These keys are dense counters or ids the runtime
/// or the application made, never text a model chooses, so they need no protection from
/// chosen collisions.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

impl IdHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map keyed by the runtime's own ids, hashed by [`IdHasher`].
pub(crate) type IdMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;
