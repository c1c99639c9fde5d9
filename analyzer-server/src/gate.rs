//! A pause point for tests: a blocking thread that reaches a [`Gate`] says so and waits
//! until the test releases it, so a test can look at the service while a store append or a
//! diagnosis is in progress without guessing durations.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// How long a gate waits for its release before letting the thread through on its own.
/// Only a hang guard: a test whose release comes later fails on [`GateControl::timed_out`].
const HANG_GUARD: Duration = Duration::from_secs(20);

/// The side the paused code holds.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    reached: tokio::sync::mpsc::UnboundedSender<()>,
    proceed: Arc<Mutex<mpsc::Receiver<()>>>,
    timed_out: Arc<AtomicBool>,
}

/// The side the test holds.
#[derive(Debug)]
pub(crate) struct GateControl {
    reached: tokio::sync::mpsc::UnboundedReceiver<()>,
    proceed: mpsc::Sender<()>,
    timed_out: Arc<AtomicBool>,
}

/// A new gate and its control.
pub(crate) fn gate() -> (Gate, GateControl) {
    let (reached_tx, reached_rx) = tokio::sync::mpsc::unbounded_channel();
    let (proceed_tx, proceed_rx) = mpsc::channel();
    let timed_out = Arc::new(AtomicBool::new(false));
    (
        Gate {
            reached: reached_tx,
            proceed: Arc::new(Mutex::new(proceed_rx)),
            timed_out: timed_out.clone(),
        },
        GateControl {
            reached: reached_rx,
            proceed: proceed_tx,
            timed_out,
        },
    )
}

impl Gate {
    /// Announces that the gate was reached and waits for the release.
    pub(crate) fn pass(&self) {
        self.reached
            .send(())
            .expect("the test dropped its gate control");
        let released = self
            .proceed
            .lock()
            .expect("gate poisoned")
            .recv_timeout(HANG_GUARD);
        if released.is_err() {
            self.timed_out.store(true, Ordering::SeqCst);
        }
    }
}

impl GateControl {
    /// Waits until some thread reached the gate.
    pub(crate) async fn reached(&mut self) {
        self.reached.recv().await.expect("gate dropped");
    }

    /// Lets one waiting (or the next) thread through.
    pub(crate) fn release(&self) {
        self.proceed.send(()).expect("gate dropped");
    }

    /// Whether a thread went through without being released (the test was too late).
    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::SeqCst)
    }
}
