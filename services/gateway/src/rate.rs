//! Rate limits: a token bucket per client address and one per principal, as the reference server
//! has per address (capacity 60, one token a second; an empty bucket is 429 `RATE_LIMITED`).
//!
//! The client address is the socket's peer, or, when that peer is a trusted proxy
//! (`SNUG_TRUSTED_PROXIES`), the nearest address in `X-Forwarded-For` that is not itself a trusted
//! proxy: an untrusted client can write any `X-Forwarded-For` it likes, so the header is believed
//! only as far as the proxies that appended to it. IPv6 clients are bucketed by their /64, the
//! smallest prefix a single host is usually given, so one host cannot mint fresh buckets.
//! The principal is the authenticated user, so a user behind many addresses (or a token shared by
//! many machines) is held to one rate too.
//!
//! Memory is bounded without tuning: each table holds at most [`MAX_BUCKETS`] buckets; when it is
//! full, the buckets that have refilled (which say nothing a fresh bucket would not) are dropped.
//! A bucket that has not refilled is never dropped, since dropping it would hand its client a
//! fresh burst: a client with many addresses could otherwise reset every bucket, its own
//! included, by filling the table. While the table is full of such buckets, a new address counts
//! against the bucket of its wider prefix (IPv4 /24, IPv6 /48) in a second table, and when that
//! is full too, against one bucket shared by everyone new, so a flood under pressure is limited
//! as a group and nobody's spent bucket comes back early.

use std::{
    collections::HashMap,
    hash::Hash,
    net::{IpAddr, Ipv6Addr, SocketAddr},
    sync::Mutex,
    time::{Duration, Instant},
};

use axum::http::HeaderMap;
use snug_rpc::client::{canonical, network};

/// Buckets one table keeps at most.
pub const MAX_BUCKETS: usize = 100_000;

/// The reference's default: a burst of 60 requests.
pub const DEFAULT_BURST: u32 = 60;

/// The reference's default: one request a second, sustained.
pub const DEFAULT_PER_SECOND: f64 = 1.0;

/// An address or network a request may be forwarded through: `10.0.0.0/8`, `::1`, `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    address: IpAddr,
    prefix: u8,
}

impl Network {
    /// Parses `ADDRESS` or `ADDRESS/PREFIX`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bad =
            || format!("{text:?} is not an IP address or network like 10.0.0.0/8 or fd00::/8");
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address.parse().map_err(|_| bad())?;
        let max = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Self { address, prefix })
    }

    /// Whether `ip` lies in this network (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.address, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix)
            }
            _ => false,
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], prefix: u8) -> bool {
    let (whole, rest) = (usize::from(prefix / 8), prefix % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[whole] & mask == b[whole] & mask
    }
}

/// Whether `ip` is one of the `trusted` proxies'.
pub fn is_trusted(trusted: &[Network], ip: IpAddr) -> bool {
    trusted.iter().any(|n| n.contains(ip))
}

/// The client a request comes from: the peer, or what trusted proxies say it forwarded for.
pub fn client_address(peer: SocketAddr, headers: &HeaderMap, trusted: &[Network]) -> IpAddr {
    let mut client = canonical(peer.ip());
    if !is_trusted(trusted, client) {
        return client;
    }
    // Right to left: each trusted hop vouches for the address before it; the first address no
    // trusted proxy stands for is the client. Several headers are one list, in order.
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .collect();
    for hop in hops.iter().rev() {
        let Ok(ip) = hop.trim().parse::<IpAddr>() else {
            // A hop that is not an address: believe nothing further left.
            break;
        };
        client = canonical(ip);
        if !is_trusted(trusted, client) {
            break;
        }
    }
    client
}

/// How long until a refused client may try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// Whole seconds until one request's worth has refilled (at least one).
    pub retry_after_seconds: u32,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// One table of buckets.
#[derive(Debug)]
struct Buckets<K> {
    map: Mutex<HashMap<K, Bucket>>,
    max: usize,
}

impl<K: Hash + Eq> Buckets<K> {
    fn new(max: usize) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            max: max.max(2),
        }
    }

    /// Counts a request against `key`'s bucket; `None` when `key` has none and the table is full
    /// of buckets that have not refilled (the caller counts it elsewhere).
    fn take(&self, key: K, rate: &Rate, now: Instant) -> Option<Result<(), Limited>> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(&key) && map.len() >= self.max {
            make_room(&mut map, rate, now);
            if map.len() >= self.max {
                return None;
            }
        }
        let bucket = map.entry(key).or_insert(Bucket {
            tokens: rate.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate.per_second).min(rate.burst);
        bucket.at = now;
        Some(if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - bucket.tokens) / rate.per_second;
            Err(Limited {
                retry_after_seconds: wait.ceil().clamp(1.0, f64::from(u32::MAX)) as u32,
            })
        })
    }

    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Drops the buckets that have refilled: only those say nothing a fresh bucket would not.
fn make_room<K>(map: &mut HashMap<K, Bucket>, rate: &Rate, now: Instant) {
    let full_after = Duration::from_secs_f64(rate.burst / rate.per_second);
    map.retain(|_, b| now.saturating_duration_since(b.at) < full_after);
}

/// A table of buckets, and where a key goes while the table is full of spent buckets.
#[derive(Debug)]
struct Table<K> {
    buckets: Buckets<K>,
    /// Keys that found no room, by their wider prefix.
    wider: Buckets<K>,
    /// Keys that found no room there either.
    overflow: Buckets<()>,
}

impl<K: Hash + Eq> Table<K> {
    fn new(max: usize) -> Self {
        Self {
            buckets: Buckets::new(max),
            wider: Buckets::new(max),
            overflow: Buckets::new(2),
        }
    }

    fn take(&self, key: K, wider: impl FnOnce(&K) -> K, rate: &Rate) -> Result<(), Limited> {
        let now = Instant::now();
        let prefix = wider(&key);
        self.buckets
            .take(key, rate, now)
            .or_else(|| self.wider.take(prefix, rate, now))
            .or_else(|| self.overflow.take((), rate, now))
            // The overflow table has one key and room for it.
            .unwrap_or(Ok(()))
    }

    fn len(&self) -> usize {
        self.buckets.len() + self.wider.len()
    }
}

/// The wider prefix an address counts against under pressure: IPv4 /24, IPv6 /48.
fn wider_key(ip: &IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            IpAddr::V4(std::net::Ipv4Addr::new(o[0], o[1], o[2], 0))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, 0))
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Rate {
    burst: f64,
    per_second: f64,
}

/// The gateway's rate limits: per client address and per principal.
#[derive(Debug)]
pub struct RateLimits {
    rate: Rate,
    trusted: Vec<Network>,
    addresses: Table<IpAddr>,
    principals: Table<String>,
}

impl RateLimits {
    /// Limits of `burst` requests refilling at `per_second`, or `None` when either is zero (off).
    /// `trusted` lists the proxies whose `X-Forwarded-For` is believed.
    pub fn new(burst: u32, per_second: f64, trusted: Vec<Network>) -> Option<Self> {
        Self::with_capacity(burst, per_second, trusted, MAX_BUCKETS)
    }

    fn with_capacity(
        burst: u32,
        per_second: f64,
        trusted: Vec<Network>,
        max: usize,
    ) -> Option<Self> {
        (burst > 0 && per_second > 0.0 && per_second.is_finite()).then(|| Self {
            rate: Rate {
                burst: f64::from(burst),
                per_second,
            },
            trusted,
            addresses: Table::new(max),
            principals: Table::new(max),
        })
    }

    /// Counts a request from `peer` (with its forwarding headers) against its address's bucket.
    pub fn check_address(&self, peer: SocketAddr, headers: &HeaderMap) -> Result<(), Limited> {
        let client = client_address(peer, headers, &self.trusted);
        self.addresses.take(network(client), wider_key, &self.rate)
    }

    /// Counts a request by `principal` (a user id) against that principal's bucket.
    pub fn check_principal(&self, principal: &str) -> Result<(), Limited> {
        // A principal has no wider prefix: under pressure, new ones share the overflow bucket.
        self.principals
            .take(principal.to_owned(), |_| String::new(), &self.rate)
    }

    /// Buckets held now, per address and per principal.
    pub fn buckets(&self) -> (usize, usize) {
        (self.addresses.len(), self.principals.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(forwarded: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in forwarded {
            headers.append("x-forwarded-for", value.parse().expect("header"));
        }
        headers
    }

    fn nets(list: &[&str]) -> Vec<Network> {
        list.iter()
            .map(|n| Network::parse(n).expect("network"))
            .collect()
    }

    #[test]
    fn networks_parse_and_match() {
        let cases = [
            ("10.0.0.0/8", "10.200.3.4", true),
            ("10.0.0.0/8", "11.0.0.1", false),
            ("192.168.1.7", "192.168.1.7", true),
            ("192.168.1.7", "192.168.1.8", false),
            ("172.16.0.0/12", "172.31.255.255", true),
            ("172.16.0.0/12", "172.32.0.0", false),
            ("fd00::/8", "fd12::1", true),
            ("fd00::/8", "fe80::1", false),
            ("0.0.0.0/0", "8.8.8.8", true),
            // An IPv4-mapped IPv6 peer is its IPv4 address.
            ("127.0.0.1", "::ffff:127.0.0.1", true),
        ];
        for (net, ip, expected) in cases {
            let net = Network::parse(net).expect(net);
            assert_eq!(
                net.contains(ip.parse().expect(ip)),
                expected,
                "{net:?} {ip}"
            );
        }
        for bad in ["", "10.0.0.0/33", "fd00::/129", "example.com", "10.0.0.0/x"] {
            assert!(Network::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn forwarded_for_is_believed_only_through_trusted_proxies() {
        let proxy: SocketAddr = "10.0.0.5:4000".parse().expect("addr");
        let stranger: SocketAddr = "203.0.113.9:4000".parse().expect("addr");
        let trusted = nets(&["10.0.0.0/8"]);
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let cases: [(SocketAddr, &[&str], &str); 6] = [
            // A client that is not a proxy cannot choose its address.
            (stranger, &["198.51.100.1"], "203.0.113.9"),
            // The proxy's word is taken for its client.
            (proxy, &["198.51.100.1"], "198.51.100.1"),
            // A spoofed entry to the left of the real client is not believed.
            (proxy, &["1.2.3.4, 198.51.100.1"], "198.51.100.1"),
            // Through two trusted proxies.
            (proxy, &["198.51.100.1, 10.1.1.1"], "198.51.100.1"),
            // Several headers are one list.
            (proxy, &["1.2.3.4", "198.51.100.1"], "198.51.100.1"),
            // Garbage stops the walk at the last believed hop: the proxy itself.
            (proxy, &["junk"], "10.0.0.5"),
        ];
        for (peer, forwarded, expected) in cases {
            assert_eq!(
                client_address(peer, &headers(forwarded), &trusted),
                ip(expected),
                "{peer} {forwarded:?}"
            );
        }
        // With no trusted proxies the header is never read.
        assert_eq!(
            client_address(proxy, &headers(&["198.51.100.1"]), &[]),
            ip("10.0.0.5")
        );
    }

    #[test]
    fn a_burst_is_served_then_refused_until_tokens_refill() {
        let limits = RateLimits::new(3, 1.0, Vec::new()).expect("on");
        let peer: SocketAddr = "198.51.100.7:1".parse().expect("addr");
        let none = HeaderMap::new();
        for _ in 0..3 {
            limits.check_address(peer, &none).expect("within the burst");
        }
        let refused = limits.check_address(peer, &none).expect_err("burst spent");
        assert_eq!(refused.retry_after_seconds, 1);
        // Another address, and a principal, have buckets of their own.
        let other: SocketAddr = "198.51.100.8:1".parse().expect("addr");
        limits.check_address(other, &none).expect("its own bucket");
        limits.check_principal("u1").expect("its own bucket");
        // The same IPv6 /64 is one bucket.
        let a: SocketAddr = "[2001:db8:1:2::1]:1".parse().expect("addr");
        let b: SocketAddr = "[2001:db8:1:2:ffff::9]:1".parse().expect("addr");
        for _ in 0..3 {
            limits.check_address(a, &none).expect("within the burst");
        }
        limits.check_address(b, &none).expect_err("same /64");
    }

    #[test]
    fn refill_is_by_elapsed_time() {
        let rate = Rate {
            burst: 2.0,
            per_second: 0.5,
        };
        let buckets = Buckets::new(10);
        let t0 = Instant::now();
        let take = |at: Instant| buckets.take(1, &rate, at).expect("room in the table");
        take(t0).expect("1");
        take(t0).expect("2");
        let refused = take(t0).expect_err("empty");
        assert_eq!(refused.retry_after_seconds, 2, "half a token a second");
        take(t0 + Duration::from_secs(2)).expect("one token back after 2 s");
        take(t0 + Duration::from_secs(2)).expect_err("only one");
    }

    #[test]
    fn zero_turns_limits_off() {
        assert!(RateLimits::new(0, 1.0, Vec::new()).is_none());
        assert!(RateLimits::new(60, 0.0, Vec::new()).is_none());
    }

    /// A flood of distinct addresses never grows a table past its bound, and never resets a
    /// bucket that is spent (issue 36 point 10): the flood is limited as a group instead.
    #[test]
    fn a_flood_of_addresses_stays_bounded_and_resets_no_spent_bucket() {
        let limits = RateLimits::with_capacity(5, 0.01, Vec::new(), 1_000).expect("on");
        let none = HeaderMap::new();
        let spent = SocketAddr::from(([203, 0, 113, 9], 1));
        for _ in 0..5 {
            limits.check_address(spent, &none).expect("its burst");
        }
        assert!(limits.check_address(spent, &none).is_err(), "spent");
        let mut admitted = 0;
        for i in 0..20_000u32 {
            let peer = SocketAddr::from((i.to_be_bytes(), 1));
            if limits.check_address(peer, &none).is_ok() {
                admitted += 1;
            }
        }
        let (addresses, _) = limits.buckets();
        assert!(addresses <= 2 * 1_000, "{addresses} buckets");
        assert!(
            limits.check_address(spent, &none).is_err(),
            "the flood did not hand the spent client a fresh burst"
        );
        // The first thousand (minus the spent one's) got buckets of their own; the rest shared
        // their /24s' buckets (five each) and then one overflow bucket.
        assert!(admitted < 20_000 / 2, "{admitted} of the flood admitted");
        // A refilled bucket makes room again: the table is not full for ever.
        let fast = RateLimits::with_capacity(5, 1_000_000.0, Vec::new(), 10).expect("on");
        for i in 0..100u32 {
            let peer = SocketAddr::from((i.to_be_bytes(), 1));
            fast.check_address(peer, &none)
                .expect("refilled buckets are dropped for room");
        }
    }
}
