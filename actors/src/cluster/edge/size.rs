//! The size guard: a frame whose encoding exceeds the edge's limit is refused before it is
//! sent, as an error value, because one frame over ractor_cluster's 16 MiB limit drops the
//! whole connection (and everything in flight on it).
//!
//! # Invariants
//!
//! * A frame that passes is at most `max_bytes` encoded; one that does not never reaches
//!   the wire, and the caller gets its size back.

use agent_tree_protocol::DEFAULT_MAX_FRAME_BYTES;

/// A frame too large for the edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("edge frame of {bytes} bytes exceeds the limit of {max} bytes")]
pub(crate) struct Oversized {
    /// Its encoded size.
    pub(crate) bytes: usize,
    /// The limit.
    pub(crate) max: usize,
}

/// The largest encoded frame an edge sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SizeGuard {
    max_bytes: usize,
}

impl Default for SizeGuard {
    /// [`DEFAULT_MAX_FRAME_BYTES`] (8 MiB), half of ractor_cluster's frame limit.
    fn default() -> Self {
        SizeGuard::new(DEFAULT_MAX_FRAME_BYTES)
    }
}

impl SizeGuard {
    /// A guard refusing frames over `max_bytes`.
    pub(crate) const fn new(max_bytes: usize) -> Self {
        SizeGuard { max_bytes }
    }

    /// The limit.
    pub(crate) const fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Whether a frame of `bytes` encoded bytes may be sent; `Ok` gives the size back.
    pub(crate) fn check(&self, bytes: usize) -> Result<usize, Oversized> {
        if bytes > self.max_bytes {
            Err(Oversized {
                bytes,
                max: self.max_bytes,
            })
        } else {
            Ok(bytes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_inclusive_and_the_default_is_below_the_transports() {
        let guard = SizeGuard::new(10);
        assert_eq!(guard.check(10), Ok(10));
        assert_eq!(guard.check(11), Err(Oversized { bytes: 11, max: 10 }));
        assert_eq!(guard.check(0), Ok(0));
        let default = SizeGuard::default();
        assert_eq!(default.max_bytes(), 8 * 1024 * 1024);
        assert!(default.check(16 * 1024 * 1024).is_err());
        assert!(default.check(usize::MAX).is_err());
    }
}
