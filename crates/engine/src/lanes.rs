//! Batches side by side, and the buffers each keeps from one batch to the
//! next.
//!
//! A batch's forward pass goes through phases (a layer's projections, its
//! attention, the blocks after attention) split into parallel tasks, and
//! each phase ends when its last task does: a thread done with its share
//! waits. Two batches in flight at once let that thread take up the other
//! batch's tasks instead (MiniLM at 2 threads lost 1.6% of its time to
//! those waits). The results do not depend on which thread ran what.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use rayon::prelude::*;

/// How many batches the engine runs at once: two on more than one thread,
/// else one.
pub fn count() -> usize {
    if rayon::current_num_threads() > 1 {
        2
    } else {
        1
    }
}

/// Runs jobs `0..jobs`, `lanes` at a time, each lane taking the next job
/// when it is done with one. `done` gets each job's result as it finishes
/// (one call at a time, so a count it keeps only grows). The first error
/// stops the lanes taking new jobs and is returned.
pub fn side_by_side<T, E: Send>(
    jobs: usize,
    lanes: usize,
    run: impl Fn(usize) -> Result<T, E> + Sync,
    done: impl FnMut(usize, T) + Send,
) -> Result<(), E> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let done = Mutex::new(done);
    let lane = || {
        while !failed.load(Ordering::Relaxed) {
            let job = next.fetch_add(1, Ordering::Relaxed);
            if job >= jobs {
                break;
            }
            let out = run(job).inspect_err(|_| failed.store(true, Ordering::Relaxed))?;
            (done.lock().unwrap_or_else(PoisonError::into_inner))(job, out);
        }
        Ok(())
    };
    match lanes {
        0 | 1 => lane(),
        _ => (0..lanes).into_par_iter().try_for_each(|_| lane()),
    }
}

/// State reused from one call to the next (buffers whose fresh allocation
/// would fault in every page on every batch): one set per call running at
/// once, made on first use.
#[derive(Default)]
pub struct Reused<T>(Mutex<Vec<T>>);

impl<T> std::fmt::Debug for Reused<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reused").finish_non_exhaustive()
    }
}

impl<T: Default> Reused<T> {
    /// Runs `f` with a set no other call holds.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        // A panic inside `f` loses its set, and nothing that the next call
        // relies on: every buffer is resized and overwritten before it is
        // read.
        let sets = || self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut state = sets().pop().unwrap_or_default();
        let out = f(&mut state);
        sets().push(state);
        out
    }
}

/// `buffer` resized to `n` values, for a pass that writes each before
/// reading it (its old values are not cleared).
pub fn sized(buffer: &mut Vec<f32>, n: usize) -> &mut [f32] {
    buffer.resize(n, 0.0);
    &mut buffer[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_runs_once_and_the_first_error_stops_the_lanes() {
        for lanes in [1, 2, 3] {
            let mut seen = Vec::new();
            side_by_side(50, lanes, Ok::<_, ()>, |job, out| {
                assert_eq!(job, out);
                seen.push(job);
            })
            .unwrap();
            seen.sort_unstable();
            assert_eq!(seen, (0..50).collect::<Vec<_>>(), "{lanes} lanes");

            let started = AtomicUsize::new(0);
            let failed = side_by_side(
                1000,
                lanes,
                |job| {
                    started.fetch_add(1, Ordering::Relaxed);
                    if job == 3 { Err(job) } else { Ok(job) }
                },
                |_, _| {},
            );
            assert_eq!(failed, Err(3));
            if lanes == 1 {
                assert_eq!(started.into_inner(), 4, "jobs after the error ran");
            }
        }
    }

    #[test]
    fn calls_at_once_get_sets_of_their_own() {
        let reused = Reused::<Vec<usize>>::default();
        reused.with(|outer| {
            outer.push(1);
            reused.with(|inner| assert!(inner.is_empty(), "a set in use was handed out"));
        });
        // Both sets are kept: the next two calls get one each.
        reused.with(|a| reused.with(|b| assert_eq!(a.len() + b.len(), 1)));
    }
}
