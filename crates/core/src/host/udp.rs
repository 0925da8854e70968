//! UDP sockets (RFC 768, RFC 1122 §4.1): bind, send, receive and close, over the IP
//! layer. Input is in `input.rs` (`udp_input`), beside the other transports.

use super::ip::{IpLayer, TcpSink};
use super::output::{datagram_buffer, HEADROOM};
use super::UdpId;
use crate::time::Instant;
use crate::udp::{UdpEndpoint, DEFAULT_RCVBUF, MAX_PAYLOAD};
use crate::wire::{ip_proto, Ipv4Repr, UdpRepr, IPV4_HEADER_LEN, UDP_HEADER_LEN};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};

impl IpLayer {
    /// Binds a UDP socket (port 0 picks an ephemeral port).
    pub fn udp_bind(&mut self, local: SocketAddrV4) -> io::Result<UdpId> {
        if !local.ip().is_unspecified() && !self.is_local_addr(*local.ip()) {
            return Err(io::ErrorKind::AddrNotAvailable.into());
        }
        let mut local = local;
        if local.port() == 0 {
            let lo = self.params.tcp_smallest_anon_port;
            let hi = self.params.tcp_largest_anon_port;
            let range = hi - lo + 1;
            let mut found = None;
            for i in 0..range {
                let port = (lo + (self.next_port.wrapping_add(i)) % range) as u16;
                let cand = SocketAddrV4::new(*local.ip(), port);
                let wild = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
                if !self.udp_by_addr.contains_key(&cand) && !self.udp_by_addr.contains_key(&wild) {
                    found = Some(cand);
                    self.next_port = self.next_port.wrapping_add(i + 1);
                    break;
                }
            }
            local = found.ok_or_else(|| io::Error::from(io::ErrorKind::AddrInUse))?;
        } else {
            let wild = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, local.port());
            if self.udp_by_addr.contains_key(&local) || self.udp_by_addr.contains_key(&wild) {
                return Err(io::ErrorKind::AddrInUse.into());
            }
            if local.ip().is_unspecified()
                && self.udp_by_addr.keys().any(|a| a.port() == local.port())
            {
                return Err(io::ErrorKind::AddrInUse.into());
            }
        }
        let id = UdpId(self.udp.insert(UdpEndpoint::new(local, DEFAULT_RCVBUF)));
        self.udp_by_addr.insert(local, id);
        Ok(id)
    }

    /// The local address of a UDP socket.
    pub fn udp_local_addr(&self, id: UdpId) -> Option<SocketAddrV4> {
        self.udp.get(id.0).map(|u| u.local)
    }

    /// Sends a datagram (fragmented if larger than the path MTU).
    pub fn udp_send_to<S: TcpSink + ?Sized>(
        &mut self,
        now: Instant,
        id: UdpId,
        to: SocketAddrV4,
        data: &[u8],
        tcp: &mut S,
    ) -> io::Result<usize> {
        let (local, tos) = self
            .udp
            .get(id.0)
            .map(|u| (u.local, u.tos))
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        if data.len() > MAX_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "message too long",
            ));
        }
        if to.port() == 0 {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let src = if local.ip().is_unspecified() {
            let Some((src, _)) = self.source_for(*to.ip()) else {
                self.stats.ip.out_no_routes += 1;
                return Err(io::ErrorKind::NetworkUnreachable.into());
            };
            src
        } else {
            *local.ip()
        };
        let udp_len = UDP_HEADER_LEN + data.len();
        let ip = Ipv4Repr {
            dscp_ecn: tos,
            ..self.header(src, *to.ip(), ip_proto::UDP, udp_len)
        };
        let mut f = datagram_buffer(&ip);
        let u = &mut f[HEADROOM + IPV4_HEADER_LEN..];
        u[UDP_HEADER_LEN..].copy_from_slice(data);
        UdpRepr {
            src_port: local.port(),
            dst_port: to.port(),
        }
        .emit(u, src, *to.ip());
        self.ip_output(now, f)?;
        self.stats.udp.out_datagrams += 1;
        self.run_loopback(now, tcp);
        Ok(data.len())
    }

    /// IP_TOS for a UDP socket (RFC 1122 §4.1.4: the application can set the TOS).
    pub fn udp_set_tos(&mut self, id: UdpId, tos: u8) -> io::Result<()> {
        let u = self
            .udp
            .get_mut(id.0)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        u.tos = tos;
        Ok(())
    }

    /// Receives a datagram, if one is queued.
    pub fn udp_recv_from(&mut self, id: UdpId) -> io::Result<crate::udp::Datagram> {
        let sock = self
            .udp
            .get_mut(id.0)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        sock.pop().ok_or_else(|| io::ErrorKind::WouldBlock.into())
    }

    /// Datagrams waiting on a UDP socket.
    pub fn udp_pending(&self, id: UdpId) -> usize {
        self.udp.get(id.0).map_or(0, |u| u.len())
    }

    /// Closes a UDP socket.
    pub fn udp_close(&mut self, id: UdpId) {
        if let Some(s) = self.udp.remove(id.0) {
            self.udp_by_addr.remove(&s.local);
        }
    }
}
