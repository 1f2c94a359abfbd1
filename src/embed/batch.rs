//! Length-sorted, token-budget batching: texts are grouped longest first so that each batch pads
//! little, and a batch holds at most `max_batch_tokens` padded tokens (rows x longest row). The
//! plan records each row's input position, so results go back in input order.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::progress::Progress;

/// Default token budget of one batch (padded tokens) on a GPU, as text-embeddings-inference.
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 16_384;

/// Default token budget on the CPU: small batches keep activations in cache and below the
/// allocator's mmap threshold (measured ~1.4x faster than 16,384 for all-MiniLM-L6-v2 on 2 cores).
pub const DEFAULT_CPU_MAX_BATCH_TOKENS: usize = 2_048;

/// Splits inputs of the given token lengths into batches of input positions.
///
/// Positions are ordered by length descending (ties by position, so the plan is deterministic);
/// a batch is closed when one more row would exceed `max_batch_tokens` padded tokens. A single
/// row longer than the budget still forms its own batch.
pub fn plan_batches(lengths: &[usize], max_batch_tokens: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
    let mut batches = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut longest = 0;
    for position in order {
        let len = lengths[position].max(1);
        let widest = longest.max(len);
        if !current.is_empty() && widest * (current.len() + 1) > max_batch_tokens {
            batches.push(std::mem::take(&mut current));
            longest = 0;
        }
        longest = longest.max(len);
        current.push(position);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// Runs `run` on every batch and hands each result to `store`, advancing `progress` per row.
///
/// On the CPU (`on_cpu`), the batches run concurrently, one per worker thread of the current
/// rayon pool (never more workers than batches), each inside its own one-thread rayon pool, so
/// every matmul, attention and elementwise pass of a batch runs serially on its worker. Small models on few cores gain from this: intra-op parallelism
/// synchronises every layer and splits matrices that are already small (measured with
/// all-MiniLM-L6-v2 on 2 cores: see README). A batch's result does not depend on which
/// worker ran it or on the thread count (no kernel splits an inner sum), so the output is
/// the same as a serial run. On failure the other workers stop after their current batch and
/// the error of the earliest failing batch is returned (`model` names the model in errors of
/// the workers themselves).
pub fn run_batches<T: Send>(
    model: &str,
    batches: &[Vec<usize>],
    on_cpu: bool,
    progress: &dyn Progress,
    run: impl Fn(&[usize]) -> Result<T> + Sync,
    mut store: impl FnMut(&[usize], T) -> Result<()> + Send,
) -> Result<()> {
    // Accelerators run one batch at a time.
    let workers = if on_cpu {
        rayon::current_num_threads().min(batches.len())
    } else {
        1
    };
    let interrupted = || Error::Interrupted {
        what: format!("encoding with {model}"),
    };
    if workers <= 1 {
        for batch in batches {
            if progress.cancelled() {
                return Err(interrupted());
            }
            let got = run(batch)?;
            store(batch, got)?;
            progress.advance(batch.len() as u64);
        }
        return Ok(());
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let store = Mutex::new(&mut store);
    let errors: Mutex<Vec<(usize, Error)>> = Mutex::new(Vec::new());
    let fail = |at: usize, error: Error| {
        failed.store(true, Ordering::Relaxed);
        if let Ok(mut errors) = errors.lock() {
            errors.push((at, error));
        }
    };
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let pool = match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
                    Ok(pool) => pool,
                    Err(e) => {
                        fail(
                            0,
                            Error::model(model, format!("cannot start a batch worker: {e}")),
                        );
                        return;
                    }
                };
                while !failed.load(Ordering::Relaxed) {
                    if progress.cancelled() {
                        fail(usize::MAX, interrupted());
                        break;
                    }
                    let at = next.fetch_add(1, Ordering::Relaxed);
                    let Some(batch) = batches.get(at) else { break };
                    let stored = pool
                        .install(|| run(batch))
                        .and_then(|got| match store.lock() {
                            Ok(mut store) => store(batch, got),
                            Err(_) => Err(Error::model(model, "a batch worker panicked")),
                        });
                    match stored {
                        Ok(()) => progress.advance(batch.len() as u64),
                        Err(e) => fail(at, e),
                    }
                }
            });
        }
    });
    let mut errors = errors
        .into_inner()
        .map_err(|_| Error::model(model, "a batch worker panicked"))?;
    errors.sort_by_key(|(at, _)| *at);
    match errors.into_iter().next() {
        Some((_, error)) => Err(error),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn longest_first_within_budget() {
        let batches = plan_batches(&[3, 10, 5, 10, 1], 20);
        assert_eq!(batches, vec![vec![1, 3], vec![2, 0, 4]]);
        assert_eq!(plan_batches(&[50, 2], 10), vec![vec![0], vec![1]]);
        assert!(plan_batches(&[], 10).is_empty());
    }

    /// Runs `f` inside a rayon pool of `threads` threads (the batch workers' count on the CPU).
    fn in_pool<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(f)
    }

    #[test]
    fn concurrent_batches_store_everything_once() {
        let batches: Vec<Vec<usize>> = (0..40).map(|b| vec![2 * b, 2 * b + 1]).collect();
        let mut out = vec![0usize; 80];
        in_pool(3, || {
            run_batches(
                "m",
                &batches,
                true,
                &crate::progress::NoProgress,
                |batch| Ok(batch.iter().map(|p| p * 10).collect::<Vec<_>>()),
                |batch, got| {
                    for (&p, v) in batch.iter().zip(got) {
                        out[p] += v;
                    }
                    Ok(())
                },
            )
        })
        .unwrap();
        assert_eq!(out, (0..80).map(|p| p * 10).collect::<Vec<_>>());
    }

    #[test]
    fn a_failing_batch_stops_the_run_with_its_error() {
        let batches: Vec<Vec<usize>> = (0..40).map(|b| vec![b]).collect();
        for workers in [1, 2] {
            let err = in_pool(workers, || {
                run_batches(
                    "m",
                    &batches,
                    true,
                    &crate::progress::NoProgress,
                    |batch| {
                        if batch[0] >= 7 {
                            Err(Error::model("m", format!("batch {} failed", batch[0])))
                        } else {
                            Ok(())
                        }
                    },
                    |_, ()| Ok(()),
                )
            })
            .unwrap_err();
            assert!(err.to_string().contains("batch 7 failed"), "{err}");
        }
    }

    proptest! {
        #[test]
        fn every_position_once_and_budget_kept(lengths in proptest::collection::vec(1usize..300, 0..200), budget in 1usize..2000) {
            let batches = plan_batches(&lengths, budget);
            let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
            for batch in &batches {
                let widest = batch.iter().map(|&p| lengths[p]).max().unwrap();
                prop_assert!(batch.len() == 1 || widest * batch.len() <= budget);
            }
        }
    }
}
