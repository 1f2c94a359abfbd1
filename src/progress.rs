//! Progress reporting without printing: library code reports through this trait; the CLI draws
//! bars (indicatif), tests and embedders pass [`NoProgress`].

/// Receives progress of a long step. Implementations must be cheap and thread-safe: workers call
/// [`Progress::advance`] from rayon threads.
pub trait Progress: Sync {
    /// A new step begins: `label` names it, `total` counts its units when known.
    fn begin(&self, label: &str, total: Option<u64>) {
        let _ = (label, total);
    }
    /// `units` more units are done.
    fn advance(&self, units: u64) {
        let _ = units;
    }
    /// The step is over.
    fn finish(&self) {}
    /// Whether the caller asked the work to stop (a Python caller's Ctrl-C): long loops look
    /// before each item and stop with [`crate::Error::Interrupted`]. Called from worker
    /// threads, so it must be cheap.
    fn cancelled(&self) -> bool {
        false
    }
}

/// Ignores all progress.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}
