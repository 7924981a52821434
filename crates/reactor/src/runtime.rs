//! Runtimes: reactors driven by threads of their own, on one of two IO
//! models.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::error::{panic_message, Error};
use crate::handle::Handle;
use crate::lane::{Lane, LaneCtx, LaneHandle, LaneOptions};
use crate::reactor_lane::new_core;
use crate::sync::lock;

/// How a runtime maps threads to reactors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoModel {
    /// One reactor driven by `threads` threads, leader/follower: one thread
    /// waits in poll, hands the poll on to an idle thread when readiness
    /// arrives, and runs the ready lanes. A lane still runs on one thread at
    /// a time; different lanes run in parallel.
    Shared {
        /// Threads driving the reactor (at least 1).
        threads: usize,
    },
    /// `reactors` reactors, one thread each. Lanes are placed round-robin or
    /// explicitly, and stay on their reactor.
    Sharded {
        /// Reactors, each with its own thread (at least 1).
        reactors: usize,
    },
}

impl IoModel {
    /// Reactors this model creates: 1 for shared, N for sharded.
    pub fn reactors(&self) -> usize {
        match *self {
            IoModel::Shared { .. } => 1,
            IoModel::Sharded { reactors } => reactors,
        }
    }

    /// Threads this model starts.
    pub fn threads(&self) -> usize {
        match *self {
            IoModel::Shared { threads } => threads,
            IoModel::Sharded { reactors } => reactors,
        }
    }
}

/// Settings of a [`Runtime`] beyond its [`IoModel`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeOptions {
    /// In the shared model, how many of its threads are kept awake at once
    /// (running lanes, polling, or spinning briefly for work); the others
    /// stay parked until one of these parks. `None` (the default) is the
    /// number of CPUs this process may use
    /// ([`std::thread::available_parallelism`]): more awake threads than
    /// CPUs only queue for a CPU and cost futex round trips, so an
    /// oversubscribed runtime (`Shared { threads: 4 }` on 2 CPUs) runs like
    /// one that fits. Set it to the thread count to have every thread
    /// compete (tests of lane exclusivity do).
    pub awake_threads: Option<usize>,
}

/// Reactors and the threads that drive them.
///
/// # Examples
///
/// ```
/// use keel_reactor::{IoModel, Runtime};
/// use std::sync::mpsc;
///
/// let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
/// let (tx, rx) = mpsc::channel();
/// rt.handle().post(move || tx.send(42).unwrap());
/// assert_eq!(rx.recv().unwrap(), 42);
/// rt.stop().unwrap();
/// ```
pub struct Runtime {
    model: IoModel,
    handles: Vec<Handle>,
    threads: Vec<JoinHandle<Result<(), Error>>>,
    next: AtomicUsize,
    /// Counts threads that left their loop, so `join` learns that one
    /// reactor stopped and stops the others.
    exited: Arc<(Mutex<usize>, Condvar)>,
}

impl Runtime {
    /// Starts the reactors and threads of `model`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if the model asks for 0 threads or reactors; the OS
    /// error if a poll instance or thread cannot be created.
    pub fn new(model: IoModel) -> io::Result<Runtime> {
        Runtime::with_options(model, RuntimeOptions::default())
    }

    /// Starts the reactors and threads of `model` with `options`.
    ///
    /// # Errors
    ///
    /// As [`Runtime::new`]; also `InvalidInput` for `awake_threads: Some(0)`.
    pub fn with_options(model: IoModel, options: RuntimeOptions) -> io::Result<Runtime> {
        if options.awake_threads == Some(0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "awake_threads: expected at least 1 (or None for the CPU count)",
            ));
        }
        let (reactors, per_reactor) = match model {
            IoModel::Shared { threads } => (1, threads),
            IoModel::Sharded { reactors } => (reactors, 1),
        };
        if reactors == 0 || per_reactor == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{model:?}: threads and reactors must be at least 1"),
            ));
        }
        let mut rt = Runtime {
            model,
            handles: Vec::with_capacity(reactors),
            threads: Vec::new(),
            next: AtomicUsize::new(0),
            exited: Arc::new((Mutex::new(0), Condvar::new())),
        };
        for c in 0..reactors {
            let core = new_core()?;
            if let Some(n) = options.awake_threads {
                core.set_max_awake(n);
            }
            rt.handles.push(Handle::from_core(core.clone()));
            for t in 0..per_reactor {
                let core = core.clone();
                core.add_worker();
                let exited = rt.exited.clone();
                let name = match model {
                    IoModel::Shared { .. } => format!("keel-shared-{t}"),
                    IoModel::Sharded { .. } => format!("keel-shard-{c}"),
                };
                let thread = std::thread::Builder::new().name(name).spawn(move || {
                    let result = core.run_worker();
                    let (count, cv) = &*exited;
                    *lock(count) += 1;
                    cv.notify_all();
                    result
                });
                match thread {
                    Ok(j) => rt.threads.push(j),
                    Err(e) => {
                        let _ = rt.shutdown();
                        return Err(e);
                    }
                }
            }
        }
        Ok(rt)
    }

    /// The IO model this runtime was built with.
    pub fn model(&self) -> IoModel {
        self.model
    }

    /// Number of reactors (1 for shared).
    pub fn reactors(&self) -> usize {
        self.handles.len()
    }

    /// Every reactor's handle, in context order (one for shared).
    pub fn handles(&self) -> &[Handle] {
        &self.handles
    }

    /// The first reactor's handle.
    pub fn handle(&self) -> &Handle {
        &self.handles[0]
    }

    /// Reactor `index` (`0..reactors()`), or `None`.
    pub fn reactor(&self, index: usize) -> Option<&Handle> {
        self.handles.get(index)
    }

    /// The next reactor in round-robin order.
    pub fn next_reactor(&self) -> &Handle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        &self.handles[i]
    }

    /// Adds a lane on the next reactor (round-robin).
    pub fn add_lane<L: Lane>(&self, state: L) -> LaneHandle<L> {
        self.next_reactor().add_lane(state)
    }

    /// Adds a lane on the next reactor (round-robin) and runs `init` on it
    /// on the calling thread; see [`Handle::add_lane_with`].
    pub fn add_lane_with<L, R, F>(&self, state: L, init: F) -> (LaneHandle<L>, R)
    where
        L: Lane,
        F: FnOnce(&mut L, &mut LaneCtx<'_, L>) -> R,
    {
        self.next_reactor().add_lane_with(state, init)
    }

    /// As [`Runtime::add_lane_with`], with `options`; see
    /// [`Handle::add_lane_with_options`].
    pub fn add_lane_with_options<L, R, F>(
        &self,
        state: L,
        options: LaneOptions,
        init: F,
    ) -> (LaneHandle<L>, R)
    where
        L: Lane,
        F: FnOnce(&mut L, &mut LaneCtx<'_, L>) -> R,
    {
        self.next_reactor()
            .add_lane_with_options(state, options, init)
    }

    /// Stops every reactor, waits for the threads (running handlers finish
    /// first) and drops every lane's state, closing its sockets.
    ///
    /// # Errors
    ///
    /// The first handler panic ([`Error::HandlerPanic`]), thread panic or
    /// poll error seen by any thread.
    pub fn stop(mut self) -> Result<(), Error> {
        for h in &self.handles {
            h.stop();
        }
        self.shutdown()
    }

    /// Waits until one reactor stops (some handle called [`Handle::stop`],
    /// or a handler panicked), stops the others, then shuts down as
    /// [`Runtime::stop`] does.
    ///
    /// # Errors
    ///
    /// As [`Runtime::stop`].
    pub fn join(mut self) -> Result<(), Error> {
        {
            let (count, cv) = &*self.exited;
            let mut n = lock(count);
            while *n == 0 {
                n = cv.wait(n).unwrap_or_else(|p| p.into_inner());
            }
        }
        for h in &self.handles {
            h.stop();
        }
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), Error> {
        let mut first: Option<Error> = None;
        for t in self.threads.drain(..) {
            let outcome = match t.join() {
                Ok(r) => r,
                Err(payload) => Err(Error::ThreadPanic {
                    message: panic_message(payload.as_ref()),
                }),
            };
            if let Err(e) = outcome {
                first.get_or_insert(e);
            }
        }
        for h in &self.handles {
            if let Some(e) = h.core.take_panic() {
                first.get_or_insert(e);
            }
            h.core.shutdown();
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        for h in &self.handles {
            h.stop();
        }
        let _ = self.shutdown();
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("model", &self.model)
            .finish()
    }
}
