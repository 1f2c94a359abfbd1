//! Several sequences decoded together: a pool of sessions (one KV cache per sequence) and a
//! scheduler that runs every waiting sequence's next tokens in one pass over the weights.
//!
//! Each caller (one thread per call in flight) takes a [`Session`] from the [`SessionPool`],
//! runs its prompt there, then joins the [`Batcher`] for its generated tokens. A step waits until
//! every sequence that is decoding has asked for its own, then one of the waiting threads runs
//! them all with [`Model::steps_many`] and hands each its logits. Generation is memory-bound one
//! sequence at a time (every weight byte read per token); N sequences read each byte once for N
//! tokens. [`Model::steps_many`] gives every run the logits it would get alone, so answers do not
//! depend on which sequences happened to share a pass.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

use super::Session;
use super::model::{Model, Run};
use crate::kernels::attention::KvCache;

/// Sessions for up to `capacity` sequences at once; a caller takes the one whose cached prompt
/// shares the longest prefix with its own.
pub struct SessionPool {
    free: Mutex<Vec<Session>>,
    returned: Condvar,
    capacity: usize,
}

/// A session taken from a [`SessionPool`]; it goes back when dropped.
pub struct PooledSession<'a> {
    pool: &'a SessionPool,
    session: Option<Session>,
}

impl SessionPool {
    /// `capacity` empty sessions for `model` (at least one).
    pub fn new(model: &Model, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            free: Mutex::new((0..capacity).map(|_| Session::new(model)).collect()),
            returned: Condvar::new(),
            capacity,
        }
    }

    /// How many sequences can run at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// A free session, the one sharing the longest prefix with `prompt` (waits while all are
    /// taken).
    pub fn take(&self, prompt: &[u32]) -> PooledSession<'_> {
        let mut free = relock(self.free.lock());
        while free.is_empty() {
            free = relock(self.returned.wait(free));
        }
        let best = (0..free.len())
            .max_by_key(|&i| (free[i].shared_prefix(prompt), std::cmp::Reverse(i)))
            .unwrap_or(0);
        let session = free.swap_remove(best);
        PooledSession {
            pool: self,
            session: Some(session),
        }
    }
}

impl std::ops::Deref for PooledSession<'_> {
    type Target = Session;
    fn deref(&self) -> &Session {
        self.session.as_ref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for PooledSession<'_> {
    fn deref_mut(&mut self) -> &mut Session {
        self.session.as_mut().expect("present until dropped")
    }
}

impl Drop for PooledSession<'_> {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            relock(self.pool.free.lock()).push(session);
            self.pool.returned.notify_one();
        }
    }
}

/// The decode scheduler shared by every sequence of one model.
#[derive(Default)]
pub struct Batcher {
    state: Mutex<BatchState>,
    changed: Condvar,
}

#[derive(Default)]
struct BatchState {
    /// Sequences between their prompt and their last token.
    decoding: usize,
    /// Steps asked for and not yet run.
    waiting: Vec<Waiting>,
    /// Whether a pass is running now.
    running: bool,
    /// Finished steps, by ticket, until their caller takes them.
    done: HashMap<u64, Finished>,
    next_ticket: u64,
    /// Sequences per pass so far (for the debug log and the bench).
    passes: u64,
    stepped: u64,
}

struct Waiting {
    ticket: u64,
    tokens: Vec<u32>,
    cache: KvCache,
}

struct Finished {
    cache: KvCache,
    logits: Result<Vec<f32>, String>,
}

/// One sequence's membership of a [`Batcher`], from its first generated token to its last;
/// dropping it lets the others go on without it.
pub struct Decoding<'a> {
    batcher: &'a Batcher,
}

fn relock<'a, T>(
    result: Result<MutexGuard<'a, T>, std::sync::PoisonError<MutexGuard<'a, T>>>,
) -> MutexGuard<'a, T> {
    // The state is consistent after every statement that holds the lock: keep using it.
    result.unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Batcher {
    /// Joins the sequences being decoded.
    pub fn join(&self) -> Decoding<'_> {
        relock(self.state.lock()).decoding += 1;
        Decoding { batcher: self }
    }

    /// Passes run and sequence steps they held, since the start.
    pub fn counts(&self) -> (u64, u64) {
        let state = relock(self.state.lock());
        (state.passes, state.stepped)
    }
}

impl Drop for Decoding<'_> {
    fn drop(&mut self) {
        relock(self.batcher.state.lock()).decoding -= 1;
        // A pass may have been waiting for this sequence's step.
        self.batcher.changed.notify_all();
    }
}

impl Decoding<'_> {
    /// Runs `tokens` at the end of `session`'s cache together with the other sequences' next
    /// tokens; returns the logits of the last, the same as [`Session::steps`].
    pub fn steps(
        &self,
        model: &Model,
        session: &mut Session,
        tokens: &[u32],
    ) -> Result<Vec<f32>, String> {
        let batcher = self.batcher;
        let mut state = relock(batcher.state.lock());
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.push(Waiting {
            ticket,
            tokens: tokens.to_vec(),
            cache: session.take_cache(),
        });
        loop {
            if let Some(finished) = state.done.remove(&ticket) {
                session.put_cache(finished.cache);
                return finished.logits;
            }
            if !state.running && !state.waiting.is_empty() && state.waiting.len() >= state.decoding
            {
                let mut batch = std::mem::take(&mut state.waiting);
                state.running = true;
                drop(state);
                let logits = run_pass(model, &mut batch);
                state = relock(batcher.state.lock());
                state.running = false;
                state.passes += 1;
                state.stepped += batch.len() as u64;
                for (waiting, logits) in batch.into_iter().zip(logits) {
                    state.done.insert(
                        waiting.ticket,
                        Finished {
                            cache: waiting.cache,
                            logits,
                        },
                    );
                }
                batcher.changed.notify_all();
                continue;
            }
            state = relock(batcher.changed.wait(state));
        }
    }
}

/// One pass over every waiting step: their logits, or the pass's error for each (a panic
/// becomes an error, so the threads waiting on the pass are never left waiting).
fn run_pass(model: &Model, batch: &mut [Waiting]) -> Vec<Result<Vec<f32>, String>> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut runs: Vec<Run<'_>> = batch
            .iter_mut()
            .map(|w| Run {
                tokens: &w.tokens,
                cache: &mut w.cache,
            })
            .collect();
        model.steps_many(&mut runs)
    }));
    let error = match outcome {
        Ok(Ok(logits)) => return logits.into_iter().map(Ok).collect(),
        Ok(Err(e)) => e,
        Err(_) => "the decoding pass panicked".to_string(),
    };
    batch.iter().map(|_| Err(error.clone())).collect()
}
