//! The client a limit counts: one rule for the gateway's rate limits and the services' shares of
//! the upload budget, so one host is one client to both.

use std::net::{IpAddr, Ipv6Addr};

/// `ip` as the client it is: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, what a dual-stack
/// socket reports for an IPv4 peer) is its IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The network one client holds: an IPv4 address as is, an IPv6 address by its /64 (which one
/// host usually holds whole, so counting single addresses would let it count as billions).
pub fn network(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_its_ipv4_address_or_its_ipv6_64() {
        let cases = [
            ("192.0.2.7", "192.0.2.7"),
            ("::ffff:192.0.2.7", "192.0.2.7"),
            ("2001:db8:0:1::5", "2001:db8:0:1::"),
            ("2001:db8:0:1:ffff:1:2:3", "2001:db8:0:1::"),
        ];
        for (ip, expected) in cases {
            let ip: IpAddr = ip.parse().expect("address");
            assert_eq!(network(ip).to_string(), expected, "{ip}");
        }
    }
}
