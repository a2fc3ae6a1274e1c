//! A persistent worker pool with a barrier (DESIGN.md §6): the
//! calling thread and N−1 workers all run the same job, each with its index,
//! and `run` returns only when every one has finished.
//!
//! Jobs borrow the caller's stack (weights, activations, output slices), so
//! the pool erases the job's lifetime while workers hold it. That is sound
//! for the same reason `std::thread::scope` is: `run` does not return, even
//! by unwinding, until no worker can touch the job any more.
//!
//! Workers spin briefly before sleeping: a decode step issues hundreds of
//! short jobs per token, and a condvar wake-up costs more than most of them.

use super::error::{MlError, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The most threads a pool will run; per-thread scratch is sized by it.
pub const MAX_THREADS: usize = 32;

/// How long an idle worker spins before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// Bumped once per job; workers run a job when they see it change.
    generation: AtomicU64,
    /// The current job, lifetime-erased (see the module doc).
    job: Mutex<Option<&'static Job>>,
    /// Workers that have not finished the current job.
    pending: AtomicUsize,
    /// A worker's job panicked; `run` re-raises it on the caller.
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Workers asleep on `wake`, or about to be: `run` notifies only when
    /// some are, since a notify is a system call (futex wake) on every job
    /// otherwise, on the caller's critical path.
    sleepers: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
}

pub struct Pool {
    threads: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// A pool running jobs on `threads` threads: the caller plus
    /// `threads − 1` workers (clamped to 1..=MAX_THREADS).
    pub fn new(threads: usize) -> Result<Pool> {
        let threads = threads.clamp(1, MAX_THREADS);
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            pending: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut pool = Pool {
            threads: 1,
            shared,
            workers: Vec::new(),
        };
        for index in 1..threads {
            let shared = Arc::clone(&pool.shared);
            let handle = std::thread::Builder::new()
                .name(format!("ml-worker-{index}"))
                .spawn(move || worker(&shared, index))
                .map_err(|e| MlError::no_mem(format!("cannot start worker thread {index} of {threads}: {e}")))?;
            pool.workers.push(handle);
            pool.threads += 1;
        }
        Ok(pool)
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `job(i)` for every thread index i in 0..threads (0 on the
    /// caller) and waits for all of them.
    pub fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        if self.threads == 1 {
            job(0);
            return;
        }
        // SAFETY: the 'static reference never outlives this call: the guard
        // below waits until every worker has finished with it and clears it,
        // on normal return and on unwinding alike.
        let erased: &'static Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(job) };
        let s = &*self.shared;
        *s.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(erased);
        s.pending.store(self.threads - 1, Ordering::Release);
        // SeqCst pairs with the worker's `sleepers` increment and generation
        // check: either this load sees the worker counted (and the notify
        // below, under the lock it holds until it waits, wakes it) or the
        // worker's check sees the new generation and does not wait.
        s.generation.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _lock = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        struct WaitForWorkers<'a>(&'a Shared);
        impl Drop for WaitForWorkers<'_> {
            fn drop(&mut self) {
                // Spin while the workers are likely running; past SPIN a
                // worker has most likely lost its core (more threads than
                // free cores): yield ours, which may be the one it needs.
                let start = Instant::now();
                while self.0.pending.load(Ordering::Acquire) != 0 {
                    if start.elapsed() < SPIN {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
                *self.0.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
        }
        let wait = WaitForWorkers(s);
        job(0);
        drop(wait);
        if s.panicked.swap(false, Ordering::AcqRel) {
            panic!("a worker thread panicked");
        }
    }
}

fn worker(s: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        let spin_start = Instant::now();
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            if s.generation.load(Ordering::Acquire) != seen {
                break;
            }
            if spin_start.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let lock = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            if s.generation.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::SeqCst) {
                drop(s.wake.wait(lock).unwrap_or_else(|e| e.into_inner()));
            }
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        seen = s.generation.load(Ordering::Acquire);
        let job = *s.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(job) = job {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(index))).is_err() {
                s.panicked.store(true, Ordering::Release);
            }
        }
        s.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _lock = self.shared.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// The default thread count: one per available CPU, at most 8. Batch-1
/// decode is bound by memory bandwidth, which a few cores saturate; more
/// threads then only add synchronisation.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn counting_job(counts: &[AtomicUsize]) -> impl Fn(usize) + Sync + '_ {
        move |i| {
            counts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn every_thread_index_runs_once_per_job() {
        let pool = Pool::new(3).expect("pool");
        let counts: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        let jobs = if cfg!(miri) { 20 } else { 2000 };
        for _ in 0..jobs {
            pool.run(&counting_job(&counts));
        }
        let counts: Vec<usize> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert_eq!(counts, vec![jobs; 3]);
    }

    /// Workers that went to sleep (idle past SPIN) must be woken by the
    /// next job: a lost wake-up would hang `run`, so it runs on a thread of
    /// its own and the test fails after a timeout instead of hanging.
    #[test]
    fn workers_asleep_past_the_spin_wake_for_the_next_job() {
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            let pool = Pool::new(3).expect("pool");
            let counts: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..5 {
                pool.run(&counting_job(&counts));
                std::thread::sleep(SPIN * 20);
            }
            let _ = done.send(counts.iter().map(|c| c.load(Ordering::Relaxed)).collect::<Vec<_>>());
        });
        let counts = finished
            .recv_timeout(Duration::from_secs(60))
            .expect("a job after the workers slept never finished: lost wake-up");
        assert_eq!(counts, vec![5; 3]);
    }
}
