//! The gateway's open connections: which may stay, which must go, and who sheds whom.
//!
//! hyper bounds only what it reads once it knows the protocol: its header timeout starts when
//! HTTP/1 begins waiting for a request, and `auto::Builder` first waits, unbounded, for the bytes
//! that tell HTTP/1 from HTTP/2; an HTTP/2 connection that has sent its preface and SETTINGS may
//! then stay silent for ever. So every connection here is watched from accept by one rule
//! ([`Watch::deadline`]): it must start its first request within the header timeout of being
//! accepted, and, between requests, start the next within the idle timeout of the last one's
//! end (HTTP/2 is also pinged, so a peer that vanished is noticed). A connection with a request
//! in flight is never closed for silence: how long a body may take is the upload rules' business.
//!
//! At most `max` connections are open, and at most `per_address` from one client address,
//! except a trusted proxy's (it carries many clients; the rate limits see through it by
//! `X-Forwarded-For`, which only a request has). A connection over the per-address cap is closed
//! at once. At the global cap the silent connections are shed first: the one idle longest among
//! those that never started a request, else among those idle between requests, so a health
//! probe or an authenticated client's new connection is served while silent ones hold the cap.
//! Only when every open connection has a request in flight does a new one wait in the listen
//! backlog.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use crate::rate::Network;

/// The bounds every connection is held to.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Open connections at most.
    pub max: usize,
    /// Open connections from one client address at most (a trusted proxy's excepted).
    pub per_address: usize,
    /// From accept to the first request's headers.
    pub header_timeout: Duration,
    /// From the end of one request to the start of the next.
    pub idle_timeout: Duration,
    /// Proxies whose connections the per-address cap does not count.
    pub trusted: Vec<Network>,
}

/// The open connections, shared by the accept loop and each connection's task.
#[derive(Debug)]
pub struct Connections {
    limits: Limits,
    state: Mutex<State>,
    /// Signalled whenever a connection closes, for an accept loop waiting for room.
    closed: Notify,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    open: HashMap<u64, Arc<Watch>>,
    by_address: HashMap<IpAddr, usize>,
}

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its address already holds `per_address` connections.
    AddressFull,
}

impl Connections {
    /// No connection open yet.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            state: Mutex::new(State::default()),
            closed: Notify::new(),
        })
    }

    /// The bounds in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// How many connections are open.
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Waits until a connection from `address` may be admitted: refused at once when its address
    /// is full; at the global cap, sheds the most silent connection and waits for room (for a
    /// connection to close, when every one has a request in flight).
    pub async fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Admitted, Refused> {
        loop {
            let closed = self.closed.notified();
            {
                let mut state = self.lock();
                let trusted = crate::rate::is_trusted(&self.limits.trusted, address);
                if !trusted
                    && state.by_address.get(&address).copied().unwrap_or(0)
                        >= self.limits.per_address
                {
                    return Err(Refused::AddressFull);
                }
                if state.open.len() < self.limits.max {
                    let id = state.next;
                    state.next += 1;
                    let watch = Arc::new(Watch::new());
                    state.open.insert(id, Arc::clone(&watch));
                    *state.by_address.entry(address).or_default() += 1;
                    return Ok(Admitted {
                        connections: Arc::clone(self),
                        id,
                        address,
                        watch,
                    });
                }
                if let Some(victim) = most_silent(state.open.values()) {
                    victim.shed();
                }
            }
            closed.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The connection to shed at the cap: never-started ones before idle ones, the longest silent
/// first; none while every connection has a request in flight. One already told to go counts
/// as gone, so a burst of new connections sheds one each.
fn most_silent<'a>(open: impl Iterator<Item = &'a Arc<Watch>>) -> Option<&'a Arc<Watch>> {
    open.filter(|w| !w.is_shed())
        .filter_map(|w| w.silent_since().map(|since| (w, since)))
        .min_by_key(|(w, since)| (w.started_any(), *since))
        .map(|(w, _)| w)
}

/// One admitted connection: it leaves the count when dropped.
#[derive(Debug)]
pub struct Admitted {
    connections: Arc<Connections>,
    id: u64,
    address: IpAddr,
    watch: Arc<Watch>,
}

impl Admitted {
    /// What the connection's requests report to, and its task watches.
    pub fn watch(&self) -> &Arc<Watch> {
        &self.watch
    }

    /// When the connection must be closed for silence, if nothing starts before then; `None`
    /// while a request is in flight.
    pub fn deadline(&self) -> Option<Instant> {
        self.watch.deadline(&self.connections.limits)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut state = self.connections.lock();
        state.open.remove(&self.id);
        if let Some(count) = state.by_address.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                state.by_address.remove(&self.address);
            }
        }
        drop(state);
        self.connections.closed.notify_waiters();
    }
}

/// What a connection is doing: requests in flight, and since when it has been silent.
#[derive(Debug)]
pub struct Watch {
    in_flight: AtomicUsize,
    /// Accept, or the end of the last request; and whether any request ever started.
    quiet: Mutex<(Instant, bool)>,
    shed: Notify,
    shed_flag: std::sync::atomic::AtomicBool,
    /// Signalled when the last request in flight ends, which moves the deadline.
    quieted: Notify,
    /// A request's body was dropped before its end: the connection lingers when it closes.
    unread: std::sync::atomic::AtomicBool,
}

impl Watch {
    fn new() -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            quiet: Mutex::new((Instant::now(), false)),
            shed: Notify::new(),
            shed_flag: std::sync::atomic::AtomicBool::new(false),
            quieted: Notify::new(),
            unread: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A request's body was answered without being read to its end.
    pub fn leave_unread(&self) {
        self.unread.store(true, Ordering::SeqCst);
    }

    /// Whether a request's body was left unread, so the client may still be sending it.
    pub fn left_unread(&self) -> bool {
        self.unread.load(Ordering::SeqCst)
    }

    /// A request has started (its headers arrived); it is in flight until the guard drops,
    /// which the response body carries to its end.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.quiet_lock().1 = true;
        Busy(Arc::clone(self))
    }

    /// Resolves when the connection's last request in flight ends, which sets a new deadline;
    /// create it before reading [`Admitted::deadline`] so that no end is missed in between.
    pub fn quieted(&self) -> tokio::sync::futures::Notified<'_> {
        self.quieted.notified()
    }

    /// Resolves once the accept loop sheds this connection to make room.
    pub async fn shed_requested(&self) {
        let notified = self.shed.notified();
        if self.is_shed() {
            return;
        }
        notified.await;
    }

    fn shed(&self) {
        self.shed_flag.store(true, Ordering::SeqCst);
        self.shed.notify_waiters();
    }

    fn is_shed(&self) -> bool {
        self.shed_flag.load(Ordering::SeqCst)
    }

    fn started_any(&self) -> bool {
        self.quiet_lock().1
    }

    /// Since when the connection has had no request in flight; `None` while one is.
    fn silent_since(&self) -> Option<Instant> {
        let quiet = self.quiet_lock();
        (self.in_flight.load(Ordering::SeqCst) == 0).then_some(quiet.0)
    }

    /// The one rule: silent since accept, the header timeout; silent since a request ended, the
    /// idle timeout; busy, no deadline.
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        let quiet = self.quiet_lock();
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let (since, started_any) = *quiet;
        Some(
            since
                + if started_any {
                    limits.idle_timeout
                } else {
                    limits.header_timeout
                },
        )
    }

    fn quiet_lock(&self) -> std::sync::MutexGuard<'_, (Instant, bool)> {
        self.quiet.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A request in flight on a connection; its end starts the connection's idle time.
#[derive(Debug)]
pub struct Busy(Arc<Watch>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut quiet = self.0.quiet_lock();
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            quiet.0 = Instant::now();
            drop(quiet);
            self.0.quieted.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn limits(max: usize, per_address: usize, trusted: &[&str]) -> Limits {
        Limits {
            max,
            per_address,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            trusted: trusted
                .iter()
                .map(|n| Network::parse(n).expect("network"))
                .collect(),
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_is_the_header_timeout_from_accept_then_the_idle_timeout_from_the_last_end()
     {
        let connections = Connections::new(limits(4, 4, &[]));
        let accepted = Instant::now();
        let admitted = connections.admit(ip(1)).await.expect("admitted");
        assert_eq!(
            admitted.deadline(),
            Some(accepted + Duration::from_secs(10))
        );
        tokio::time::advance(Duration::from_secs(3)).await;
        let busy = admitted.watch().begin();
        let second = admitted.watch().begin();
        assert_eq!(
            admitted.deadline(),
            None,
            "a request in flight has no deadline"
        );
        tokio::time::advance(Duration::from_secs(100)).await;
        drop(busy);
        assert_eq!(admitted.deadline(), None, "one request is still in flight");
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(second);
        assert_eq!(
            admitted.deadline(),
            Some(Instant::now() + Duration::from_secs(60))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_over_its_share_is_refused_but_a_trusted_proxy_is_not_counted() {
        let connections = Connections::new(limits(100, 2, &["127.0.0.9/32"]));
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(connections.admit(ip(1)).await.expect("within the share"));
        }
        assert_eq!(
            connections.admit(ip(1)).await.err(),
            Some(Refused::AddressFull)
        );
        held.push(connections.admit(ip(2)).await.expect("another address"));
        for _ in 0..10 {
            held.push(connections.admit(ip(9)).await.expect("the proxy"));
        }
        held.remove(0);
        held.push(connections.admit(ip(1)).await.expect("room again"));
        assert_eq!(connections.open(), 13);
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_the_longest_silent_connection_that_never_asked_is_shed_first() {
        let connections = Connections::new(limits(3, 3, &[]));
        let served = connections.admit(ip(1)).await.expect("1");
        drop(served.watch().begin());
        tokio::time::advance(Duration::from_secs(1)).await;
        let silent_old = connections.admit(ip(2)).await.expect("2");
        tokio::time::advance(Duration::from_secs(1)).await;
        let silent_new = connections.admit(ip(3)).await.expect("3");
        // The fourth waits; the oldest never-started connection is told to go, not the idle one.
        let waiting = tokio::spawn({
            let connections = Arc::clone(&connections);
            async move { connections.admit(ip(4)).await.map(|a| a.id) }
        });
        tokio::time::timeout(Duration::from_secs(1), silent_old.watch().shed_requested())
            .await
            .expect("the oldest silent connection is shed");
        assert!(!silent_new.watch().is_shed() && !served.watch().is_shed());
        drop(silent_old);
        waiting
            .await
            .expect("task")
            .expect("admitted once one closed");
    }

    #[tokio::test(start_paused = true)]
    async fn when_every_connection_is_busy_a_new_one_waits_for_one_to_end() {
        let connections = Connections::new(limits(1, 1, &[]));
        let only = connections.admit(ip(1)).await.expect("1");
        let busy = only.watch().begin();
        let waiting = tokio::spawn({
            let connections = Arc::clone(&connections);
            async move { connections.admit(ip(2)).await.is_ok() }
        });
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!only.watch().is_shed(), "a busy connection is not shed");
        assert!(!waiting.is_finished());
        drop(busy);
        drop(only);
        assert!(waiting.await.expect("task"));
    }
}
