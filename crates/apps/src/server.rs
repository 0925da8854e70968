//! The accept loop every TCP service of `ember serve` shares.
//!
//! One thread per connection (services are simple blocking code; ember's sockets park and
//! wake, they never spin), a bound on live connections (the next one is closed at once and
//! counted), and a [`Stop`] that ends the accept loop within [`ACCEPT_TICK`] and shuts down
//! every live connection both ways, so that SIGINT/SIGTERM end `ember serve` cleanly.

use crate::net::{Conn, Listen};
use std::collections::HashMap;
use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a blocked accept looks at the stop flag.
pub const ACCEPT_TICK: Duration = Duration::from_millis(100);

/// A stop flag shared by every service of one server, plus the live connections it shuts
/// down when raised.
#[derive(Default)]
pub struct Stop {
    stopped: AtomicBool,
    next_id: AtomicU64,
    #[allow(clippy::type_complexity)]
    live: Mutex<HashMap<u64, Arc<dyn Fn() + Send + Sync>>>,
}

impl core::fmt::Debug for Stop {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Stop")
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

impl Stop {
    pub fn new() -> Arc<Stop> {
        Arc::new(Stop::default())
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Raises the flag and shuts down every registered connection.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let live: Vec<_> = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for f in live {
            f();
        }
    }

    /// Registers a connection to shut down on stop; the guard unregisters it.
    pub fn register<C: Conn>(self: &Arc<Self>, c: &Arc<C>) -> StopGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let weak = Arc::downgrade(c);
        let f: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            if let Some(c) = weak.upgrade() {
                let _ = c.shutdown(Shutdown::Both);
            }
        });
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, f);
        if self.is_stopped() {
            let _ = c.shutdown(Shutdown::Both);
        }
        StopGuard {
            stop: self.clone(),
            id,
        }
    }

    /// Live registered connections.
    pub fn live(&self) -> usize {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Unregisters a connection from its [`Stop`] when dropped.
pub struct StopGuard {
    stop: Arc<Stop>,
    id: u64,
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.stop
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

/// Counters of one service.
#[derive(Debug, Default)]
pub struct ServiceStats {
    pub accepted: AtomicU64,
    pub refused_over_limit: AtomicU64,
    pub errors: AtomicU64,
}

/// Runs `handler` for every connection `listener` accepts, each on its own thread, until
/// `stop` is raised; at most `max_conns` at once. Returns the accept thread.
pub fn spawn_service<L, F>(
    name: &str,
    listener: L,
    stop: Arc<Stop>,
    max_conns: usize,
    stats: Arc<ServiceStats>,
    handler: F,
) -> io::Result<JoinHandle<()>>
where
    L: Listen,
    F: Fn(Arc<L::Conn>) -> io::Result<()> + Send + Sync + 'static,
{
    listener.set_accept_timeout(Some(ACCEPT_TICK))?;
    let handler = Arc::new(handler);
    let name = name.to_string();
    let live = Arc::new(AtomicU64::new(0));
    std::thread::Builder::new()
        .name(format!("svc-{name}"))
        .spawn(move || {
            while !stop.is_stopped() {
                let (c, peer) = match listener.accept() {
                    Ok(x) => x,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock
                                | io::ErrorKind::TimedOut
                                | io::ErrorKind::Interrupted
                        ) =>
                    {
                        continue
                    }
                    Err(e) => {
                        if !stop.is_stopped() {
                            tracing::warn!(service = %name, error = %e, "accept failed; service ends");
                        }
                        break;
                    }
                };
                stats.accepted.fetch_add(1, Ordering::Relaxed);
                if live.load(Ordering::SeqCst) >= max_conns as u64 {
                    stats.refused_over_limit.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(service = %name, %peer, "over the connection limit; closed");
                    drop(c);
                    continue;
                }
                let c = Arc::new(c);
                let guard = stop.register(&c);
                live.fetch_add(1, Ordering::SeqCst);
                let (h, n, st, lv) = (handler.clone(), name.clone(), stats.clone(), live.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("{name}-conn"))
                    .spawn(move || {
                        // Gives the slot back however the handler ends (a panic too).
                        struct Slot(Arc<AtomicU64>);
                        impl Drop for Slot {
                            fn drop(&mut self) {
                                self.0.fetch_sub(1, Ordering::SeqCst);
                            }
                        }
                        let _slot = Slot(lv);
                        let _guard = guard;
                        tracing::debug!(service = %n, %peer, "connection");
                        if let Err(e) = h(c) {
                            st.errors.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(service = %n, %peer, error = %e, "connection ended with an error");
                        }
                    });
                if let Err(e) = spawned {
                    live.fetch_sub(1, Ordering::SeqCst);
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(service = %name, error = %e, "cannot start a connection thread");
                }
            }
        })
}
